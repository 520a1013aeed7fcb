//! The public handles — `Db`, `Keyspace`, `Snapshot` — and the calls users make on them:
//! keyspaces, writes, snapshots, flush, compact, stats.

use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::batch::{self, check_key, check_value, KsIds, WriteBatch, WriteOptions};
use crate::error::{Error, Result};
use crate::iterator::{self, RangeIter, Value};
use crate::key::ValueKind;
use crate::layout::{self, ManualScope, ManualStep};
use crate::manifest::edit::{Edit, KeyspaceDef, KsEdit};
use crate::memtable::Memtable;
use crate::options::{KeyspaceOptions, Layout as LayoutKind};
use crate::stats::{KeyspaceStats, LevelWrites, Stats};

use super::{guard_panic, DbHandle, DbInner, KsCore, ScopeToken};

/// An open database. Cheap to clone; the database closes when the last `Db`, `Keyspace`,
/// `Snapshot` and range iterator is dropped (background work is stopped, the WAL synced).
#[derive(Clone)]
pub struct Db {
    pub(super) h: Arc<DbHandle>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Db({})", self.h.inner.dir.display())
    }
}

/// A named keyspace of a database. Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Keyspace {
    pub(super) h: Arc<DbHandle>,
    pub(super) core: Arc<KsCore>,
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keyspace({}, {})", self.core.name, self.core.kind)
    }
}

/// A handle to a keyspace that does not keep the database open: point reads at the latest
/// state, and `Err(Error::Closed)` once the database has closed (or the keyspace is gone).
///
/// Made for a [`CompactionFilter`](crate::CompactionFilter) that decides by reading another
/// keyspace: a filter is owned by the database (through its keyspace's options), so a
/// [`Keyspace`] inside it would keep the database open forever (a reference cycle: the close,
/// which syncs the WAL and stops the background threads, would never run). Reading from a
/// compaction thread is safe: jobs run holding none of the database's locks (only installing
/// their result takes them), and a read takes only its keyspace's super-version lock
/// momentarily (docs/compaction-filter.md, "Filters that read").
#[derive(Clone)]
pub struct WeakKeyspace {
    inner: std::sync::Weak<DbInner>,
    core: std::sync::Weak<KsCore>,
}

impl std::fmt::Debug for WeakKeyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.core.upgrade() {
            Some(c) => write!(f, "WeakKeyspace({}, {})", c.name, c.kind),
            None => write!(f, "WeakKeyspace(closed)"),
        }
    }
}

impl WeakKeyspace {
    /// The current value of `key`, as [`Keyspace::get`]; `Err(Error::Closed)` once the
    /// database has closed.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        let (Some(inner), Some(core)) = (self.inner.upgrade(), self.core.upgrade()) else {
            return Err(Error::Closed);
        };
        super::read::get_in(&inner, &core, key.as_ref(), None)
    }
}

/// A consistent read view of the whole database at one moment.
pub struct Snapshot {
    pub(super) h: Arc<DbHandle>,
    pub(super) seq: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot({})", self.seq)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let mut s = self.h.inner.snapshots.lock();
        if let Some(c) = s.get_mut(&self.seq) {
            *c -= 1;
            if *c == 0 {
                s.remove(&self.seq);
            }
        }
    }
}

impl Db {
    pub(super) fn inner(&self) -> &Arc<DbInner> {
        &self.h.inner
    }

