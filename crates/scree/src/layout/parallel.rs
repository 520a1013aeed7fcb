//! The engine's one kind of worker pool for reads done in parallel: a persistent set of threads
//! fed through one queue, each task's result handed back through a [`Pending`]. It serves
//! parallel search (lsm-trie-parallel-search.txt: [`WorkerPool::get`] probes a version's last
//! level while the reading thread probes the levels above it; an upper-level result always wins,
//! otherwise the last level's answer or absence stands; one pool per database,
//! `Options::parallel_search`) and the `fragmented` layout's parallel seeks
//! ([`WorkerPool::seek_all`]). No thread is ever started per lookup or seek.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::iter::InternalIter;
use crate::layout::LayoutVersion;
use crate::memtable::Lookup;

type Task = Box<dyn FnOnce() + Send>;

/// Most last-level probes waiting for a search thread; a lookup beyond it searches serially.
const MAX_QUEUED: usize = 64;

struct Shared {
    queue: Mutex<VecDeque<Task>>,
    cv: Condvar,
    closing: AtomicBool,
}

/// A fixed set of search threads fed through one queue.
pub struct WorkerPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerPool({} threads)", self.threads.len())
    }
}

/// The result slot of a submitted task: filled by the worker, or marked abandoned if the task
/// was dropped without running to completion (a panic in the worker).
struct Slot<T> {
    value: Mutex<(Option<T>, bool)>,
    cv: Condvar,
}

/// The worker's end of a slot; marks the slot done when dropped.
struct Sender<T> {
    slot: Arc<Slot<T>>,
}

impl<T> Sender<T> {
    fn send(self, v: T) {
        self.slot.value.lock().0 = Some(v);
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.slot.value.lock().1 = true;
        self.slot.cv.notify_all();
    }
}

/// A task's future result.
pub struct Pending<T> {
    slot: Arc<Slot<T>>,
}

impl<T> Pending<T> {
    /// Waits for the task; `None` if it panicked.
    pub fn wait(self) -> Option<T> {
        let mut g = self.slot.value.lock();
        while !g.1 {
            self.slot.cv.wait(&mut g);
        }
        g.0.take()
    }
}

impl WorkerPool {
    /// Starts `threads` threads named `{name}-{i}`.
    pub fn new(name: &str, threads: usize) -> Result<WorkerPool> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            closing: AtomicBool::new(false),
        });
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || worker(&s))
                .map_err(|e| Error::io("thread", e))?;
            handles.push(h);
        }
        Ok(WorkerPool {
            shared,
            threads: handles,
        })
    }

    /// Runs `f` on a search thread.
    pub fn submit<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Pending<T> {
        let slot = Arc::new(Slot {
            value: Mutex::new((None, false)),
            cv: Condvar::new(),
        });
        let tx = Sender { slot: slot.clone() };
        let task: Task = Box::new(move || tx.send(f()));
        self.shared.queue.lock().push_back(task);
        self.shared.cv.notify_one();
        Pending { slot }
    }

    /// A point lookup in `version`: the last level on a search thread, the levels above it on
    /// the calling thread. Falls back to a serial lookup when the version has no distinct last
    /// level.
    pub fn get(
        &self,
        version: &Arc<dyn LayoutVersion>,
        user_key: &[u8],
        seq: u64,
    ) -> Result<Lookup> {
        // With probes already waiting (lookups arrive faster than the search threads take
        // them), the lookup searches serially instead of queueing behind them: the queue stays
        // bounded.
        if !version.has_distinct_last_level() || self.shared.queue.lock().len() >= MAX_QUEUED {
            return version.get(user_key, seq);
        }
        let v = version.clone();
        let k = user_key.to_vec();
        // Cleared when the upper levels answer: a probe nobody waits for is skipped, so it
        // neither costs a search thread's time nor delays the probes queued after it.
        let wanted = Arc::new(AtomicBool::new(true));
        let w = wanted.clone();
        let last = self.submit(move || w.load(Ordering::Acquire).then(|| v.get_last(&k, seq)));
        match version.get_upper(user_key, seq) {
            Ok(Lookup::Absent) => last.wait().flatten().unwrap_or_else(|| {
                Err(Error::BackgroundError(
                    "a parallel-search thread failed during a lookup".into(),
                ))
            }),
            other => {
                wanted.store(false, Ordering::Release);
                other
            }
        }
    }
}

