//! The write path: group commit of batches into the WAL, then into the memtables; making room
//! (stalls, WAL rotation, freezing memtables); syncing retired WALs.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::batch::{self, KsIds};
use crate::error::{Error, Result};
use crate::key;
use crate::layout::Pressure;
use crate::log::LogWriter;
use crate::memtable::Memtable;
use crate::stats::WriteCause;
use crate::wal_chain;

use super::{guard_panic, wal_path, DbInner, KsCore, Pending, SuperVersion, WalState};

impl DbInner {
    // ---- write path ----

    pub(super) fn write(
        &self,
        rep: Vec<u8>,
        count: u32,
        ks_ids: KsIds,
        user_bytes: u64,
        sync: bool,
    ) -> Result<()> {
        self.check_writable("write")?;
        let me = Pending {
            rep,
            count,
            ks_ids,
            user_bytes,
            sync,
            exclusive: false,
            result: Mutex::new(None),
        };
        let mut q = self.queue.lock();
        if !q.leader && q.pending.is_empty() {
            // Nobody is writing or waiting: lead a group of one without queueing (no shared
            // allocation, no hand-off). Writers arriving meanwhile queue behind the leader.
            q.leader = true;
            drop(q);
            let res = self.write_group_guarded(&[&me], &mut 0);
            let mut q = self.queue.lock();
            q.leader = false;
            if !q.pending.is_empty() {
                self.queue_cv.notify_all();
            }
            return res;
        }
        let me = Arc::new(me);
        q.pending.push_back(me.clone());
        loop {
            if let Some(r) = me.result.lock().take() {
                return r;
            }
            if !q.leader && q.pending.front().is_some_and(|f| Arc::ptr_eq(f, &me)) {
                break;
            }
            self.queue_cv.wait(&mut q);
        }
        q.leader = true;
        let mut group = Vec::new();
        let mut bytes = 0u64;
        while let Some(p) = q.pending.front() {
            if !group.is_empty() && (p.exclusive || bytes + p.user_bytes > 4 << 20) {
                break;
            }
            bytes += p.user_bytes;
            if let Some(p) = q.pending.pop_front() {
                group.push(p);
            }
        }
        drop(q);
        let refs: Vec<&Pending> = group.iter().map(|p| &**p).collect();
        let mut applied = 0;
        let res = self.write_group_guarded(&refs, &mut applied);
        for (i, p) in group.iter().enumerate() {
            let r = match &res {
                Ok(()) => Ok(()),
                Err(_) if i < applied => Ok(()),
                Err(e) => Err(e.duplicate()),
            };
            *p.result.lock() = Some(r);
        }
        let mut q = self.queue.lock();
        q.leader = false;
        self.queue_cv.notify_all();
        drop(q);
        let r = me.result.lock().take();
        r.unwrap_or(Ok(()))
    }

    /// A conditional write: waits for its turn in the writers' queue, then, while it alone may
    /// write (every earlier write applied, no later one started), calls `decide`, which reads
    /// what it needs and returns the batch to write (`rep`, entry count, user bytes) or `None`
    /// for no write. Returns whether it wrote. Other writers wait meanwhile, so `decide` should
    /// be a lookup, not more.
    pub(super) fn write_exclusive(
        &self,
        ks_ids: KsIds,
        sync: bool,
        decide: impl FnOnce() -> Result<Option<(Vec<u8>, u32, u64)>>,
    ) -> Result<bool> {
        self.check_writable("write")?;
        let me = Arc::new(Pending {
            rep: Vec::new(),
            count: 0,
            ks_ids: ks_ids.clone(),
            user_bytes: 0,
            sync,
            exclusive: true,
            result: Mutex::new(None),
        });
        let mut q = self.queue.lock();
        q.pending.push_back(me.clone());
        while q.leader || !q.pending.front().is_some_and(|f| Arc::ptr_eq(f, &me)) {
            self.queue_cv.wait(&mut q);
        }
        q.leader = true;
        q.pending.pop_front();
        drop(q);
        let res = guard_panic("conditional write", || {
            let Some((rep, count, user_bytes)) = decide()? else {
                return Ok(false);
            };
            let p = Pending {
                rep,
                count,
                ks_ids,
                user_bytes,
                sync,
                exclusive: true,
                result: Mutex::new(None),
            };
            self.write_group_guarded(&[&p], &mut 0).map(|()| true)
        });
        let mut q = self.queue.lock();
        q.leader = false;
        self.queue_cv.notify_all();
        drop(q);
        res
    }

