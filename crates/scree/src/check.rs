//! Offline consistency check of a database directory (`scree check`): reads every byte the
//! database depends on without opening it (nothing is written, recovered or removed).
//!
//! Checked: `CURRENT` (format and checksum); every record of the manifest it names (checksums,
//! edit decoding, replay into each keyspace's layout); every file the manifest names exists with
//! the recorded size, and every block of it is read and verified by its format's entry in
//! [`crate::table_format`] (sorted tables: footer, index, filter and every data block, keys
//! strictly increasing and inside the recorded key range, the recorded entry count; HTables:
//! footer, metadata, filters and every bucket; BloomCluster files: trailer and every block);
//! every record of every live WAL (checksums and batch decoding); each layout's invariants; and
//! that a read finds every table entry: each one is looked up through its keyspace's layout at
//! its own sequence number, as a get at that snapshot would (which guard, container or level,
//! then the filters, index, bucket and migration metadata), and must come back as itself. A
//! table the layout files where reads do not look, or a filter or index that misses a key, would
//! answer "absent" for data that is there, with every checksum right. A torn tail at the end of
//! the newest WAL or of the manifest is what a crash leaves and recovery drops: it is not a
//! problem.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch;
use crate::cache::BlockCache;
use crate::error::{Error, Result};
use crate::fs::std_fs::StdFs;
use crate::fs::{Env, FileSystem};
use crate::key;
use crate::layout::{self, LayoutVersion};
use crate::log::{self, LogEnd};
use crate::manifest::{self, edit::Edit};
use crate::memtable::Lookup;
use crate::options::Layout as LayoutKind;
use crate::stats::IoStats;
use crate::table::{TableCtx, TableFile};
use crate::table_format::{self, Description, EntryVisitor, Verified};
use crate::wal_chain;

/// One thing wrong with a database, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file holding the bad bytes (the directory for whole-database problems).
    pub file: PathBuf,
    /// Byte offset of the bad record or block (0 when not about one place).
    pub offset: u64,
    /// What is wrong.
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at offset {}: {}",
            self.file.display(),
            self.offset,
            self.detail
        )
    }
}

/// One keyspace as the manifest describes it.
struct KsView {
    id: u32,
    name: String,
    version: Arc<dyn LayoutVersion>,
    /// Oldest WAL that may hold its unflushed writes.
    log_number: u64,
}

/// What the check looked at, besides the problems it found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Everything wrong.
    pub problems: Vec<Problem>,
    /// Observations that are not problems (a torn WAL tail, files recovery will remove).
    pub notes: Vec<String>,
    /// Files read.
    pub files: u64,
    /// Log records (manifest and WAL) verified.
    pub records: u64,
    /// Table blocks (data blocks, buckets) verified.
    pub blocks: u64,
    /// Entries read from tables and WALs.
    pub entries: u64,
    /// Table entries looked up through their keyspace's layout and found as themselves.
    pub lookups: u64,
    /// Each keyspace's name and the shape of its layout as the manifest describes it.
    pub levels: Vec<(String, Vec<crate::stats::LevelStats>)>,
    /// Each sound file the manifest names, described by its format
    /// ([`CheckOptions::describe`]).
    pub described: Vec<(PathBuf, Description)>,
}

impl Report {
    fn problem(&mut self, file: impl Into<PathBuf>, offset: u64, detail: impl Into<String>) {
        self.problems.push(Problem {
            file: file.into(),
            offset,
            detail: detail.into(),
        });
    }
    fn error(&mut self, fallback: &Path, e: Error) {
        match e {
            Error::Corruption {
                file,
                offset,
                detail,
            } => self.problem(file, offset, detail),
            Error::Io { path, source } => self.problem(path, 0, format!("I/O error: {source}")),
            other => self.problem(fallback, 0, other.to_string()),
        }
    }
}

