//! Test-only: a [`JobScript`] runs a database's background compactions in a fixed order of
//! phases, so that a test can crash at every I/O operation of jobs that are in flight at the
//! same time and meet the same operation at the same index on every run. Its background
//! threads pick the script's jobs as they always do (concurrently, from the same version, each
//! holding its claims); then each job runs (`Phase::Run`: its reads and writes, up to its
//! edit) and installs (`Phase::Install`: the manifest write, then the purge of what the edit
//! made obsolete) only when the script's next step names it. Nothing else is picked while the
//! script lasts, nor after it (the database runs the scripted jobs only). A job that fails
//! (a crashed file system) aborts the script: every waiting job goes on (and fails on the
//! frozen file system too), and [`JobScript::wait_done`] says why.

use std::cell::Cell;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A phase of a scripted job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// `Job::run`: every read and write of the job up to its edit.
    Run,
    /// The install of its edit (manifest write) and the purge that follows it.
    Install,
}

#[derive(Default)]
struct State {
    /// Jobs the script runs, numbered in the order they were picked.
    jobs: usize,
    steps: Vec<(usize, Phase)>,
    picked: usize,
    next: usize,
    armed: bool,
    aborted: Option<String>,
}

/// The order in which the jobs a database picks run their phases (see the module comment).
#[derive(Default)]
pub(crate) struct JobScript {
    st: Mutex<State>,
    cv: Condvar,
}

impl std::fmt::Debug for JobScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.st.lock();
        write!(
            f,
            "JobScript(picked {}/{}, step {}/{}, aborted {:?})",
            s.picked,
            s.jobs,
            s.next,
            s.steps.len(),
            s.aborted
        )
    }
}

thread_local! {
    /// The script index of the job this background thread picked last (`None`: unscripted).
    static SCRIPTED: Cell<Option<usize>> = const { Cell::new(None) };
}

impl JobScript {
    /// A script of `steps` over jobs `0..jobs` (each job's run before its install).
    pub(crate) fn new(jobs: usize, steps: Vec<(usize, Phase)>) -> JobScript {
        JobScript {
            st: Mutex::new(State {
                jobs,
                steps,
                ..State::default()
            }),
            cv: Condvar::new(),
        }
    }

    /// Lets the first step go once every job is picked.
    pub(crate) fn arm(&self) {
        self.st.lock().armed = true;
        self.cv.notify_all();
    }

    /// Waits until every step has run (`Ok`), the script was aborted or `limit` passed
    /// (`Err` saying why).
    pub(crate) fn wait_done(&self, limit: Duration) -> Result<(), String> {
        let end = Instant::now() + limit;
        let mut s = self.st.lock();
        loop {
            if let Some(why) = &s.aborted {
                return Err(why.clone());
            }
            if s.next == s.steps.len() {
                return Ok(());
            }
            if self.cv.wait_until(&mut s, end).timed_out() {
                return Err(format!(
                    "timed out: {} of {} jobs picked, at step {} of {}",
                    s.picked,
                    s.jobs,
                    s.next,
                    s.steps.len()
                ));
            }
        }
    }

    /// Stops the script: waiting jobs go on, nothing more is picked.
    pub(crate) fn abort(&self, why: &str) {
        let mut s = self.st.lock();
        if s.aborted.is_none() {
            s.aborted = Some(why.to_string());
        }
        drop(s);
        self.cv.notify_all();
    }

    /// Whether this background thread may pick a compaction (called under the pick lock).
    pub(crate) fn may_pick(&self) -> bool {
        let s = self.st.lock();
        s.aborted.is_none() && s.picked < s.jobs
    }

    /// Records that this background thread picked the next job of the script.
    pub(crate) fn picked(&self) {
        let mut s = self.st.lock();
        SCRIPTED.with(|c| c.set(Some(s.picked)));
        s.picked += 1;
        drop(s);
        self.cv.notify_all();
    }

    /// Waits until the next step is `phase` of the job this thread picked (returns at once on
    /// an unscripted thread or an aborted script).
    pub(crate) fn wait_turn(&self, phase: Phase) {
        let Some(job) = SCRIPTED.with(Cell::get) else {
            return;
        };
        let mut s = self.st.lock();
        while s.aborted.is_none()
            && !(s.armed && s.picked == s.jobs && s.steps.get(s.next) == Some(&(job, phase)))
        {
            self.cv.wait(&mut s);
        }
    }

    /// The step this thread was waiting for has run (`ok`), or failed (aborts the script).
    pub(crate) fn step_done(&self, phase: Phase, ok: bool) {
        let Some(job) = SCRIPTED.with(Cell::get) else {
            return;
        };
        let mut s = self.st.lock();
        if !ok {
            drop(s);
            self.abort(&format!("job {job} failed in {phase:?}"));
            return;
        }
        if s.aborted.is_none() && s.steps.get(s.next) == Some(&(job, phase)) {
            s.next += 1;
        }
        if phase == Phase::Install {
            SCRIPTED.with(|c| c.set(None));
        }
        drop(s);
        self.cv.notify_all();
    }
}
