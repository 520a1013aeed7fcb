//! Recovery's first steps: replaying the manifest into keyspaces and their versions, and
//! checking that every file it names is there exactly once.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::Env;
use crate::key;
use crate::layout;
use crate::manifest;
use crate::memtable::Memtable;
use crate::options::{KeyspaceOptions, Layout as LayoutKind, Options};
use crate::table::TableCtx;
use crate::table_format::is_table_ext;

use super::Recovered;
use crate::db::{log_may_hold_data, parse_file_name, wal_path, KsCore, SuperVersion, MAX_FILE_NO};

/// Replays the manifest `CURRENT` names (or finds that there is no database yet): the
/// keyspaces with their versions and log numbers, the file and sequence counters, the
/// placement-hash key. A directory holding data without `CURRENT` is `Corruption`.
pub(super) fn replay(
    dir: &Path,
    env: &Env,
    opts: &Options,
    tables: &Arc<TableCtx>,
    names: &[String],
) -> Result<Recovered> {
    let current = dir.join(manifest::CURRENT);
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
        let n = manifest::read_current(env, dir)?;
        old_manifest = Some(n);
        let path = manifest::manifest_path(dir, n);
        let edits = manifest::read_manifest(env, &path)?;
        // Hash-placed layouts need the key before their first version exists.
        hash_key = edits.iter().find_map(|e| e.hash_key);
        // Every manifest Scree writes records the key in its snapshot record. Without it a new
        // random key would place every lookup of a hash layout in the wrong containers: its
        // data would read as absent.
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
                // on the next open.
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
                let version = policy.empty_version_with_key(tables, hash_key.unwrap_or_default());
                cores.insert(
                    d.id,
                    // A placeholder memtable: replay or the move to the new WAL replaces it.
                    KsCore::new(
                        d.id,
                        d.name.clone(),
                        kopts,
                        policy,
                        Memtable::for_layout(&kind, 0, 0),
                        version,
                        0,
                    ),
                );
            }
            for k in &e.keyspaces {
                let ks = cores.get(&k.id).ok_or_else(|| {
                    Error::corruption(&path, 0, format!("edit for unknown keyspace {}", k.id))
                })?;
                let mut g = ks.sv.write();
                let v = g
                    .version
                    .apply(k, tables)
                    .map_err(|err| Error::corruption(&path, 0, err.to_string()))?;
                *g = SuperVersion::new(g.mem.clone(), Vec::new(), v);
                if let Some(n) = k.log_number {
                    ks.log_number.store(n, Ordering::SeqCst);
                }
            }
        }
    } else if let Some(found) = names.iter().find(|n| match parse_file_name(n) {
        // CURRENT is written last when a database is created: without it, manifests and
        // empty logs are the leftovers of a creation that did not finish (no write was ever
        // acknowledged), and the database starts afresh. Any data means CURRENT was lost, and
        // starting afresh would delete it (a directory whose CURRENT and manifest are gone
        // would reopen empty, its tables deleted).
        Some((num, "log")) => log_may_hold_data(env.fs.as_ref(), &wal_path(dir, num)),
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
    Ok(Recovered {
        next_file,
        last_seq,
        hash_key,
        sealed_from,
        features,
        cores,
        old_manifest,
    })
}

/// Every file the manifest names must exist, and be named once: a table named by two
/// keyspaces (or twice by one) was accepted, and the first compaction of one deleted the
/// file the other still read. Raises the next file number past every named table.
pub(super) fn check_named_files(dir: &Path, names: &[String], r: &mut Recovered) -> Result<()> {
    let cores = &r.cores;
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
            r.next_file = r.next_file.max(f.meta.file_no + 1);
        }
    }
    Ok(())
}
