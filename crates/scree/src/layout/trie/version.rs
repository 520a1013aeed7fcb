//! One immutable state of a `trie` keyspace: its containers (trie nodes addressed by depth and
//! hash prefix), each a pile of HTables (sub-levels, newest first) plus, at the last level, the
//! BloomCluster covering them; the point lookup (containers on the key's path root to last
//! level, sub-levels newest first, filters before buckets); and the manifest records.
//!
//! Container ids: `depth << 56 | prefix`, where `prefix` is the top `3 × depth` bits of the
//! placement hash (the root is id 0). A table's `AddedTable::level` is its container's depth and
//! `slot` the container id. A sub-level's `TableMeta::max_seq` is its *order key*: the largest
//! sequence number of the data it was made from (for a flush, the memtable's; for a compaction,
//! of the whole input pile). Sub-levels of one container are ordered by it, newest first; all
//! tables one compaction writes into one container share it and hold disjoint keys.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use crate::coding::{put_varint, Reader};
use crate::error::{Error, Result};
use crate::filter::bloom::bloom_hash;
use crate::htable::cluster::CLUSTER_EXT;
use crate::htable::{
    bucket_of, bucket_shift_for_depth, filter_may_contain, placement_hash, trie_child,
    FORMAT_HTABLE, HTABLE_EXT,
};
use crate::iter::InternalIter;
use crate::key::ValueKind;
use crate::layout::{check_edit_tables, LayoutVersion, TablePlace};
use crate::manifest::edit::{AddedTable, KsEdit, LayoutRecord};
use crate::memtable::Lookup;
use crate::stats::{LevelReads, LevelStats, ReadKind};
use crate::table::{TableCtx, TableFile, TableMeta};

use super::handle::{adopt, open_handle, table_handle, Shared, MAX_DEPTH};

/// Record: persistent parameters (`varint 1 ‖ varint last_level_depth`).
pub const TAG_PARAMS: u8 = 1;
/// Record: the BloomCluster of a container (`varint container ‖ varint file_no ‖ varint size ‖
/// varint n_columns ‖ varint count ‖ count × varint table id`).
pub const TAG_CLUSTER: u8 = 2;
/// Record: a container has no BloomCluster any more (`varint container`).
pub const TAG_CLUSTER_DROP: u8 = 3;
/// Record: the garbage estimate of a last-level container (`varint container ‖ varint
/// signature ‖ varint ratio in millionths`), valid while the container's newest sub-level is
/// the one with `max_seq` = signature.
pub const TAG_GC: u8 = 4;

/// A garbage estimate of a last-level container, valid while its newest sub-level is the one
/// it was taken with (persisted with [`TAG_GC`], so garbage collection resumes after a reopen).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcEstimate {
    /// `max_seq` of the container's newest sub-level when sampled.
    pub signature: u64,
    /// Estimated fraction of the container's bytes that are garbage (0..=1).
    pub ratio: f64,
}

/// Encodes a garbage-estimate record.
pub fn gc_record(container: u64, est: GcEstimate) -> LayoutRecord {
    let mut data = Vec::new();
    put_varint(&mut data, container);
    put_varint(&mut data, est.signature);
    put_varint(&mut data, (est.ratio.clamp(0.0, 1.0) * 1e6).round() as u64);
    LayoutRecord { tag: TAG_GC, data }
}

/// A cheap hasher for container ids and file numbers (the std SipHash costs more than the rest
/// of a lookup's map access).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

/// A map keyed by container id or file number.
pub type IdMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<IdHasher>>;

/// The id of the container at `depth` on the path of `hash`.
pub fn container_id(depth: u32, hash: u128) -> u64 {
    let prefix = if depth == 0 {
        0
    } else {
        (hash >> (128 - 3 * depth.min(MAX_DEPTH as u32))) as u64
    };
    (u64::from(depth) << 56) | prefix
}

/// The depth of container `id`.
pub fn depth_of(id: u64) -> u32 {
    (id >> 56) as u32
}

