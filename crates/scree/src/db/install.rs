//! Installing a flush's or compaction's edit: logging it to the manifest, publishing the new
//! version, counting what it wrote per level, rolling the manifest over, removing WALs no
//! keyspace needs.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::manifest::edit::{Edit, KeyspaceDef, KsEdit};
use crate::manifest::{self, ManifestWriter};
use crate::memtable::Memtable;

use super::{wal_path, DbInner, KsCore, SuperVersion};

impl DbInner {
    /// Logs `edit` to the manifest and publishes the new version; `flushed` is the memtable the
    /// edit replaces.
    pub(super) fn install(
        &self,
        ks: &Arc<KsCore>,
        edit: &mut KsEdit,
        flushed: Option<&Arc<Memtable>>,
    ) -> Result<()> {
        edit.id = ks.id;
        // A job that changed nothing the manifest records (a `semisorted` filter rebuild, which
        // hands its filter to the live version itself): no manifest write, no new version.
        if flushed.is_none()
            && edit.added.is_empty()
            && edit.removed.is_empty()
            && edit.records.is_empty()
            && edit.log_number.is_none()
        {
            return Ok(());
        }
        let mut m = self.manifest.lock();
        let sv = ks.sv();
        if let Some(imm) = flushed {
            // After this flush, the oldest memtable still holding data decides the log number.
            let oldest = sv
                .imms
                .iter()
                .rev()
                .find(|x| !Arc::ptr_eq(x, imm))
                .unwrap_or(&sv.mem);
            edit.log_number = Some(oldest.log_number);
        }
        let new_version = sv.version.apply(edit, &self.tables)?;
        let added: HashSet<u64> = edit.added.iter().map(|a| a.meta.file_no).collect();
        let merged: HashSet<u64> = edit
            .removed
            .iter()
            .copied()
            .filter(|f| !added.contains(f))
            .collect();
        // Only the merged tables are needed (their bytes, and marking them obsolete), and the
        // old sizes of appendable tables switched to a new end (what was appended): a flush or
        // a move needs none and skips listing every live table, which costs milliseconds
        // under the manifest lock in a store of 100k tables.
        let switches = edit
            .added
            .iter()
            .any(|a| a.meta.append.is_some() && edit.removed.contains(&a.meta.file_no));
        let old_files = if merged.is_empty() && !switches {
            Vec::new()
        } else {
            sv.version.files()
        };
        if !edit.added.is_empty() {
            // The new files' directory entries must be durable before a manifest edit names
            // them, or a power loss leaves the manifest pointing at missing files.
            if let Err(err) = self.env.sync_dir(&self.dir) {
                self.set_bg_error("directory sync before a manifest edit", &err);
                return Err(err);
            }
        }
        let mut e = Edit {
            next_file_no: Some(self.next_file.load(Ordering::SeqCst)),
            last_seq: Some(self.last_seq.load(Ordering::Acquire)),
            keyspaces: vec![edit.clone()],
            ..Default::default()
        };
        if e.adds_appendable_tables() {
            // The snapshot may predate every appendable table: the edit names the feature
            // itself, so that a build without it refuses the manifest here too.
            e.features = Some(e.features_needed());
        }
        if flushed.is_some() {
            // The flush synced the retired WALs when it started; a rotation since then
            // retired another, unsynced, which the log numbers recorded here can move past.
            // A power loss could then lose its tail while the manifest says it is not needed
            // below tables holding older writes: recovery would end the history there and
            // refuse to open ("already holds later writes"). The log numbers are read first:
            // every WAL below them was retired before this sync.
            e.keyspaces.extend(self.advanced_log_numbers(ks.id));
            self.sync_old_logs()?;
        }
        self.log_edit(&mut m, &e)?;
        for k in &e.keyspaces {
            if let (Some(n), Some(core)) = (k.log_number, self.keyspaces.read().get(&k.id)) {
                core.log_number.store(n, Ordering::SeqCst);
            }
        }
        ks.count_level_writes(edit, &old_files, &merged, flushed.is_some());
        {
            let mut manual = ks.manual.lock();
            if !manual.running.is_empty() {
                // The tables the edit wrote data into: new files, and appendable tables that
                // gained entries. A table switched to a new tail only (a `lightweight`
                // aggregation write) holds none of the merged data and keeps its place in or
                // out of a manual compaction's scope.
                let old: std::collections::HashMap<u64, &crate::table::TableMeta> = old_files
                    .iter()
                    .map(|f| (f.meta.file_no, &f.meta))
                    .collect();
                let gained: Vec<u64> = edit
                    .added
                    .iter()
                    .filter(|a| {
                        old.get(&a.meta.file_no).is_none_or(|o| {
                            o.entries != a.meta.entries || o.max_seq != a.meta.max_seq
                        })
                    })
                    .map(|a| a.meta.file_no)
                    .collect();
                for (_, scope) in manual.running.iter_mut() {
                    scope.follow(gained.iter().copied(), &merged);
                }
            }
        }
        {
            let mut g = ks.sv.write();
            let imms = match flushed {
                Some(imm) => g
                    .imms
                    .iter()
                    .filter(|x| !Arc::ptr_eq(x, imm))
                    .cloned()
                    .collect(),
                None => g.imms.clone(),
            };
            *g = SuperVersion::new(g.mem.clone(), imms, new_version);
        }
        for f in old_files {
            if merged.contains(&f.meta.file_no) {
                f.mark_obsolete();
            }
        }
        self.maybe_roll_manifest(&mut m)?;
        drop(m);
        if flushed.is_some() {
            self.delete_obsolete_logs();
        }
        Ok(())
    }

