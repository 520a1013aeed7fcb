//! Open files of the `trie` layout and the state its versions share: the HTable handle kept in
//! a [`TableFile`]'s `aux` slot (a reader the open-table bound may close, plus, for tables no
//! BloomCluster covers, the in-memory per-bucket filters under a byte budget), the
//! BloomCluster handle (its reader closed the same way), per-level lookup read
//! counters, handles of freshly written tables waiting for their version, and the garbage
//! estimates of last-level containers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};

use crate::error::{Error, Result};
use crate::htable::{
    BloomClusterReader, BloomColumn, ClusterBlock, FilterSet, HTableReader, CLUSTER_BLOCK_SIZE,
};
use crate::stats::{LevelReads, ReadKind};
use crate::table::{TableAux, TableFile};

use super::version::ClusterRef;

/// Deepest trie level the counters cover (the last level is at most depth 9).
pub const MAX_DEPTH: usize = 9;

/// Lookup reads at one depth.
#[derive(Default)]
pub struct LevelCounter {
    /// Data blocks read.
    pub data: AtomicU64,
    /// Metadata blocks read.
    pub meta: AtomicU64,
}

/// State shared by a keyspace's policy and all its versions.
pub struct Shared {
    /// Budget of in-memory filters (from the options, updated on every pick).
    pub filter_budget: AtomicUsize,
    /// Bytes of filters held in memory.
    pub filter_used: AtomicUsize,
    /// Lookup reads per depth.
    pub reads: [LevelCounter; MAX_DEPTH + 1],
    /// Handles of tables written by a job, adopted by the version that adds them.
    pub pending: Mutex<HashMap<u64, Arc<HHandle>>>,
    /// Containers whose BloomCluster could not be built (too many sub-levels for a block),
    /// with the newest sub-level's file number at that time: not retried until it changes.
    pub cluster_failed: Mutex<HashMap<u64, u64>>,
    /// Cache of checked BloomCluster blocks by (file number, block index); created on the
    /// first [`Shared::set_cache_budget`] with a budget, resized by later ones.
    pub cluster_cache: OnceLock<ClusterCache>,
    /// The cache's budget in bytes (0: disabled, lookups read their column).
    cluster_cache_bytes: AtomicUsize,
}

/// Weighs cached cluster blocks by their length.
#[derive(Clone)]
pub struct BlockWeighter;

impl quick_cache::Weighter<(u64, u32), Arc<ClusterBlock>> for BlockWeighter {
    fn weight(&self, _key: &(u64, u32), val: &Arc<ClusterBlock>) -> u64 {
        val.memory_bytes() as u64
    }
}

/// One BloomCluster column as a lookup sees it: read from the file, or in a cached block.
pub enum ColumnView {
    /// Read (no cache).
    Read(BloomColumn),
    /// Column `.1` of a cached block.
    Cached(Arc<ClusterBlock>, u32),
}

impl ColumnView {
    /// Whether sub-level `i` may hold the key of Bloom hash `h`.
    pub fn may_contain(&self, i: usize, h: u64) -> bool {
        match self {
            ColumnView::Read(c) => c.may_contain(i, h),
            ColumnView::Cached(b, c) => b.may_contain(*c, i, h),
        }
    }
}

/// A cache of BloomCluster blocks.
pub type ClusterCache = quick_cache::sync::Cache<(u64, u32), Arc<ClusterBlock>, BlockWeighter>;

impl Shared {
    /// Fresh shared state.
    pub fn new(filter_budget: usize) -> Arc<Shared> {
        Arc::new(Shared {
            filter_budget: AtomicUsize::new(filter_budget),
            filter_used: AtomicUsize::new(0),
            reads: Default::default(),
            pending: Mutex::new(HashMap::new()),
            cluster_failed: Mutex::new(HashMap::new()),
            cluster_cache: OnceLock::new(),
            cluster_cache_bytes: AtomicUsize::new(0),
        })
    }

