//! The manifest: a log of [`edit::Edit`] records (record format of `log`) naming every live
//! table and layout record, plus `CURRENT`, which names the manifest in use. The manifest is
//! rolled over to a fresh snapshot when it grows past `Options::max_manifest_bytes`.

pub mod edit;

use std::path::{Path, PathBuf};

use crate::coding::crc;
use crate::error::{Error, Result};
use crate::fs::Env;
use crate::log::{self, LogEnd, LogWriter};
use crate::stats::WriteCause;
use edit::Edit;
pub use edit::{FEATURE_LOG_NUMBERS_EXIST, KNOWN_FEATURES};

/// Name of the file that names the current manifest.
pub const CURRENT: &str = "CURRENT";

/// Path of manifest number `n`.
pub fn manifest_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("MANIFEST-{n:06}"))
}

/// Reads `CURRENT`: the number of the manifest in use.
pub fn read_current(env: &Env, dir: &Path) -> Result<u64> {
    let path = dir.join(CURRENT);
    let data = env.read_all(&path)?;
    let bad = |d: &str| Error::corruption(&path, 0, d.to_string());
    let text = std::str::from_utf8(&data).map_err(|_| bad("CURRENT is not UTF-8"))?;
    let line = text
        .strip_suffix('\n')
        .ok_or_else(|| bad("CURRENT lacks its newline"))?;
    let (name, sum) = line
        .split_once(' ')
        .ok_or_else(|| bad("CURRENT lacks its checksum"))?;
    let want = u32::from_str_radix(sum, 16).map_err(|_| bad("CURRENT checksum is not hex"))?;
    if crc(name.as_bytes()) != want || sum.len() != 8 {
        return Err(bad("CURRENT checksum mismatch"));
    }
    let n = name
        .strip_prefix("MANIFEST-")
        .and_then(|n| n.parse::<u64>().ok())
        .ok_or_else(|| bad("CURRENT does not name a manifest"))?;
    Ok(n)
}

/// Points `CURRENT` at manifest `n` (write temp, sync, rename, sync directory).
pub fn write_current(env: &Env, dir: &Path, n: u64) -> Result<()> {
    let name = format!("MANIFEST-{n:06}");
    let text = format!("{name} {:08x}\n", crc(name.as_bytes()));
    let tmp = dir.join(format!("{n:06}.dbtmp"));
    let mut w = env.create(&tmp, WriteCause::Metadata)?;
    w.append(text.as_bytes())?;
    w.sync()?;
    drop(w);
    // The manifest's directory entry (and the temporary file's) must be durable before the
    // rename can be: a file system may write directory entries back out of order, and a power
    // loss could otherwise keep the new CURRENT and lose the manifest it names, and the
    // database would not open (found with `FaultFs`'s out-of-order directory mode, session
    // 22). LevelDB syncs the directory when it syncs a manifest for the same reason.
    env.sync_dir(dir)?;
    env.rename(&tmp, &dir.join(CURRENT))?;
    env.sync_dir(dir)
}

/// Reads every edit of a manifest. A torn tail is dropped (the engine writes a fresh manifest
/// at open); any other bad record is corruption.
pub fn read_manifest(env: &Env, path: &Path) -> Result<Vec<Edit>> {
    let data = env.read_all(path)?;
    let (records, end) = log::read_records(&data);
    if let Some(e) = log::corrupt_error(path, &end) {
        return Err(e);
    }
    let mut out = Vec::with_capacity(records.len());
    let mut offset = 0u64;
    for r in records {
        let e = Edit::decode(r).map_err(|(o, d)| {
            // A field this build cannot read, in an edit naming features it does not know:
            // written by a newer build, not damaged.
            if let Some(f) = Edit::leading_features(r).filter(|f| f & !KNOWN_FEATURES != 0) {
                return Error::Unsupported(format!(
                    "{} needs format features {:#x} this build does not read (written by a newer build)",
                    path.display(),
                    f & !KNOWN_FEATURES
                ));
            }
            Error::corruption(
                path,
                offset + log::HEADER as u64 + o as u64,
                format!("manifest edit: {d}"),
            )
        })?;
        offset += (log::HEADER + r.len()) as u64;
        out.push(e);
    }
    if out.is_empty() {
        // The first record (the snapshot) is synced before CURRENT names the manifest: a
        // manifest without it is corrupt, not empty (an empty state would delete every table).
        let offset = match &end {
            LogEnd::TornTail { offset } | LogEnd::Corrupt { offset, .. } => *offset,
            LogEnd::Clean => 0,
        };
        return Err(Error::corruption(
            path,
            offset,
            "manifest has no valid snapshot record",
        ));
    }
    if let LogEnd::TornTail { .. } = end {
        // Accepted: the edit being written when the process stopped was never acknowledged.
    }
    Ok(out)
}

