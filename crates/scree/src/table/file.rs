//! The shared handle of a live table file ([`TableFile`]): opening its reader on demand, its
//! lifetime (obsolete once merged away, torn down on the purge thread), and lookups over
//! several tables.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering as AtOrd};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::RwLock;

use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::CountedReader;
use crate::memtable::Lookup;

use super::*;

/// The open state of a file of a layout-specific format, kept in [`TableFile::aux`]: what it
/// holds open (descriptor, map, per-file metadata) can be closed by the open-table bound and
/// reopened on the next use, like a sorted table's reader.
pub trait TableAux: std::any::Any + Send + Sync {
    /// Closes the open file; a use already holding it keeps it until done.
    fn close(&self);
    /// The table is obsolete and unreferenced, and its teardown is about to be queued on the
    /// purge thread: give back what budgets it holds now, so tables opened meanwhile are not
    /// refused for memory about to be freed. Runs on the thread that dropped the table.
    fn retire(&self) {}
}

/// A live table file. When it is marked obsolete (no version names it any more) the file is
/// deleted as soon as the last reader drops its handle. An appendable table has one handle per
/// length a version names ([`TableFile::readded`]): they share the file's [`FileLife`], and the
/// file goes only when every one of them is gone.
pub struct TableFile {
    /// What the manifest knows of it.
    pub meta: TableMeta,
    /// File name extension: its format's [`TableFormat::ext`] ([`crate::table_format::by_ext`]
    /// finds the format).
    pub ext: &'static str,
    /// The handle of a layout-specific format, set by the layout that owns the file. A layout
    /// that opens the file through it calls [`TableFile::opened`] and, on each use,
    /// [`TableFile::touch`], so the open-table bound covers it too.
    pub aux: OnceLock<Arc<dyn TableAux>>,
    ctx: Arc<TableCtx>,
    /// The open reader; `None` until first used, and again after [`OpenTables`] closed it.
    reader: RwLock<Option<Arc<TableReader>>>,
    /// Used since the open-table sweep last passed it.
    pub(crate) used: AtomicBool,
    /// Where its index and filter sit in the block cache, once a reader has put them there
    /// (`cache_index_and_filter_blocks`), so that deleting the table drops them even when the
    /// open-table bound has closed its reader.
    cached_meta: OnceLock<[Option<u64>; 2]>,
    me: Weak<TableFile>,
    /// The file's life, shared with the handles of its other lengths; taken by the drop.
    life: Option<Arc<FileLife>>,
    /// LevelDB's `allowed_seeks`: lookups that may still probe this table in vain before a
    /// layout with seek compaction (`leveled`) compacts it down
    /// ([`TableFile::charge_seek`]). In memory only, like LevelDB's: a handle opened again
    /// (reopen, or a new handle after an edit) starts from [`allowed_seeks`] again.
    seeks_left: AtomicI64,
}

/// LevelDB's starting `allowed_seeks` of a table of `size` bytes: one seek per 16 KiB, at
/// least 100. LevelDB's reasoning (version_set.cc): a seek costs about what compacting 40 KB
/// costs (10 ms of disk against 1 MB read, 1 MB written per MB compacted at 100 MB/s, and a
/// merge rewrites 10-12 MB of the next level per MB), so 16 KiB of table per seek is
/// conservative.
pub fn allowed_seeks(size: u64) -> i64 {
    i64::try_from(size / 16384).unwrap_or(i64::MAX).max(100)
}

/// What every handle of one file shares: whether the file is obsolete. The handle that drops
/// the last reference to it deletes the file (on the purge thread) if it is; handles of an
/// appendable table's older lengths, which old versions still read, keep it until then.
#[derive(Default)]
pub(crate) struct FileLife {
    obsolete: AtomicBool,
}

impl std::fmt::Debug for TableFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TableFile({})", self.meta.file_no)
    }
}

