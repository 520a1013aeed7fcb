//! Decoded views of a database's files for tools (`scree wal`): a WAL's records as recovery
//! reads them, by the rules of docs/format.md (record framing, batch payloads, the seal, how
//! the log ends). Nothing here changes a file.

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::log::{self, LogEnd};
use crate::wal_chain;

/// One entry of a WAL batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WalEntry {
    /// Sequence number.
    pub seq: u64,
    /// Keyspace id (the manifest maps ids to names).
    pub keyspace: u32,
    /// Whether it is a put (else a delete).
    pub put: bool,
    /// The key.
    pub key: Vec<u8>,
    /// The value (empty for a delete).
    pub value: Vec<u8>,
}

/// One batch record of a WAL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WalBatch {
    /// Offset of the record in the file.
    pub offset: u64,
    /// Record type: 1 (fixed header, older builds), 2 (compact) or 3 (compact, written after
    /// a completed sync of the log).
    pub record_type: u8,
    /// Its entries, or why the payload does not decode (recovery then reports corruption).
    pub entries: std::result::Result<Vec<WalEntry>, String>,
}

/// A WAL file as recovery reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WalDump {
    /// File size in bytes.
    pub size: u64,
    /// Batch records, in order.
    pub batches: Vec<WalBatch>,
    /// The next WAL's number, when the log ends with its seal.
    pub seal: Option<u64>,
    /// Whether a record shows a completed sync of the log (a type-3 record).
    pub synced: bool,
    /// End of the last valid record.
    pub valid_end: u64,
    /// How reading ended: `clean`, `torn tail at N` or `corrupt at N: detail` (whether a torn
    /// tail or a missing seal ends the history depends on the later WALs: `scree check`).
    pub end: String,
}

/// Reads and decodes the WAL at `path`.
pub fn read_wal(fs: Arc<dyn FileSystem>, path: &Path) -> Result<WalDump> {
    let data = fs.read_all(path).map_err(|e| Error::io(path, e))?;
    let file = wal_chain::read(&data);
    let batches = file
        .batches
        .iter()
        .map(|&(ty, payload, offset)| WalBatch {
            offset,
            record_type: ty,
            entries: crate::batch::decode(ty, payload)
                .map(|(seq, entries)| {
                    entries
                        .into_iter()
                        .zip(seq..)
                        .map(|(e, seq)| WalEntry {
                            seq,
                            keyspace: e.ks,
                            put: e.kind == crate::key::ValueKind::Put,
                            key: e.key,
                            value: e.value,
                        })
                        .collect()
                })
                .map_err(|(o, d)| {
                    format!(
                        "at payload offset {o} (file offset {}): {d}",
                        offset + log::HEADER as u64 + o as u64
                    )
                }),
        })
        .collect();
    let end = match &file.end {
        LogEnd::Clean => "clean".to_string(),
        LogEnd::TornTail { offset } => format!("torn tail at {offset}"),
        LogEnd::Corrupt { offset, detail } => format!("corrupt at {offset}: {detail}"),
    };
    Ok(WalDump {
        size: data.len() as u64,
        batches,
        seal: file.seal,
        synced: file.synced,
        valid_end: file.valid_end,
        end,
    })
}