    /// Opens the keyspace `name`, creating it with `opts` if it does not exist. The layout is
    /// persisted: reopening with another layout is `InvalidArgument`. Other options may change.
    pub fn keyspace(&self, name: &str, opts: KeyspaceOptions) -> Result<Keyspace> {
        opts.validate()?;
        if name.is_empty() || name.len() > 255 {
            return Err(Error::InvalidArgument(
                "keyspace names are 1..=255 bytes".into(),
            ));
        }
        let inner = self.inner();
        let mut m = inner.manifest.lock();
        let existing = inner
            .keyspaces
            .read()
            .values()
            .find(|k| k.name == name)
            .cloned();
        if let Some(core) = existing {
            if core.kind != opts.layout {
                return Err(Error::InvalidArgument(format!(
                    "keyspace {name:?} was created with layout `{}`, not `{}`",
                    core.kind, opts.layout
                )));
            }
            core.layout.configure(&opts);
            *core.opts.write() = Arc::new(opts);
            return Ok(Keyspace {
                h: self.h.clone(),
                core,
            });
        }
        inner.check_writable("creating a keyspace")?;
        let policy = layout::new_layout(opts.layout)?;
        policy.configure(&opts);
        // A manifest may hold the largest id (crafted, or 2^32 keyspaces): no id is reused.
        let Some(id) = inner
            .keyspaces
            .read()
            .keys()
            .max()
            .map_or(Some(1), |m| m.checked_add(1))
        else {
            return Err(Error::Unsupported(format!(
                "cannot create keyspace {name:?}: keyspace ids are used up to {}",
                u32::MAX
            )));
        };
        let mut ks_edit = KsEdit::new(id);
        policy.init_records(&opts, &mut ks_edit);
        let wal_no = inner.wal_number.load(Ordering::SeqCst);
        ks_edit.log_number = Some(wal_no);
        let empty = policy.empty_version_with_key(&inner.tables, inner.hash_key);
        let version = empty.apply(&ks_edit, &inner.tables)?;
        let edit = Edit {
            new_keyspaces: vec![KeyspaceDef {
                id,
                name: name.to_string(),
                layout: opts.layout.encode(),
            }],
            keyspaces: vec![ks_edit],
            ..Default::default()
        };
        inner.log_edit(&mut m, &edit)?;
        let (wb, kind) = (opts.write_buffer_bytes, opts.layout);
        let mem = Memtable::for_layout(&kind, wal_no, wb);
        let core = KsCore::new(id, name.to_string(), opts, policy, mem, version, wal_no);
        inner.keyspaces.write().insert(id, core.clone());
        Ok(Keyspace {
            h: self.h.clone(),
            core,
        })
    }

    /// Opens the existing keyspace `name` with the options it has now: its layout's defaults
    /// after a reopen, until `Db::keyspace` names it with the application's options. For
    /// tools that do not know how a keyspace was created; `InvalidArgument` if there is none
    /// of that name.
    pub fn existing_keyspace(&self, name: &str) -> Result<Keyspace> {
        let core = self
            .inner()
            .keyspaces
            .read()
            .values()
            .find(|k| k.name == name)
            .cloned();
        match core {
            Some(core) => Ok(Keyspace {
                h: self.h.clone(),
                core,
            }),
            None => Err(Error::InvalidArgument(format!(
                "no keyspace named {name:?} (the database has {:?})",
                self.keyspace_names()
            ))),
        }
    }