impl TableFile {
    /// A handle for a sorted table named by the manifest (opened lazily).
    pub fn new(meta: TableMeta, ctx: Arc<TableCtx>) -> Arc<TableFile> {
        Self::with_ext(meta, ctx, SORTED_EXT)
    }
    /// A handle for a file of another format (`ext`, a registered extension, names it).
    pub fn with_ext(meta: TableMeta, ctx: Arc<TableCtx>, ext: &'static str) -> Arc<TableFile> {
        Self::with_life(meta, ctx, ext, Arc::default())
    }
    fn with_life(
        meta: TableMeta,
        ctx: Arc<TableCtx>,
        ext: &'static str,
        life: Arc<FileLife>,
    ) -> Arc<TableFile> {
        let meta_size = meta.size;
        Arc::new_cyclic(|me| TableFile {
            meta,
            ext,
            aux: OnceLock::new(),
            ctx,
            reader: RwLock::new(None),
            used: AtomicBool::new(false),
            cached_meta: OnceLock::new(),
            me: me.clone(),
            life: Some(life),
            seeks_left: AtomicI64::new(allowed_seeks(meta_size)),
        })
    }
    /// The handle of this table once an edit removed it and added it back with `meta`: this
    /// handle when nothing changed (a move), or, for an append switch (an appendable table at
    /// a new end), a new handle of the same file at the new length, sharing the file's life
    /// (this one keeps the old length for the versions that hold it). Anything else is not an
    /// append of this table: the new end must lie past the old one, with the new metadata
    /// after the old end (bytes before it are never written again) and at least the dead
    /// bytes before.
    pub fn readded(&self, meta: &TableMeta) -> Result<Arc<TableFile>> {
        let (old, me) = (&self.meta, self.me.upgrade());
        if meta == old {
            if let Some(me) = me {
                return Ok(me);
            }
        }
        let fits = match (old.append, meta.append) {
            (Some(o), Some(n)) => {
                meta.file_no == old.file_no
                    && meta.size > old.size
                    && n.meta_offset >= old.size
                    && n.dead_bytes >= o.dead_bytes
            }
            _ => false,
        };
        if !fits {
            return Err(Error::InvalidArgument(format!(
                "table {:06} re-added as {meta:?}, which is neither it ({old:?}) nor an append to it",
                old.file_no
            )));
        }
        let life = self.life.clone().unwrap_or_default();
        Ok(Self::with_life(
            meta.clone(),
            self.ctx.clone(),
            self.ext,
            life,
        ))
    }
    /// The file's path.
    pub fn path(&self) -> PathBuf {
        self.ctx
            .dir
            .join(format!("{:06}.{}", self.meta.file_no, self.ext))
    }
    /// The shared table context.
    pub fn ctx(&self) -> &Arc<TableCtx> {
        &self.ctx
    }
    /// Whether `user_key` at `seq` can be in this table by its metadata: inside its key range,
    /// and not all of its versions newer than `seq`.
    pub fn may_hold(&self, user_key: &[u8], seq: u64) -> bool {
        user_key >= self.meta.smallest_user()
            && user_key <= self.meta.largest_user()
            && self.meta.min_seq <= seq
    }
    /// Charges one seek to the table (a lookup probed it, then had to probe another table):
    /// true when this charge used up its allowance (LevelDB's `UpdateStats`, which flags the
    /// table for compaction when `allowed_seeks` drops to 0 or below). Every later charge
    /// returns true as well, until [`TableFile::reset_seeks`].
    pub fn charge_seek(&self) -> bool {
        self.seeks_left.fetch_sub(1, AtOrd::Relaxed) <= 1
    }
    /// Seeks left before the table is due ([`TableFile::charge_seek`]).
    pub fn seeks_left(&self) -> i64 {
        self.seeks_left.load(AtOrd::Relaxed)
    }
    /// Starts the allowance again, as LevelDB does for a table an edit adds (a trivial move
    /// adds it to its new level as a new file record).
    pub fn reset_seeks(&self) {
        self.seeks_left
            .store(allowed_seeks(self.meta.size), AtOrd::Relaxed);
    }
    /// The layout-specific handle as a `T`, if set and of that type.
    pub fn aux_as<T: TableAux>(&self) -> Option<&T> {
        let a: &dyn std::any::Any = &**self.aux.get()?;
        a.downcast_ref::<T>()
    }
    /// Records a use of the file's open state (the open-table sweep spares it once).
    pub fn touch(&self) {
        if !self.used.load(AtOrd::Relaxed) {
            self.used.store(true, AtOrd::Relaxed);
        }
    }
    /// Records that the file was just opened (by its reader or its [`TableFile::aux`]
    /// handle), closing files past the open-table bound.
    pub fn opened(&self) {
        self.ctx.open.opened(self.me.clone());
    }
    /// Closes what the file holds open (reader and `aux`); the next use opens it again.
    pub(crate) fn close(&self) {
        if let Some(r) = self.reader.write().take() {
            // Its cached mapped blocks hold the file's map; once closed, nothing would
            // remove them when the table is deleted (see `evict_mapped_blocks`).
            r.evict_mapped_blocks(false);
        }
        if let Some(a) = self.aux.get() {
            a.close();
        }
    }
    /// The open reader, if the file is open.
    fn open_reader(&self) -> Option<Arc<TableReader>> {
        let r = self.reader.read().clone();
        if r.is_some() {
            self.touch();
        }
        r
    }
    /// The open reader (opens the file on first use, and after the open-table bound closed it).
    pub fn reader(&self) -> Result<Arc<TableReader>> {
        if let Some(r) = self.open_reader() {
            return Ok(r);
        }
        let r = Arc::new(TableReader::from_file(
            &self.ctx.env,
            self.open_file()?,
            self.meta.file_no,
            self.ctx.cache.clone(),
        )?);
        {
            let mut slot = self.reader.write();
            if let Some(other) = &*slot {
                // Another thread opened it meanwhile: one reader per file.
                return Ok(other.clone());
            }
            *slot = Some(r.clone());
        }
        self.cached_meta.get_or_init(|| r.cached_offsets());
        self.opened();
        Ok(r)
    }
    /// Opens the file for reading (mapped when the options say so). Its length must be the
    /// size the manifest records (0: not recorded): a file of another length is not the file
    /// the manifest names, even when its own footer and checksums are sound (a table of
    /// another number or database put in its place), and reading it as that file would answer
    /// from the wrong keys (gets of the real table's keys would say "absent"). An appendable
    /// table is read up to the size its version names and no further (a map covers only
    /// that); its file may be longer, by bytes a later switch appended (the next version's,
    /// or an unfinished switch's before a crash), never shorter.
    pub fn open_file(&self) -> Result<CountedReader> {
        let env = &self.ctx.env;
        let path = self.path();
        if self.meta.append.is_some() {
            return env.open_prefix(&path, env.direct_reads, self.meta.size);
        }
        let file = env.open(&path, env.direct_reads)?;
        let (len, size) = (file.len(), self.meta.size);
        if size != 0 && len != size {
            return Err(Error::corruption(
                &path,
                len.min(size),
                format!("file is {len} bytes, the manifest says {size}"),
            ));
        }
        Ok(file)
    }
    /// Marks the file for deletion once unreferenced (by every handle of it).
    pub fn mark_obsolete(&self) {
        if let Some(l) = &self.life {
            l.obsolete.store(true, AtOrd::SeqCst);
        }
    }

