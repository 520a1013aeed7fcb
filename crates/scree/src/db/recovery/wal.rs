use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::fs::Env;
use crate::stats::WriteCause;
use crate::wal_chain;

use crate::db::{wal_path, KsCore};

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
