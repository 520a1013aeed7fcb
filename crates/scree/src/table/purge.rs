//! Deferred teardown of obsolete table files ([`Purger`]). Whichever thread drops the last
//! reference to an obsolete table used to tear it down on the spot: unmap it, drop its reader,
//! evict its blocks and delete the file. That thread is often a writer or a reader that held
//! the superversion a compaction just replaced: on a 50M-key `trie` fill, dropping a root
//! pile of eight 64 MiB HTables cost the writer 175–365 ms (20–46 ms per table, mostly the
//! teardown of its mapping and metadata), the longest puts of the run. The purger hands that
//! work to one thread of the database (`scree-purge`), as RocksDB's background purge does
//! (`avoid_unnecessary_blocking_io`). [`Purger::close`] runs what is queued before the
//! database's close returns, so no deletion outlives it (a later open may reuse the number
//! of a file a job never installed).

use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

/// A teardown to run.
pub type PurgeJob = Box<dyn FnOnce() + Send>;

/// Runs teardowns of obsolete tables on a thread of its own (see the module comment).
pub struct Purger {
    tx: Mutex<Option<mpsc::Sender<PurgeJob>>>,
    /// Jobs handed to the thread and not finished yet.
    pending: Arc<(Mutex<u64>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Purger {
    /// A purger that runs every job on the calling thread (tools and tests that open tables
    /// without a database).
    pub fn inline() -> Purger {
        Purger {
            tx: Mutex::new(None),
            pending: Arc::new((Mutex::new(0), Condvar::new())),
            thread: Mutex::new(None),
        }
    }

    /// A purger with a thread named `name`; inline if the thread cannot be started.
    pub fn spawn(name: &str) -> Purger {
        let p = Purger::inline();
        let (tx, rx) = mpsc::channel::<PurgeJob>();
        let pending = p.pending.clone();
        let started = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                while let Ok(job) = rx.recv() {
                    // A panicking teardown (a bug) loses that one deletion, which the next
                    // open's sweep of unreferenced files makes up for; the thread goes on.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
                    let (m, cv) = &*pending;
                    let mut n = m.lock();
                    *n = n.saturating_sub(1);
                    cv.notify_all();
                }
            });
        if let Ok(h) = started {
            *p.tx.lock() = Some(tx);
            *p.thread.lock() = Some(h);
        }
        p
    }

    /// Runs `job` on the purge thread, or here when there is none (inline, or closed).
    pub fn run(&self, job: PurgeJob) {
        let job = {
            let tx = self.tx.lock();
            match &*tx {
                Some(tx) => {
                    *self.pending.0.lock() += 1;
                    match tx.send(job) {
                        Ok(()) => return,
                        Err(back) => {
                            let (m, cv) = &*self.pending;
                            let mut n = m.lock();
                            *n = n.saturating_sub(1);
                            cv.notify_all();
                            back.0
                        }
                    }
                }
                None => job,
            }
        };
        job();
    }

    /// Waits until every job handed over before the call has run.
    pub fn wait_idle(&self) {
        let (m, cv) = &*self.pending;
        let mut n = m.lock();
        while *n > 0 {
            cv.wait(&mut n);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn jobs_run_on_the_purge_thread_and_close_runs_the_rest() {
        let p = Purger::spawn("scree-purge-test");
        let ran = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        {
            let (ran, gate) = (ran.clone(), gate.clone());
            p.run(Box::new(move || {
                let mut open = gate.0.lock();
                while !*open {
                    gate.1.wait(&mut open);
                }
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
        *gate.0.lock() = true;
        gate.1.notify_all();
        p.close();
        let ran = ran.lock();
        assert_eq!(ran.len(), 4, "close runs every queued job");
        assert!(ran.iter().all(|n| n.as_deref() == Some("scree-purge-test")));
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
