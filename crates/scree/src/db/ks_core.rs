//! A keyspace's shared state ([`KsCore`]) and what its readers see ([`SuperVersion`]), each
//! built in one place; the scopes of its running manual compactions.

use std::collections::HashSet;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::layout::{Layout, LayoutVersion, ManualScope};
use crate::manifest::edit::KsEdit;
use crate::memtable::Memtable;
use crate::options::{KeyspaceOptions, Layout as LayoutKind};
use crate::stats::LevelWrites;
use crate::table::TableFile;

/// What readers of a keyspace see: memtables and the layout's version, swapped atomically.
pub(crate) struct SuperVersion {
    pub mem: Arc<Memtable>,
    /// Frozen memtables, newest first.
    pub imms: Vec<Arc<Memtable>>,
    pub version: Arc<dyn LayoutVersion>,
}

impl SuperVersion {
    /// The one place a super-version is made: `mem` takes writes, `imms` (newest first) wait
    /// for their flush, `version` holds the layout's tables.
    pub(crate) fn new(
        mem: Arc<Memtable>,
        imms: Vec<Arc<Memtable>>,
        version: Arc<dyn LayoutVersion>,
    ) -> Arc<SuperVersion> {
        Arc::new(SuperVersion { mem, imms, version })
    }
}

/// A keyspace's shared state: what every handle of it, the write path and the background
/// jobs reach.
pub(crate) struct KsCore {
    pub id: u32,
    pub name: String,
    pub kind: LayoutKind,
    pub opts: RwLock<Arc<KeyspaceOptions>>,
    pub layout: Arc<dyn Layout>,
    pub sv: RwLock<Arc<SuperVersion>>,
    /// Oldest WAL that may hold unflushed data of this keyspace, as persisted.
    pub log_number: AtomicU64,
    /// What flushes and compactions put into each level since open (index = level).
    pub level_writes: Mutex<Vec<LevelWrites>>,
    /// The scopes of the manual compactions running on this keyspace, by token; every
    /// installed edit updates them ([`ManualScope::follow`]).
    pub manual: Mutex<ManualScopes>,
}

/// Scopes of the running manual compactions of one keyspace.
#[derive(Default)]
pub(crate) struct ManualScopes {
    next_token: u64,
    pub(super) running: Vec<(u64, ManualScope)>,
}

impl ManualScopes {
    pub(super) fn register(&mut self, scope: ManualScope) -> u64 {
        self.next_token += 1;
        self.running.push((self.next_token, scope));
        self.next_token
    }
    pub(super) fn get(&self, token: u64) -> ManualScope {
        self.running
            .iter()
            .find(|(t, _)| *t == token)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }
    pub(super) fn remove(&mut self, token: u64) {
        self.running.retain(|(t, _)| *t != token);
    }
}

/// Ends a manual compaction's scope however the call returns.
pub(super) struct ScopeToken<'a> {
    pub(super) ks: &'a KsCore,
    pub(super) token: u64,
}

impl Drop for ScopeToken<'_> {
    fn drop(&mut self) {
        self.ks.manual.lock().remove(self.token);
    }
}

impl KsCore {
    /// The one place a keyspace's core is made: keyspace `id` named `name`, run by `layout`
    /// with `opts`, holding `version`, with `mem` taking its writes and `log_number` the
    /// oldest WAL that may hold its unflushed writes.
    pub(crate) fn new(
        id: u32,
        name: String,
        opts: KeyspaceOptions,
        layout: Arc<dyn Layout>,
        mem: Memtable,
        version: Arc<dyn LayoutVersion>,
        log_number: u64,
    ) -> Arc<KsCore> {
        Arc::new(KsCore {
            id,
            name,
            kind: opts.layout,
            opts: RwLock::new(Arc::new(opts)),
            layout,
            sv: RwLock::new(SuperVersion::new(Arc::new(mem), Vec::new(), version)),
            log_number: AtomicU64::new(log_number),
            level_writes: Mutex::new(Vec::new()),
            manual: Mutex::new(ManualScopes::default()),
        })
    }

    pub(super) fn sv(&self) -> Arc<SuperVersion> {
        self.sv.read().clone()
    }
    pub(super) fn opts(&self) -> Arc<KeyspaceOptions> {
        self.opts.read().clone()
    }

    /// Counts what an edit about to be installed writes into each level: its added tables, and
    /// the tables it merges away (`merged`: removed and not re-added), at the deepest level it
    /// writes to. A table also named as removed is a move (its bytes are moved, not written),
    /// unless it is an appendable table at a new end: then the bytes appended since the end
    /// `old` names are written (flush or compaction bytes, and `appended_bytes`), the bytes
    /// before them neither written nor moved. `old` holds the tables of the version the edit
    /// applies to (at least the merged and the re-added appendable ones).
    pub(super) fn count_level_writes(
        &self,
        edit: &KsEdit,
        old: &[Arc<TableFile>],
        merged: &HashSet<u64>,
        flush: bool,
    ) {
        let mut w = self.level_writes.lock();
        let mut deepest: Option<usize> = None;
        for a in &edit.added {
            let level = a.level as usize;
            if w.len() <= level {
                w.resize_with(level + 1, LevelWrites::default);
            }
            let Some(lw) = w.get_mut(level) else { continue };
            let no = a.meta.file_no;
            let written = if edit.removed.contains(&no) {
                let before = old.iter().find(|t| t.meta.file_no == no).map(|t| &t.meta);
                match before {
                    Some(b) if a.meta.append.is_some() && a.meta.size > b.size => {
                        let appended = a.meta.size - b.size;
                        lw.appended_bytes += appended;
                        appended
                    }
                    _ => {
                        lw.moved_bytes += a.meta.size;
                        continue;
                    }
                }
            } else {
                lw.tables_written += 1;
                a.meta.size
            };
            if flush {
                lw.flush_bytes += written;
            } else {
                lw.compaction_bytes += written;
            }
            deepest = deepest.max(Some(level));
        }
        let merged: u64 = old
            .iter()
            .filter(|t| merged.contains(&t.meta.file_no))
            .map(|t| t.meta.size)
            .sum();
        if let Some(lw) = deepest.and_then(|d| w.get_mut(d)) {
            lw.input_bytes += merged;
        }
    }
}