/// The id of child `c` (0..8) of container `id`.
pub fn child_id(id: u64, c: u8) -> u64 {
    let d = depth_of(id) + 1;
    let prefix = id & ((1 << 56) - 1);
    (u64::from(d) << 56) | (prefix << 3) | u64::from(c & 7)
}

/// Whether container `id` lies in the subtree of container `root` (itself included).
pub fn in_subtree(id: u64, root: u64) -> bool {
    let (d, r) = (depth_of(id), depth_of(root));
    if d < r {
        return false;
    }
    let mask = (1u64 << 56) - 1;
    (id & mask).checked_shr(3 * (d - r)) == Some(root & mask)
}

/// Whether `id` can name a container: depth at most [`MAX_DEPTH`], prefix of `3 × depth` bits.
pub fn valid_container(id: u64) -> bool {
    let d = depth_of(id);
    d as usize <= MAX_DEPTH && (id & ((1u64 << 56) - 1)) >> (3 * d) == 0
}

/// The BloomCluster of a last-level container.
#[derive(Debug)]
pub struct ClusterRef {
    /// The cluster file (extension `bc`; its reader lives in `aux`).
    pub file: Arc<TableFile>,
    /// Table ids of its sub-levels, in the file's sub-level order.
    pub ids: Vec<u64>,
    /// Its column count (the bucket count of the tables it covers).
    pub n: u32,
}

impl ClusterRef {
    /// The cluster's sub-level index of table `id`.
    pub fn index_of(&self, id: u64) -> Option<usize> {
        self.ids.iter().position(|&x| x == id)
    }
}

/// One trie node.
#[derive(Debug, Clone)]
pub struct Container {
    /// Container id.
    pub id: u64,
    /// Its depth (root = 0).
    pub depth: u32,
    /// Sub-levels, newest first.
    pub pile: Vec<Arc<TableFile>>,
    /// The BloomCluster (last level only).
    pub cluster: Option<Arc<ClusterRef>>,
    /// The newest garbage estimate (last level only).
    pub gc: Option<GcEstimate>,
}

impl Container {
    /// Whether pile table `id` is covered by the cluster.
    pub fn covered(&self, id: u64) -> bool {
        self.cluster
            .as_ref()
            .is_some_and(|c| c.index_of(id).is_some())
    }
    /// Tables no cluster covers.
    pub fn uncovered(&self) -> usize {
        self.pile
            .iter()
            .filter(|t| !self.covered(t.meta.file_no))
            .count()
    }
    /// Number of generations (distinct order keys) in the pile.
    pub fn generations(&self) -> usize {
        self.generations_where(|_| true)
    }
    /// Number of generations among the pile's tables whose file numbers pass `keep`.
    pub fn generations_where(&self, keep: impl Fn(u64) -> bool) -> usize {
        let mut n = 0;
        let mut last = None;
        for t in self.pile.iter().filter(|t| keep(t.meta.file_no)) {
            if last != Some(t.meta.max_seq) {
                n += 1;
                last = Some(t.meta.max_seq);
            }
        }
        n
    }
    /// Order key of the newest sub-level.
    pub fn newest(&self) -> u64 {
        self.pile.first().map_or(0, |t| t.meta.max_seq)
    }
}

/// A `trie` version.
pub struct TrieVersion {
    pub(crate) shared: Arc<Shared>,
    pub(crate) hash_key: [u8; 16],
    pub(crate) last_depth: u32,
    pub(crate) containers: IdMap<Arc<Container>>,
    /// File number → container id, for tables and cluster files.
    files: IdMap<u64>,
    /// Longest pile among upper-level containers.
    pub(crate) max_upper_pile: usize,
    /// Containers at the last level.
    pub(crate) last_containers: usize,
    /// Number of edits applied since the empty version: versions installed later have larger
    /// numbers, which lets the policy refuse jobs planned on a stale version.
    pub(crate) gen: u64,
    /// Deepest depth holding a container (at least the last level's).
    deepest: u32,
}