/// Checks the database at `path` on the real file system; `Ok` with the problems found (empty
/// when the database is sound). `Err` only when the directory cannot be read at all.
pub fn check_db(path: impl AsRef<Path>) -> Result<Vec<Problem>> {
    Ok(check_dir(path.as_ref(), Arc::new(StdFs))?.problems)
}

/// What [`check_dir_with`] does beyond reading and verifying every byte.
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// Look every table entry up through its keyspace's layout (default true). It costs about
    /// 2 µs per sorted-table entry and 4 µs per HTable entry here, several times the rest of the
    /// check; without it a table the layout files where reads do not look goes unnoticed.
    pub lookups: bool,
    /// Describe every sound file the manifest names ([`Report::described`]; default false).
    pub describe: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            lookups: true,
            describe: false,
        }
    }
}

/// [`check_db`] on any file system, with the full report.
pub fn check_dir(dir: &Path, fs: Arc<dyn FileSystem>) -> Result<Report> {
    check_dir_with(dir, fs, CheckOptions::default())
}

/// [`check_dir`] with options.
pub fn check_dir_with(dir: &Path, fs: Arc<dyn FileSystem>, opts: CheckOptions) -> Result<Report> {
    let env = Env {
        fs,
        stats: Arc::new(IoStats::default()),
        direct_reads: false,
        mmap_reads: false,
    };
    let tables = Arc::new(TableCtx {
        env: env.clone(),
        // Entries are looked up in file order, so consecutive lookups mostly read the block
        // the previous one read; blocks enter the cache only after their checksum is verified.
        cache: BlockCache::new(8 << 20),
        dir: dir.to_path_buf(),
        // Every table is read once, in turn: none needs to stay open.
        open: crate::table::OpenTables::new(64),
        purge: crate::table::purge::Purger::inline(),
        compaction_wanted: Default::default(),
    });
    let mut rep = Report::default();
    let names = env.list(dir)?;

    // CURRENT and the manifest.
    let mut versions: Vec<KsView> = Vec::new();
    let current = dir.join(manifest::CURRENT);
    let manifest_no = if env.fs.exists(&current) {
        rep.files += 1;
        match manifest::read_current(&env, dir) {
            Ok(n) => Some(n),
            Err(e) => {
                rep.error(&current, e);
                None
            }
        }
    } else {
        let data = names.iter().find(|n| {
            n.rsplit_once('.').is_some_and(|(num, ext)| {
                num.parse::<u64>().is_ok()
                    && (table_format::is_table_ext(ext)
                        || (ext == "log"
                            && crate::db::log_may_hold_data(
                                env.fs.as_ref(),
                                &dir.join(n.as_str()),
                            )))
            })
        });
        if let Some(f) = data {
            // Db::open refuses this directory too (its data would otherwise be lost).
            rep.problem(
                &current,
                0,
                format!("CURRENT is missing but the directory holds database files ({f})"),
            );
        } else if names.iter().any(|n| n.starts_with("MANIFEST-")) {
            // CURRENT is written last when a database is created: manifests without it or any
            // data are a creation that did not finish, which Db::open starts afresh.
            rep.notes.push(
                "no CURRENT, manifests but no data: a creation that did not finish \
                 (the next open starts afresh)"
                    .into(),
            );
        } else {
            rep.notes
                .push("no CURRENT: not a database (or never created)".into());
        }
        None
    };
    // WALs from this number on are sealed when retired (`wal_chain`); none without a manifest
    // that says so.
    let mut sealed_from = u64::MAX;
    let mut features = 0;
    if let Some(n) = manifest_no {
        (sealed_from, features) = check_manifest(dir, &env, &tables, n, &mut rep, &mut versions);
    }
    // Log numbers of a manifest read only in part say nothing about which WALs must exist.
    let manifest_sound = rep.problems.is_empty();

    // Every file the manifest names.
    let mut named = std::collections::HashSet::new();
    for k in &versions {
        let (ks, v) = (&k.name, &k.version);
        for f in v.files() {
            let name = format!("{:06}.{}", f.meta.file_no, f.ext);
            if !named.insert(name.clone()) {
                rep.problem(dir, 0, format!("keyspace {ks}: {name} is named twice"));
            }
            check_file(&env, &f, opts, &mut rep);
        }
        for f in v.files() {
            let path = f.path();
            let for_each = table_format::by_ext(f.ext).and_then(|t| t.for_each);
            // A damaged file is reported once, by `check_file`.
            if let Some(for_each) = for_each.filter(|_| opts.lookups) {
                if !rep.problems.iter().any(|p| p.file == path) {
                    if let Err(e) = check_lookups(v.as_ref(), &f, for_each, &mut rep) {
                        rep.error(&path, e);
                    }
                }
            }
        }
        if let Err(d) = v.check_invariants() {
            rep.problem(dir, 0, format!("keyspace {ks}: layout invariant: {d}"));
        }
        // Metadata files that are sound on their own but do not match their records (a
        // BloomCluster of another container); a damaged file is already reported.
        for e in v.verify_metadata_files() {
            let file = match &e {
                Error::Corruption { file, .. } => Some(file.clone()),
                Error::Io { path, .. } => Some(path.clone()),
                _ => None,
            };
            if !file.is_some_and(|f| rep.problems.iter().any(|p| p.file == f)) {
                rep.error(dir, e);
            }
        }
        rep.levels.push((ks.clone(), v.level_stats()));
    }

    // WALs that recovery would replay.
    let min_log = versions.iter().map(|k| k.log_number).min().unwrap_or(0);
    let mut logs: Vec<u64> = names
        .iter()
        .filter_map(|n| {
            let (num, ext) = n.split_once('.')?;
            (ext == "log").then(|| num.parse().ok()).flatten()
        })
        .collect();
    logs.sort_unstable();
    // As recovery: the WALs the manifest says exist must be there.
    let log_numbers: Vec<(String, u64)> = versions
        .iter()
        .map(|k| (k.name.clone(), k.log_number))
        .collect();
    let missing = wal_chain::missing_required(&logs, &log_numbers, sealed_from, features);
    if let Some((w, detail)) = missing.filter(|_| manifest_sound) {
        rep.problem(dir.join(format!("{w:06}.log")), 0, detail);
    }
    let live: Vec<u64> = logs.iter().copied().filter(|&n| n >= min_log).collect();
    let known: Option<Vec<u32>> = manifest_no.map(|_| versions.iter().map(|k| k.id).collect());
    // The largest sequence number replayed so far, as recovery counts it.
    let mut replayed_max = 0u64;
    for (i, &n) in live.iter().enumerate() {
        let later = live.get(i + 1..).unwrap_or_default();
        let chain = WalChain { sealed_from, later };
        let ends = check_wal(
            dir,
            &env,
            n,
            chain,
            known.as_deref(),
            &mut replayed_max,
            &mut rep,
        );
        if let Some(offset) = ends {
            // Recovery cuts the history here, and refuses to open if a keyspace flushed past
            // this WAL holds later writes in a table: no point in time is consistent.
            for k in versions.iter().filter(|k| k.log_number > n) {
                let files = k.version.files();
                if let Some(f) = files.iter().find(|f| f.meta.max_seq > replayed_max) {
                    rep.problem(
                        dir.join(format!("{n:06}.log")),
                        offset,
                        format!(
                            "recovery would end the WAL history here, but keyspace {:?} \
                             already holds later writes (table {:06}, sequence {} > {}): \
                             no consistent point in time",
                            k.name, f.meta.file_no, f.meta.max_seq, replayed_max
                        ),
                    );
                }
            }
            // Recovery drops the later logs (the note says why).
            break;
        }
    }
    for name in &names {
        let Some((num, ext)) = name.split_once('.') else {
            continue;
        };
        if num.parse::<u64>().is_err() {
            continue;
        }
        // The kinds of file the open removes when nothing names them (never a user's file).
        let stray = match ext {
            "log" => false,
            "dbtmp" => true,
            ext if table_format::is_table_ext(ext) => {
                manifest_no.is_some() && !named.contains(name)
            }
            _ => false,
        };
        if stray {
            rep.notes.push(format!(
                "{name}: not named by the manifest (removed at the next open)"
            ));
        }
    }
    Ok(rep)
}

