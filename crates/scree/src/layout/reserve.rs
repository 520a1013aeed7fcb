//! The one mechanism that stops two compactions from taking the same input: a table of the
//! claims running jobs hold (fjall's `HiddenSet`, generalised). A layout says what a claim is
//! and when two conflict ([`Claim`]); a job takes claims while it plans, under the table's lock,
//! and holds them in a [`Reservation`]. Dropping the reservation releases them. A job that has
//! produced its edit may instead keep them until a version shows the edit installed
//! ([`Reservation::keep_until`]): the engine picks from a version it read before taking the
//! policy's lock, and a version older than the install could otherwise let a second job take the
//! same inputs. Every layout reserves through this module: `leveled` (input files and output
//! ranges), `fragmented` (key-range locks per level with modes), `trie` (containers' piles and
//! BloomClusters).

use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

/// Something a job holds of a version: a file, a key range of a level, a container.
pub trait Claim: Send + 'static {
    /// Whether a job holding `self` keeps another job from taking `other` (symmetric).
    fn conflicts(&self, other: &Self) -> bool;
}

/// Tells whether a version of type `V` shows a finished job's edit installed.
type Installed<V> = Box<dyn Fn(&V) -> bool + Send>;

/// The claims of every running job, and of finished jobs whose edits no version has shown yet.
pub struct Claims<C, V> {
    held: Vec<(u64, C)>,
    finished: Vec<(u64, Installed<V>)>,
    next_job: u64,
    newest_generation: u64,
}

impl<C, V> Default for Claims<C, V> {
    fn default() -> Self {
        Claims {
            held: Vec::new(),
            finished: Vec::new(),
            next_job: 0,
            newest_generation: 0,
        }
    }
}

impl<C: Claim, V> Claims<C, V> {
    /// A new job id.
    pub fn new_job(&mut self) -> u64 {
        self.next_job += 1;
        self.next_job
    }

    /// Whether `job` may take `claim`: no other job holds a conflicting one.
    pub fn free(&self, job: u64, claim: &C) -> bool {
        !self
            .held
            .iter()
            .any(|(j, h)| *j != job && h.conflicts(claim))
    }

    /// Takes `claim` for `job` if it is free.
    pub fn take(&mut self, job: u64, claim: C) -> bool {
        if !self.free(job, &claim) {
            return false;
        }
        self.held.push((job, claim));
        true
    }

    /// Takes every one of `claims` for `job`, or none of them.
    pub fn take_all(&mut self, job: u64, claims: Vec<C>) -> bool {
        if !claims.iter().all(|c| self.free(job, c)) {
            return false;
        }
        self.held.extend(claims.into_iter().map(|c| (job, c)));
        true
    }

    /// Releases the claims of `job` that `which` selects (taken while planning, not needed by
    /// the plan).
    pub fn release_where(&mut self, job: u64, which: impl Fn(&C) -> bool) {
        self.held.retain(|(j, c)| !(*j == job && which(c)));
    }

    /// Releases everything `job` holds.
    pub fn release(&mut self, job: u64) {
        self.held.retain(|(j, _)| *j != job);
        self.finished.retain(|(j, _)| *j != job);
    }

    /// Releases the claims of finished jobs whose edits `v` shows installed.
    pub fn gc(&mut self, v: &V) {
        let mut done = Vec::new();
        self.finished.retain(|(job, installed)| {
            let shown = installed(v);
            if shown {
                done.push(*job);
            }
            !shown
        });
        for job in done {
            self.held.retain(|(j, _)| *j != job);
        }
    }

    /// Records that a version of `generation` was seen, and says whether `generation` is older
    /// than the newest seen: a job planned on such a version could take inputs a finished job
    /// already consumed (layouts whose versions count generations refuse to plan on it).
    pub fn is_stale(&mut self, generation: u64) -> bool {
        self.newest_generation = self.newest_generation.max(generation);
        generation < self.newest_generation
    }

    /// Whether any job holds a claim.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Whether a claim some job holds satisfies `f`.
    pub fn any_held(&self, f: impl Fn(&C) -> bool) -> bool {
        self.held.iter().any(|(_, c)| f(c))
    }