    /// [`DbInner::write_group`], with a panic (a bug) turned into a background error: the
    /// leader flag is then still cleared, so later writers get the error instead of waiting
    /// for a leader that is gone.
    pub(super) fn write_group_guarded(
        &self,
        group: &[&Pending],
        applied: &mut usize,
    ) -> Result<()> {
        let res = guard_panic("write", || self.write_group(group, applied));
        if let Err(e @ Error::BackgroundError(_)) = &res {
            self.set_bg_error("write", e);
        }
        res
    }

    /// Writes a group's batches to the WAL and the memtables. On an error, `applied` is the
    /// number of leading batches that were applied all the same (and are acknowledged).
    pub(super) fn write_group(&self, group: &[&Pending], applied: &mut usize) -> Result<()> {
        self.check_bg_error()?;
        let mut wal = self.wal.lock();
        let mut ids: KsIds = group
            .iter()
            .flat_map(|p| p.ks_ids.iter().copied())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let mut cores = Vec::with_capacity(ids.len());
        for id in ids {
            let ks = self
                .keyspace(id)
                .ok_or_else(|| Error::InvalidArgument(format!("no keyspace with id {id}")))?;
            cores.push(ks);
        }
        let mut grade = None;
        for ks in &cores {
            if let Some(g) = self.make_room(&mut wal, ks)? {
                grade = Some(grade.map_or(g, |was: u32| was.max(g)));
            }
        }
        let bytes: u64 = group.iter().map(|p| p.rep.len() as u64).sum();
        let wait = wal.delay.delay(Instant::now(), bytes, grade);
        if !wait.is_zero() {
            // Slept holding the WAL lock: the writers queued behind this group are delayed
            // with it, which is the point (the rate is the database's).
            std::thread::sleep(wait);
            self.stats
                .slowdown_micros
                .fetch_add(wait.as_micros() as u64, Ordering::Relaxed);
        }
        let mut seq = self.last_seq.load(Ordering::Acquire);
        // Refused before anything is logged: a record past the largest sequence number would
        // be acknowledged and then refuse to replay.
        let count: u64 = group.iter().map(|p| u64::from(p.count)).sum();
        if seq.saturating_add(count) > key::MAX_SEQ {
            return Err(Error::Unsupported(format!(
                "sequence numbers exhausted: {seq} used, {count} more needed, the largest is {}",
                key::MAX_SEQ
            )));
        }
        let mut sync = false;
        let first_seq = seq + 1;
        for (i, p) in group.iter().enumerate() {
            // One record per batch: the compact header (a few bytes on the stack), then the
            // batch's entries as they are.
            if let Err(e) = batch::append_to_log(&mut wal.log, seq + 1, p.count, &p.rep) {
                self.set_bg_error("WAL append", &e);
                // The batches before this one are whole records in the log and replay after a
                // reopen: failing them too would make a write that returned an error appear
                // later. Those that asked for no sync, up to the first that did, are applied
                // and acknowledged; a synced one cannot be (its sync will not come) and may
                // reappear, as after a failed sync.
                let done = group.get(..i).unwrap_or_default();
                *applied = done.iter().take_while(|p| !p.sync).count();
                self.apply_group(&cores, done.get(..*applied).unwrap_or_default(), first_seq);
                return Err(e);
            }
            seq += u64::from(p.count);
            sync |= p.sync;
        }
        let r = if sync {
            self.sync_old_logs().and_then(|_| wal.log.sync())
        } else {
            wal.log.flush()
        };
        if let Err(e) = r {
            self.set_bg_error(if sync { "WAL sync" } else { "WAL write" }, &e);
            return Err(e);
        }
        self.apply_group(&cores, group, first_seq);
        Ok(())
    }