impl TrieVersion {
    /// An empty version.
    pub fn empty(shared: Arc<Shared>, hash_key: [u8; 16], last_depth: u32) -> Self {
        TrieVersion {
            shared,
            hash_key,
            last_depth,
            containers: IdMap::default(),
            files: IdMap::default(),
            max_upper_pile: 0,
            last_containers: 0,
            gen: 0,
            deepest: last_depth,
        }
    }

    /// Whether the version names file `no` (a table or a cluster).
    pub fn has_file(&self, no: u64) -> bool {
        self.files.contains_key(&no)
    }

    /// Lookup in containers of depths `lo..=hi` on the key's path.
    fn get_depths(&self, user_key: &[u8], seq: u64, lo: u32, hi: u32) -> Result<Lookup> {
        let h = placement_hash(&self.hash_key, user_key);
        let bh = bloom_hash(user_key);
        for d in lo..=hi {
            if let Some(c) = self.containers.get(&container_id(d, h)) {
                if let Some(found) = self.probe(c, h, bh, user_key, seq)? {
                    return Ok(found);
                }
            }
        }
        Ok(Lookup::Absent)
    }

    /// Probes one container: sub-levels newest first, each after its filter (the BloomCluster
    /// column for covered last-level tables, read once per lookup).
    fn probe(
        &self,
        c: &Container,
        h: u128,
        bh: u64,
        user_key: &[u8],
        seq: u64,
    ) -> Result<Option<Lookup>> {
        let mut data = 0u64;
        let mut meta = 0u64;
        let r = self.probe_counted(c, h, bh, user_key, seq, &mut data, &mut meta);
        self.shared.count(c.depth, data, meta);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn probe_counted(
        &self,
        c: &Container,
        h: u128,
        bh: u64,
        user_key: &[u8],
        seq: u64,
        data: &mut u64,
        meta: &mut u64,
    ) -> Result<Option<Lookup>> {
        let mut column = None;
        // The in-memory filters of the pile's open tables, looked up (and their first byte
        // loaded) before any is tested: one cache miss or two per table, independent of each
        // other, so the processor overlaps them instead of taking them one table at a time.
        let mut early: smallvec::SmallVec<[Option<&[u8]>; 16]> = smallvec::SmallVec::new();
        if c.cluster.is_none() {
            for t in &c.pile {
                let f = open_handle(t).and_then(|hd| hd.filter_in_memory(h));
                std::hint::black_box(f.and_then(|f| f.first().copied()));
                early.push(f);
            }
        }
        for (i, t) in c.pile.iter().enumerate() {
            if t.meta.min_seq > seq {
                continue;
            }
            let pre = early.get(i).copied().flatten();
            if let Some(f) = pre {
                if !filter_may_contain(f, bh) {
                    continue;
                }
            }
            let mut opened = None;
            let covered = c
                .cluster
                .as_ref()
                .and_then(|cl| cl.index_of(t.meta.file_no).map(|i| (cl, i)));
            if let Some((cl, idx)) = covered {
                if column.is_none() {
                    column = Some(self.shared.cluster_column(
                        cl,
                        bucket_of(h, cl.n, bucket_shift_for_depth(c.depth)),
                        meta,
                    )?);
                }
                if !column.as_ref().is_some_and(|col| col.may_contain(idx, bh)) {
                    continue;
                }
            } else if pre.is_some() {
                // Its filter passed above.
            } else {
                let (handle, r) =
                    table_handle(t, &self.shared, &self.hash_key, ReadKind::Metadata, meta)?;
                if let Some(fs) = handle.filters(&r, meta)? {
                    if !fs.may_contain(r.bucket_of(h) as usize, bh) {
                        continue;
                    }
                }
                opened = Some(r);
            }
            // Opened only once a filter let the key through (the open-table bound may have
            // closed the file).
            let r = match opened {
                Some(r) => r,
                None => table_handle(t, &self.shared, &self.hash_key, ReadKind::Metadata, meta)?.1,
            };
            let (found, reads) = r.probe(h, user_key, seq)?;
            *data += u64::from(reads);
            if let Some((_, kind, v)) = found {
                return Ok(Some(match kind {
                    ValueKind::Put => Lookup::Value(v),
                    ValueKind::Delete => Lookup::Deleted,
                }));
            }
        }
        Ok(None)
    }

    fn recompute(&mut self) {
        self.max_upper_pile = self
            .containers
            .values()
            .filter(|c| c.depth < self.last_depth)
            .map(|c| c.pile.len())
            .max()
            .unwrap_or(0);
        self.last_containers = self
            .containers
            .values()
            .filter(|c| c.depth >= self.last_depth && !c.pile.is_empty())
            .count();
        self.deepest = self
            .containers
            .values()
            .map(|c| c.depth)
            .max()
            .unwrap_or(0)
            .max(self.last_depth);
    }

    /// Deepest depth holding a container.
    fn max_depth(&self) -> u32 {
        self.deepest
    }
}

fn bad(d: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("trie manifest record: {}", d.into()))
}