    /// The claims `job` holds.
    pub fn held_by(&self, job: u64) -> impl Iterator<Item = &C> {
        self.held
            .iter()
            .filter(move |(j, _)| *j == job)
            .map(|(_, c)| c)
    }
}

/// A layout's table of claims, shared with the reservations of its jobs.
pub struct Reservations<C, V> {
    table: Arc<Mutex<Claims<C, V>>>,
}

impl<C, V> Default for Reservations<C, V> {
    fn default() -> Self {
        Reservations {
            table: Arc::new(Mutex::new(Claims::default())),
        }
    }
}

impl<C: Claim, V: 'static> Reservations<C, V> {
    /// The table, locked for planning: take, release, collect.
    pub fn lock(&self) -> MutexGuard<'_, Claims<C, V>> {
        self.table.lock()
    }

    /// A new job planned on version `v` of generation `generation` with every one of
    /// `claims`: `None` when `v` is older than a version already seen (a finished job may have
    /// consumed the inputs it shows) or a claim is held. Collects finished jobs first.
    pub fn reserve(&self, v: &V, generation: u64, claims: Vec<C>) -> Option<Reservation<C, V>> {
        let mut t = self.lock();
        t.gc(v);
        if t.is_stale(generation) {
            return None;
        }
        let job = t.new_job();
        if !t.take_all(job, claims) {
            return None;
        }
        drop(t);
        Some(self.hold(job))
    }

    /// The reservation that holds `job`'s claims (taken through [`Reservations::lock`]).
    pub fn hold(&self, job: u64) -> Reservation<C, V> {
        Reservation {
            table: self.table.clone(),
            job,
            keep: None,
        }
    }
}

/// What one job holds; released when dropped, unless [`Reservation::keep_until`] was called.
pub struct Reservation<C: Claim, V: 'static> {
    table: Arc<Mutex<Claims<C, V>>>,
    job: u64,
    keep: Option<Installed<V>>,
}

impl<C: Claim, V: 'static> Reservation<C, V> {
    /// The job's id, to take more claims for it through [`Reservations::lock`].
    pub fn job(&self) -> u64 {
        self.job
    }

    /// Keeps the claims after the drop until a version shows the job's edit installed, as
    /// `installed` tells (called with every version the layout collects with).
    pub fn keep_until(&mut self, installed: impl Fn(&V) -> bool + Send + 'static) {
        self.keep = Some(Box::new(installed));
    }
}

impl<C: Claim, V: 'static> Drop for Reservation<C, V> {
    fn drop(&mut self) {
        let mut t = self.table.lock();
        match self.keep.take() {
            Some(installed) => t.finished.push((self.job, installed)),
            None => t.release(self.job),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct File(u64);

    impl Claim for File {
        fn conflicts(&self, other: &Self) -> bool {
            self == other
        }
    }

    /// Claims conflict as their type says; all-or-nothing takes leave nothing behind; a
    /// reservation releases on drop, or once the version shows its edit when kept.
    #[test]
    fn claims_are_held_until_released_or_shown_installed() {
        let r: Reservations<File, u64> = Reservations::default();
        let (a, b) = {
            let mut t = r.lock();
            (t.new_job(), t.new_job())
        };
        assert!(r.lock().take_all(a, vec![File(1), File(2)]));
        assert!(!r.lock().take_all(b, vec![File(3), File(2)]));
        assert!(
            r.lock().free(b, &File(3)),
            "a refused take_all took nothing"
        );
        assert!(r.lock().take(b, File(3)));
        let mut held_a = r.hold(a);
        let held_b = r.hold(b);
        // `a` finished: its claims stay until a version (here: a number) reaches 5.
        held_a.keep_until(|v: &u64| *v >= 5);
        drop(held_a);
        drop(held_b);
        assert!(
            r.lock().free(b, &File(3)),
            "b's claims went with its reservation"
        );
        assert!(!r.lock().free(b, &File(1)));
        r.lock().gc(&4);
        assert!(
            !r.lock().free(b, &File(1)),
            "version 4 does not show a's edit"
        );
        r.lock().gc(&5);
        assert!(r.lock().is_empty());
        let mut t = r.lock();
        assert!(!t.is_stale(3) && t.is_stale(2) && !t.is_stale(3));
    }
}