    /// Sets the cluster cache's budget (`TrieOptions::cluster_cache_bytes`; 0 disables it),
    /// creating the cache on the first budget and resizing it (evicting) on a change: the
    /// options a keyspace is opened with hold, not the defaults a reopened keyspace's policy
    /// started with.
    pub fn set_cache_budget(&self, bytes: usize) {
        if self.cluster_cache_bytes.swap(bytes, Ordering::Relaxed) == bytes
            && (bytes == 0 || self.cluster_cache.get().is_some())
        {
            return;
        }
        if bytes == 0 {
            if let Some(c) = self.cluster_cache.get() {
                c.clear();
            }
            return;
        }
        let c = self.cluster_cache.get_or_init(|| {
            ClusterCache::with_weighter(
                (bytes / CLUSTER_BLOCK_SIZE).max(16),
                bytes as u64,
                BlockWeighter,
            )
        });
        if c.capacity() != bytes as u64 {
            c.set_capacity(bytes as u64);
        }
    }

    /// The cluster cache, unless disabled.
    fn cache(&self) -> Option<&ClusterCache> {
        if self.cluster_cache_bytes.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.cluster_cache.get()
    }

    /// Column `c` of cluster `file`, through the cache; `meta_reads` counts a miss.
    pub fn cluster_column(
        &self,
        cluster: &ClusterRef,
        c: u32,
        meta_reads: &mut u64,
    ) -> Result<ColumnView> {
        let file = &cluster.file;
        let r = cluster_reader(cluster, ReadKind::Metadata, meta_reads)?;
        let i = r.block_of(c)?;
        let Some(cache) = self.cache() else {
            *meta_reads += 1;
            return Ok(ColumnView::Read(r.column(c)?));
        };
        let key = (file.meta.file_no, i as u32);
        let block = match cache.get(&key) {
            Some(b) => b,
            None => {
                *meta_reads += 1;
                let b = Arc::new(r.load_block(i)?);
                cache.insert(key, b.clone());
                b
            }
        };
        Ok(ColumnView::Cached(block, c))
    }

    /// Counts lookup reads at `depth`.
    pub fn count(&self, depth: u32, data: u64, meta: u64) {
        if let Some(c) = self.reads.get(depth as usize) {
            if data > 0 {
                c.data.fetch_add(data, Ordering::Relaxed);
            }
            if meta > 0 {
                c.meta.fetch_add(meta, Ordering::Relaxed);
            }
        }
    }

    /// The counters of depths `0..=last`.
    pub fn level_reads(&self, last: u32) -> Vec<LevelReads> {
        self.reads
            .iter()
            .take(last as usize + 1)
            .enumerate()
            .map(|(d, c)| LevelReads {
                level: d as u32,
                data_block_reads: c.data.load(Ordering::Relaxed),
                metadata_block_reads: c.meta.load(Ordering::Relaxed),
                ..Default::default()
            })
            .collect()
    }

    /// Reserves `bytes` of the filter budget; `false` when over it.
    fn charge(&self, bytes: usize) -> bool {
        let budget = self.filter_budget.load(Ordering::Relaxed);
        let mut cur = self.filter_used.load(Ordering::Relaxed);
        loop {
            if cur.saturating_add(bytes) > budget {
                return false;
            }
            match self.filter_used.compare_exchange_weak(
                cur,
                cur + bytes,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
    }
}

/// A table of the trie: its open HTable reader (closed by the open-table bound, reopened on
/// the next use) and, loaded at most once and kept while the table lives, its per-bucket
/// filters.
pub struct HHandle {
    /// The open reader (opened without filters); `None` once the open-table bound closed it.
    open: RwLock<Option<Arc<OpenHTable>>>,
    /// The reader when no bound can close it (`max_open_files` 0, the default): read without
    /// a lock or a reference count, which cost ≈ 6 % of a get.
    fixed: OnceLock<OpenHTable>,
    /// Bucket count and shift, to find a key's bucket filter without the reader.
    n_buckets: u32,
    shift: u32,
    /// `Some(None)`: loaded but over the budget, not kept.
    filters: OnceLock<Option<FilterSet>>,
    charged: AtomicUsize,
    shared: Arc<Shared>,
    /// Counts the filters while kept in `Stats::table_reader_bytes`.
    filter_pin: crate::stats::Pinned,
}

/// An open HTable: the reader (file, migration records, bucket and overflow indexes), counted
/// in `Stats::open_table_files` and `Stats::table_reader_bytes` while it lives.
pub struct OpenHTable {
    reader: HTableReader,
    _pinned: crate::stats::Pinned,
}

impl OpenHTable {
    fn new(reader: HTableReader) -> Self {
        let _pinned = crate::stats::Pinned::new(
            reader.io_stats().clone(),
            reader.memory_bytes() + std::mem::size_of::<OpenHTable>(),
        );
        OpenHTable { reader, _pinned }
    }
}

/// An open reader as a use holds it: borrowed from a file that is never closed, or shared
/// with the file's slot, which the open-table bound may empty meanwhile.
pub enum Held<'a, T> {
    /// Never closed: borrowed.
    Fixed(&'a T),
    /// Closable: kept alive by this use.
    Shared(Arc<T>),
}

impl<T> std::ops::Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            Held::Fixed(r) => r,
            Held::Shared(r) => r,
        }
    }
}