/// Encodes the parameters record.
pub fn params_record(last_depth: u32) -> LayoutRecord {
    let mut data = Vec::new();
    put_varint(&mut data, 1);
    put_varint(&mut data, u64::from(last_depth));
    LayoutRecord {
        tag: TAG_PARAMS,
        data,
    }
}

/// Encodes a cluster record.
pub fn cluster_record(container: u64, file: &TableMeta, n: u32, ids: &[u64]) -> LayoutRecord {
    let mut data = Vec::new();
    put_varint(&mut data, container);
    put_varint(&mut data, file.file_no);
    put_varint(&mut data, file.size);
    put_varint(&mut data, u64::from(n));
    put_varint(&mut data, ids.len() as u64);
    for id in ids {
        put_varint(&mut data, *id);
    }
    LayoutRecord {
        tag: TAG_CLUSTER,
        data,
    }
}

/// Encodes a cluster-drop record.
pub fn cluster_drop_record(container: u64) -> LayoutRecord {
    let mut data = Vec::new();
    put_varint(&mut data, container);
    LayoutRecord {
        tag: TAG_CLUSTER_DROP,
        data,
    }
}

/// Metadata of a cluster file as the engine's file registry sees it.
pub fn cluster_meta(file_no: u64, size: u64) -> TableMeta {
    TableMeta {
        file_no,
        size,
        smallest: Vec::new(),
        largest: Vec::new(),
        entries: 0,
        min_seq: 0,
        max_seq: 0,
        append: None,
    }
}

impl LayoutVersion for TrieVersion {
    fn get(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        self.get_depths(user_key, seq, 0, self.max_depth())
    }

    fn has_distinct_last_level(&self) -> bool {
        self.last_containers > 0
    }

    fn get_upper(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        if self.last_depth == 0 {
            return Ok(Lookup::Absent);
        }
        self.get_depths(user_key, seq, 0, self.last_depth - 1)
    }

    fn get_last(&self, user_key: &[u8], seq: u64) -> Result<Lookup> {
        self.get_depths(user_key, seq, self.last_depth, self.max_depth())
    }

    fn level_reads(&self) -> Vec<LevelReads> {
        self.shared.level_reads(self.max_depth())
    }

    fn add_iters(&self, _out: &mut Vec<Box<dyn InternalIter>>) -> Result<()> {
        Err(Error::Unsupported(
            "trie keyspaces are hash-ordered: range and prefix scans are not supported; use a \
             sorted layout (leveled, fragmented)"
                .into(),
        ))
    }