/// Checks manifest `n`; returns its first sealed WAL (`u64::MAX`: none).
fn check_manifest(
    dir: &Path,
    env: &Env,
    tables: &Arc<TableCtx>,
    n: u64,
    rep: &mut Report,
    versions: &mut Vec<KsView>,
) -> (u64, u64) {
    let path = manifest::manifest_path(dir, n);
    let data = match env.read_all(&path) {
        Ok(d) => d,
        Err(e) => {
            rep.error(&path, e);
            return (u64::MAX, 0);
        }
    };
    rep.files += 1;
    let (records, end) = log::read_records(&data);
    let mut edits = Vec::new();
    let mut offset = 0u64;
    for r in records {
        rep.records += 1;
        match Edit::decode(r) {
            Ok(e) => edits.push((offset, e)),
            Err((o, d)) => rep.problem(
                &path,
                offset + log::HEADER as u64 + o as u64,
                format!("manifest edit: {d}"),
            ),
        }
        offset += (log::HEADER + r.len()) as u64;
    }
    match end {
        LogEnd::Clean if edits.is_empty() => {
            rep.problem(&path, 0, "manifest has no valid snapshot record")
        }
        LogEnd::Clean => {}
        LogEnd::TornTail { offset } if edits.is_empty() => {
            rep.problem(&path, offset, "manifest has no valid snapshot record")
        }
        LogEnd::TornTail { offset } => rep.notes.push(format!(
            "{}: torn tail at offset {offset} (dropped by recovery)",
            path.display()
        )),
        LogEnd::Corrupt { offset, detail } => rep.problem(&path, offset, detail),
    }
    let sealed_from = edits
        .iter()
        .rev()
        .find_map(|(_, e)| e.sealed_logs_from)
        .unwrap_or(u64::MAX);
    let features = edits
        .iter()
        .rev()
        .find_map(|(_, e)| e.features)
        .unwrap_or(0);
    if !rep.problems.is_empty() {
        // Replaying a manifest with a hole would report consequences, not causes.
        return (sealed_from, features);
    }
    let hash_key = edits.iter().find_map(|(_, e)| e.hash_key);
    if hash_key.is_none() && edits.iter().any(|(_, e)| !e.new_keyspaces.is_empty()) {
        rep.problem(
            &path,
            0,
            "manifest defines keyspaces but records no placement-hash key",
        );
        return (sealed_from, features);
    }
    let hash_key = hash_key.unwrap_or_default();
    let mut ks: HashMap<u32, KsView> = HashMap::new();
    for (off, e) in &edits {
        for d in &e.new_keyspaces {
            if ks.contains_key(&d.id) {
                continue;
            }
            if ks.values().any(|k| k.name == d.name) {
                rep.problem(&path, *off, format!("two keyspaces named {:?}", d.name));
            }
            let Some(kind) = LayoutKind::decode(&d.layout) else {
                rep.problem(
                    &path,
                    *off,
                    format!("keyspace {:?}: unknown layout", d.name),
                );
                continue;
            };
            match layout::new_layout(kind) {
                Ok(l) => {
                    let v = l.empty_version_with_key(tables, hash_key);
                    ks.insert(
                        d.id,
                        KsView {
                            id: d.id,
                            name: d.name.clone(),
                            version: v,
                            log_number: 0,
                        },
                    );
                }
                Err(e) => rep.problem(&path, *off, format!("keyspace {:?}: {e}", d.name)),
            }
        }
        for k in &e.keyspaces {
            let Some(entry) = ks.get_mut(&k.id) else {
                rep.problem(&path, *off, format!("edit for unknown keyspace {}", k.id));
                continue;
            };
            match entry.version.apply(k, tables) {
                Ok(v) => entry.version = v,
                Err(err) => rep.problem(
                    &path,
                    *off,
                    format!("keyspace {}: edit does not apply: {err}", entry.name),
                ),
            }
            if let Some(n) = k.log_number {
                entry.log_number = n;
            }
        }
    }
    let mut all: Vec<KsView> = ks.into_values().collect();
    all.sort_by_key(|k| k.id);
    versions.extend(all);
    (sealed_from, features)
}