impl WorkerPool {
    /// Positions every table cursor of `iters` at `ikey`: the calling thread the first, the
    /// pool the others (PebblesDB's parallel seeks). The cursors come back in their order.
    pub(crate) fn seek_all(
        &self,
        mut iters: Vec<crate::table::TableIter>,
        ikey: &[u8],
    ) -> Result<Vec<crate::table::TableIter>> {
        if iters.len() < 2 {
            for it in &mut iters {
                it.seek(ikey)?;
            }
            return Ok(iters);
        }
        let rest = iters.split_off(1);
        let pending: Vec<Pending<_>> = rest
            .into_iter()
            .map(|mut it| {
                let k = ikey.to_vec();
                self.submit(move || {
                    let r = it.seek(&k);
                    (it, r)
                })
            })
            .collect();
        for it in &mut iters {
            it.seek(ikey)?;
        }
        for p in pending {
            let (it, r) = p.wait().ok_or_else(|| {
                Error::BackgroundError("a parallel-seek thread failed during a seek".into())
            })?;
            r?;
            iters.push(it);
        }
        Ok(iters)
    }
}

fn worker(s: &Shared) {
    loop {
        let task = {
            let mut q = s.queue.lock();
            loop {
                if let Some(t) = q.pop_front() {
                    break t;
                }
                if s.closing.load(Ordering::Acquire) {
                    return;
                }
                s.cv.wait(&mut q);
            }
        };
        // A panicking probe drops its sender, which wakes the waiting reader with an error.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        {
            let _q = self.shared.queue.lock();
            self.shared.closing.store(true, Ordering::Release);
        }
        self.shared.cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_run_and_panics_are_reported() {
        let pool = WorkerPool::new("scree-test", 2).expect("pool");
        let a = pool.submit(|| 40 + 2);
        let b = pool.submit(|| -> u32 { panic!("boom") });
        assert_eq!(a.wait(), Some(42));
        assert_eq!(b.wait(), None);
        let many: Vec<_> = (0..100).map(|i| pool.submit(move || i * 2)).collect();
        let sum: i32 = many.into_iter().filter_map(Pending::wait).sum();
        assert_eq!(sum, 9900);
    }

    /// A version whose upper levels hold every key but `miss` and whose last level takes
    /// `delay` per probe.
    struct SlowLast {
        delay: std::time::Duration,
        last_probes: std::sync::atomic::AtomicUsize,
    }

    impl LayoutVersion for SlowLast {
        fn get(&self, k: &[u8], seq: u64) -> Result<Lookup> {
            match self.get_upper(k, seq)? {
                Lookup::Absent => self.get_last(k, seq),
                found => Ok(found),
            }
        }
        fn add_iters(&self, _: &mut Vec<Box<dyn crate::iter::InternalIter>>) -> Result<()> {
            Ok(())
        }
        fn apply(
            &self,
            _: &crate::manifest::edit::KsEdit,
            _: &Arc<crate::table::TableCtx>,
        ) -> Result<Arc<dyn LayoutVersion>> {
            Err(Error::Unsupported("test".into()))
        }
        fn snapshot(&self, _: &mut crate::manifest::edit::KsEdit) {}
        fn files(&self) -> Vec<Arc<crate::table::TableFile>> {
            Vec::new()
        }
        fn level_stats(&self) -> Vec<crate::stats::LevelStats> {
            Vec::new()
        }
        fn table_places(&self) -> Vec<crate::layout::TablePlace> {
            Vec::new()
        }
        fn has_distinct_last_level(&self) -> bool {
            true
        }
        fn get_upper(&self, k: &[u8], _: u64) -> Result<Lookup> {
            Ok(if k == b"miss" {
                Lookup::Absent
            } else {
                Lookup::Value(k.to_vec())
            })
        }
        fn get_last(&self, _: &[u8], _: u64) -> Result<Lookup> {
            self.last_probes.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(self.delay);
            Ok(Lookup::Value(b"last".to_vec()))
        }
        fn check_invariants(&self) -> std::result::Result<(), String> {
            Ok(())
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }

    /// Lookups answered by the upper levels must not leave their last-level probes queued:
    /// they piled up without bound (each holding its version, and so its files, alive) and a
    /// later lookup that needs the last level waited behind all of them.
    #[test]
    fn upper_level_hits_leave_no_backlog_of_last_level_probes() {
        let pool = WorkerPool::new("scree-test", 2).expect("pool");
        let v: Arc<dyn LayoutVersion> = Arc::new(SlowLast {
            delay: std::time::Duration::from_millis(2),
            last_probes: std::sync::atomic::AtomicUsize::new(0),
        });
        for i in 0..2000u32 {
            let k = i.to_be_bytes();
            assert!(matches!(pool.get(&v, &k, 1), Ok(Lookup::Value(x)) if x == k));
        }
        let queued = pool.shared.queue.lock().len();
        assert!(queued <= 64, "{queued} last-level probes still queued");
        let t = std::time::Instant::now();
        assert!(matches!(pool.get(&v, b"miss", 1), Ok(Lookup::Value(x)) if x == b"last"));
        let waited = t.elapsed();
        assert!(
            waited < std::time::Duration::from_millis(500),
            "a last-level lookup waited {waited:?} behind abandoned probes"
        );
    }
}