    /// Names of the keyspaces in the database.
    pub fn keyspace_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner()
            .keyspaces
            .read()
            .values()
            .map(|k| k.name.clone())
            .collect();
        v.sort();
        v
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        if let Some(e) = batch.error {
            return Err(Error::InvalidArgument(e));
        }
        if batch.count == 0 {
            return Ok(());
        }
        if batch.db_id.is_some_and(|id| id != self.id()) {
            return Err(Error::InvalidArgument(
                "the batch names keyspaces of another database".into(),
            ));
        }
        let ub = batch.user_bytes();
        self.inner()
            .write(batch.rep, batch.count, batch.ks_ids, ub, opts.sync)
    }

    pub(super) fn id(&self) -> u64 {
        self.h.inner.instance
    }

    /// A snapshot of the current state.
    pub fn snapshot(&self) -> Snapshot {
        let inner = self.inner();
        let mut s = inner.snapshots.lock();
        let seq = inner.last_seq.load(Ordering::Acquire);
        *s.entry(seq).or_insert(0) += 1;
        Snapshot {
            h: self.h.clone(),
            seq,
        }
    }

    /// Freezes every non-empty memtable and waits until all are flushed.
    pub fn flush(&self) -> Result<()> {
        let inner = self.inner();
        inner.check_writable("flush")?;
        {
            let mut wal = inner.wal.lock();
            inner.check_bg_error()?;
            let all: Vec<Arc<KsCore>> = inner.keyspaces.read().values().cloned().collect();
            if all.iter().any(|k| !k.sv().mem.is_empty()) {
                inner.rotate(&mut wal, &all)?;
            }
        }
        inner.wait_for_immutable_memtables()
    }

    /// The script of this database's background compactions, if it was opened with one
    /// (`db::script`).
    #[cfg(test)]
    pub(crate) fn job_script(&self) -> Option<Arc<super::script::JobScript>> {
        self.inner().opts.job_script.clone()
    }

    /// Flushes, then compacts every keyspace as far as its layout goes: the tables present
    /// at the call, and every table made from them while it runs, end where the layout puts
    /// fully compacted data (one sorted level at the bottom for `leveled`, one table per
    /// guard of the deepest level for `fragmented`, one generation per last-level container
    /// for `trie`). Data written meanwhile is compacted only where a job merges it with
    /// older data, so writes that go on do not keep the call from returning.
    pub fn compact(&self) -> Result<()> {
        self.inner().check_writable("compact")?;
        self.flush()?;
        let inner = self.inner();
        let all: Vec<Arc<KsCore>> = inner.keyspaces.read().values().cloned().collect();
        for ks in all {
            self.compact_keyspace(&ks, &mut || Ok(()))?;
        }
        inner.bg_cv.notify_all();
        // The tables it made obsolete are deleted when it returns.
        inner.tables.purge.wait_idle();
        Ok(())
    }

    /// The manual compaction of one keyspace ([`Db::compact`]); `between` runs after each of
    /// its jobs (tests put writes there). Returns the number of jobs it ran.
    pub(super) fn compact_keyspace(
        &self,
        ks: &Arc<KsCore>,
        between: &mut dyn FnMut() -> Result<()>,
    ) -> Result<u64> {
        let inner = self.inner();
        let mut jobs = 0;
        {
            // Under the pick lock, no compaction installs between listing the tables and
            // registering the scope that later installs update.
            let token = {
                let _pick = inner.pick_lock.lock();
                let files = ks.sv().version.files();
                let scope = ManualScope::new(files.iter().map(|f| f.meta.file_no));
                ks.manual.lock().register(scope)
            };
            let _token = ScopeToken { ks, token };
            loop {
                inner.check_bg_error()?;
                let opts = ks.opts();
                let smallest = inner.smallest_snapshot();
                let step = {
                    let ctx = inner.job_ctx(&opts, smallest);
                    let _pick = inner.pick_lock.lock();
                    let scope = ks.manual.lock().get(token);
                    ks.layout.manual(&ks.sv().version, &ctx, &scope)
                };
                match step {
                    ManualStep::Done => break,
                    ManualStep::Wait => {
                        let mut bg = inner.bg.lock();
                        inner.bg_cv.wait_for(&mut bg, Duration::from_millis(20));
                    }
                    ManualStep::Run(job) => {
                        // As in the background: a failed compaction stops writes.
                        if let Err(e) = guard_panic("compaction", || inner.run_compaction(ks, job))
                        {
                            inner
                                .set_bg_error(&format!("compaction of keyspace {:?}", ks.name), &e);
                            return Err(e);
                        }
                        jobs += 1;
                        between()?;
                    }
                }
            }
        }
        Ok(jobs)
    }

    /// Waits until no flush or compaction is running or due, and the tables they made
    /// obsolete are deleted. Returns at once on a database opened read-only, where none runs.
    pub fn wait_for_compactions(&self) -> Result<()> {
        let inner = self.inner();
        if inner.opts.read_only {
            return Ok(());
        }
        let mut bg = inner.bg.lock();
        loop {
            inner.check_bg_error()?;
            let busy = bg.running > 0
                || inner.keyspaces.read().values().any(|k| {
                    let sv = k.sv();
                    !sv.imms.is_empty() || k.layout.needs_compaction(&sv.version, &k.opts())
                });
            if !busy {
                drop(bg);
                // The tables those jobs made obsolete are deleted too.
                inner.tables.purge.wait_idle();
                return Ok(());
            }
            inner.bg_cv.notify_all();
            inner.bg_cv.wait_for(&mut bg, Duration::from_millis(20));
        }
    }

    /// Statistics since open.
    pub fn stats(&self) -> Stats {
        let inner = self.inner();
        let mut s = inner.stats.snapshot();
        s.block_cache_usage_bytes = inner.tables.cache.usage_bytes();
        s.device = inner.env.fs.device_stats();
        let mut ks: Vec<Arc<KsCore>> = inner.keyspaces.read().values().cloned().collect();
        ks.sort_by_key(|k| k.id);
        for k in ks {
            let sv = k.sv();
            let dead_bytes: u64 = sv.version.files().iter().map(|f| f.meta.dead_bytes()).sum();
            s.dead_bytes += dead_bytes;
            s.keyspaces.push(KeyspaceStats {
                name: k.name.clone(),
                layout: k.kind.name().to_string(),
                levels: sv.version.level_stats(),
                memtable_bytes: std::iter::once(&sv.mem)
                    .chain(sv.imms.iter())
                    .map(|m| m.approximate_bytes() as u64)
                    .sum(),
                level_reads: sv
                    .version
                    .level_reads()
                    .into_iter()
                    .map(|mut r| {
                        let g = s.gets.max(1) as f64;
                        r.data_block_reads_per_get = r.data_block_reads as f64 / g;
                        r.metadata_block_reads_per_get = r.metadata_block_reads as f64 / g;
                        r
                    })
                    .collect(),
                level_writes: k
                    .level_writes
                    .lock()
                    .iter()
                    .enumerate()
                    .filter(|(_, w)| w.flush_bytes + w.compaction_bytes + w.moved_bytes > 0)
                    .map(|(level, w)| {
                        let written = (w.flush_bytes + w.compaction_bytes) as f64;
                        LevelWrites {
                            level: level as u32,
                            bytes_per_user_byte: written / s.user_bytes.max(1) as f64,
                            ..w.clone()
                        }
                    })
                    .collect(),
                dead_bytes,
            });
        }
        s
    }

    /// Checks every keyspace's layout invariants (used by tests and `scree check`).
    pub fn check_invariants(&self) -> Result<()> {
        for k in self.inner().keyspaces.read().values() {
            k.sv().version.check_invariants().map_err(|d| {
                Error::corruption(&self.inner().dir, 0, format!("keyspace {}: {d}", k.name))
            })?;
        }
        Ok(())
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner().dir
    }
}