/// Checks the file `f` names by its format's [`table_format::TableFormat::verify`].
fn check_file(env: &Env, f: &Arc<TableFile>, opts: CheckOptions, rep: &mut Report) {
    let path = f.path();
    let size = match env.fs.file_size(&path) {
        Ok(s) => s,
        Err(_) => {
            rep.problem(&path, 0, "named by the manifest but missing");
            return;
        }
    };
    rep.files += 1;
    let recorded = f.meta.size;
    // BloomCluster files record no size (they are rewritten whole). An appendable table may
    // be longer than the end its version names (bytes of a switch not installed), never
    // shorter.
    let appendable = f.meta.append.is_some();
    if recorded != 0 && (size < recorded || (size > recorded && !appendable)) {
        rep.problem(
            &path,
            size.min(recorded),
            format!("file is {size} bytes, the manifest says {recorded}"),
        );
        return;
    }
    let Some(format) = table_format::by_ext(f.ext) else {
        rep.problem(
            &path,
            0,
            format!("no table format is registered for .{}", f.ext),
        );
        return;
    };
    let mut found = Verified::default();
    let r = (format.verify)(f, &mut found);
    rep.blocks += found.blocks;
    rep.entries += found.entries;
    for e in found.problems {
        rep.error(&path, e);
    }
    match r {
        Err(e) => rep.error(&path, e),
        Ok(()) if opts.describe => match (format.describe)(env, &path) {
            Ok(d) => rep.described.push((path, d)),
            Err(e) => rep.error(&path, e),
        },
        Ok(()) => {}
    }
}

