//! The chain of WAL files: whether recovery may go on from one WAL to the next.
//!
//! A WAL is retired at a memtable rotation by appending its seal (record type 4, naming the WAL
//! started after it), without a sync: the writer does not wait for the disk. The retired log is
//! synced later, before the flush of its memtable or before the next synced write (which
//! syncs every retired log first). Until then a power loss can lose the retired log's tail
//! while keeping writes of the next log; replaying both would leave a hole in the history.
//!
//! So a WAL of the sealed regime (file number at least the manifest's `sealed_logs_from`) leads
//! on to the next replayed WAL only when it ends with its seal naming that WAL. Otherwise the
//! history ends in it: the later WALs hold only writes acknowledged without a sync (a synced
//! write, or a flush, syncs every retired WAL first) and are dropped. A later WAL that records a
//! completed sync contradicts that: durable writes were lost, which is corruption. WALs below
//! `sealed_logs_from` were written whole and synced before a newer WAL held writes (by older
//! builds at every rotation, by this build at the recovery that started the regime), so a torn
//! one that is not the newest is corruption. See docs/format.md, "WAL seals".

use crate::coding::Reader;
use crate::error::Result;
use crate::log::{self, LogEnd, LogWriter};

/// Appends the seal of a retired log: the WAL numbered `next` follows it, and the log takes no
/// more records.
pub(crate) fn seal(log: &mut LogWriter, next: u64) -> Result<()> {
    let mut payload = Vec::with_capacity(10);
    crate::coding::put_varint(&mut payload, next);
    log.add_record_parts(log::SEAL, &[], &payload)
}

/// One WAL file as read: its batch records and how it ends.
pub(crate) struct WalFile<'a> {
    /// Batch records: (type, payload, offset of the record in the file).
    pub batches: Vec<(u8, &'a [u8], u64)>,
    /// The next WAL's file number, when the log ends with its seal.
    pub seal: Option<u64>,
    /// End of the last valid record (batch or seal).
    pub valid_end: u64,
    /// How reading ended; a record after the seal, or a seal that does not decode, is
    /// `Corrupt` at that record.
    pub end: LogEnd,
    /// Whether a record shows that a sync of this log completed (a record of type 3).
    pub synced: bool,
}

/// Reads a whole WAL file.
pub(crate) fn read(data: &[u8]) -> WalFile<'_> {
    let (records, mut end) = log::read_wal_records(data);
    let mut f = WalFile {
        batches: Vec::with_capacity(records.len()),
        seal: None,
        valid_end: 0,
        end: LogEnd::Clean,
        synced: false,
    };
    let mut offset = 0u64;
    for (ty, payload) in records {
        if f.seal.is_some() {
            end = LogEnd::Corrupt {
                offset,
                detail: "a record after the WAL's seal".into(),
            };
            break;
        }
        if ty == log::SEAL {
            let mut r = Reader::new(payload);
            match r.varint().filter(|_| r.is_empty()) {
                Some(next) => f.seal = Some(next),
                None => {
                    end = LogEnd::Corrupt {
                        offset,
                        detail: "WAL seal does not decode".into(),
                    };
                    break;
                }
            }
        } else {
            f.synced |= ty == log::SYNCED_BATCH;
            f.batches.push((ty, payload, offset));
        }
        offset += (log::HEADER + payload.len()) as u64;
        f.valid_end = offset;
    }
    f.end = end;
    f
}

/// What recovery does after replaying a WAL.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Go on with the next WAL (or, after the newest, open).
    Continue,
    /// The history ends at `offset` of this WAL: the log is cut there and every later WAL is
    /// dropped.
    EndsAt {
        /// Where the history ends.
        offset: u64,
        /// Why, for the info log and `scree check`.
        why: String,
    },
}

