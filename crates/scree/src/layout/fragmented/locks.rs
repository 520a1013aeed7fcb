//! Reservations of the fragmented layout: key-range locks per level that let compactions of
//! disjoint guards run in parallel. A job holds `Source` on the guard it removes tables from,
//! `Shared` where it appends fragments, and `Exclusive` where it commits or deletes guards.
//! Appends may run beside removals; guard changes exclude everything else in their range.
//! A finished job's locks stay until a version without its first input at its source level is
//! seen: the engine picks from a version it read before taking the policy's lock, so a version
//! older than the job's install could otherwise let a second job take the same inputs.

use std::sync::Arc;

use parking_lot::Mutex;

use super::version::{FragmentedVersion, GKey};

/// How a job uses a level's key range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Removes tables (compaction input).
    Source,
    /// Appends tables (fragments).
    Shared,
    /// Changes guards.
    Exclusive,
}

fn compatible(a: Mode, b: Mode) -> bool {
    matches!(
        (a, b),
        (Mode::Shared, Mode::Shared) | (Mode::Shared, Mode::Source) | (Mode::Source, Mode::Shared)
    )
}

/// Whether `[alo, ahi)` and `[blo, bhi)` intersect (None = unbounded).
pub(crate) fn ranges_overlap(
    alo: Option<&[u8]>,
    ahi: Option<&[u8]>,
    blo: Option<&[u8]>,
    bhi: Option<&[u8]>,
) -> bool {
    let a_before_b = matches!((ahi, blo), (Some(h), Some(l)) if h <= l);
    let b_before_a = matches!((bhi, alo), (Some(h), Some(l)) if h <= l);
    !(a_before_b || b_before_a)
}

struct Lock {
    job: u64,
    level: usize,
    lo: Option<GKey>,
    hi: Option<GKey>,
    mode: Mode,
}

#[derive(Default)]
pub(crate) struct LockTable {
    locks: Vec<Lock>,
    /// Finished jobs: (job, level, file) — released once `file` has left `level`.
    zombies: Vec<(u64, usize, u64)>,
    next_job: u64,
}

impl LockTable {
    /// A new job id.
    pub(crate) fn new_job(&mut self) -> u64 {
        self.next_job += 1;
        self.next_job
    }

    /// Whether `job` may take `mode` on `[lo, hi)` of `level`.
    pub(crate) fn free(
        &self,
        job: u64,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        mode: Mode,
    ) -> bool {
        !self.locks.iter().any(|l| {
            l.job != job
                && l.level == level
                && !compatible(l.mode, mode)
                && ranges_overlap(l.lo.as_deref(), l.hi.as_deref(), lo, hi)
        })
    }

    /// Takes the lock if it is free.
    pub(crate) fn take(
        &mut self,
        job: u64,
        level: usize,
        lo: &Option<GKey>,
        hi: &Option<GKey>,
        mode: Mode,
    ) -> bool {
        if !self.free(job, level, lo.as_deref(), hi.as_deref(), mode) {
            return false;
        }
        self.locks.push(Lock {
            job,
            level,
            lo: lo.clone(),
            hi: hi.clone(),
            mode,
        });
        true
    }

    /// Releases what `job` holds in `mode` on `level` (a lock taken while planning and not
    /// needed by the plan).
    pub(crate) fn release_mode(&mut self, job: u64, level: usize, mode: Mode) {
        self.locks
            .retain(|l| !(l.job == job && l.level == level && l.mode == mode));
    }

    /// Releases everything `job` holds.
    pub(crate) fn release(&mut self, job: u64) {
        self.locks.retain(|l| l.job != job);
    }

    /// Releases the locks of finished jobs whose edits `v` shows installed.
    pub(crate) fn gc(&mut self, v: &FragmentedVersion) {
        let mut done = Vec::new();
        self.zombies.retain(|&(job, level, file)| {
            let present = if level == 0 {
                v.l0.iter().any(|t| t.meta.file_no == file)
            } else {
                v.level(level).is_some_and(|l| {
                    l.guards
                        .iter()
                        .flat_map(|g| g.tables.iter())
                        .any(|t| t.meta.file_no == file)
                })
            };
            if !present {
                done.push(job);
            }
            present
        });
        for j in done {
            self.release(j);
        }
    }

    /// Whether any job holds a lock (tests).
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }
}

/// The locks of one job; dropping it releases them, or, once the job has produced its edit,
/// keeps them until a version shows the edit installed.
pub(crate) struct Reservation {
    pub(crate) table: Arc<Mutex<LockTable>>,
    pub(crate) job: u64,
    /// Set when the job has produced its edit: (source level, a file the edit removes there).
    pub(crate) retire_on: Option<(usize, u64)>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        match self.retire_on {
            Some((level, file)) => t.zombies.push((self.job, level, file)),
            None => t.release(self.job),
        }
    }
}