impl std::ops::Deref for OpenHTable {
    type Target = HTableReader;
    fn deref(&self) -> &HTableReader {
        &self.reader
    }
}

impl std::fmt::Debug for HHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HHandle({} buckets)", self.n_buckets)
    }
}

impl HHandle {
    /// A handle of an open table; `filters` (from the builder) are kept if the budget allows.
    /// `closable`: the open-table bound may close it (`OpenTables::bounded`).
    pub fn new(
        reader: HTableReader,
        filters: Option<FilterSet>,
        shared: Arc<Shared>,
        closable: bool,
    ) -> Self {
        let filter_pin = crate::stats::Pinned::heap(reader.io_stats().clone(), 0);
        let (n_buckets, shift) = (reader.n_buckets(), reader.bucket_shift());
        let open = OpenHTable::new(reader);
        let (open, fixed) = if closable {
            (Some(Arc::new(open)), OnceLock::new())
        } else {
            (None, OnceLock::from(open))
        };
        let h = HHandle {
            n_buckets,
            shift,
            open: RwLock::new(open),
            fixed,
            filters: OnceLock::new(),
            charged: AtomicUsize::new(0),
            shared,
            filter_pin,
        };
        if let Some(f) = filters {
            h.keep(f);
        }
        h
    }

    fn keep(&self, f: FilterSet) {
        let bytes = f.memory_bytes();
        let kept = if self.shared.charge(bytes) {
            Some(f)
        } else {
            None
        };
        let charged = kept.as_ref().map_or(0, |_| bytes);
        if self.filters.set(kept).is_ok() {
            self.charged.store(charged, Ordering::Relaxed);
            self.filter_pin.add(charged);
        } else if charged > 0 {
            self.shared
                .filter_used
                .fetch_sub(charged, Ordering::Relaxed);
        }
    }

    /// The table's filters, loading them through `reader` (one Metadata read, counted in
    /// `meta_reads`) on first use; `None` when they are over the memory budget (probe the
    /// bucket directly then).
    pub fn filters(
        &self,
        reader: &HTableReader,
        meta_reads: &mut u64,
    ) -> Result<Option<&FilterSet>> {
        if let Some(f) = self.filters.get() {
            return Ok(f.as_ref());
        }
        let f = reader.read_filters_kind(ReadKind::Metadata)?;
        *meta_reads += 1;
        self.keep(f);
        Ok(self.filters.get().and_then(Option::as_ref))
    }

    /// The filter of the bucket of placement hash `h` if the filters are held in memory (no
    /// I/O, whether the file is open or not).
    pub fn filter_in_memory(&self, h: u128) -> Option<&[u8]> {
        let b = crate::htable::bucket_of(h, self.n_buckets, self.shift);
        self.filters.get()?.as_ref()?.get(b as usize)
    }

    /// Whether the filters are held in memory.
    pub fn filters_in_memory(&self) -> bool {
        self.filters.get().is_some_and(Option::is_some)
    }

    /// The open reader, if the file is open.
    fn open_reader(&self) -> Option<Arc<OpenHTable>> {
        self.open.read().clone()
    }

    /// Installs a reopened reader; `false` (and the reader installed meanwhile) when another
    /// thread reopened the file first: one reader per file.
    fn install(&self, r: Arc<OpenHTable>) -> (Arc<OpenHTable>, bool) {
        let mut slot = self.open.write();
        if let Some(other) = &*slot {
            return (other.clone(), false);
        }
        *slot = Some(r.clone());
        (r, true)
    }
}

