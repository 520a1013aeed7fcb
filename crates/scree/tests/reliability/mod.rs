//! Shared helpers of the reliability tests (crash_consistency, io_errors): an acknowledged
//! history of writes and the oracle that checks a recovered database against it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use scree::testing::fault::FaultFs;
use scree::{Db, Keyspace, KeyspaceOptions, Layout, Options, WriteBatch, WriteOptions};

/// The directory every fake database lives in.
pub const DIR: &str = "/db";

/// (keyspace index, key) → value; a missing entry is an absent key.
pub type State = BTreeMap<(usize, Vec<u8>), Vec<u8>>;

/// One write operation (a single put/delete or a batch).
#[derive(Debug, Clone)]
pub struct Op {
    pub writes: Vec<(usize, Vec<u8>, Option<Vec<u8>>)>,
    /// Whether the call returned `Ok`.
    pub acked: bool,
}

/// The writes issued, in order, and how many of them must survive any crash.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub ops: Vec<Op>,
    /// The first `durable` ops were made durable (a synced write or a successful flush
    /// acknowledged them or a later op).
    pub durable: usize,
    /// The state before the first op.
    pub base: State,
}

impl History {
    /// A history starting from `base`.
    pub fn from_state(base: State) -> Self {
        History {
            ops: Vec::new(),
            durable: 0,
            base,
        }
    }

    /// Every key the history touches.
    pub fn keys(&self) -> Vec<(usize, Vec<u8>)> {
        let mut k: Vec<(usize, Vec<u8>)> = self.base.keys().cloned().collect();
        for op in &self.ops {
            for (ks, key, _) in &op.writes {
                k.push((*ks, key.clone()));
            }
        }
        k.sort();
        k.dedup();
        k
    }

    /// Marks everything acknowledged so far as durable.
    pub fn barrier(&mut self) {
        self.durable = self.ops.len();
    }

    /// The state after the first `p` ops.
    pub fn state_at(&self, p: usize) -> State {
        let mut s = self.base.clone();
        for op in self.ops.iter().take(p) {
            apply(&mut s, op);
        }
        s
    }

    /// The prefix lengths whose state equals `got`, restricted to `durable..=ops.len()`.
    pub fn matching_prefix(&self, got: &State) -> Option<usize> {
        let mut s = self.base.clone();
        for p in 0..=self.ops.len() {
            if p > 0 {
                if let Some(op) = self.ops.get(p - 1) {
                    apply(&mut s, op);
                }
            }
            if p >= self.durable && &s == got {
                return Some(p);
            }
        }
        None
    }
}

fn apply(s: &mut State, op: &Op) {
    for (ks, k, v) in &op.writes {
        match v {
            Some(v) => s.insert((*ks, k.clone()), v.clone()),
            None => s.remove(&(*ks, k.clone())),
        };
    }
}

/// Small options on the fault fs.
pub fn fault_opts(fs: &FaultFs) -> Options {
    let mut o = Options::default();
    o.background_threads = 1;
    o.block_cache_bytes = 64 * 1024;
    o.fs = Some(fs.as_dyn());
    o
}

/// Small keyspace options (flushes and compactions with little data).
pub fn small_ks(layout: Layout) -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(layout);
    o.write_buffer_bytes = 64 * 1024;
    o.block_size = 256;
    o.leveled.level_base_bytes = 8 * 1024;
    o.leveled.target_table_bytes = 4 * 1024;
    o.leveled.level_size_ratio = 4;
    o.leveled.l0_compaction_trigger = 2;
    o.leveled.l0_slowdown_trigger = 8;
    o.leveled.l0_stop_trigger = 12;
    // The other layouts' small settings, shared with the other integration tests.
    crate::common::scree_test_tune(&mut o);
    o
}

/// Keyspace names used by the tests (index = keyspace index in [`State`]).
pub const KS_NAMES: [&str; 2] = ["a", "b"];

/// An open database with its keyspaces.
pub struct Handle {
    pub db: Db,
    pub ks: Vec<Keyspace>,
}

/// Opens the database and `nks` keyspaces.
pub fn open(opts: &Options, layout: Layout, nks: usize) -> scree::Result<Handle> {
    let db = Db::open(DIR, opts.clone())?;
    let mut ks = Vec::new();
    for name in KS_NAMES.iter().take(nks) {
        ks.push(db.keyspace(name, small_ks(layout))?);
    }
    Ok(Handle { db, ks })
}

/// Issues writes and records them in the history. Stops at the first error (returned).
pub struct Writer<'a> {
    pub h: &'a Handle,
    pub hist: &'a mut History,
    /// Value size in bytes.
    pub value_len: usize,
}

