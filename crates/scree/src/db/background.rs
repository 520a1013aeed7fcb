//! Background work: the flush and compaction threads, which keyspace to flush or which job
//! to run next, and running it (a panic in a job becomes a background error).

use crate::manifest::edit::KsEdit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::layout::{Job, JobCtx};

use super::{BgState, DbInner, KsCore};

impl DbInner {
    // ---- background work ----

    /// A background thread: flushes first, then compactions (none if `flush_only`).
    pub(super) fn worker(self: Arc<Self>, flush_only: bool) {
        loop {
            let work = {
                let mut bg = self.bg.lock();
                loop {
                    if bg.closing {
                        return;
                    }
                    if self.bg_error.lock().is_none() {
                        // A panic while picking (a bug) stops background work with an error
                        // writers see, instead of ending this thread silently.
                        let mut picked = None;
                        let r = guard_panic("picking background work", || {
                            picked = self.pick_work(&mut bg, flush_only);
                            Ok(())
                        });
                        if let Err(e) = r {
                            self.set_bg_error("picking background work", &e);
                        }
                        if let Some(w) = picked {
                            bg.running += 1;
                            break w;
                        }
                    }
                    self.bg_cv.wait_for(&mut bg, Duration::from_millis(200));
                }
            };
            let (what, res) = match work {
                Work::Flush(ks) => ("flush", self.run_claimed_flush(&ks).map_err(|e| (ks, e))),
                Work::Compact(ks, job) => (
                    "compaction",
                    guard_panic("compaction", || self.run_compaction(&ks, job))
                        .map_err(|e| (ks, e)),
                ),
            };
            if let Err((ks, e)) = res {
                self.set_bg_error(&format!("{what} of keyspace {:?}", ks.name), &e);
            }
            let mut bg = self.bg.lock();
            bg.running -= 1;
            self.bg_cv.notify_all();
        }
    }

    /// A keyspace with an immutable memtable nobody is flushing, now marked as being flushed
    /// (by the caller, who then runs [`DbInner::run_claimed_flush`]).
    pub(super) fn claim_flush(&self, bg: &mut BgState) -> Option<Arc<KsCore>> {
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        let ks = all
            .into_iter()
            .find(|ks| !bg.flushing.contains(&ks.id) && !ks.sv().imms.is_empty())?;
        bg.flushing.insert(ks.id);
        Some(ks)
    }

    /// Flushes a keyspace [`DbInner::claim_flush`] returned, and releases the claim.
    pub(super) fn run_claimed_flush(&self, ks: &Arc<KsCore>) -> Result<()> {
        let res = guard_panic("flush", || self.run_flush(ks));
        self.bg.lock().flushing.remove(&ks.id);
        res
    }

    pub(super) fn pick_work(&self, bg: &mut BgState, flush_only: bool) -> Option<Work> {
        if let Some(ks) = self.claim_flush(bg) {
            return Some(Work::Flush(ks));
        }
        if flush_only {
            return None;
        }
        let all: Vec<Arc<KsCore>> = self.keyspaces.read().values().cloned().collect();
        let smallest = self.smallest_snapshot();
        let _pick = self.pick_lock.lock();
        #[cfg(test)]
        if let Some(s) = &self.opts.job_script {
            if !s.may_pick() {
                return None;
            }
        }
        for ks in &all {
            let opts = ks.opts();
            let ctx = self.job_ctx(&opts, smallest);
            if let Some(job) = ks.layout.pick(&ks.sv().version, &ctx) {
                #[cfg(test)]
                if let Some(s) = &self.opts.job_script {
                    s.picked();
                }
                return Some(Work::Compact(ks.clone(), job));
            }
        }
        None
    }

    /// A compaction's [`JobCtx::flush_point`]: when every background thread is busy and a
    /// keyspace has an immutable memtable nobody is flushing, flushes it on this thread.
    pub(super) fn flush_if_waiting(&self) -> Result<()> {
        let ks = {
            let mut bg = self.bg.lock();
            let threads = self.opts.background_threads + self.opts.flush_threads;
            if bg.closing || bg.running < threads {
                return Ok(());
            }
            let Some(ks) = self.claim_flush(&mut bg) else {
                return Ok(());
            };
            ks
        };
        let res = self.run_claimed_flush(&ks);
        self.bg_cv.notify_all();
        self.stats
            .flushes_in_compactions
            .fetch_add(1, Ordering::Relaxed);
        res
    }