    fn apply(&self, edit: &KsEdit, tables: &Arc<TableCtx>) -> Result<Arc<dyn LayoutVersion>> {
        let mut v = TrieVersion {
            shared: self.shared.clone(),
            hash_key: self.hash_key,
            last_depth: self.last_depth,
            containers: self.containers.clone(),
            files: self.files.clone(),
            max_upper_pile: 0,
            last_containers: 0,
            gen: self.gen + 1,
            deepest: 0,
        };
        let mut touched: HashMap<u64, Container> = HashMap::new();
        let take = |v: &TrieVersion, id: u64| -> Container {
            v.containers.get(&id).map_or_else(
                || Container {
                    id,
                    depth: depth_of(id),
                    pile: Vec::new(),
                    cluster: None,
                    gc: None,
                },
                |c| Container::clone(c),
            )
        };
        check_edit_tables(edit, FORMAT_HTABLE, |no| self.files.contains_key(&no))?;
        for no in &edit.removed {
            // Named twice in one edit: gone already.
            let Some(cid) = v.files.remove(no) else {
                continue;
            };
            let c = match touched.remove(&cid) {
                Some(c) => c,
                None => take(&v, cid),
            };
            let mut c = c;
            c.pile.retain(|t| t.meta.file_no != *no);
            if c.cluster
                .as_ref()
                .is_some_and(|cl| cl.file.meta.file_no == *no)
            {
                c.cluster = None;
            }
            touched.insert(cid, c);
        }
        for a in &edit.added {
            let cid = a.slot;
            if depth_of(cid) != a.level || a.level as usize > MAX_DEPTH {
                return Err(bad(format!(
                    "table {} at level {} in container {cid:#x}",
                    a.meta.file_no, a.level
                )));
            }
            if v.files.contains_key(&a.meta.file_no) {
                return Err(bad(format!("table {} added twice", a.meta.file_no)));
            }
            let f = TableFile::with_ext(a.meta.clone(), tables.clone(), HTABLE_EXT);
            if let Some(h) = self.shared.pending.lock().remove(&a.meta.file_no) {
                adopt(&f, h, true);
            }
            let mut c = match touched.remove(&cid) {
                Some(c) => c,
                None => take(&v, cid),
            };
            c.pile.push(f);
            v.files.insert(a.meta.file_no, cid);
            touched.insert(cid, c);
        }
        for r in &edit.records {
            let mut rd = Reader::new(&r.data);
            match r.tag {
                TAG_PARAMS => {
                    let _ver = rd.varint().ok_or_else(|| bad("params"))?;
                    let d = rd.varint().ok_or_else(|| bad("params"))?;
                    if !(1..=MAX_DEPTH as u64).contains(&d) {
                        return Err(bad(format!("last level depth {d}")));
                    }
                    v.last_depth = d as u32;
                }
                TAG_CLUSTER => {
                    let cid = rd.varint().ok_or_else(|| bad("cluster"))?;
                    if !valid_container(cid) {
                        return Err(bad(format!("cluster of container {cid:#x}")));
                    }
                    let no = rd.varint().ok_or_else(|| bad("cluster"))?;
                    let size = rd.varint().ok_or_else(|| bad("cluster"))?;
                    let n = rd.varint().ok_or_else(|| bad("cluster"))?;
                    let count = rd.varint().ok_or_else(|| bad("cluster"))?;
                    if n == 0 || n > u64::from(u32::MAX) || count > r.data.len() as u64 {
                        return Err(bad("cluster sizes"));
                    }
                    let ids = (0..count)
                        .map(|_| rd.varint().ok_or_else(|| bad("cluster ids")))
                        .collect::<Result<Vec<u64>>>()?;
                    let mut c = match touched.remove(&cid) {
                        Some(c) => c,
                        None => take(&v, cid),
                    };
                    if let Some(old) = &c.cluster {
                        if old.file.meta.file_no != no {
                            v.files.remove(&old.file.meta.file_no);
                        }
                    }
                    let file = match &c.cluster {
                        Some(old) if old.file.meta.file_no == no => old.file.clone(),
                        _ => {
                            TableFile::with_ext(cluster_meta(no, size), tables.clone(), CLUSTER_EXT)
                        }
                    };
                    v.files.insert(no, cid);
                    c.cluster = Some(Arc::new(ClusterRef {
                        file,
                        ids,
                        n: n as u32,
                    }));
                    touched.insert(cid, c);
                }
                TAG_CLUSTER_DROP => {
                    let cid = rd.varint().ok_or_else(|| bad("cluster drop"))?;
                    let mut c = match touched.remove(&cid) {
                        Some(c) => c,
                        None => take(&v, cid),
                    };
                    if let Some(old) = c.cluster.take() {
                        v.files.remove(&old.file.meta.file_no);
                    }
                    touched.insert(cid, c);
                }
                TAG_GC => {
                    let cid = rd.varint().ok_or_else(|| bad("gc estimate"))?;
                    if !valid_container(cid) {
                        return Err(bad(format!("gc estimate of container {cid:#x}")));
                    }
                    let signature = rd.varint().ok_or_else(|| bad("gc estimate"))?;
                    let ppm = rd.varint().ok_or_else(|| bad("gc estimate"))?;
                    if ppm > 1_000_000 {
                        return Err(bad(format!("gc estimate ratio {ppm} ppm")));
                    }
                    let mut c = match touched.remove(&cid) {
                        Some(c) => c,
                        None => take(&v, cid),
                    };
                    c.gc = Some(GcEstimate {
                        signature,
                        ratio: ppm as f64 / 1e6,
                    });
                    touched.insert(cid, c);
                }
                t => return Err(bad(format!("unknown record tag {t}"))),
            }
        }
        for (cid, mut c) in touched {
            c.pile.sort_by(|a, b| {
                b.meta
                    .max_seq
                    .cmp(&a.meta.max_seq)
                    .then(b.meta.file_no.cmp(&a.meta.file_no))
            });
            if c.pile.is_empty() && c.cluster.is_none() {
                v.containers.remove(&cid);
            } else {
                v.containers.insert(cid, Arc::new(c));
            }
        }
        v.recompute();
        Ok(Arc::new(v))
    }