impl Keyspace {
    /// The keyspace's id: how its WAL records and manifest edits name it (`scree wal`).
    pub fn id(&self) -> u32 {
        self.core.id
    }
    pub(crate) fn db_id(&self) -> u64 {
        self.h.inner.instance
    }

    /// The keyspace's name.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The keyspace's layout.
    pub fn layout(&self) -> LayoutKind {
        self.core.kind
    }

    /// Checks a key's size, and its length against the layout's key order (a `PrefixGroups`
    /// layout needs at least the prefix).
    pub(crate) fn check_key(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.core
            .kind
            .order()
            .check_key(&self.core.name, &self.core.kind, key)
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(key, value, &WriteOptions::default())
    }

    /// The layout's current version (unit tests of a layout's own structures).
    #[cfg(test)]
    pub(crate) fn version(&self) -> Arc<dyn crate::layout::LayoutVersion> {
        self.core.sv().version.clone()
    }

    /// Every live file of the keyspace, level by level in its layout's order, with where the
    /// layout keeps it (`ldb manifest_dump`'s view; `scree dump` prints it).
    pub fn tables(&self) -> Vec<crate::stats::TableInfo> {
        self.core
            .sv()
            .version
            .table_places()
            .into_iter()
            .map(|p| {
                let m = &p.file.meta;
                crate::stats::TableInfo {
                    file: format!("{:06}.{}", m.file_no, p.file.ext),
                    level: p.level,
                    place: p.place,
                    guard: p.guard,
                    size: m.size,
                    entries: m.entries,
                    smallest_key: m.smallest_user().to_vec(),
                    largest_key: m.largest_user().to_vec(),
                    min_seq: m.min_seq,
                    max_seq: m.max_seq,
                    dead_bytes: m.dead_bytes(),
                }
            })
            .collect()
    }

