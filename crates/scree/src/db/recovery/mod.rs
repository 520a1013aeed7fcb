mod wal;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::batch;
use crate::error::{Error, Result};
use crate::fs::Env;
use crate::key;
use crate::layout;
use crate::log::{self, LogWriter};
use crate::manifest::edit::{Edit, KeyspaceDef, KsEdit};
use crate::manifest::{self, ManifestWriter};
use crate::memtable::Memtable;
use crate::options::{KeyspaceOptions, Layout as LayoutKind, Options, WalRecovery};
use crate::stats::{IoStats, WriteCause};
use crate::table::TableCtx;
use crate::wal_chain;

use crate::db::{
    is_table_ext, log_may_hold_data, parse_file_name, wal_path, BgState, DbInner, KsCore,
    ManualScopes, Queue, SuperVersion, WalState, MAX_FILE_NO, NEXT_INSTANCE,
};
use wal::{empty_logs, first_synced_log, table_ahead, truncate_log};

/// Opens or creates the database state: manifest, keyspaces, WAL replay, cleanup.
pub(in crate::db) fn recover(
    dir: PathBuf,
    env: Env,
    opts: Options,
    tables: Arc<TableCtx>,
    stats: Arc<IoStats>,
) -> Result<DbInner> {
    let current = dir.join(manifest::CURRENT);
    let names = env.list(&dir)?;
    let mut next_file = 2u64;
    let mut last_seq = 0u64;
    let mut hash_key = None;
    // No WAL is sealed unless the manifest says so (one written before seals: every WAL was
    // synced before the next held writes).
    let mut sealed_from = u64::MAX;
    // The features of the manifest's last snapshot.
    let mut features = 0u64;
    let mut cores: HashMap<u32, Arc<KsCore>> = HashMap::new();
    let mut old_manifest = None;
    if env.fs.exists(&current) {
        let n = manifest::read_current(&env, &dir)?;
        old_manifest = Some(n);
        let path = manifest::manifest_path(&dir, n);
        let edits = manifest::read_manifest(&env, &path)?;
        // Hash-placed layouts need the key before their first version exists.
        hash_key = edits.iter().find_map(|e| e.hash_key);
        // Every manifest Scree writes records the key in its snapshot record. Without it a new
        // random key would place every lookup of a hash layout in the wrong containers: its
        // data would read as absent (found in review, 2026-11-24).
        if hash_key.is_none() && edits.iter().any(|e| !e.new_keyspaces.is_empty()) {
            return Err(Error::corruption(
                &path,
                0,
                "manifest defines keyspaces but records no placement-hash key",
            ));
        }
        for e in edits {
            if let Some(f) = e.features.filter(|f| f & !manifest::KNOWN_FEATURES != 0) {
                return Err(Error::Unsupported(format!(
                    "{} needs format features {:#x} this build does not read (written by a newer build)",
                    path.display(),
                    f & !manifest::KNOWN_FEATURES
                )));
            }
            if let Some(n) = e.next_file_no {
                if n > MAX_FILE_NO {
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!("next file number {n} out of range"),
                    ));
                }
                next_file = next_file.max(n);
            }
            if let Some(s) = e.last_seq {
                if s > key::MAX_SEQ {
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!(
                            "last sequence number {s} above the largest ({})",
                            key::MAX_SEQ
                        ),
                    ));
                }
                last_seq = last_seq.max(s);
            }
            if e.hash_key.is_some() {
                hash_key = e.hash_key;
            }
            if let Some(n) = e.sealed_logs_from {
                sealed_from = n;
            }
            if let Some(f) = e.features {
                features = f;
            }
            for d in &e.new_keyspaces {
                if cores.contains_key(&d.id) {
                    continue;
                }
                // Two keyspaces of one name: `Db::keyspace` would open either (whichever a
                // hash map met first), so writes could land in one and be read from the other
                // on the next open (found in review, 2026-11-24).
                if cores.values().any(|k| k.name == d.name) {
                    return Err(Error::corruption(
                        &path,
                        0,
                        format!("two keyspaces named {:?}", d.name),
                    ));
                }
                let kind = LayoutKind::decode(&d.layout).ok_or_else(|| {
                    Error::corruption(&path, 0, format!("keyspace {:?}: unknown layout", d.name))
                })?;
                let policy = layout::new_layout(kind)?;
                // The application's options for it, if given at open: what the recovered
                // memtables' flush and the first compactions run with.
                let kopts = match opts.keyspace_options.iter().find(|(n, _)| *n == d.name) {
                    Some((_, o)) if o.layout != kind => {
                        return Err(Error::InvalidArgument(format!(
                            "Options::keyspace_options gives keyspace {:?} layout `{}`, but it was created with `{kind}`",
                            d.name, o.layout
                        )))
                    }
                    Some((_, o)) => {
                        policy.configure(o);
                        o.clone()
                    }
                    None => KeyspaceOptions::new(kind),
                };
                let version = policy.empty_version_with_key(&tables, hash_key.unwrap_or_default());
                cores.insert(
                    d.id,
                    Arc::new(KsCore {
                        id: d.id,
                        name: d.name.clone(),
                        kind,
                        opts: RwLock::new(Arc::new(kopts)),
                        layout: policy,
                        sv: RwLock::new(Arc::new(SuperVersion {
                            mem: Arc::new(Memtable::for_layout(&kind, 0, 0)),
                            imms: Vec::new(),
                            version,
                        })),
                        log_number: AtomicU64::new(0),
                        level_writes: Mutex::new(Vec::new()),
                        manual: Mutex::new(ManualScopes::default()),
                    }),
                );
            }
            for k in &e.keyspaces {
                let ks = cores.get(&k.id).ok_or_else(|| {
                    Error::corruption(&path, 0, format!("edit for unknown keyspace {}", k.id))
                })?;
                let mut g = ks.sv.write();
                let v = g
                    .version
                    .apply(k, &tables)
                    .map_err(|err| Error::corruption(&path, 0, err.to_string()))?;
                *g = Arc::new(SuperVersion {
                    mem: g.mem.clone(),
                    imms: Vec::new(),
                    version: v,
                });
                if let Some(n) = k.log_number {
                    ks.log_number.store(n, Ordering::SeqCst);
                }
            }
        }
    } else if let Some(found) = names.iter().find(|n| match parse_file_name(n) {
        // CURRENT is written last when a database is created: without it, manifests and
        // empty logs are the leftovers of a creation that did not finish (no write was ever
        // acknowledged), and the database starts afresh. Any data means CURRENT was lost, and
        // starting afresh would delete it (found in review: a directory whose CURRENT and
        // manifest were gone reopened empty, its tables deleted).
        Some((num, "log")) => log_may_hold_data(env.fs.as_ref(), &wal_path(&dir, num)),
        Some((_, ext)) => is_table_ext(ext),
        None => false,
    }) {
        return Err(Error::corruption(
            &current,
            0,
            format!("CURRENT is missing but the directory holds database data ({found})"),
        ));
    } else if opts.read_only {
        return Err(Error::InvalidArgument(format!(
            "{} holds no database (no {}): a read-only open does not create one",
            dir.display(),
            manifest::CURRENT
        )));
    }
    // Every file the manifest names must exist, and be named once: a table named by two
    // keyspaces (or twice by one) was accepted, and the first compaction of one deleted the
    // file the other still read (found in review, 2026-11-24).
    let present: HashSet<&str> = names.iter().map(String::as_str).collect();
    let mut named: HashSet<(u64, &str)> = HashSet::new();
    for ks in cores.values() {
        for f in ks.sv().version.files() {
            let name = format!("{:06}.{}", f.meta.file_no, f.ext);
            if !named.insert((f.meta.file_no, f.ext)) {
                return Err(Error::corruption(
                    dir.join(&name),
                    0,
                    format!("named twice by the manifest (keyspace {:?})", ks.name),
                ));
            }
            if !present.contains(name.as_str()) {
                return Err(Error::corruption(
                    dir.join(&name),
                    0,
                    "table named by the manifest is missing",
                ));
            }
            if f.meta.file_no > MAX_FILE_NO {
                return Err(Error::corruption(
                    dir.join(&name),
                    0,
                    "table file number out of range",
                ));
            }
            next_file = next_file.max(f.meta.file_no + 1);
        }
    }
    // Replay WAL files.
    let min_log = cores
        .values()
        .map(|k| k.log_number.load(Ordering::SeqCst))
        .min()
        .unwrap_or(0);
    let mut logs: Vec<u64> = names
        .iter()
        .filter_map(|n| parse_file_name(n))
        .filter(|(_, ext)| *ext == "log")
        .map(|(n, _)| n)
        .collect();
    logs.sort_unstable();
    for &n in &logs {
        if n > MAX_FILE_NO {
            return Err(Error::corruption(
                wal_path(&dir, n),
                0,
                "WAL file number out of range",
            ));
        }
        next_file = next_file.max(n + 1);
    }
    // The WALs the manifest says exist must be there: without one, writes it held would be
    // lost with no sign (a WAL removed by hand, or the directory copied without WALs).
    let log_numbers: Vec<(String, u64)> = cores
        .values()
        .map(|k| (k.name.clone(), k.log_number.load(Ordering::SeqCst)))
        .collect();
    let missing = wal_chain::missing_required(&logs, &log_numbers, sealed_from, features);
    let mut replay: Vec<u64> = logs.iter().copied().filter(|&n| n >= min_log).collect();
    // Point in time with a required WAL missing: the history ends before it.
    let mut ends_before_missing = None;
    if let Some((w, detail)) = missing {
        if opts.wal_recovery != WalRecovery::PointInTime {
            return Err(Error::corruption(wal_path(&dir, w), 0, detail));
        }
        // Later WALs are emptied durably before anything newer exists, as when a WAL is cut
        // (`truncate_log`), but only once the check below has accepted this point in time
        // (a refused open changes nothing: found in review, it had emptied WALs holding
        // synced writes).
        let later: Vec<u64> = replay.iter().copied().filter(|&n| n > w).collect();
        replay.retain(|&n| n < w);
        ends_before_missing = Some((w, detail, later));
    }
    let mut live_logs = Vec::new();
    // Replayed logs that put at least one entry into a memtable: the others hold nothing a
    // keyspace still needs (empty, or only writes already in tables) and are removed below,
    // once the new manifest is durable. Kept, they piled up: a log per open while nothing
    // was flushed, every one replayed by every later open (found in review, 2026-11-24).
    let mut needed_logs: HashSet<u64> = HashSet::new();
    // The largest sequence number replayed so far (entries of flushed keyspaces included).
    let mut replayed_max = 0u64;
    'logs: for (i, &n) in replay.iter().enumerate() {
        let path = wal_path(&dir, n);
        let data = env.read_all(&path)?;
        let file = wal_chain::read(&data);
        live_logs.push(n);
        for &(ty, r, offset) in &file.batches {
            // Type 1 (fixed header, older builds), 2 (compact) and 3 all replay.
            let (seq, entries) = batch::decode(ty, r).map_err(|(o, d)| {
                Error::corruption(
                    &path,
                    offset + log::HEADER as u64 + o as u64,
                    format!("WAL batch: {d}"),
                )
            })?;
            for (j, e) in entries.iter().enumerate() {
                let s = seq + j as u64;
                last_seq = last_seq.max(s);
                replayed_max = replayed_max.max(s);
                let Some(ks) = cores.get(&e.ks) else {
                    // A keyspace created after its manifest edit was lost cannot be: keyspace
                    // creation is logged before any write to it.
                    return Err(Error::corruption(
                        &path,
                        offset,
                        format!("WAL names unknown keyspace {}", e.ks),
                    ));
                };
                if n < ks.log_number.load(Ordering::SeqCst) {
                    continue;
                }
                let mut g = ks.sv.write();
                if g.mem.is_empty() && g.mem.log_number != n {
                    *g = Arc::new(SuperVersion {
                        mem: Arc::new(Memtable::for_layout(
                            &ks.kind,
                            n,
                            ks.opts().write_buffer_bytes,
                        )),
                        imms: Vec::new(),
                        version: g.version.clone(),
                    });
                }
                g.mem.insert(&e.key, s, e.kind, &e.value);
                needed_logs.insert(n);
            }
        }
        let later = replay.get(i + 1..).unwrap_or_default();
        let strict = opts.wal_recovery != WalRecovery::PointInTime;
        let cut = match wal_chain::judge(n, &file, later.first().copied(), sealed_from) {
            Ok(wal_chain::Next::Continue) => None,
            Ok(wal_chain::Next::EndsAt { offset, why }) => {
                // The later logs can hold only writes acknowledged without a sync: a synced
                // write syncs every retired log first. One that records a completed sync says
                // this log was durable whole, so its missing end is damage, not a crash.
                if strict {
                    if let Some(m) = first_synced_log(&env, &dir, later)? {
                        return Err(Error::corruption(
                            &path,
                            offset,
                            format!(
                                "{why}; but WAL {m:06} records a completed sync, which syncs \
                                 every older WAL first: durable writes are missing"
                            ),
                        ));
                    }
                }
                Some(offset)
            }
            Err((offset, detail)) => {
                if strict {
                    return Err(Error::corruption(&path, offset, detail));
                }
                Some(offset)
            }
        };
        if let Some(offset) = cut {
            // A keyspace flushed past this log may already hold, in its tables, writes made
            // after the cut; keeping them while the WAL loses the rest of their batches (and
            // the other keyspaces' writes in between) is no point in time. Refuse, as RocksDB
            // does ("SST file is ahead of WALs"), before anything is changed on disk.
            if let Some(ahead) = table_ahead(&cores, n, replayed_max) {
                return Err(Error::corruption(
                    &path,
                    offset,
                    format!("point-in-time recovery would cut the WAL here, but {ahead}"),
                ));
            }
            // The log ends here. Cut it durably to its valid prefix (and drop any later log)
            // before a newer WAL exists: otherwise the next recovery would find a torn record
            // in a log that is no longer the newest, or replay discarded records.
            // (A read-only open leaves the files as they are: it only stops replaying here.)
            if !opts.read_only {
                truncate_log(&env, &dir, n, &data, offset, later)?;
            }
            break 'logs;
        }
    }
    if let Some((w, detail, later)) = ends_before_missing {
        // As at a cut: a keyspace whose log number is above the missing WAL may hold, in its
        // tables, writes from after it. The writes before the end are those replayed and those
        // in the tables of keyspaces flushed only up to the missing WAL (found in review: with
        // nothing replayed, every table counted as later, and a copy without its WALs never
        // opened).
        let before_end = cores
            .values()
            .filter(|k| k.log_number.load(Ordering::SeqCst) <= w)
            .flat_map(|k| k.sv().version.files())
            .map(|f| f.meta.max_seq)
            .fold(replayed_max, u64::max);
        if let Some(ahead) = table_ahead(&cores, w, before_end) {
            return Err(Error::corruption(
                wal_path(&dir, w),
                0,
                format!(
                    "{detail}; point-in-time recovery would end the history before it, but {ahead}"
                ),
            ));
        }
        if !opts.read_only {
            empty_logs(&env, &dir, &later)?;
        }
    }
    // The replayed logs may hold writes that reached only the page cache before a process
    // crash: make them durable before a new WAL can hold synced writes, or a later power loss
    // could keep those and lose these (a hole in the history).
    if !opts.read_only {
        for &n in &live_logs {
            env.sync_file(&wal_path(&dir, n))?;
        }
    }
    let flush_recovered = !opts.read_only && needed_logs.len() > 1;
    live_logs.retain(|n| needed_logs.contains(n));
    let hash_key = hash_key.unwrap_or_else(rand::random);
    // New WAL and a fresh manifest holding the whole recovered state.
    let wal_no = next_file;
    let manifest_no = next_file + 1;
    next_file += 2;
    let wal_w = if opts.read_only {
        env.refusing_writer(&wal_path(&dir, wal_no), WriteCause::Wal)
    } else {
        env.create_log(&wal_path(&dir, wal_no), WriteCause::Wal)?
    };
    live_logs.push(wal_no);
    for ks in cores.values() {
        let mut g = ks.sv.write();
        // When the writes to replay span several WALs, what they gave a keyspace is flushed by
        // the background threads (LevelDB and RocksDB flush at every open). Left in the
        // memtable, it kept every replayed WAL alive, and an application that opened, wrote
        // a little and closed again piled up one more WAL per open, each replayed by every
        // later open (found in session 22 with `scree put`). One WAL's worth stays in the
        // memtable, as any unflushed memtable does; a read-only open runs no flush.
        let recovered = !g.mem.is_empty() && flush_recovered;
        if g.mem.is_empty() || recovered {
            *g = Arc::new(SuperVersion {
                mem: Arc::new(Memtable::for_layout(
                    &ks.kind,
                    wal_no,
                    ks.opts().write_buffer_bytes,
                )),
                imms: if recovered {
                    vec![g.mem.clone()]
                } else {
                    Vec::new()
                },
                version: g.version.clone(),
            });
        }
    }
    let search_pool = if opts.parallel_search {
        Some(Arc::new(layout::parallel::SearchPool::new(2)?))
    } else {
        None
    };
    let inner_partial = |manifest: ManifestWriter, wal: LogWriter| DbInner {
        instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
        dir: dir.clone(),
        env: env.clone(),
        opts: opts.clone(),
        tables: tables.clone(),
        next_file: AtomicU64::new(next_file),
        last_seq: AtomicU64::new(last_seq),
        hash_key,
        search_pool: search_pool.clone(),
        keyspaces: RwLock::new(cores.clone()),
        queue: Mutex::new(Queue::default()),
        queue_cv: Condvar::new(),
        wal: Mutex::new(WalState {
            log: wal,
            number: wal_no,
        }),
        wal_number: AtomicU64::new(wal_no),
        old_logs: Mutex::new(Vec::new()),
        log_sync: Mutex::new(()),
        wal_dir_unsynced: AtomicBool::new(false),
        wal_dir_sync: Mutex::new(()),
        wal_sync_failed: AtomicBool::new(false),
        sealed_from: wal_no,
        live_logs: Mutex::new(live_logs.clone()),
        manifest: Mutex::new(manifest),
        bg: Mutex::new(BgState::default()),
        bg_cv: Condvar::new(),
        bg_error: Mutex::new(None),
        pick_lock: Mutex::new(()),
        snapshots: Mutex::new(BTreeMap::new()),
        stats: stats.clone(),
    };
    // Build the snapshot edit with a temporary view of the state.
    let mut snap = Edit {
        next_file_no: Some(next_file),
        last_seq: Some(last_seq),
        hash_key: Some(hash_key),
        features: Some(manifest::KNOWN_FEATURES),
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
            if !opts.read_only {
                ks.log_number.store(needed, Ordering::SeqCst);
            }
            k.log_number = Some(needed);
            sv.version.snapshot(&mut k);
            snap.keyspaces.push(k);
        }
    }
    if opts.read_only {
        // Nothing below runs: no manifest is written and no file removed.
        let number = old_manifest.unwrap_or_default();
        let manifest = ManifestWriter::refusing(&env, &dir, number);
        return Ok(inner_partial(manifest, LogWriter::new(wal_w)));
    }
    let manifest = ManifestWriter::create(&env, &dir, manifest_no, &snap)?;
    let inner = inner_partial(manifest, LogWriter::new(wal_w));
    // Remove files no one needs: old manifests, temp files, unreferenced tables, dead logs.
    let live_tables: HashSet<String> = cores
        .values()
        .flat_map(|k| k.sv().version.files())
        .map(|f| format!("{:06}.{}", f.meta.file_no, f.ext))
        .collect();
    let live_log_set: HashSet<u64> = live_logs.iter().copied().collect();
    for name in &names {
        let remove = if let Some(n) = name.strip_prefix("MANIFEST-") {
            // Only manifests Scree wrote (`MANIFEST-` and a number), not a user's
            // `MANIFEST-backup` (found in review, 2026-11-24).
            n.parse::<u64>().is_ok_and(|n| n != manifest_no)
        } else if name == "LOCK" || name == manifest::CURRENT {
            false
        } else if let Some((n, ext)) = parse_file_name(name) {
            // Only the kinds of file Scree writes: anything else in the directory is not ours
            // (found in review: opening a directory that was not a database deleted files
            // such as `2023.csv`).
            match ext {
                "log" => !live_log_set.contains(&n),
                "dbtmp" => true,
                ext if is_table_ext(ext) => !live_tables.contains(name),
                _ => false,
            }
        } else {
            false
        };
        if remove {
            let _ = env.remove(&dir.join(name));
        }
    }
    let _ = old_manifest;
    Ok(inner)
}