    /// Log-number edits for the keyspaces other than `except` whose oldest memtable is on a
    /// newer WAL than the manifest records for them (an empty memtable moves to the new WAL at
    /// every rotation): recorded with a flush, so that a keyspace without writes does not keep
    /// every WAL alive. Must hold the manifest lock.
    pub(super) fn advanced_log_numbers(&self, except: u32) -> Vec<KsEdit> {
        let mut out = Vec::new();
        for k in self.keyspaces.read().values() {
            if k.id == except {
                continue;
            }
            let sv = k.sv();
            let oldest = sv.imms.last().unwrap_or(&sv.mem).log_number;
            if oldest > k.log_number.load(Ordering::SeqCst) {
                let mut e = KsEdit::new(k.id);
                e.log_number = Some(oldest);
                out.push(e);
            }
        }
        out
    }

    pub(super) fn log_edit(&self, m: &mut ManifestWriter, e: &Edit) -> Result<()> {
        // Nothing is logged after a failure: a failed append may have left part of a record
        // (a later record behind it would be dropped with the torn tail), and a failed roll-over
        // may already have pointed CURRENT at another manifest.
        self.check_bg_error()?;
        self.sync_wal_dir()?;
        if let Err(err) = m.append(e) {
            self.set_bg_error("manifest append", &err);
            return Err(err);
        }
        Ok(())
    }

    /// The whole state as one edit (must hold the manifest lock).
    pub(super) fn snapshot_edit(&self) -> Edit {
        let mut e = Edit {
            next_file_no: Some(self.next_file.load(Ordering::SeqCst)),
            last_seq: Some(self.last_seq.load(Ordering::Acquire)),
            hash_key: Some(self.hash_key),
            sealed_logs_from: Some(self.sealed_from),
            ..Default::default()
        };
        let mut all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        all.sort_by_key(|k| k.id);
        for ks in all {
            e.new_keyspaces.push(KeyspaceDef {
                id: ks.id,
                name: ks.name.clone(),
                layout: ks.kind.encode(),
            });
            let mut k = KsEdit::new(ks.id);
            k.log_number = Some(ks.log_number.load(Ordering::SeqCst));
            ks.sv().version.snapshot(&mut k);
            e.keyspaces.push(k);
        }
        e.features = Some(e.features_needed());
        e
    }

    pub(super) fn maybe_roll_manifest(&self, m: &mut ManifestWriter) -> Result<()> {
        if !m.due_for_roll_over(self.opts.max_manifest_bytes) {
            return Ok(());
        }
        let n = self.next_file.fetch_add(1, Ordering::SeqCst);
        let snap = self.snapshot_edit();
        let new = match ManifestWriter::create(&self.env, &self.dir, n, &snap) {
            Ok(w) => w,
            Err(e) => {
                self.set_bg_error("manifest roll-over", &e);
                return Err(e);
            }
        };
        let old = std::mem::replace(m, new);
        let _ = self
            .env
            .remove(&manifest::manifest_path(&self.dir, old.number));
        Ok(())
    }

    pub(super) fn delete_obsolete_logs(&self) {
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        // Never take the WAL lock here: a stalled writer holds it while waiting for this flush.
        let current = self.wal_number.load(Ordering::SeqCst);
        let mut min_log = current;
        for ks in &all {
            // The log numbers the manifest records, not the memtables' (which can be ahead):
            // a log recovery would replay is never deleted, so the WALs it replays are the
            // whole chain since the oldest, and a missing one is a loss (`wal_chain`).
            let sv = ks.sv();
            let oldest = sv.imms.last().unwrap_or(&sv.mem).log_number;
            min_log = min_log
                .min(oldest)
                .min(ks.log_number.load(Ordering::SeqCst));
        }
        let doomed: Vec<u64> = {
            let mut logs = self.live_logs.lock();
            let d = logs.iter().copied().filter(|&n| n < min_log).collect();
            logs.retain(|&n| n >= min_log);
            d
        };
        if !doomed.is_empty() {
            // A retired log whose data is all in tables never needs its sync.
            let paths: Vec<PathBuf> = doomed.iter().map(|&n| wal_path(&self.dir, n)).collect();
            self.old_logs
                .lock()
                .retain(|l| !paths.iter().any(|p| p == l.path()));
            for p in paths {
                let _ = self.env.remove(&p);
            }
        }
    }
}