    fn snapshot(&self, out: &mut KsEdit) {
        out.records.push(params_record(self.last_depth));
        let mut ids: Vec<u64> = self.containers.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let Some(c) = self.containers.get(&id) else {
                continue;
            };
            for t in c.pile.iter().rev() {
                out.added.push(AddedTable {
                    level: c.depth,
                    slot: c.id,
                    format: FORMAT_HTABLE,
                    meta: t.meta.clone(),
                });
            }
            if let Some(cl) = &c.cluster {
                out.records
                    .push(cluster_record(c.id, &cl.file.meta, cl.n, &cl.ids));
            }
            if let Some(est) = c.gc {
                out.records.push(gc_record(c.id, est));
            }
        }
    }

    fn files(&self) -> Vec<Arc<TableFile>> {
        let mut out = Vec::new();
        for c in self.containers.values() {
            out.extend(c.pile.iter().cloned());
            if let Some(cl) = &c.cluster {
                out.push(cl.file.clone());
            }
        }
        out
    }

    fn table_places(&self) -> Vec<TablePlace> {
        let mut cs: Vec<&Arc<Container>> = self.containers.values().collect();
        cs.sort_by_key(|c| (c.depth, c.id));
        let mut out = Vec::new();
        for c in cs {
            for t in &c.pile {
                out.push(TablePlace {
                    level: c.depth,
                    place: format!("container {}", c.id),
                    guard: None,
                    file: t.clone(),
                });
            }
            if let Some(cl) = &c.cluster {
                out.push(TablePlace {
                    level: c.depth,
                    place: format!("container {}, BloomCluster", c.id),
                    guard: None,
                    file: cl.file.clone(),
                });
            }
        }
        out
    }

    fn level_stats(&self) -> Vec<LevelStats> {
        (0..=self.max_depth())
            .map(|d| {
                let cs: Vec<&Arc<Container>> =
                    self.containers.values().filter(|c| c.depth == d).collect();
                let tables: u64 = cs.iter().map(|c| c.pile.len() as u64).sum();
                let bytes: u64 = cs
                    .iter()
                    .flat_map(|c| c.pile.iter())
                    .map(|t| t.meta.size)
                    .sum();
                let max_pile = cs.iter().map(|c| c.pile.len()).max().unwrap_or(0);
                let clusters = cs.iter().filter(|c| c.cluster.is_some()).count();
                let cluster_bytes: u64 = cs
                    .iter()
                    .filter_map(|c| c.cluster.as_ref())
                    .map(|cl| cl.file.meta.size)
                    .sum();
                let kind = if d == self.last_depth {
                    "last level"
                } else if d > self.last_depth {
                    "below the last level"
                } else {
                    "upper level"
                };
                LevelStats {
                    filter_bytes: 0,
                    memory: None,
                    level: d,
                    tables,
                    bytes,
                    detail: format!(
                        "{kind}: {} containers, max pile {max_pile}, {clusters} BloomClusters \
                         ({cluster_bytes} bytes)",
                        cs.len()
                    ),
                }
            })
            .collect()
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        for c in self.containers.values() {
            if depth_of(c.id) != c.depth {
                return Err(format!("container {:#x} at depth {}", c.id, c.depth));
            }
            for w in c.pile.windows(2) {
                if let [a, b] = w {
                    if a.meta.max_seq < b.meta.max_seq {
                        return Err(format!(
                            "container {:#x}: sub-level {} older than {} below it",
                            c.id, a.meta.file_no, b.meta.file_no
                        ));
                    }
                }
            }
            for t in &c.pile {
                if self.files.get(&t.meta.file_no) != Some(&c.id) {
                    return Err(format!("table {} not indexed", t.meta.file_no));
                }
            }
            if let Some(cl) = &c.cluster {
                if c.depth < self.last_depth {
                    return Err(format!("upper container {:#x} has a BloomCluster", c.id));
                }
                for id in &cl.ids {
                    if !c.pile.iter().any(|t| t.meta.file_no == *id) {
                        return Err(format!(
                            "container {:#x}: BloomCluster covers table {id} not in the pile",
                            c.id
                        ));
                    }
                }
            }
            // Every table of a container holds keys routed to it.
            let _ = trie_child;
        }
        Ok(())
    }

    fn verify_metadata_files(&self) -> Vec<Error> {
        let mut errors = Vec::new();
        for cl in self.containers.values().filter_map(|c| c.cluster.as_ref()) {
            let mut reads = 0;
            if let Err(e) = super::handle::cluster_reader(cl, ReadKind::Compaction, &mut reads) {
                errors.push(e);
            }
        }
        errors
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::test_support::metadata_only_ctx;

    /// Layout records naming a container the trie cannot have (depth above [`MAX_DEPTH`]) are
    /// bad records: they were accepted, and a BloomCluster record kept such a container in the
    /// version, where the next compaction's pick (`in_subtree`, a shift by three bits per depth
    /// of difference) panicked.
    #[test]
    fn records_of_impossible_containers_are_refused() {
        let v = TrieVersion::empty(Shared::new(0), [0; 16], 2);
        let deep = 40u64 << 56;
        let mut e = KsEdit::default();
        e.records
            .push(cluster_record(deep, &cluster_meta(7, 100), 4, &[]));
        let r = v.apply(&e, &metadata_only_ctx());
        if let Ok(v) = &r {
            if let Some(v) = v.as_any().downcast_ref::<TrieVersion>() {
                for c in v.containers.values() {
                    // What a compaction of the root's child 3 computes for every container.
                    let _ = in_subtree(c.id, child_id(0, 3));
                }
            }
        }
        assert!(matches!(r, Err(Error::InvalidArgument(_))));
        let mut e = KsEdit::default();
        e.records.push(gc_record(
            (1 << 56) | 8,
            GcEstimate {
                signature: 1,
                ratio: 0.5,
            },
        ));
        assert!(matches!(
            v.apply(&e, &metadata_only_ctx()),
            Err(Error::InvalidArgument(_))
        ));
        assert!(in_subtree(child_id(child_id(0, 3), 5), child_id(0, 3)));
        assert!(!in_subtree(child_id(child_id(0, 2), 5), child_id(0, 3)));
        assert!(valid_container(child_id(child_id(0, 7), 7)));
    }
}
