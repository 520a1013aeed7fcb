//! Operation sequences on the fault-injecting file system, checked against a model.
//!
//! Ops: puts and deletes (synced or not), batches, gets, scans, snapshots, flushes,
//! compactions, clean reopens, power losses (with every crash mode) and injected I/O faults.
//! Model: the acknowledged history. After a clean reopen every acknowledged write is there;
//! after a power loss the state is the state after some prefix of the history that includes
//! every write acknowledged with `sync` (or before a successful flush); a write that failed may
//! or may not be there. No panic, no wrong value, never a failed open on a state a crash made.
#![no_main]

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use scree::testing::fault::{CrashMode, Fault, FaultError, FaultFs, OpKind};
use scree::{Db, Keyspace, KeyspaceOptions, Layout, Options, WriteBatch, WriteOptions};

#[derive(Arbitrary, Debug)]
enum Op {
    Put {
        k: u8,
        v: u16,
        sync: bool,
    },
    Delete {
        k: u8,
        sync: bool,
    },
    Batch {
        items: Vec<(u8, Option<u16>)>,
        sync: bool,
    },
    Get {
        k: u8,
    },
    Scan,
    SnapshotCheck,
    Flush,
    Compact,
    Reopen,
    PowerLoss {
        mode: u8,
    },
    Fault {
        kind: u8,
        nth: u8,
        persistent: bool,
        short: bool,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    layout: u8,
    ops: Vec<Op>,
}

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(k: u8) -> Vec<u8> {
    format!("k{:03}", k % 64).into_bytes()
}

fn value(v: u16, n: usize) -> Vec<u8> {
    let mut out = format!("{n}:{v}:").into_bytes();
    out.resize(out.len() + (v as usize % 700), b'a' + (v % 26) as u8);
    out
}

struct Model {
    /// Acknowledged (or uncertain) writes since the last point where the state was known.
    history: Vec<(Vec<(Vec<u8>, Option<Vec<u8>>)>, bool)>,
    /// The state before `history`.
    base: State,
    /// `history[..durable]` survives a power loss.
    durable: usize,
}

impl Model {
    fn state_at(&self, p: usize) -> State {
        let mut s = self.base.clone();
        for (w, _) in self.history.iter().take(p) {
            for (k, v) in w {
                match v {
                    Some(v) => s.insert(k.clone(), v.clone()),
                    None => s.remove(k),
                };
            }
        }
        s
    }
    fn current(&self) -> State {
        self.state_at(self.history.len())
    }
    /// After recovery: find the prefix, make it the new base.
    fn settle(&mut self, got: &State, min: usize) {
        let p = (min..=self.history.len())
            .find(|&p| &self.state_at(p) == got)
            .unwrap_or_else(|| {
                panic!(
                    "recovered state ({} keys) is no prefix >= {min} of {} writes",
                    got.len(),
                    self.history.len()
                )
            });
        self.base = self.state_at(p);
        self.history.clear();
        self.durable = 0;
    }
}

fn ks_opts(layout: Layout) -> KeyspaceOptions {
    let mut o = KeyspaceOptions::new(layout);
    o.write_buffer_bytes = 64 * 1024;
    o.block_size = 256;
    o.leveled.level_base_bytes = 16 * 1024;
    o.leveled.target_table_bytes = 8 * 1024;
    o.leveled.level_size_ratio = 4;
    o.fragmented.max_levels = 4;
    o.fragmented.l0_compaction_trigger = 2;
    o.fragmented.max_sstables_per_guard = 2;
    o.fragmented.top_level_bits = 6;
    o.fragmented.bit_decrement = 1;
    o.fragmented.level_base_bytes = 64 * 1024;
    o.trie.pile_size = 2;
    o.trie.last_level_depth = 2;
    o
}

fn read_all(ks: &Keyspace) -> State {
    let mut s = State::new();
    for k in 0..64u8 {
        if let Ok(Some(v)) = ks.get(key(k)) {
            s.insert(key(k), v);
        }
    }
    s
}

fn open(fs: &FaultFs, layout: Layout) -> (Db, Keyspace) {
    let mut o = Options::default();
    o.background_threads = 1;
    o.block_cache_bytes = 64 * 1024;
    o.max_manifest_bytes = 4096;
    o.fs = Some(fs.as_dyn());
    let db = Db::open("/db", o).expect("open after the faults were cleared");
    let ks = db.keyspace("f", ks_opts(layout)).expect("keyspace");
    (db, ks)
}

fuzz_target!(|input: Input| {
    let layouts = Layout::implemented();
    let layout = layouts[input.layout as usize % layouts.len()];
    let fs = FaultFs::new(u64::from(input.layout));
    let (mut db, mut ks) = open(&fs, layout);
    let mut m = Model {
        history: Vec::new(),
        base: State::new(),
        durable: 0,
    };
    // After a failed write the engine is read-only: reopen before the next write.
    let mut failed = false;
    for (n, op) in input.ops.into_iter().take(200).enumerate() {
        let mut write = |items: Vec<(Vec<u8>, Option<Vec<u8>>)>, sync: bool| {
            let r = if items.len() == 1 {
                let (k, v) = &items[0];
                let o = WriteOptions { sync };
                match v {
                    Some(v) => ks.put_opt(k, v, &o),
                    None => ks.delete_opt(k, &o),
                }
            } else {
                let mut b = WriteBatch::new();
                for (k, v) in &items {
                    match v {
                        Some(v) => b.put(&ks, k, v),
                        None => b.delete(&ks, k),
                    }
                }
                db.write(b, &WriteOptions { sync })
            };
            let ok = r.is_ok();
            if let Err(e) = &r {
                assert!(
                    !matches!(e, scree::Error::Corruption { .. }),
                    "an I/O fault surfaced as {e}"
                );
            }
            m.history.push((items, ok));
            if ok && sync {
                m.durable = m.history.len();
            }
            ok
        };
        match op {
            Op::Put { k, v, sync } => failed |= !write(vec![(key(k), Some(value(v, n)))], sync),
            Op::Delete { k, sync } => failed |= !write(vec![(key(k), None)], sync),
            Op::Batch { items, sync } => {
                let items: Vec<_> = items
                    .into_iter()
                    .take(8)
                    .map(|(k, v)| (key(k), v.map(|v| value(v, n))))
                    .collect();
                if !items.is_empty() {
                    failed |= !write(items, sync);
                }
            }
            Op::Get { k } => {
                if let Ok(got) = ks.get(key(k)) {
                    if !failed {
                        assert_eq!(got, m.current().get(&key(k)).cloned(), "get {k}");
                    }
                }
            }
            Op::Scan => {
                if layout != Layout::Trie && !failed {
                    if let Ok(all) = ks
                        .range::<Vec<u8>, _>(..)
                        .collect::<scree::Result<Vec<_>>>()
                    {
                        let want: Vec<_> = m.current().into_iter().collect();
                        assert_eq!(all, want, "scan");
                    }
                }
            }
            Op::SnapshotCheck => {
                if !failed {
                    let s = db.snapshot();
                    let want = m.current();
                    for k in 0..64u8 {
                        if let Ok(v) = s.get(&ks, key(k)) {
                            assert_eq!(v, want.get(&key(k)).cloned());
                        }
                    }
                }
            }
            Op::Flush => {
                if db.flush().is_ok() {
                    m.durable = m.history.len();
                }
            }
            Op::Compact => {
                if db.compact().is_ok() {
                    m.durable = m.history.len();
                    let _ = db.check_invariants().map_err(|e| panic!("invariants: {e}"));
                }
            }
            Op::Reopen => {
                fs.clear_faults();
                drop(ks);
                drop(db);
                (db, ks) = open(&fs, layout);
                // No power loss: every acknowledged write is there.
                let acked = m.history.iter().take_while(|(_, ok)| *ok).count();
                let got = read_all(&ks);
                m.settle(&got, acked);
                failed = false;
            }
            Op::PowerLoss { mode } => {
                fs.freeze();
                drop(ks);
                drop(db);
                fs.crash(CrashMode::ALL[mode as usize % CrashMode::ALL.len()]);
                (db, ks) = open(&fs, layout);
                let got = read_all(&ks);
                m.settle(&got, m.durable);
                failed = false;
            }
            Op::Fault {
                kind,
                nth,
                persistent,
                short,
            } => {
                let kinds = [
                    None,
                    Some(OpKind::Write),
                    Some(OpKind::Sync),
                    Some(OpKind::Create),
                    Some(OpKind::Read),
                    Some(OpKind::Rename),
                    Some(OpKind::SyncDir),
                ];
                let mut f = Fault::nth(kinds[kind as usize % kinds.len()], 1 + u64::from(nth % 32));
                if nth % 2 == 0 {
                    f = f.error(FaultError::Enospc);
                }
                if persistent {
                    f = f.persistent();
                }
                if short {
                    f = f.short();
                }
                fs.inject(f);
            }
        }
    }
});