    /// Inserts the logged batches of `group` (sequence numbers from `first_seq` on) into the
    /// memtables of `cores` and publishes the last sequence number (must hold the WAL lock).
    pub(super) fn apply_group(&self, cores: &[Arc<KsCore>], group: &[&Pending], first_seq: u64) {
        if group.is_empty() {
            return;
        }
        // The memtables stay current while the WAL lock is held (only `rotate` swaps them).
        let mems: Vec<(u32, Arc<Memtable>)> =
            cores.iter().map(|k| (k.id, k.sv().mem.clone())).collect();
        let user_bytes = group.iter().map(|p| p.user_bytes).sum();
        if let [p] = group {
            if p.count == 1 {
                // One put or delete (`Keyspace::put`): no list to build.
                // `rep` was encoded by this crate (WriteBatch or batch::single): it decodes.
                for e in batch::entries(&p.rep, 1).flatten() {
                    if let Some((_, mem)) = mems.iter().find(|(id, _)| *id == e.ks) {
                        mem.insert(e.key, first_seq, e.kind, e.value);
                    }
                }
                self.stats
                    .user_bytes
                    .fetch_add(user_bytes, Ordering::Relaxed);
                self.last_seq.store(first_seq, Ordering::Release);
                return;
            }
        }
        // The group is decoded once; each memtable then takes its entries in one call, which
        // locks its index once per run of entries rather than per entry.
        let total: usize = group.iter().map(|p| p.count as usize).sum();
        let mut all = Vec::with_capacity(total);
        let mut s = first_seq;
        for p in group {
            // `rep` was encoded by this crate (WriteBatch or batch::single): every entry decodes.
            for e in batch::entries(&p.rep, p.count).flatten() {
                all.push((e.ks, (e.key, s, e.kind, e.value)));
                s += 1;
            }
        }
        let mut entries = Vec::with_capacity(all.len());
        for (id, mem) in &mems {
            entries.clear();
            entries.extend(all.iter().filter(|(ks, _)| ks == id).map(|&(_, e)| e));
            mem.insert_batch(&entries);
        }
        self.stats
            .user_bytes
            .fetch_add(user_bytes, Ordering::Relaxed);
        let last: u64 = group.iter().map(|p| u64::from(p.count)).sum();
        self.last_seq.store(first_seq - 1 + last, Ordering::Release);
    }

    /// Makes sure `ks` can take a write: waits at the layout's stop trigger, freezes a full
    /// memtable. Returns the grade of slowdown the write group is under (`db/delay.rs`), if
    /// any: the layout's, plus the memtable's while the immutable memtables are all waiting
    /// for a flush (its grade grows with each eighth of the current one filled, so writers
    /// slow down before they would have to wait for the flush).
    pub(super) fn make_room(&self, wal: &mut WalState, ks: &Arc<KsCore>) -> Result<Option<u32>> {
        loop {
            self.check_bg_error()?;
            let sv = ks.sv();
            let opts = ks.opts();
            let layout = match ks.layout.pressure(&sv.version, &opts) {
                Pressure::Stop => {
                    self.stall(false);
                    continue;
                }
                Pressure::Slowdown(g) => Some(g),
                Pressure::None => None,
            };
            let used = sv.mem.approximate_bytes();
            let full = opts.write_buffer_bytes.max(1);
            let waiting = sv.imms.len() >= self.opts.max_immutable_memtables;
            if used < full {
                let memtable = waiting.then(|| u32::try_from(used * 8 / full).unwrap_or(u32::MAX));
                return Ok(match (layout, memtable) {
                    (Some(a), Some(b)) => Some(a.saturating_add(b)),
                    (a, b) => a.or(b),
                });
            }
            if waiting {
                self.stall(true);
                continue;
            }
            self.rotate(wal, std::slice::from_ref(ks))?;
            self.bg_cv.notify_all();
            return Ok(layout);
        }
    }

    /// Waits up to 10 ms for background work; `memtable`: the wait is for a flush.
    pub(super) fn stall(&self, memtable: bool) {
        let t = Instant::now();
        let mut bg = self.bg.lock();
        self.bg_cv.notify_all();
        self.bg_cv.wait_for(&mut bg, Duration::from_millis(10));
        drop(bg);
        let us = t.elapsed().as_micros() as u64;
        self.stats.stall_micros.fetch_add(us, Ordering::Relaxed);
        if memtable {
            self.stats
                .memtable_stall_micros
                .fetch_add(us, Ordering::Relaxed);
        }
    }