/// Looks every entry of table `f` up through `v` at the entry's own sequence number. The newest
/// version visible there is the entry itself, with one exception: the trie writes every
/// version that all snapshots see with sequence number 0 at any depth (its structure, not the
/// sequence numbers, orders versions between tables), so a newer version of the key with
/// sequence number 0 hides the entry from lookups at every snapshot. A different answer is
/// therefore accepted only when it is what a lookup at sequence number 0 finds (the newest
/// zeroed version); "absent" never is. A misfiled entry whose key has a newer zeroed version
/// elsewhere can go unnoticed; one whose key has no other version cannot.
fn check_lookups(
    v: &dyn LayoutVersion,
    f: &Arc<TableFile>,
    for_each: fn(&TableFile, EntryVisitor<'_>) -> Result<()>,
    rep: &mut Report,
) -> Result<()> {
    let path = f.path();
    let mut bad = 0u64;
    let mut first: Option<String> = None;
    let mut visit = |ikey: &[u8], value: &[u8]| -> Result<()> {
        let p = key::parse(ikey);
        let want = match key::ValueKind::from_u8(p.kind) {
            Some(key::ValueKind::Put) => Lookup::Value(value.to_vec()),
            Some(key::ValueKind::Delete) => Lookup::Deleted,
            // Reported by the table's own check.
            None => return Ok(()),
        };
        let got = v.get(p.user_key, p.seq)?;
        rep.lookups += 1;
        let hidden_by_a_zeroed_version =
            || -> Result<bool> { Ok(got != Lookup::Absent && v.get(p.user_key, 0)? == got) };
        if got != want && !hidden_by_a_zeroed_version()? {
            bad += 1;
            if first.is_none() {
                let found = match got {
                    Lookup::Absent => "nothing",
                    Lookup::Deleted => "a tombstone",
                    Lookup::Value(_) => "another value",
                };
                first = Some(format!(
                    "{:?} at sequence number {}: the lookup found {found}",
                    String::from_utf8_lossy(p.user_key),
                    p.seq
                ));
            }
        }
        Ok(())
    };
    for_each(f, &mut visit)?;
    if let Some(e) = first {
        rep.problem(
            &path,
            0,
            format!(
                "{bad} entries that a read at their sequence number does not find (first: {e})"
            ),
        );
    }
    Ok(())
}

/// Where a WAL stands in the chain recovery replays.
#[derive(Clone, Copy)]
struct WalChain<'a> {
    /// The manifest's first sealed WAL.
    sealed_from: u64,
    /// The WALs recovery would replay after this one.
    later: &'a [u64],
}

