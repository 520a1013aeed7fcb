//! Recovery's last step: once the new manifest is durable, the files nobody needs go — old
//! manifests, temp files, tables no version names, WALs holding nothing still needed. Only
//! files of the kinds Scree writes are ever removed.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::fs::Env;
use crate::manifest;
use crate::table_format::is_table_ext;

use crate::db::{parse_file_name, KsCore};

/// Removes what the new manifest `manifest_no` and the WALs `live_logs` do not need.
/// Failures are ignored: a file left is removed by a later open.
pub(super) fn remove_unneeded_files(
    env: &Env,
    dir: &Path,
    names: &[String],
    cores: &HashMap<u32, Arc<KsCore>>,
    live_logs: &[u64],
    manifest_no: u64,
) {
    let live_tables: HashSet<String> = cores
        .values()
        .flat_map(|k| k.sv().version.files())
        .map(|f| format!("{:06}.{}", f.meta.file_no, f.ext))
        .collect();
    let live_log_set: HashSet<u64> = live_logs.iter().copied().collect();
    for name in names {
        let remove = if let Some(n) = name.strip_prefix("MANIFEST-") {
            // Only manifests Scree wrote (`MANIFEST-` and a number), not a user's
            // `MANIFEST-backup`.
            n.parse::<u64>().is_ok_and(|n| n != manifest_no)
        } else if name == "LOCK" || name == manifest::CURRENT {
            false
        } else if let Some((n, ext)) = parse_file_name(name) {
            // Only the kinds of file Scree writes: anything else in the directory is not ours
            // (opening a directory that is not a database must not delete files such as
            // `2023.csv`).
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
}