/// Judges WAL `n`, read as `f`: `next` is the next WAL recovery would replay (`None`: `n` is
/// the newest); `sealed_from` the manifest's first WAL of the sealed regime. `Err` is
/// corruption: (offset, detail).
pub(crate) fn judge(
    n: u64,
    f: &WalFile<'_>,
    next: Option<u64>,
    sealed_from: u64,
) -> Result<Next, (u64, String)> {
    if let LogEnd::Corrupt { offset, detail } = &f.end {
        return Err((*offset, detail.clone()));
    }
    let torn = match f.end {
        LogEnd::TornTail { offset } => Some(offset),
        _ => None,
    };
    let Some(next) = next else {
        // The newest log: a torn tail is what a crash leaves of unacknowledged or unsynced
        // appends. A seal there only means the crash came before the next WAL was durable.
        return Ok(match torn {
            Some(offset) if f.seal.is_none() => Next::EndsAt {
                offset,
                why: "torn tail of the newest WAL".into(),
            },
            _ => Next::Continue,
        });
    };
    if n < sealed_from {
        // Bytes after a seal are no records, in either regime.
        return match torn {
            Some(offset) if f.seal.is_none() => {
                Err((offset, "torn record in a WAL that is not the newest".into()))
            }
            _ => Ok(Next::Continue),
        };
    }
    match f.seal {
        // Bytes after a seal (a crash's garbage past the last append) are no records.
        Some(s) if s == next => Ok(Next::Continue),
        Some(s) => Ok(Next::EndsAt {
            offset: f.valid_end,
            why: format!("sealed for WAL {s:06}, which is missing (its directory entry was lost)"),
        }),
        None => Ok(Next::EndsAt {
            offset: torn.unwrap_or(f.valid_end),
            why: format!("retired for WAL {next:06}, but its end did not reach the disk (no seal)"),
        }),
    }
}