/// The manifest being appended to.
pub struct ManifestWriter {
    /// Its number.
    pub number: u64,
    log: LogWriter,
    /// Bytes of the snapshot record it starts with.
    snapshot_len: u64,
    /// Edits appended after the snapshot.
    edits: u64,
}

/// Edits after which a manifest whose snapshot alone reaches `max_manifest_bytes` is rolled
/// over even before it doubles. Recovery applies every edit to a version of the whole store
/// (each apply costs time linear in its tables), and the edits a doubling takes grow with the
/// snapshot too: replay was quadratic in the number of tables (≈ 190 s for 100k tables and
/// the 25k flush edits a doubling holds; `examples/scale_probe.rs`). A bound keeps recovery
/// linear, for one snapshot rewrite per this many flushes and compactions (a few KB per edit
/// at 100k tables, each edit writing megabytes of tables).
pub const MAX_EDITS_PER_LARGE_MANIFEST: u64 = 1000;

impl ManifestWriter {
    /// The manifest of a database opened read-only: manifest `number` stays as it is, and an
    /// edit logged through this writer fails (`Env::refusing_writer`).
    pub fn refusing(env: &Env, dir: &Path, number: u64) -> Self {
        ManifestWriter {
            number,
            log: LogWriter::new(
                env.refusing_writer(&manifest_path(dir, number), WriteCause::Metadata),
            ),
            snapshot_len: 0,
            edits: 0,
        }
    }

    /// Creates manifest `number` holding `snapshot`, synced, and points CURRENT at it.
    pub fn create(env: &Env, dir: &Path, number: u64, snapshot: &Edit) -> Result<Self> {
        let w = env.create(&manifest_path(dir, number), WriteCause::Metadata)?;
        let mut log = LogWriter::new(w);
        log.add_record(&snapshot.encode())?;
        log.sync()?;
        write_current(env, dir, number)?;
        let snapshot_len = log.len();
        Ok(ManifestWriter {
            number,
            log,
            snapshot_len,
            edits: 0,
        })
    }

    /// Whether the manifest should be rolled over to a fresh snapshot: once it is `max` bytes
    /// and either twice its snapshot or [`MAX_EDITS_PER_LARGE_MANIFEST`] edits past it. A
    /// snapshot alone larger than `max` (a store of many tables) would otherwise be rewritten
    /// whole after every flush and compaction; the edit bound keeps recovery from replaying a
    /// number of edits that grows with the store.
    pub fn due_for_roll_over(&self, max: u64) -> bool {
        self.len() >= max
            && (self.len() >= self.snapshot_len.saturating_mul(2)
                || self.edits >= MAX_EDITS_PER_LARGE_MANIFEST)
    }

    /// Appends and syncs one edit.
    pub fn append(&mut self, e: &Edit) -> Result<()> {
        self.log.add_record(&e.encode())?;
        self.edits += 1;
        self.log.sync()
    }

    /// Current size in bytes.
    pub fn len(&self) -> u64 {
        self.log.len()
    }

    /// Whether the manifest is empty.
    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }
}

#[cfg(test)]
mod feature_tests {
    use std::sync::Arc;

    use super::edit::{Edit, KsEdit};
    use super::{manifest_path, read_manifest, KNOWN_FEATURES};
    use crate::error::Error;
    use crate::fs::{std_fs::StdFs, Env};
    use crate::log::frame;

