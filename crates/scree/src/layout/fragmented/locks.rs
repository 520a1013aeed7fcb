//! Reservations of the fragmented layout, as claims of the shared mechanism
//! (`layout::reserve`): key-range locks per level that let compactions of disjoint guards run
//! in parallel. A job holds `Source` on the guard it removes tables from,
//! `Shared` where it appends fragments, and `Exclusive` where it commits or deletes guards.
//! Appends may run beside removals; guard changes exclude everything else in their range.
//! A finished job's locks stay until a version without its first input at its source level is
//! seen: the engine picks from a version it read before taking the policy's lock, so a version
//! older than the job's install could otherwise let a second job take the same inputs.

use super::version::{FragmentedVersion, GKey};
use crate::layout::reserve::{self, Claim, Claims};

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

/// A job's lock on `[lo, hi)` of `level` in `mode` (`None`: unbounded).
pub(crate) struct RangeLock {
    level: usize,
    lo: Option<GKey>,
    hi: Option<GKey>,
    mode: Mode,
}

impl Claim for RangeLock {
    fn conflicts(&self, other: &Self) -> bool {
        self.level == other.level
            && !compatible(self.mode, other.mode)
            && ranges_overlap(
                self.lo.as_deref(),
                self.hi.as_deref(),
                other.lo.as_deref(),
                other.hi.as_deref(),
            )
    }
}

/// The layout's table of range locks.
pub(crate) type LockTable = Claims<RangeLock, FragmentedVersion>;

/// The locks of one job; dropping it releases them, or, once the job has produced its edit,
/// keeps them until a version shows the edit installed ([`retire_on`]).
pub(crate) type Reservation = reserve::Reservation<RangeLock, FragmentedVersion>;

/// Range locks in the words the planner uses.
impl LockTable {
    /// Whether `job` may take `mode` on `[lo, hi)` of `level`.
    pub(crate) fn free_range(
        &self,
        job: u64,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
        mode: Mode,
    ) -> bool {
        self.free(
            job,
            &RangeLock {
                level,
                lo: lo.map(GKey::from),
                hi: hi.map(GKey::from),
                mode,
            },
        )
    }

    /// Takes the lock if it is free.
    pub(crate) fn take_range(
        &mut self,
        job: u64,
        level: usize,
        lo: &Option<GKey>,
        hi: &Option<GKey>,
        mode: Mode,
    ) -> bool {
        self.take(
            job,
            RangeLock {
                level,
                lo: lo.clone(),
                hi: hi.clone(),
                mode,
            },
        )
    }

    /// Releases what `job` holds in `mode` on `level` (a lock taken while planning and not
    /// needed by the plan).
    pub(crate) fn release_mode(&mut self, job: u64, level: usize, mode: Mode) {
        self.release_where(job, |l| l.level == level && l.mode == mode);
    }
}

/// Keeps a finished job's locks until a version no longer holds `file` (its first input) at
/// `level`: the version then shows the job's edit installed.
pub(crate) fn retire_on(res: &mut Reservation, level: usize, file: u64) {
    res.keep_until(move |v: &FragmentedVersion| !holds(v, level, file));
}

/// Whether `v` holds table `file` at `level`.
fn holds(v: &FragmentedVersion, level: usize, file: u64) -> bool {
    if level == 0 {
        v.l0.iter().any(|t| t.meta.file_no == file)
    } else {
        v.level(level).is_some_and(|l| {
            l.guards
                .iter()
                .flat_map(|g| g.tables.iter())
                .any(|t| t.meta.file_no == file)
        })
    }
}
