//! Deferred teardown of obsolete table files ([`Purger`]). Tearing an obsolete table down on
//! the spot (unmap it, drop its reader, evict its blocks, delete the file) would fall on
//! whichever thread drops the last reference to it. That thread is often a writer or a reader that held
//! the superversion a compaction just replaced: on a 50M-key `trie` fill, dropping a root
//! pile of eight 64 MiB HTables cost the writer 175–365 ms (20–46 ms per table, mostly the
//! teardown of its mapping and metadata), the longest puts of the run. The purger hands that
//! work to one thread of the database (`scree-purge`), as RocksDB's background purge does
//! (`avoid_unnecessary_blocking_io`). [`Purger::close`] runs what is queued before the
//! database's close returns, and so before it releases the directory's lock: no deletion of
//! one instance runs while another has the directory open (a test's simulated crash and
//! reopen included).

use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

/// A teardown to run.
pub type PurgeJob = Box<dyn FnOnce() + Send>;

/// Jobs waiting for the purge thread at which a new one runs on the thread that hands it over
/// instead. Each waiting job keeps an obsolete table's file, mapping and metadata (a 64 MiB
/// HTable's in-memory filters are about 1 MB), so a thread that falls behind (a slow file
/// system's `unlink`, say) must not let them pile up without bound. A compaction drops at most
/// a pile or a guard's tables at once (8 at the trie's default), so the queue stays far below
/// this in normal work.
pub const MAX_QUEUED: u64 = 64;

/// Runs teardowns of obsolete tables on a thread of its own (see the module comment).
pub struct Purger {
    tx: Mutex<Option<mpsc::Sender<PurgeJob>>>,
    /// Jobs handed to the thread and jobs it finished (or that came back to run inline),
    /// counted separately so that [`Purger::wait_idle`] waits for the jobs handed over before
    /// the call, not for a queue that later jobs keep from emptying.
    counts: Arc<(Mutex<Counts>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Counts {
    submitted: u64,
    done: u64,
}

/// Counts one job as finished.
fn finished(counts: &(Mutex<Counts>, Condvar)) {
    let (m, cv) = counts;
    m.lock().done += 1;
    cv.notify_all();
}

impl Purger {
    /// A purger that runs every job on the calling thread (tools and tests that open tables
    /// without a database).
    pub fn inline() -> Purger {
        Purger {
            tx: Mutex::new(None),
            counts: Arc::new((Mutex::new(Counts::default()), Condvar::new())),
            thread: Mutex::new(None),
        }
    }

    /// A purger with a thread named `name`; inline if the thread cannot be started.
    pub fn spawn(name: &str) -> Purger {
        let p = Purger::inline();
        let (tx, rx) = mpsc::channel::<PurgeJob>();
        let counts = p.counts.clone();
        let started = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    // A panicking teardown (a bug) loses that one deletion, which the next
                    // open's sweep of unreferenced files makes up for; the thread goes on.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                    finished(&counts);
                }
            });
        if let Ok(h) = started {
            *p.tx.lock() = Some(tx);
            *p.thread.lock() = Some(h);
        }
        p
    }

    /// Runs `job` on the purge thread, or here when there is none (inline, or closed) or
    /// [`MAX_QUEUED`] jobs are already waiting for it.
    pub fn run(&self, job: PurgeJob) {
        let job = match &*self.tx.lock() {
            Some(tx) if self.take_slot() => match tx.send(job) {
                Ok(()) => return,
                Err(back) => {
                    finished(&self.counts);
                    back.0
                }
            },
            _ => job,
        };
        job();
    }

    /// Counts one more job handed to the thread, unless [`MAX_QUEUED`] are already waiting.
    fn take_slot(&self) -> bool {
        let mut c = self.counts.0.lock();
        let room = c.submitted - c.done < MAX_QUEUED;
        if room {
            c.submitted += 1;
        }
        room
    }

    /// Waits until every job handed over before the call has run.
    pub fn wait_idle(&self) {
        self.wait_for(self.handed_over());
    }

    /// Jobs handed to the thread so far.
    fn handed_over(&self) -> u64 {
        self.counts.0.lock().submitted
    }

    /// Waits until the first `n` jobs handed over have run (they run in that order: one
    /// thread, one queue).
    fn wait_for(&self, n: u64) {
        let (m, cv) = &*self.counts;
        let mut c = m.lock();
        while c.done < n {
            cv.wait(&mut c);
        }
    }

    /// Runs the queued jobs, stops the thread and makes later jobs run inline.
    pub fn close(&self) {
        drop(self.tx.lock().take());
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        // Joining here would deadlock when the last reference to the table context (which
        // owns the purger) is dropped by a job on the purge thread itself; dropping the sender
        // lets the thread finish its queue and end on its own.
        drop(self.tx.get_mut().take());
    }
}