    /// An edit with a field this build cannot decode is `Unsupported` when its leading
    /// features name a bit this build does not know (a newer build's record), and
    /// `Corruption` otherwise.
    #[test]
    fn an_undecodable_edit_naming_unknown_features_is_unsupported_not_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Env {
            fs: Arc::new(StdFs),
            stats: Arc::default(),
            direct_reads: false,
            mmap_reads: false,
        };
        let snapshot = Edit {
            next_file_no: Some(5),
            features: Some(KNOWN_FEATURES),
            ..Default::default()
        };
        for (features, unsupported) in [(KNOWN_FEATURES, false), (1 << 40, true)] {
            let mut next = Edit {
                next_file_no: Some(6),
                features: Some(features),
                keyspaces: vec![KsEdit::new(1)],
                ..Default::default()
            }
            .encode();
            // The keyspace edit (last field, 3 bytes: tag 5, length 1, id 1) gets a field of
            // an unknown tag.
            let n = next.len();
            next[n - 2] = 2;
            next.push(99);
            let mut bytes = frame(1, &snapshot.encode());
            bytes.extend_from_slice(&frame(1, &next));
            let path = manifest_path(dir.path(), 7);
            std::fs::write(&path, bytes).expect("write");
            match (read_manifest(&env, &path), unsupported) {
                (Err(Error::Unsupported(m)), true) => assert!(m.contains("0x10000000000"), "{m}"),
                (Err(Error::Corruption { detail, .. }), false) => {
                    assert!(detail.contains("unknown keyspace edit tag 99"), "{detail}")
                }
                (other, _) => panic!("features {features:#x}: {other:?}"),
            }
        }
    }
}

#[cfg(test)]
mod roll_over_tests {
    use std::sync::Arc;

    use super::edit::{Edit, KsEdit};
    use super::{ManifestWriter, MAX_EDITS_PER_LARGE_MANIFEST};
    use crate::fs::{std_fs::StdFs, Env};

    fn env() -> Env {
        Env {
            fs: Arc::new(StdFs),
            stats: Arc::default(),
            direct_reads: false,
            mmap_reads: false,
        }
    }

    /// An edit of about `n` bytes (removed table numbers).
    fn edit(n: usize) -> Edit {
        let mut k = KsEdit::new(1);
        k.removed = (0..n as u64 / 2).map(|i| i + 1).collect();
        Edit {
            keyspaces: vec![k],
            ..Default::default()
        }
    }

    /// Guards against a manifest whose snapshot alone passes `max_manifest_bytes` being rolled
    /// over only once it doubles, after a number of edits that grows with the store: recovery
    /// replays every one of them against the whole version (quadratic).
    #[test]
    fn a_large_manifest_rolls_over_after_a_bounded_number_of_edits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = env();
        let max = 4096;
        // A snapshot of ~64 KiB, far above `max`; edits of ~8 bytes would take 8k to double it.
        let mut w = ManifestWriter::create(&env, dir.path(), 7, &edit(64 << 10)).expect("create");
        let snapshot = w.len();
        for i in 0..MAX_EDITS_PER_LARGE_MANIFEST {
            assert!(
                !w.due_for_roll_over(max),
                "due after {i} edits, {} bytes",
                w.len()
            );
            w.append(&edit(8)).expect("append");
        }
        assert!(
            w.len() < 2 * snapshot,
            "the test must not reach the doubling rule: {} bytes after a snapshot of {snapshot}",
            w.len()
        );
        assert!(w.due_for_roll_over(max));
    }

    /// A small store's manifest still waits for `max_manifest_bytes`, however many edits.
    #[test]
    fn a_small_manifest_is_not_rolled_over_for_its_edit_count() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = env();
        let mut w = ManifestWriter::create(&env, dir.path(), 7, &edit(16)).expect("create");
        for _ in 0..MAX_EDITS_PER_LARGE_MANIFEST + 10 {
            w.append(&edit(8)).expect("append");
        }
        assert!(w.len() < 1 << 20);
        assert!(!w.due_for_roll_over(1 << 20));
    }
}