    /// Stores `value` under `key` with write options.
    pub fn put_opt(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let (k, v) = (key.as_ref(), value.as_ref());
        self.check_key(k)?;
        check_value(v)?;
        let rep = batch::single(self.core.id, ValueKind::Put, k, v);
        self.h.inner.write(
            rep,
            1,
            KsIds::from_elem(self.core.id, 1),
            (k.len() + v.len()) as u64,
            opts.sync,
        )
    }

    /// Stores `value` under `key` only if `key` has no live value, and says whether it did. No
    /// other write lands between the check and the put (a non-blind write: SlimDB's filters
    /// use it to skip reads a blind write would cost).
    pub fn put_if_absent(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool> {
        self.put_if_absent_opt(key, value, &WriteOptions::default())
    }

    /// [`Keyspace::put_if_absent`] with write options.
    pub fn put_if_absent_opt(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: &WriteOptions,
    ) -> Result<bool> {
        let (k, v) = (key.as_ref(), value.as_ref());
        self.check_key(k)?;
        check_value(v)?;
        self.h
            .inner
            .write_exclusive(KsIds::from_elem(self.core.id, 1), opts.sync, || {
                let (old, placed) = super::read::get_placed_in(&self.h.inner, &self.core, k)?;
                Ok(match old {
                    Some(_) => None,
                    None => Some(self.single_placed(ValueKind::Put, k, v, placed)),
                })
            })
    }

    /// Read-modify-write: `f` gets the current value of `key` (`None` if it has none) and
    /// returns the new one (`None` deletes the key); no other write lands between the read and
    /// the write. Returns the new value. `f` runs while other writers wait: keep it short, and
    /// do not write to the database from it (that write would wait for this one forever).
    pub fn update(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> Option<Vec<u8>>,
    ) -> Result<Option<Value>> {
        self.update_opt(key, f, &WriteOptions::default())
    }

    /// [`Keyspace::update`] with write options.
    pub fn update_opt(
        &self,
        key: impl AsRef<[u8]>,
        f: impl FnOnce(Option<&[u8]>) -> Option<Vec<u8>>,
        opts: &WriteOptions,
    ) -> Result<Option<Value>> {
        let k = key.as_ref();
        self.check_key(k)?;
        let mut new = None;
        self.h
            .inner
            .write_exclusive(KsIds::from_elem(self.core.id, 1), opts.sync, || {
                let (old, placed) = super::read::get_placed_in(&self.h.inner, &self.core, k)?;
                new = f(old.as_deref());
                match (&old, &new) {
                    (None, None) => Ok(None),
                    (_, Some(v)) => {
                        check_value(v)?;
                        Ok(Some(self.single_placed(ValueKind::Put, k, v, placed)))
                    }
                    (Some(_), None) => {
                        Ok(Some(self.single_placed(ValueKind::Delete, k, &[], placed)))
                    }
                }
            })?;
        Ok(new)
    }

    /// [`Keyspace::single`] for a non-blind write: what its read learned about the key's
    /// place in the first level is left with the memtable it read, whose flush gives it to the
    /// layout (SlimDB's Algorithm 2). Called where no other write can land before this one.
    fn single_placed(
        &self,
        kind: ValueKind,
        k: &[u8],
        v: &[u8],
        placed: Option<super::read::Placed>,
    ) -> (Vec<u8>, u32, u64) {
        if let Some((mem, place)) = placed {
            mem.note_first_level(k, place);
        }
        self.single(kind, k, v)
    }

    /// One entry of this keyspace as a write path batch: (`rep`, count, user bytes).
    fn single(&self, kind: ValueKind, k: &[u8], v: &[u8]) -> (Vec<u8>, u32, u64) {
        let rep = batch::single(self.core.id, kind, k, v);
        (rep, 1, (k.len() + v.len()) as u64)
    }

    /// Deletes `key`.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(key, &WriteOptions::default())
    }