    pub(super) fn run_flush(&self, ks: &Arc<KsCore>) -> Result<()> {
        let start = std::time::Instant::now();
        let res = self.flush_oldest(ks);
        let us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.stats.flush_micros.fetch_add(us, Ordering::Relaxed);
        self.stats.max_flush_micros.fetch_max(us, Ordering::Relaxed);
        res
    }

    pub(super) fn flush_oldest(&self, ks: &Arc<KsCore>) -> Result<()> {
        self.sync_old_logs()?;
        let sv = ks.sv();
        let Some(imm) = sv.imms.last().cloned() else {
            return Ok(());
        };
        let opts = ks.opts();
        let ctx = self.job_ctx(&opts, self.smallest_snapshot());
        let mut edit = ks.layout.flush(&ctx, &sv.version, &imm)?;
        self.stats.flushes.fetch_add(1, Ordering::Relaxed);
        let added = added_files(&edit);
        self.install(ks, &mut edit, Some(&imm))?;
        ks.layout.warm(&ctx, &ks.sv().version, &added)
    }

    pub(super) fn run_compaction(&self, ks: &Arc<KsCore>, job: Box<dyn Job>) -> Result<()> {
        let opts = ks.opts();
        let trivial = job.is_trivial();
        let start = std::time::Instant::now();
        // Microseconds of flushes run at this job's flush points (counted as flush time).
        let flushed_us = AtomicU64::new(0);
        let flush_point = || {
            let t = std::time::Instant::now();
            let r = self.flush_if_waiting();
            let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
            flushed_us.fetch_add(us, Ordering::Relaxed);
            r
        };
        let mut ctx = self.job_ctx(&opts, self.smallest_snapshot());
        if self.opts.flush_in_compactions {
            ctx.flush_point = Some(&flush_point);
        }
        let res = self.run_job(ks, job, &ctx, trivial);
        let us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        let job_us = us.saturating_sub(flushed_us.load(Ordering::Relaxed));
        self.stats
            .compaction_micros
            .fetch_add(job_us, Ordering::Relaxed);
        res
    }

    pub(super) fn run_job(
        &self,
        ks: &Arc<KsCore>,
        mut job: Box<dyn Job>,
        ctx: &JobCtx<'_>,
        trivial: bool,
    ) -> Result<()> {
        #[cfg(test)]
        let script = self.opts.job_script.clone();
        #[cfg(test)]
        if let Some(s) = &script {
            s.wait_turn(super::script::Phase::Run);
        }
        let res = job.run(ctx);
        #[cfg(test)]
        if let Some(s) = &script {
            s.step_done(super::script::Phase::Run, res.is_ok());
            s.wait_turn(super::script::Phase::Install);
        }
        let mut edit = res?;
        if trivial {
            self.stats.trivial_moves.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.compactions.fetch_add(1, Ordering::Relaxed);
        }
        let added = added_files(&edit);
        let pick = self.pick_lock.lock();
        let r = self.install(ks, &mut edit, None);
        // The job's input reservation ends only now that its edit is installed.
        drop(job);
        drop(pick);
        let r = r.and_then(|()| ks.layout.warm(ctx, &ks.sv().version, &added));
        #[cfg(test)]
        if let Some(s) = &script {
            if r.is_ok() {
                self.tables.purge.wait_idle();
            }
            s.step_done(super::script::Phase::Install, r.is_ok());
        }
        r
    }
}

/// The file numbers of the tables `edit` adds.
fn added_files(edit: &KsEdit) -> Vec<u64> {
    edit.added.iter().map(|a| a.meta.file_no).collect()
}

pub(super) enum Work {
    Flush(Arc<KsCore>),
    Compact(Arc<KsCore>, Box<dyn Job>),
}

/// Runs one flush or compaction, turning a panic (a bug) into a background error: the
/// database then refuses writes with a message naming the bug, instead of a worker dying with
/// its job counted as running forever (`wait_for_compactions` and writers would wait for it).
pub(super) fn guard_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(Error::from_panic(what, p.as_ref())),
    }
}

#[cfg(test)]
mod panic_tests {
    use super::*;

    #[test]
    fn a_panicking_job_becomes_a_background_error() {
        let r: Result<()> = guard_panic("compaction", || panic!("guard nesting broken"));
        match r {
            Err(Error::BackgroundError(m)) => {
                assert!(m.contains("compaction panicked") && m.contains("guard nesting broken"))
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(guard_panic("flush", || Ok(())).is_ok());
    }
}