    /// Starts a new WAL and freezes the memtables of `freeze` (must hold the WAL lock).
    pub(super) fn rotate(&self, wal: &mut WalState, freeze: &[Arc<KsCore>]) -> Result<()> {
        // The old log is sealed, naming the new one, and not synced here: its sync (and the
        // directory entry of the new one) wait for the flush of its memtable or the next synced
        // write, both of which sync every retired log first (`sync_old_logs`). A power loss
        // before that can keep writes of the new log while losing the old log's tail; the
        // missing seal tells recovery that the history ends there (`wal_chain`; syncing the
        // old log here, on the writer, took 2.8 s of a 6.5 s fill with 4 MiB memtables).
        let n = self.next_file.fetch_add(1, Ordering::SeqCst);
        if let Err(e) = wal_chain::seal(&mut wal.log, n).and_then(|()| wal.log.flush()) {
            self.set_bg_error("WAL seal at rotation", &e);
            return Err(e);
        }
        let w = match self
            .env
            .create_log(&wal_path(&self.dir, n), WriteCause::Wal)
        {
            Ok(w) => w,
            Err(e) => {
                self.set_bg_error("WAL creation", &e);
                return Err(e);
            }
        };
        self.wal_dir_unsynced.store(true, Ordering::SeqCst);
        self.live_logs.lock().push(n);
        let old = std::mem::replace(&mut wal.log, LogWriter::new(w));
        self.old_logs.lock().push(old);
        wal.number = n;
        self.wal_number.store(n, Ordering::SeqCst);
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        for ks in all {
            let mut g = ks.sv.write();
            let frozen = freeze.iter().any(|f| f.id == ks.id) && !g.mem.is_empty();
            if frozen {
                let mut imms = vec![g.mem.clone()];
                imms.extend(g.imms.iter().cloned());
                *g = SuperVersion::new(
                    Arc::new(Memtable::for_layout(
                        &ks.kind,
                        n,
                        ks.opts().write_buffer_bytes,
                    )),
                    imms,
                    g.version.clone(),
                );
            } else if g.mem.is_empty() {
                // An empty memtable needs no old log.
                *g = SuperVersion::new(
                    Arc::new(Memtable::for_layout(
                        &ks.kind,
                        n,
                        ks.opts().write_buffer_bytes,
                    )),
                    g.imms.clone(),
                    g.version.clone(),
                );
            }
        }
        Ok(())
    }

    /// Syncs every retired WAL, and the directory entries of the WALs created since the last
    /// directory sync (so a newer log can hold synced writes, or a flush can make a log
    /// obsolete, without a hole in the history).
    pub(super) fn sync_old_logs(&self) -> Result<()> {
        let _one = self.log_sync.lock();
        if self.wal_sync_failed.load(Ordering::SeqCst) {
            // A writer that waited here while another thread's sync failed must not retry
            // it and acknowledge a synced write on top.
            self.check_bg_error()?;
            return Err(Error::BackgroundError(
                "sync of a retired WAL failed earlier".into(),
            ));
        }
        let old = std::mem::take(&mut *self.old_logs.lock());
        for mut log in old {
            // A retired log takes no more records: only its appended bytes are written.
            if let Err(e) = log.finish() {
                self.wal_sync_failed.store(true, Ordering::SeqCst);
                self.set_bg_error("sync of a retired WAL", &e);
                return Err(e);
            }
        }
        self.sync_wal_dir()
    }

    /// Makes the directory entries of new WALs durable, if any was created since the last
    /// time. Called before every manifest edit too: an edit can make older logs obsolete
    /// (`log_number`), and the next log must then be found after a power loss.
    pub(super) fn sync_wal_dir(&self) -> Result<()> {
        let _one = self.wal_dir_sync.lock();
        if self.wal_dir_unsynced.swap(false, Ordering::SeqCst) {
            if let Err(e) = self.env.sync_dir(&self.dir) {
                self.wal_dir_unsynced.store(true, Ordering::SeqCst);
                self.set_bg_error("directory sync after WAL creation", &e);
                return Err(e);
            }
        }
        Ok(())
    }
}