    /// Deletes `key` with write options.
    pub fn delete_opt(&self, key: impl AsRef<[u8]>, opts: &WriteOptions) -> Result<()> {
        let k = key.as_ref();
        self.check_key(k)?;
        let rep = batch::single(self.core.id, ValueKind::Delete, k, &[]);
        self.h.inner.write(
            rep,
            1,
            KsIds::from_elem(self.core.id, 1),
            k.len() as u64,
            opts.sync,
        )
    }

    /// The current value of `key`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.get_at(key.as_ref(), None)
    }

    /// A handle that reads this keyspace without keeping the database open (for compaction
    /// filters: [`WeakKeyspace`]).
    pub fn downgrade(&self) -> WeakKeyspace {
        WeakKeyspace {
            inner: Arc::downgrade(&self.h.inner),
            core: Arc::downgrade(&self.core),
        }
    }

    /// Iterates `range` in key order (reverse with `.rev()` / `next_back`). Served by layouts
    /// whose [`Order`](crate::Order) is `Total`; the iterator of any other yields one
    /// `Unsupported` error saying why.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> RangeIter {
        self.range_scan(own(range.start_bound()), own(range.end_bound()), None)
    }

    /// Iterates every key starting with `prefix`. Served for any prefix by `Total`-ordered
    /// layouts, for prefixes of exactly the group length by `PrefixGroups` layouts (in the
    /// layout's own order); otherwise the iterator yields one `Unsupported` error saying why.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> RangeIter {
        self.prefix_scan(prefix.as_ref(), None)
    }
}

pub(super) fn own<K: AsRef<[u8]>>(b: Bound<&K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl Snapshot {
    pub(super) fn check(&self, ks: &Keyspace) -> Result<()> {
        if !Arc::ptr_eq(&self.h.inner, &ks.h.inner) {
            return Err(Error::InvalidArgument(
                "snapshot and keyspace belong to different databases".into(),
            ));
        }
        Ok(())
    }

    /// The value of `key` in `ks` at the snapshot.
    pub fn get(&self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<Option<Value>> {
        self.check(ks)?;
        ks.get_at(key.as_ref(), Some(self.seq))
    }

    /// Iterates `range` of `ks` at the snapshot.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, ks: &Keyspace, range: R) -> RangeIter {
        if let Err(e) = self.check(ks) {
            return iterator::failed(e);
        }
        ks.range_scan(
            own(range.start_bound()),
            own(range.end_bound()),
            Some(self.seq),
        )
    }

    /// Iterates the keys of `ks` starting with `prefix` at the snapshot.
    pub fn prefix(&self, ks: &Keyspace, prefix: impl AsRef<[u8]>) -> RangeIter {
        if let Err(e) = self.check(ks) {
            return iterator::failed(e);
        }
        ks.prefix_scan(prefix.as_ref(), Some(self.seq))
    }

    /// The snapshot's sequence number.
    pub fn sequence(&self) -> u64 {
        self.seq
    }
}