    /// A cursor over the table.
    pub fn iter(&self, fill_cache: bool) -> Result<TableIter> {
        TableIter::new(self.reader()?, fill_cache)
    }
}

/// Looks `user_key` up at `seq` in `tables`, given newest data first: the first table holding a
/// version of the key answers. The key is hashed once, and the filter blocks of every table
/// that may hold it (an open one: the others open when reached) are loaded before any is
/// tested, so their cache misses overlap instead of coming one table after another (a get in
/// a sorted layout tests 5–10 filters, each a miss).
pub fn get_in_tables<'a>(
    tables: impl IntoIterator<Item = &'a Arc<TableFile>>,
    user_key: &[u8],
    seq: u64,
) -> Result<Lookup> {
    get_in_tables_probed(tables, user_key, seq, &mut Probes::default())
}

/// Which tables a lookup over several tables probed, for seek compaction (`leveled`): a
/// table is probed when the key lies in its range and the lookup reached it, whether or not
/// its filter then ruled the key out. That is LevelDB 1.23's count: `Version::Get` calls its
/// `Match` for every file whose range holds the key, in order, until one answers, and the
/// filter is tested inside that call (`TableCache::Get`, `Table::InternalGet`).
#[derive(Default)]
pub struct Probes<'a> {
    /// The first table probed, with its place in the sequence of tables given.
    pub first: Option<(usize, &'a Arc<TableFile>)>,
    /// Tables probed.
    pub count: usize,
}

