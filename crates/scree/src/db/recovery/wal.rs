//! Recovery's WAL steps: replaying the WALs into memtables, and ending the history durably
//! where a log is damaged or missing (cutting it, emptying the logs after it).

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::batch;
use crate::error::{Error, Result};
use crate::fs::Env;
use crate::log;
use crate::memtable::Memtable;
use crate::options::{Options, WalRecovery};
use crate::stats::WriteCause;
use crate::wal_chain;

use super::Recovered;
use crate::db::{parse_file_name, wal_path, KsCore, SuperVersion, MAX_FILE_NO};

/// Replaces WAL `n` by its first `valid` bytes and removes the logs `later`, durably
/// (temp file, sync, rename, directory sync), so that a cut log never precedes a newer one.
pub(in crate::db) fn truncate_log(
    env: &Env,
    dir: &Path,
    n: u64,
    data: &[u8],
    valid: u64,
    later: &[u64],
) -> Result<()> {
    // The later logs go first, durably: if the cut log were replaced first and only the
    // rename reached the disk, the next recovery would replay the later logs after the cut (a
    // hole in the history). Emptied first, a crash leaves the damaged log the last one with
    // records, and the next recovery cuts it at the same place. They are emptied, not removed:
    // one may be the newest WAL the manifest names, which must exist
    // (`wal_chain::newest_named`); the open removes them once its new manifest is durable.
    empty_logs(env, dir, later)?;
    if usize::try_from(valid).is_ok_and(|v| v >= data.len()) {
        // Nothing to cut: only the later logs go.
        return Ok(());
    }
    let path = wal_path(dir, n);
    let tmp = dir.join(format!("{n:06}.dbtmp"));
    let mut w = env.create(&tmp, WriteCause::Wal)?;
    let keep = usize::try_from(valid).unwrap_or(usize::MAX).min(data.len());
    w.append(data.get(..keep).unwrap_or_default())?;
    w.sync()?;
    drop(w);
    env.rename(&tmp, &path)?;
    env.sync_dir(dir)
}

/// A keyspace whose log number is above WAL `n` and which holds a table with writes after
/// `replayed_max` (the largest sequence number replayed up to the end of the history in `n`):
/// ending the history there is no point in time. Says which, for an error.
pub(in crate::db) fn table_ahead(
    cores: &HashMap<u32, Arc<KsCore>>,
    n: u64,
    replayed_max: u64,
) -> Option<String> {
    for ks in cores.values() {
        if ks.log_number.load(Ordering::SeqCst) <= n {
            continue;
        }
        if let Some(f) = ks
            .sv()
            .version
            .files()
            .iter()
            .find(|f| f.meta.max_seq > replayed_max)
        {
            return Some(format!(
                "keyspace {:?} already holds later writes (table {:06}, sequence {} > {}): \
                 no consistent point in time",
                ks.name, f.meta.file_no, f.meta.max_seq, replayed_max
            ));
        }
    }
    None
}

/// Empties the WALs `logs` durably (they stay, empty, until the open's new manifest is durable
/// and removes them).
pub(in crate::db) fn empty_logs(env: &Env, dir: &Path, logs: &[u64]) -> Result<()> {
    for &l in logs {
        let mut w = env.create(&wal_path(dir, l), WriteCause::Wal)?;
        w.sync()?;
    }
    if !logs.is_empty() {
        env.sync_dir(dir)?;
    }
    Ok(())
}

/// The first of the WALs `logs` holding a record that shows a completed sync of it.
pub(in crate::db) fn first_synced_log(env: &Env, dir: &Path, logs: &[u64]) -> Result<Option<u64>> {
    for &m in logs {
        if wal_chain::read(&env.read_all(&wal_path(dir, m))?).synced {
            return Ok(Some(m));
        }
    }
    Ok(None)
}

/// What WAL replay leaves: the WALs to keep, and whether the recovered memtables are to be
/// flushed before the open returns.
pub(super) struct ReplayedWals {
    /// Replayed WALs that put an entry into a memtable.
    pub live_logs: Vec<u64>,
    /// The replayed writes span more than one WAL (and the open may write).
    pub flush_recovered: bool,
}

