//! Recovery at open, as a short sequence of steps: replay the manifest
//! ([`manifest::replay`]), check the files it names, replay the WALs ([`wal::replay`]),
//! start a new WAL and move the memtables onto it, write a fresh manifest holding the whole
//! state, and remove what nobody needs ([`cleanup`]). A read-only open stops before writing.

mod cleanup;
mod manifest;
mod wal;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::error::Result;
use crate::fs::Env;
use crate::layout;
use crate::log::LogWriter;
use crate::manifest::edit::{Edit, KeyspaceDef, KsEdit};
use crate::manifest::ManifestWriter;
use crate::memtable::Memtable;
use crate::options::Options;
use crate::stats::{IoStats, WriteCause};
use crate::table::TableCtx;

use crate::db::{wal_path, BgState, DbInner, KsCore, Queue, SuperVersion, WalState, NEXT_INSTANCE};

/// The state recovery builds, step by step.
pub(super) struct Recovered {
    /// The next file number to allocate.
    pub next_file: u64,
    /// The largest sequence number in the manifest or the replayed WALs.
    pub last_seq: u64,
    /// The placement-hash key the manifest records (`None` for a new database).
    pub hash_key: Option<[u8; 16]>,
    /// The first sealed WAL (`u64::MAX`: the manifest predates seals).
    pub sealed_from: u64,
    /// The features of the manifest's last snapshot.
    pub features: u64,
    /// The keyspaces, by id.
    pub cores: HashMap<u32, Arc<KsCore>>,
    /// The manifest `CURRENT` named, if any.
    pub old_manifest: Option<u64>,
}

/// Opens or creates the database state: manifest, keyspaces, WAL replay, cleanup.
pub(in crate::db) fn recover(
    dir: PathBuf,
    env: Env,
    opts: Options,
    tables: Arc<TableCtx>,
    stats: Arc<IoStats>,
) -> Result<DbInner> {
    let names = env.list(&dir)?;
    let mut r = manifest::replay(&dir, &env, &opts, &tables, &names)?;
    manifest::check_named_files(&dir, &names, &mut r)?;
    let wals = wal::replay(&dir, &env, &opts, &names, &mut r)?;
    let mut live_logs = wals.live_logs;
    let hash_key = r.hash_key.unwrap_or_else(rand::random);
    // New WAL and a fresh manifest holding the whole recovered state.
    let wal_no = r.next_file;
    let manifest_no = r.next_file + 1;
    r.next_file += 2;
    let wal_w = if opts.read_only {
        env.refusing_writer(&wal_path(&dir, wal_no), WriteCause::Wal)
    } else {
        env.create_log(&wal_path(&dir, wal_no), WriteCause::Wal)?
    };
    live_logs.push(wal_no);
    move_memtables_to(&r.cores, wal_no, wals.flush_recovered);
    let search_pool = if opts.parallel_search {
        Some(Arc::new(layout::parallel::WorkerPool::new(
            "scree-search",
            2,
        )?))
    } else {
        None
    };
    let snap = snapshot_edit(&r, hash_key, wal_no, opts.read_only);
    let manifest = if opts.read_only {
        // Nothing below runs: no manifest is written and no file removed.
        ManifestWriter::refusing(&env, &dir, r.old_manifest.unwrap_or_default())
    } else {
        ManifestWriter::create(&env, &dir, manifest_no, &snap)?
    };
    if !opts.read_only {
        cleanup::remove_unneeded_files(&env, &dir, &names, &r.cores, &live_logs, manifest_no);
    }
    let (next_file, last_seq, cores) = (r.next_file, r.last_seq, r.cores);
    let wal = LogWriter::new(wal_w);
    Ok(DbInner {
        instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
        dir,
        env,
        opts,
        tables,
        next_file: AtomicU64::new(next_file),
        last_seq: AtomicU64::new(last_seq),
        hash_key,
        search_pool,
        keyspaces: RwLock::new(cores),
        queue: Mutex::new(Queue::default()),
        queue_cv: Condvar::new(),
        wal: Mutex::new(WalState {
            log: wal,
            number: wal_no,
            delay: super::delay::WriteDelay::new(std::time::Instant::now()),
        }),
        wal_number: AtomicU64::new(wal_no),
        old_logs: Mutex::new(Vec::new()),
        log_sync: Mutex::new(()),
        wal_dir_unsynced: AtomicBool::new(false),
        wal_dir_sync: Mutex::new(()),
        wal_sync_failed: AtomicBool::new(false),
        sealed_from: wal_no,
        live_logs: Mutex::new(live_logs),
        manifest: Mutex::new(manifest),
        bg: Mutex::new(BgState::default()),
        bg_cv: Condvar::new(),
        bg_error: Mutex::new(None),
        pick_lock: Mutex::new(()),
        snapshots: Mutex::new(BTreeMap::new()),
        stats,
    })
}