impl TableAux for HHandle {
    fn close(&self) {
        self.open.write().take();
    }
    fn retire(&self) {
        self.release_filter_charge();
    }
}

impl HHandle {
    /// Gives the kept filters' bytes back to the in-memory filter budget (once).
    fn release_filter_charge(&self) {
        let c = self.charged.swap(0, Ordering::Relaxed);
        if c > 0 {
            self.shared.filter_used.fetch_sub(c, Ordering::Relaxed);
        }
    }
}

impl Drop for HHandle {
    fn drop(&mut self) {
        self.release_filter_charge();
    }
}

/// The handle of a table file of the trie if it was opened before (no I/O; its file may have
/// been closed since).
pub fn open_handle(f: &TableFile) -> Option<&HHandle> {
    f.aux_as::<HHandle>()
}

/// Adopts `h` (a freshly written table's handle, its file open) as the handle of `f`, counting
/// the open file under the open-table bound when `f` is a version's file (`track`).
pub fn adopt(f: &TableFile, h: Arc<HHandle>, track: bool) {
    if f.aux.set(h).is_ok() && track {
        f.opened();
    }
}

/// Opens the HTable of `f` (two Metadata reads, added to `meta_reads`) and checks it was built
/// with the database's placement-hash key.
fn open_htable(
    f: &TableFile,
    hash_key: &[u8; 16],
    kind: ReadKind,
    meta_reads: &mut u64,
) -> Result<HTableReader> {
    let reader = HTableReader::open_kind(f.open_file()?, false, kind)?;
    *meta_reads += 2;
    if reader.hash_key() != *hash_key {
        return Err(Error::corruption(
            f.path(),
            0,
            "HTable placement-hash key differs from the database's",
        ));
    }
    Ok(reader)
}

/// The handle and open reader of a table file of the trie, opening the table on first use and
/// again after the open-table bound closed it (two Metadata reads each time, added to
/// `meta_reads`).
pub fn table_handle<'a>(
    f: &'a TableFile,
    shared: &Arc<Shared>,
    hash_key: &[u8; 16],
    kind: ReadKind,
    meta_reads: &mut u64,
) -> Result<(&'a HHandle, Held<'a, OpenHTable>)> {
    let h = match f.aux_as::<HHandle>() {
        Some(h) => h,
        None => {
            let r = open_htable(f, hash_key, kind, meta_reads)?;
            let closable = f.ctx().open.bounded();
            adopt(
                f,
                Arc::new(HHandle::new(r, None, shared.clone(), closable)),
                true,
            );
            f.aux_as::<HHandle>()
                .ok_or_else(|| Error::corruption(f.path(), 0, "not an HTable handle"))?
        }
    };
    if let Some(r) = h.fixed.get() {
        return Ok((h, Held::Fixed(r)));
    }
    if let Some(r) = h.open_reader() {
        f.touch();
        return Ok((h, Held::Shared(r)));
    }
    let r = Arc::new(OpenHTable::new(open_htable(f, hash_key, kind, meta_reads)?));
    let (r, fresh) = h.install(r);
    if fresh {
        f.opened();
    }
    Ok((h, Held::Shared(r)))
}

/// A BloomCluster file's open reader (table ids and block directory), closed by the open-table
/// bound and reopened on the next use.
#[derive(Default)]
pub struct ClusterHandle {
    open: RwLock<Option<Arc<BloomClusterReader>>>,
    /// The reader when no bound can close it (as [`HHandle`]'s).
    fixed: OnceLock<BloomClusterReader>,
}

impl TableAux for ClusterHandle {
    fn close(&self) {
        self.open.write().take();
    }
}