/// [`get_in_tables`], recording in `probes` the tables it probed.
pub fn get_in_tables_probed<'a>(
    tables: impl IntoIterator<Item = &'a Arc<TableFile>>,
    user_key: &[u8],
    seq: u64,
    probes: &mut Probes<'a>,
) -> Result<Lookup> {
    let h = bloom::bloom_hash(user_key);
    type Candidate<'t> = (usize, &'t Arc<TableFile>, Option<Arc<TableReader>>);
    let mut todo: smallvec::SmallVec<[Candidate<'a>; 16]> = smallvec::SmallVec::new();
    for (i, f) in tables.into_iter().enumerate() {
        if f.may_hold(user_key, seq) {
            let r = f.open_reader();
            if let Some(r) = &r {
                r.prefetch_filter(h);
            }
            todo.push((i, f, r));
        }
    }
    for (i, f, r) in todo {
        if probes.first.is_none() {
            probes.first = Some((i, f));
        }
        probes.count += 1;
        let r = match r {
            Some(r) => r,
            None => f.reader()?,
        };
        if !r.admits(h)? {
            continue;
        }
        match r.get_admitted(user_key, seq)? {
            Lookup::Absent => {}
            found => return Ok(found),
        }
    }
    Ok(Lookup::Absent)
}

impl Drop for TableFile {
    fn drop(&mut self) {
        let life = self.life.take();
        if life
            .as_ref()
            .is_some_and(|l| l.obsolete.load(AtOrd::SeqCst))
        {
            // Torn down on the purge thread, not on whichever writer or reader dropped the
            // last reference (table/purge.rs).
            let reader = self.reader.get_mut().take();
            let aux = self.aux.take();
            if let Some(a) = &aux {
                a.retire();
            }
            let cached = self.cached_meta.get().copied();
            let (ctx, file_no, path) = (self.ctx.clone(), self.meta.file_no, self.path());
            self.ctx.purge.run(Box::new(move || {
                if let Some(r) = &reader {
                    r.evict_mapped_blocks(true);
                }
                for off in cached.into_iter().flatten().flatten() {
                    ctx.cache.remove(file_no, off);
                }
                drop(reader);
                drop(aux);
                // The last handle of the file deletes it; a handle of another length of an
                // appendable table still held by an old version keeps it until it goes too.
                if life.and_then(Arc::into_inner).is_some() {
                    let _ = ctx.env.fs.remove(&path);
                }
            }));
        } else if let Some(last) = life.and_then(Arc::into_inner) {
            // The last handle of the file, and no version that named it is left to mark it
            // obsolete after this check: deleted only if a newer handle already was.
            if last.obsolete.load(AtOrd::SeqCst) {
                let (ctx, path) = (self.ctx.clone(), self.path());
                self.ctx.purge.run(Box::new(move || {
                    let _ = ctx.env.fs.remove(&path);
                }));
            }
        }
    }
}