/// Moves every keyspace's memtable onto the new WAL `wal_no`: an empty one is replaced, and
/// (with `flush_recovered`) one holding replayed writes is frozen, to be flushed before the
/// open returns.
fn move_memtables_to(cores: &HashMap<u32, Arc<KsCore>>, wal_no: u64, flush_recovered: bool) {
    for ks in cores.values() {
        let mut g = ks.sv.write();
        // When the writes to replay span several WALs, what they gave a keyspace is flushed by
        // the background threads (LevelDB and RocksDB flush at every open). Left in the
        // memtable, it would keep every replayed WAL alive, and an application that opens,
        // writes a little and closes again (as `scree put` does) would pile up one more WAL
        // per open, each replayed by every later open. One WAL's worth stays in the
        // memtable, as any unflushed memtable does; a read-only open runs no flush.
        let recovered = !g.mem.is_empty() && flush_recovered;
        if g.mem.is_empty() || recovered {
            *g = SuperVersion::new(
                Arc::new(Memtable::for_layout(
                    &ks.kind,
                    wal_no,
                    ks.opts().write_buffer_bytes,
                )),
                if recovered {
                    vec![g.mem.clone()]
                } else {
                    Vec::new()
                },
                g.version.clone(),
            );
        }
    }
}

/// The snapshot record of the new manifest: the counters, the hash key, and every keyspace
/// with its version and the first WAL it still needs (stored in the keyspace too, unless the
/// open is read-only).
fn snapshot_edit(r: &Recovered, hash_key: [u8; 16], wal_no: u64, read_only: bool) -> Edit {
    let cores = &r.cores;
    let mut snap = Edit {
        next_file_no: Some(r.next_file),
        last_seq: Some(r.last_seq),
        hash_key: Some(hash_key),
        sealed_logs_from: Some(wal_no),
        ..Default::default()
    };
    let mut ids: Vec<u32> = cores.keys().copied().collect();
    ids.sort_unstable();
    for id in ids {
        if let Some(ks) = cores.get(&id) {
            snap.new_keyspaces.push(KeyspaceDef {
                id,
                name: ks.name.clone(),
                layout: ks.kind.encode(),
            });
            let mut k = KsEdit::new(id);
            // The first WAL the keyspace still needs: its oldest memtable's (the WAL where
            // replay first gave it an entry; the new WAL when it got none). No older WAL holds
            // a write of it that is not in a table, and this one is kept by this open, so the
            // log number names a WAL that exists (`FEATURE_LOG_NUMBERS_EXIST`).
            let sv = ks.sv();
            let needed = sv.imms.last().unwrap_or(&sv.mem).log_number;
            let needed = needed.max(ks.log_number.load(Ordering::SeqCst));
            if !read_only {
                ks.log_number.store(needed, Ordering::SeqCst);
            }
            k.log_number = Some(needed);
            sv.version.snapshot(&mut k);
            snap.keyspaces.push(k);
        }
    }
    snap.features = Some(snap.features_needed());
    snap
}