/// The reader of a BloomCluster file, opened on first use and after the open-table bound
/// closed it (two Metadata reads). The file must cover the tables and columns its manifest
/// record names: a lookup takes a table's filters by its position in the record, so another
/// container's cluster of the same size put in its place would answer "absent" for keys the
/// container holds.
pub fn cluster_reader<'a>(
    cluster: &'a ClusterRef,
    kind: ReadKind,
    meta_reads: &mut u64,
) -> Result<Held<'a, BloomClusterReader>> {
    let f = &cluster.file;
    f.aux.get_or_init(|| Arc::new(ClusterHandle::default()));
    let h = f
        .aux_as::<ClusterHandle>()
        .ok_or_else(|| Error::corruption(f.path(), 0, "not a BloomCluster handle"))?;
    if let Some(r) = h.fixed.get() {
        return Ok(Held::Fixed(r));
    }
    if let Some(r) = h.open.read().clone() {
        f.touch();
        return Ok(Held::Shared(r));
    }
    let r = BloomClusterReader::open_kind(f.open_file()?, kind)?;
    *meta_reads += 2;
    if r.table_ids() != cluster.ids.as_slice() || r.n_columns() != cluster.n {
        return Err(Error::corruption(
            f.path(),
            0,
            format!(
                "BloomCluster covers tables {:?} in {} columns, the manifest says {:?} in {}",
                r.table_ids(),
                r.n_columns(),
                cluster.ids,
                cluster.n
            ),
        ));
    }
    if !f.ctx().open.bounded() {
        // Another thread may have set it meanwhile: one reader either way.
        let _ = h.fixed.set(r);
        return h
            .fixed
            .get()
            .map(Held::Fixed)
            .ok_or_else(|| Error::corruption(f.path(), 0, "BloomCluster reader not set"));
    }
    let r = Arc::new(r);
    {
        let mut slot = h.open.write();
        if let Some(other) = &*slot {
            return Ok(Held::Shared(other.clone()));
        }
        *slot = Some(r.clone());
    }
    f.opened();
    Ok(Held::Shared(r))
}

#[cfg(test)]
mod retire_tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use super::{adopt, HHandle, Shared};
    use crate::htable::{placement_hash, HTableBuilder, HTableOptions, HTableReader};
    use crate::key::{make_ikey, ValueKind};
    use crate::stats::WriteCause;
    use crate::table::purge::HeldJob;
    use crate::table::{TableFile, TableMeta};

    const HK: [u8; 16] = *b"0123456789abcdef";

    /// The filter budget is given back on the thread that drops the obsolete table, before the
    /// teardown runs: given back only when the handle is dropped, on the purge thread, tables
    /// opened while a teardown waits in the queue could be refused their filters (for good)
    /// for memory about to be freed.
    #[test]
    fn an_obsolete_tables_filter_charge_is_released_before_its_teardown_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ctx = crate::table::test_support::std_ctx_purged(dir.path());
        let meta = TableMeta {
            file_no: 7,
            size: 0,
            smallest: Vec::new(),
            largest: Vec::new(),
            entries: 0,
            min_seq: 0,
            max_seq: 0,
            append: None,
        };
        let f = TableFile::with_ext(meta, ctx.clone(), crate::htable::HTABLE_EXT);
        let mut b = HTableBuilder::new(HK, HTableOptions::default());
        for i in 0..500u32 {
            let k = format!("key{i:05}").into_bytes();
            b.add(
                placement_hash(&HK, &k),
                make_ikey(&k, u64::from(i) + 1, ValueKind::Put),
                vec![b'v'; 40],
            )
            .expect("add");
        }
        let mut w = ctx
            .env
            .create(&f.path(), WriteCause::Flush)
            .expect("create");
        let (_, filters) = b.finish_with_filters(&mut w).expect("finish");
        w.sync().expect("sync");
        drop(w);
        let reader = HTableReader::open(ctx.env.open(&f.path(), false).expect("open"), false)
            .expect("reader");
        let shared = Shared::new(1 << 20);
        adopt(
            &f,
            Arc::new(HHandle::new(reader, Some(filters), shared.clone(), false)),
            false,
        );
        let charged = shared.filter_used.load(Ordering::Relaxed);
        assert!(charged > 0, "the filters are kept and charged");
        // Hold the purge thread so the table's teardown waits in the queue.
        let held = HeldJob::default();
        ctx.purge.run(held.job(|| {}));
        f.mark_obsolete();
        let path = f.path();
        drop(f);
        assert_eq!(
            shared.filter_used.load(Ordering::Relaxed),
            0,
            "the charge is back while the teardown waits"
        );
        assert!(path.exists(), "the teardown has not run yet");
        held.release();
        ctx.purge.wait_idle();
        assert!(!path.exists(), "the teardown deleted the file");
        assert_eq!(
            shared.filter_used.load(Ordering::Relaxed),
            0,
            "the handle's drop gave nothing back twice"
        );
        ctx.purge.close();
    }
}