impl Writer<'_> {
    fn value(&self, key: &[u8]) -> Vec<u8> {
        let mut v =
            format!("{}:{}:", self.hist.ops.len(), String::from_utf8_lossy(key)).into_bytes();
        let fill = b'a' + (self.hist.ops.len() % 26) as u8;
        v.resize(v.len().max(self.value_len), fill);
        v
    }

    /// One put (or delete when `delete`), synced or not.
    pub fn put(&mut self, ks: usize, key: &[u8], delete: bool, sync: bool) -> scree::Result<()> {
        let value = if delete { None } else { Some(self.value(key)) };
        let k = &self.h.ks[ks];
        let o = WriteOptions { sync };
        let r = match &value {
            Some(v) => k.put_opt(key, v, &o),
            None => k.delete_opt(key, &o),
        };
        self.record(vec![(ks, key.to_vec(), value)], r, sync)
    }

    /// One batch.
    pub fn batch(&mut self, items: &[(usize, Vec<u8>, bool)], sync: bool) -> scree::Result<()> {
        let mut b = WriteBatch::new();
        let mut writes = Vec::new();
        for (ks, key, delete) in items {
            let v = if *delete { None } else { Some(self.value(key)) };
            match &v {
                Some(v) => b.put(&self.h.ks[*ks], key, v),
                None => b.delete(&self.h.ks[*ks], key),
            }
            writes.push((*ks, key.clone(), v));
        }
        let r = self.h.db.write(b, &WriteOptions { sync });
        self.record(writes, r, sync)
    }

    fn record(
        &mut self,
        writes: Vec<(usize, Vec<u8>, Option<Vec<u8>>)>,
        r: scree::Result<()>,
        sync: bool,
    ) -> scree::Result<()> {
        self.hist.ops.push(Op {
            writes,
            acked: r.is_ok(),
        });
        if r.is_ok() && sync {
            self.hist.barrier();
        }
        r
    }

    /// `Db::flush`; on success everything acknowledged is durable.
    pub fn flush(&mut self) -> scree::Result<()> {
        self.h.db.flush()?;
        self.hist.barrier();
        Ok(())
    }

    /// `Db::compact`; on success everything acknowledged is durable.
    pub fn compact(&mut self) -> scree::Result<()> {
        self.h.db.compact()?;
        self.hist.barrier();
        Ok(())
    }
}

/// Reads every key of the history (and, with scans, every key of each keyspace).
pub fn read_state(h: &Handle, hist: &History, layout: Layout) -> Result<State, String> {
    let mut got = State::new();
    for (ks, key) in hist.keys() {
        let k = h.ks.get(ks).ok_or("keyspace missing")?;
        if let Some(v) = k.get(&key).map_err(|e| format!("get {key:?}: {e}"))? {
            got.insert((ks, key), v);
        }
    }
    if has_scans(layout) {
        for (i, k) in h.ks.iter().enumerate() {
            let mut scanned = State::new();
            for r in k.range::<Vec<u8>, _>(..) {
                let (key, v) = r.map_err(|e| format!("scan: {e}"))?;
                scanned.insert((i, key), v);
            }
            let mine: State = got
                .iter()
                .filter(|((ks, _), _)| *ks == i)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if scanned != mine {
                return Err(format!(
                    "keyspace {i}: scan disagrees with gets: scan {} keys {:?}, gets {} keys {:?}",
                    scanned.len(),
                    short(&scanned),
                    mine.len(),
                    short(&mine)
                ));
            }
        }
    }
    Ok(got)
}

/// A short description of a state for failure messages.
pub fn short(s: &State) -> Vec<String> {
    s.iter()
        .take(40)
        .map(|((ks, k), v)| {
            format!(
                "{ks}/{}={}",
                String::from_utf8_lossy(k),
                String::from_utf8_lossy(v.get(..v.len().min(12)).unwrap_or_default())
            )
        })
        .collect()
}

/// Checks the recovered state against the history: a prefix at least `durable` long.
/// Returns the prefix length.
pub fn verify(h: &Handle, hist: &History, layout: Layout) -> Result<usize, String> {
    let got = read_state(h, hist, layout)?;
    h.db.check_invariants()
        .map_err(|e| format!("invariants: {e}"))?;
    hist.matching_prefix(&got).ok_or_else(|| {
        let want = hist.state_at(hist.durable);
        format!(
            "recovered state is no prefix of the history of {} ops (durable {}): got {} keys {:?}; \
             state at durable prefix has {} keys {:?}",
            hist.ops.len(),
            hist.durable,
            got.len(),
            short(&got),
            want.len(),
            short(&want)
        )
    })
}

/// Whether the layout offers range scans.
pub fn has_scans(l: Layout) -> bool {
    crate::common::has_scans(l)
}

/// Number of an environment variable, or a default.
pub fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Keeps `Arc` in scope for users of this module.
pub type Shared<T> = Arc<T>;

static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts panics on every thread (background workers included), then runs the default hook.
pub fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            prev(info);
        }));
    });
}

/// Serializes the loops of one test binary, so that a panic on a background thread is
/// attributed to the loop that caused it.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Panics seen so far by the hook of [`count_panics`].
pub fn panics() -> usize {
    PANICS.load(std::sync::atomic::Ordering::SeqCst)
}