/// Replays the WALs into the keyspaces' memtables, from the oldest one a keyspace still
/// needs, and ends the history where `WalRecovery` and the WAL chain say it ends (cutting a
/// damaged log durably); then makes the replayed logs durable.
pub(super) fn replay(
    dir: &Path,
    env: &Env,
    opts: &Options,
    names: &[String],
    rec: &mut Recovered,
) -> Result<ReplayedWals> {
    let (sealed_from, features) = (rec.sealed_from, rec.features);
    let cores = &rec.cores;
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
                wal_path(dir, n),
                0,
                "WAL file number out of range",
            ));
        }
        rec.next_file = rec.next_file.max(n + 1);
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
            return Err(Error::corruption(wal_path(dir, w), 0, detail));
        }
        // Later WALs are emptied durably before anything newer exists, as when a WAL is cut
        // (`truncate_log`), but only once the check below has accepted this point in time
        // (a refused open changes nothing: emptying them first would lose WALs holding
        // synced writes).
        let later: Vec<u64> = replay.iter().copied().filter(|&n| n > w).collect();
        replay.retain(|&n| n < w);
        ends_before_missing = Some((w, detail, later));
    }
    let mut live_logs = Vec::new();
    // Replayed logs that put at least one entry into a memtable: the others hold nothing a
    // keyspace still needs (empty, or only writes already in tables) and are removed below,
    // once the new manifest is durable. Kept, they would pile up: a log per open while
    // nothing was flushed, every one replayed by every later open.
    let mut needed_logs: HashSet<u64> = HashSet::new();
    // The largest sequence number replayed so far (entries of flushed keyspaces included).
    let mut replayed_max = 0u64;
    'logs: for (i, &n) in replay.iter().enumerate() {
        let path = wal_path(dir, n);
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
                rec.last_seq = rec.last_seq.max(s);
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
                    *g = SuperVersion::new(
                        Arc::new(Memtable::for_layout(
                            &ks.kind,
                            n,
                            ks.opts().write_buffer_bytes,
                        )),
                        Vec::new(),
                        g.version.clone(),
                    );
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
                    if let Some(m) = first_synced_log(env, dir, later)? {
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
            if let Some(ahead) = table_ahead(cores, n, replayed_max) {
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
                truncate_log(env, dir, n, &data, offset, later)?;
            }
            break 'logs;
        }
    }
    if let Some((w, detail, later)) = ends_before_missing {
        // As at a cut: a keyspace whose log number is above the missing WAL may hold, in its
        // tables, writes from after it. The writes before the end are those replayed and those
        // in the tables of keyspaces flushed only up to the missing WAL (were only replayed
        // writes counted, with nothing replayed every table would count as later, and a copy
        // without its WALs would never open).
        let before_end = cores
            .values()
            .filter(|k| k.log_number.load(Ordering::SeqCst) <= w)
            .flat_map(|k| k.sv().version.files())
            .map(|f| f.meta.max_seq)
            .fold(replayed_max, u64::max);
        if let Some(ahead) = table_ahead(cores, w, before_end) {
            return Err(Error::corruption(
                wal_path(dir, w),
                0,
                format!(
                    "{detail}; point-in-time recovery would end the history before it, but {ahead}"
                ),
            ));
        }
        if !opts.read_only {
            empty_logs(env, dir, &later)?;
        }
    }
    // The replayed logs may hold writes that reached only the page cache before a process
    // crash: make them durable before a new WAL can hold synced writes, or a later power loss
    // could keep those and lose these (a hole in the history).
    if !opts.read_only {
        for &n in &live_logs {
            env.sync_file(&wal_path(dir, n))?;
        }
    }
    let flush_recovered = !opts.read_only && needed_logs.len() > 1;
    live_logs.retain(|n| needed_logs.contains(n));
    Ok(ReplayedWals {
        live_logs,
        flush_recovered,
    })
}