/// The first WAL the manifest says must exist that is not among `logs` (sorted), with what
/// recovery and `scree check` say about it.
///
/// Only for manifests whose `features` have [`FEATURE_LOG_NUMBERS_EXIST`], which every open
/// of this build writes:
///
/// - The newest named WAL, when the manifest names a first sealed WAL (`sealed_from`, else
///   `u64::MAX`): the largest of it and the keyspaces' log numbers. Each was created, and its
///   directory entry synced, before the manifest edit naming it; WALs are deleted only below
///   every keyspace's persisted log number, or at an open once a newer manifest naming a
///   newer first WAL is durable; a recovery that ends the history empties later WALs rather
///   than removing them.
/// - Every keyspace's log number: an open
///   then records each keyspace's first still-needed WAL (or the one it starts), so a log
///   number never names a WAL the open removes.
///
/// Log numbers 0 name no WAL. When it is missing, the writes it held are gone (a WAL removed
/// by hand, the directory copied without its WAL files).
///
/// [`FEATURE_LOG_NUMBERS_EXIST`]: crate::manifest::FEATURE_LOG_NUMBERS_EXIST
pub(crate) fn missing_required(
    logs: &[u64],
    log_numbers: &[(String, u64)],
    sealed_from: u64,
    features: u64,
) -> Option<(u64, String)> {
    // Both rules need a manifest this build's opens wrote (bit 4): the builds before it
    // removed later WALs where a recovery ended the history, so a crash in that recovery
    // could leave the newest named WAL removed with no write lost.
    if features & crate::manifest::FEATURE_LOG_NUMBERS_EXIST == 0 {
        return None;
    }
    let absent = |n: &u64| *n > 0 && logs.binary_search(n).is_err();
    let mut missing: Vec<(u64, String)> = Vec::new();
    // The newest first: of two reasons for one WAL, its message is the one kept.
    if sealed_from != u64::MAX {
        let newest = log_numbers
            .iter()
            .map(|(_, n)| *n)
            .fold(sealed_from, u64::max);
        if absent(&newest) {
            missing.push((
                newest,
                format!(
                    "WAL {newest:06}.log is missing, but the manifest names it (as a keyspace's \
                     log number or the first WAL of the last open): it holds, or was started \
                     to hold, the newest writes. Was the database copied without its WAL \
                     files? WalRecovery::PointInTime opens without them"
                ),
            ));
        }
    }
    {
        for (name, n) in log_numbers.iter().filter(|(_, n)| absent(n)) {
            missing.push((
                *n,
                format!(
                    "WAL {n:06}.log is missing, but keyspace {name:?} needs it (its log number \
                     names it: the oldest of its writes not yet in tables start there). Was \
                     it removed by hand? WalRecovery::PointInTime opens without it if no \
                     table holds later writes"
                ),
            ));
        }
    }
    missing.into_iter().min_by_key(|(n, _)| *n)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::coding::put_varint;
    use crate::log::frame;

    fn seal(next: u64) -> Vec<u8> {
        let mut p = Vec::new();
        put_varint(&mut p, next);
        frame(log::SEAL, &p)
    }

    /// Two batch records (the second of type 3 when `synced`), then `tail`.
    fn wal(synced: bool, tail: &[u8]) -> Vec<u8> {
        let mut d = frame(log::COMPACT_BATCH, b"first batch");
        if synced {
            d.extend(frame(log::SYNCED_BATCH, b"second batch"));
        } else {
            d.extend(frame(log::COMPACT_BATCH, b"second batch"));
        }
        d.extend_from_slice(tail);
        d
    }

    #[test]
    fn a_sealed_log_leads_on_to_the_log_its_seal_names() {
        let d = wal(false, &seal(9));
        let f = read(&d);
        assert_eq!(
            (f.batches.len(), f.seal, f.end.clone()),
            (2, Some(9), LogEnd::Clean)
        );
        assert_eq!(f.valid_end, d.len() as u64);
        assert_eq!(judge(7, &f, Some(9), 7), Ok(Next::Continue));
        // Zeros after the seal (a preallocated tail) change nothing.
        let mut z = d.clone();
        z.extend([0u8; 600]);
        assert_eq!(judge(7, &read(&z), Some(9), 7), Ok(Next::Continue));
    }

    #[test]
    fn a_log_without_its_seal_ends_the_history_at_its_last_record() {
        let d = wal(false, &[]);
        let f = read(&d);
        assert_eq!(
            judge(7, &f, Some(9), 7),
            Ok(Next::EndsAt {
                offset: d.len() as u64,
                why: "retired for WAL 000009, but its end did not reach the disk (no seal)".into()
            })
        );
        // Cut inside the second record: the history ends before it.
        let cut = &d[..d.len() - 3];
        let first = frame(log::COMPACT_BATCH, b"first batch").len() as u64;
        match judge(7, &read(cut), Some(9), 7) {
            Ok(Next::EndsAt { offset, .. }) => assert_eq!(offset, first),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_seal_naming_a_missing_log_ends_the_history_after_it() {
        let d = wal(false, &seal(9));
        match judge(7, &read(&d), Some(11), 7) {
            Ok(Next::EndsAt { offset, why }) => {
                assert_eq!(offset, d.len() as u64);
                assert!(why.contains("000009"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn logs_before_the_sealed_regime_need_no_seal_but_no_torn_tail() {
        let d = wal(false, &[]);
        assert_eq!(judge(5, &read(&d), Some(9), 7), Ok(Next::Continue));
        // A seal naming a log a later recovery dropped is no longer checked.
        let s = wal(false, &seal(6));
        assert_eq!(judge(5, &read(&s), Some(9), 7), Ok(Next::Continue));
        let torn = &d[..d.len() - 3];
        assert!(judge(5, &read(torn), Some(9), 7).is_err());
        // Torn bytes after a seal are ignored in this regime too: a recovery that found them
        // in a sealed WAL went on without cutting them.
        let mut garbage = wal(false, &seal(6));
        garbage.extend(frame(log::COMPACT_BATCH, b"torn")[..8].iter());
        let g = read(&garbage);
        assert!(matches!(g.end, LogEnd::TornTail { .. }) && g.seal == Some(6));
        assert_eq!(judge(5, &g, Some(9), 7), Ok(Next::Continue));
        assert_eq!(judge(7, &g, Some(6), 7), Ok(Next::Continue));
        assert_eq!(judge(7, &g, None, 7), Ok(Next::Continue));
    }

    #[test]
    fn the_newest_log_is_cut_only_at_a_torn_tail() {
        let d = wal(true, &seal(9));
        assert_eq!(judge(7, &read(&d), None, 7), Ok(Next::Continue));
        let plain = wal(true, &[]);
        assert_eq!(judge(7, &read(&plain), None, 7), Ok(Next::Continue));
        assert!(read(&plain).synced && !read(&wal(false, &[])).synced);
        match judge(7, &read(&plain[..plain.len() - 2]), None, 7) {
            Ok(Next::EndsAt { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_record_after_the_seal_or_a_bad_seal_is_corruption() {
        let mut d = wal(false, &seal(9));
        let at = d.len() as u64;
        d.extend(frame(log::COMPACT_BATCH, b"late"));
        let f = read(&d);
        assert_eq!(f.batches.len(), 2, "the late record is not replayed");
        assert_eq!(
            judge(7, &f, Some(9), 7),
            Err((at, "a record after the WAL's seal".into()))
        );
        let mut bad = wal(false, &[]);
        let at = bad.len() as u64;
        bad.extend(frame(log::SEAL, &[0x80]));
        assert_eq!(
            judge(7, &read(&bad), Some(9), 7),
            Err((at, "WAL seal does not decode".into()))
        );
    }
}