/// A purge job held until released, to keep the purge thread busy in tests.
#[cfg(test)]
#[derive(Clone, Default)]
pub(crate) struct HeldJob(Arc<(Mutex<bool>, Condvar)>);

#[cfg(test)]
impl HeldJob {
    /// A job that waits until [`HeldJob::release`], then runs `then`.
    pub(crate) fn job(&self, then: impl FnOnce() + Send + 'static) -> PurgeJob {
        let gate = self.0.clone();
        Box::new(move || {
            let mut open = gate.0.lock();
            while !*open {
                gate.1.wait(&mut open);
            }
            drop(open);
            then();
        })
    }
    /// Lets the held job go on.
    pub(crate) fn release(&self) {
        *self.0 .0.lock() = true;
        self.0 .1.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn jobs_run_on_the_purge_thread_and_close_runs_the_rest() {
        let p = Purger::spawn("scree-purge-test");
        let ran = Arc::new(Mutex::new(Vec::new()));
        let held = HeldJob::default();
        {
            let ran = ran.clone();
            p.run(held.job(move || {
                ran.lock()
                    .push(std::thread::current().name().map(String::from));
            }));
        }
        for _ in 0..3 {
            let ran = ran.clone();
            p.run(Box::new(move || {
                ran.lock()
                    .push(std::thread::current().name().map(String::from));
            }));
        }
        // The caller is not held by the job waiting at the gate.
        assert!(ran.lock().is_empty());
        held.release();
        p.close();
        let ran = ran.lock();
        assert_eq!(ran.len(), 4, "close runs every queued job");
        assert!(ran.iter().all(|n| n.as_deref() == Some("scree-purge-test")));
    }

    /// A wait covers the jobs queued when it began: waiting for an empty queue would let jobs
    /// handed over after the call (by compactions and readers that go on) hold `compact` and
    /// `wait_for_compactions` back.
    #[test]
    fn waiting_ignores_jobs_handed_over_after_the_wait_began() {
        let p = Purger::spawn("scree-purge-test");
        let held = HeldJob::default();
        let ran = Arc::new(AtomicU64::new(0));
        {
            let ran = ran.clone();
            p.run(Box::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }));
        }
        let n = p.handed_over();
        p.run(held.job(|| {}));
        // Returns although the later job is held (with a wait for an empty queue, it hung).
        p.wait_for(n);
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        held.release();
        p.wait_idle();
        p.close();
    }

    /// The queue is bounded: with the thread held and [`MAX_QUEUED`] jobs waiting, the next
    /// job runs on the thread that hands it over, and the waiting ones still run in order.
    #[test]
    fn a_full_queue_runs_the_next_job_on_the_handing_thread() {
        let p = Purger::spawn("scree-purge-test");
        let held = HeldJob::default();
        let ran = Arc::new(AtomicU64::new(0));
        p.run(held.job(|| {}));
        for _ in 1..MAX_QUEUED {
            let ran = ran.clone();
            p.run(Box::new(move || {
                ran.fetch_add(1, Ordering::SeqCst);
            }));
        }
        assert_eq!(
            ran.load(Ordering::SeqCst),
            0,
            "all queued behind the held job"
        );
        let here = std::thread::current().id();
        let on = Arc::new(Mutex::new(None));
        {
            let on = on.clone();
            p.run(Box::new(move || {
                *on.lock() = Some(std::thread::current().id());
            }));
        }
        assert_eq!(*on.lock(), Some(here), "the queue was full: ran here");
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        held.release();
        p.wait_idle();
        assert_eq!(ran.load(Ordering::SeqCst), MAX_QUEUED - 1);
        // With room again, jobs go to the thread.
        let on = Arc::new(Mutex::new(None));
        {
            let on = on.clone();
            p.run(Box::new(move || {
                *on.lock() = std::thread::current().name().map(String::from);
            }));
        }
        p.wait_idle();
        assert_eq!(on.lock().as_deref(), Some("scree-purge-test"));
        p.close();
    }

    #[test]
    fn wait_idle_waits_for_handed_over_jobs_and_a_panic_does_not_stop_the_thread() {
        let p = Purger::spawn("scree-purge-test");
        let n = Arc::new(AtomicU64::new(0));
        p.run(Box::new(|| panic!("a teardown bug")));
        for _ in 0..10 {
            let n = n.clone();
            p.run(Box::new(move || {
                std::thread::sleep(std::time::Duration::from_millis(2));
                n.fetch_add(1, Ordering::SeqCst);
            }));
        }
        p.wait_idle();
        assert_eq!(n.load(Ordering::SeqCst), 10);
        p.close();
        // After close, jobs run inline.
        let here = std::thread::current().id();
        let on = Arc::new(Mutex::new(None));
        {
            let on = on.clone();
            p.run(Box::new(move || {
                *on.lock() = Some(std::thread::current().id());
            }));
        }
        assert_eq!(*on.lock(), Some(here));
        p.wait_idle();
    }
}