/// Checks WAL `n`, raising `replayed_max` to the largest sequence number it replays; returns
/// the offset where recovery's history ends in it, if it does (the later WALs would be
/// dropped; for the newest WAL, a torn tail).
fn check_wal(
    dir: &Path,
    env: &Env,
    n: u64,
    chain: WalChain<'_>,
    keyspaces: Option<&[u32]>,
    replayed_max: &mut u64,
    rep: &mut Report,
) -> Option<u64> {
    let path = dir.join(format!("{n:06}.log"));
    let data = match env.read_all(&path) {
        Ok(d) => d,
        Err(e) => {
            rep.error(&path, e);
            return None;
        }
    };
    rep.files += 1;
    let file = wal_chain::read(&data);
    for &(ty, r, offset) in &file.batches {
        rep.records += 1;
        match batch::decode(ty, r) {
            Ok((seq, entries)) => {
                if let Some(last) = (entries.len() as u64).checked_sub(1) {
                    *replayed_max = (*replayed_max).max(seq.saturating_add(last));
                }
                rep.entries += entries.len() as u64;
                let unknown =
                    keyspaces.and_then(|known| entries.iter().find(|e| !known.contains(&e.ks)));
                if let Some(e) = unknown {
                    rep.problem(
                        &path,
                        offset,
                        format!("WAL names unknown keyspace {}", e.ks),
                    );
                }
            }
            Err((o, d)) => rep.problem(
                &path,
                offset + log::HEADER as u64 + o as u64,
                format!("WAL batch: {d}"),
            ),
        }
    }
    let newest = chain.later.is_empty();
    match wal_chain::judge(n, &file, chain.later.first().copied(), chain.sealed_from) {
        Ok(wal_chain::Next::Continue) => None,
        Ok(wal_chain::Next::EndsAt { offset, .. }) if newest => {
            rep.notes.push(format!(
                "{}: torn tail at offset {offset} (unacknowledged or unsynced writes, dropped by recovery)",
                path.display()
            ));
            Some(offset)
        }
        Ok(wal_chain::Next::EndsAt { offset, why }) => {
            // As recovery judges it: a later WAL recording a completed sync means this one
            // was durable whole.
            let synced = chain.later.iter().copied().find(|&m| {
                env.read_all(&dir.join(format!("{m:06}.log")))
                    .is_ok_and(|d| wal_chain::read(&d).synced)
            });
            match synced {
                Some(m) => rep.problem(
                    &path,
                    offset,
                    format!(
                        "{why}; but WAL {m:06} records a completed sync, which syncs every \
                         older WAL first: durable writes are missing"
                    ),
                ),
                None => rep.notes.push(format!(
                    "{}: the history ends at offset {offset}: {why} (a power loss before the \
                     retired WAL was synced); recovery drops the later WALs {:?}, which hold \
                     only writes acknowledged without a sync",
                    path.display(),
                    chain.later
                )),
            }
            Some(offset)
        }
        Err((offset, detail)) => {
            rep.problem(&path, offset, detail);
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::field_reassign_with_default)]
mod tests {
    use super::*;
    use crate::testing::fault::FaultFs;
    use crate::{Db, KeyspaceOptions, Layout, Options};

    /// Options of a database on `fs` with one background thread.
    fn fault_opts(fs: &FaultFs) -> Options {
        let mut o = Options::default();
        o.fs = Some(fs.as_dyn());
        o.background_threads = 1;
        o
    }

    #[test]
    fn a_sound_database_has_no_problems_and_flipped_bytes_are_found() {
        let fs = FaultFs::new(1);
        let o = fault_opts(&fs);
        {
            let db = Db::open("/db", o.clone()).expect("open");
            let mut ko = KeyspaceOptions::new(Layout::Leveled);
            ko.block_size = 256;
            let ks = db.keyspace("k", ko).expect("keyspace");
            for i in 0..300u32 {
                ks.put(format!("key{i:05}"), vec![b'v'; 50]).expect("put");
            }
            db.flush().expect("flush");
            for i in 0..20u32 {
                ks.put(format!("late{i:05}"), b"x").expect("put");
            }
        }
        let rep = check_dir(Path::new("/db"), fs.as_dyn()).expect("check");
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert!(rep.blocks > 10, "{rep:?}");
        let sst = fs
            .files()
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == crate::table::SORTED_EXT))
            .expect("a table");
        let mut b = fs.file_bytes(&sst).expect("bytes");
        b[100] ^= 0x40;
        fs.set_file_bytes(&sst, b);
        let problems = check_dir(Path::new("/db"), fs.as_dyn())
            .expect("check")
            .problems;
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].file, sst);
        assert!(problems[0].offset < 600, "{problems:?}");
    }

    /// `scree check -v` notes as "removed at the next open" only what the open removes: files
    /// of the kinds Scree writes that the manifest does not name, not any `<digits>.<ext>` file
    /// such as a user's `2023.csv` (which the open keeps).
    #[test]
    fn check_notes_only_files_the_next_open_removes() {
        let fs = FaultFs::new(3);
        let o = fault_opts(&fs);
        {
            let db = Db::open("/db", o.clone()).expect("open");
            let ks = db
                .keyspace("k", KeyspaceOptions::new(Layout::Leveled))
                .expect("keyspace");
            ks.put(b"a", b"1").expect("put");
            db.flush().expect("flush");
        }
        let user = Path::new("/db/2023.csv");
        let stray = Path::new("/db/000099.sst");
        fs.set_file_bytes(user, b"year,total\n".to_vec());
        fs.set_file_bytes(stray, b"not named".to_vec());
        let rep = check_dir(Path::new("/db"), fs.as_dyn()).expect("check");
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        let noted = |name: &str| rep.notes.iter().any(|n| n.starts_with(name));
        assert!(noted("000099.sst"), "{:?}", rep.notes);
        assert!(!noted("2023.csv"), "{:?}", rep.notes);
        // What the notes say is what the open does.
        drop(Db::open("/db", o).expect("reopen"));
        assert!(fs.file_bytes(user).is_some());
        assert!(fs.file_bytes(stray).is_none());
    }

    /// Manifests without `CURRENT` and with no data beside them are no problem for
    /// `scree check`, as `Db::open` takes them for a creation that did not finish and starts
    /// afresh. With data beside them both refuse.
    #[test]
    fn manifests_without_current_or_data_are_an_unfinished_creation() {
        let fs = FaultFs::new(5);
        let o = fault_opts(&fs);
        drop(Db::open("/db", o.clone()).expect("create"));
        fs.delete_file(Path::new("/db/CURRENT"));
        let rep = check_dir(Path::new("/db"), fs.as_dyn()).expect("check");
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
        assert!(
            rep.notes.iter().any(|n| n.contains("did not finish")),
            "{:?}",
            rep.notes
        );
        // What the check says is what the open does.
        drop(Db::open("/db", o).expect("reopen"));
    }
}
