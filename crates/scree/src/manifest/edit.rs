//! Manifest edits: what changed in the database's state, encoded as tagged fields.
//! Byte layout in docs/format.md ("Manifest").

use crate::coding::{put_slice, put_varint, Reader};
use crate::table::{AppendMeta, TableMeta};

/// [`AddedTable::format`] of the appendable segment table of the engine's own unit tests
/// (`layout::segments`): no layout a user can pick has it, and every build outside its tests
/// refuses it (docs/format.md, "Appendable tables").
pub const FORMAT_TEST_SEGMENTS: u8 = 0xff;

/// Whether tables of `format` may be appendable (recorded with keyspace edit tag 6): the
/// `lightweight` layout's DTable, and the test-only segment table in test builds. A layout of
/// an appendable format names it here.
pub fn format_is_appendable(format: u8) -> bool {
    format == crate::layout::lightweight::dtable::FORMAT_DTABLE
        || (cfg!(test) && format == FORMAT_TEST_SEGMENTS)
}

/// A table added to a keyspace, with its layout placement. An appendable table
/// ([`TableMeta::append`] set; keyspace edit tag 6) that the same edit also removes is an
/// append switch: the table now ends at its new size, with its metadata at the new offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedTable {
    /// Level (layout-defined; 0 = newest).
    pub level: u32,
    /// Layout-defined position inside the level (trie container id, …; 0 when unused).
    pub slot: u64,
    /// File format code (0 sorted table, 1 HTable): [`crate::table_format::by_code`] names
    /// the format.
    pub format: u8,
    /// The table.
    pub meta: TableMeta,
}

/// A layout's own record (guards, containers, …), opaque to the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutRecord {
    /// Record type, defined by the layout.
    pub tag: u8,
    /// Record payload.
    pub data: Vec<u8>,
}

/// Changes to one keyspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KsEdit {
    /// Keyspace id.
    pub id: u32,
    /// Oldest WAL file that may still hold unflushed data of this keyspace.
    pub log_number: Option<u64>,
    /// Tables added.
    pub added: Vec<AddedTable>,
    /// File numbers of tables removed.
    pub removed: Vec<u64>,
    /// Layout-specific records.
    pub records: Vec<LayoutRecord>,
}

impl KsEdit {
    /// An empty edit of keyspace `id`.
    pub fn new(id: u32) -> Self {
        KsEdit {
            id,
            ..Default::default()
        }
    }
}

/// A keyspace created in this edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyspaceDef {
    /// Keyspace id.
    pub id: u32,
    /// Name.
    pub name: String,
    /// Encoded layout and its persisted options.
    pub layout: Vec<u8>,
}

/// One manifest record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edit {
    /// Next unused file number.
    pub next_file_no: Option<u64>,
    /// Last sequence number used.
    pub last_seq: Option<u64>,
    /// The database's random placement-hash key.
    pub hash_key: Option<[u8; 16]>,
    /// Format features the database's files use (bit set, [`FEATURE_COMPACT_WAL`], …): a
    /// build that does not know a bit refuses to open the database. Written in every snapshot.
    pub features: Option<u64>,
    /// First WAL file number of the sealed regime: every WAL numbered at least this ends with a
    /// seal record naming the next WAL once it is retired (docs/format.md, "WAL seals"). Older
    /// WALs were synced whole before a newer one held writes. Written in every snapshot.
    pub sealed_logs_from: Option<u64>,
    /// Keyspaces created.
    pub new_keyspaces: Vec<KeyspaceDef>,
    /// Per-keyspace changes.
    pub keyspaces: Vec<KsEdit>,
}

const T_NEXT_FILE: u8 = 1;
const T_LAST_SEQ: u8 = 2;
const T_HASH_KEY: u8 = 3;
const T_NEW_KS: u8 = 4;
const T_KS_EDIT: u8 = 5;
const T_FEATURES: u8 = 6;
const T_SEALED_FROM: u8 = 7;

/// Feature bit: WAL records of type 2 (compact batches, docs/format.md). Builds before it
/// stop at the manifest's unknown tag 6 instead of cutting the WAL at its first type-2 record.
pub const FEATURE_COMPACT_WAL: u64 = 1;
/// Feature bit: sorted-table blocks of type 1 (internal keys with varint tags, docs/format.md).
pub const FEATURE_IKEY_BLOCKS: u64 = 2;
/// Feature bit: WAL records of type 3 (batches announcing the log length the last completed
/// sync covered, docs/format.md). Builds without it would read such a record as unknown and
/// cut the WAL there; they refuse the database instead.
pub const FEATURE_SYNCED_WAL: u64 = 4;
/// Feature bit: WAL seal records (type 4) and the manifest's first sealed WAL (tag 7). Builds
/// without it would read a seal as an unknown record, and a retired WAL that lost its seal as
/// whole, replaying the next WAL after a hole; they refuse the database instead.
pub const FEATURE_SEALED_WAL: u64 = 8;
/// Feature bit: every keyspace's log number names a WAL that exists (an open records, for
/// each keyspace, the first WAL it still needs, or the WAL it starts). Recovery then refuses a
/// database missing one: its writes would be lost silently. Builds without it refuse the
/// database, as for any feature bit they do not know.
pub const FEATURE_LOG_NUMBERS_EXIST: u64 = 16;
/// Feature bit: appendable tables (keyspace edit tag 6, docs/format.md, "Appendable tables"):
/// a table file may be longer than the size the manifest records, and grows by appends.
/// Unlike the other bits it is named only by manifests that hold such a table: by the first
/// edit adding one, and by every snapshot while one is live ([`Edit::features_needed`]), so
/// databases without them stay readable by builds before it.
pub const FEATURE_APPENDABLE_TABLES: u64 = 32;
/// Feature bit: sorted tables of footer version 2, whose index block (type 2) holds a short
/// separator and the size of each data block instead of its last internal key and handle
/// (docs/format.md, "Index block"). Builds before it would refuse each such table at its
/// first read; they refuse the database at open instead.
pub const FEATURE_SEPARATOR_INDEX: u64 = 64;
/// Every feature bit this build reads.
pub const KNOWN_FEATURES: u64 = FEATURE_COMPACT_WAL
    | FEATURE_IKEY_BLOCKS
    | FEATURE_SYNCED_WAL
    | FEATURE_SEALED_WAL
    | FEATURE_LOG_NUMBERS_EXIST
    | FEATURE_APPENDABLE_TABLES
    | FEATURE_SEPARATOR_INDEX;
/// The feature bits every snapshot this build writes names, whatever the database holds.
pub const ALWAYS_WRITTEN_FEATURES: u64 = KNOWN_FEATURES & !FEATURE_APPENDABLE_TABLES;

const K_LOG: u8 = 1;
const K_ADD: u8 = 3;
const K_REMOVE: u8 = 4;
const K_RECORD: u8 = 5;
const K_ADD_APPENDABLE: u8 = 6;

impl Edit {
    /// Whether the edit adds an appendable table (keyspace edit tag 6).
    pub fn adds_appendable_tables(&self) -> bool {
        self.keyspaces
            .iter()
            .flat_map(|k| &k.added)
            .any(|a| a.meta.append.is_some())
    }

    /// The feature bits a snapshot holding this edit's tables must name, or that an edit
    /// adding an appendable table names: [`ALWAYS_WRITTEN_FEATURES`], plus
    /// [`FEATURE_APPENDABLE_TABLES`] when it adds one.
    pub fn features_needed(&self) -> u64 {
        if self.adds_appendable_tables() {
            ALWAYS_WRITTEN_FEATURES | FEATURE_APPENDABLE_TABLES
        } else {
            ALWAYS_WRITTEN_FEATURES
        }
    }

    /// Encodes the edit.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Some(n) = self.next_file_no {
            out.push(T_NEXT_FILE);
            put_varint(&mut out, n);
        }
        if let Some(n) = self.last_seq {
            out.push(T_LAST_SEQ);
            put_varint(&mut out, n);
        }
        if let Some(k) = &self.hash_key {
            out.push(T_HASH_KEY);
            out.extend_from_slice(k);
        }
        if let Some(f) = self.features {
            out.push(T_FEATURES);
            put_varint(&mut out, f);
        }
        if let Some(n) = self.sealed_logs_from {
            out.push(T_SEALED_FROM);
            put_varint(&mut out, n);
        }
        for d in &self.new_keyspaces {
            out.push(T_NEW_KS);
            put_varint(&mut out, u64::from(d.id));
            put_slice(&mut out, d.name.as_bytes());
            put_slice(&mut out, &d.layout);
        }
        for k in &self.keyspaces {
            out.push(T_KS_EDIT);
            put_slice(&mut out, &k.encode());
        }
        out
    }

    /// The feature bits an edit names, read from its leading fields alone (the counters, the
    /// hash key, the features: what every build writes first and knows). For an edit that
    /// does not decode: if it names features this build does not know, a newer build wrote
    /// it, and the fields that failed are that build's ([`crate::manifest::read_manifest`]
    /// refuses it as `Unsupported` rather than as damage).
    pub fn leading_features(buf: &[u8]) -> Option<u64> {
        let mut r = Reader::new(buf);
        loop {
            match r.u8()? {
                T_NEXT_FILE | T_LAST_SEQ | T_SEALED_FROM => {
                    r.varint()?;
                }
                T_HASH_KEY => {
                    r.bytes(16)?;
                }
                T_FEATURES => return r.varint(),
                _ => return None,
            }
        }
    }

    /// Decodes an edit; `Err` carries the offset and what was wrong.
    pub fn decode(buf: &[u8]) -> Result<Edit, (usize, String)> {
        let mut r = Reader::new(buf);
        let mut e = Edit::default();
        while !r.is_empty() {
            let at = r.pos();
            let bad = |d: &str| (at, d.to_string());
            match r.u8() {
                Some(T_NEXT_FILE) => {
                    e.next_file_no = Some(r.varint().ok_or_else(|| bad("next file"))?)
                }
                Some(T_LAST_SEQ) => e.last_seq = Some(r.varint().ok_or_else(|| bad("last seq"))?),
                Some(T_HASH_KEY) => {
                    let k = r.bytes(16).ok_or_else(|| bad("hash key"))?;
                    let mut a = [0u8; 16];
                    a.copy_from_slice(k);
                    e.hash_key = Some(a);
                }
                Some(T_NEW_KS) => {
                    let id = r
                        .varint()
                        .and_then(|v| u32::try_from(v).ok())
                        .ok_or_else(|| bad("keyspace id"))?;
                    let name = r.slice().ok_or_else(|| bad("keyspace name"))?;
                    let name = String::from_utf8(name.to_vec())
                        .map_err(|_| bad("keyspace name is not UTF-8"))?;
                    let layout = r.slice().ok_or_else(|| bad("keyspace layout"))?.to_vec();
                    e.new_keyspaces.push(KeyspaceDef { id, name, layout });
                }
                Some(T_FEATURES) => e.features = Some(r.varint().ok_or_else(|| bad("features"))?),
                Some(T_SEALED_FROM) => {
                    e.sealed_logs_from = Some(r.varint().ok_or_else(|| bad("first sealed WAL"))?)
                }
                Some(T_KS_EDIT) => {
                    let body = r.slice().ok_or_else(|| bad("keyspace edit"))?;
                    let k = KsEdit::decode(body).map_err(|(o, d)| (at + o, d))?;
                    e.keyspaces.push(k);
                }
                Some(t) => return Err(bad(&format!("unknown edit tag {t}"))),
                None => return Err(bad("truncated")),
            }
        }
        Ok(e)
    }
}

impl KsEdit {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, u64::from(self.id));
        if let Some(n) = self.log_number {
            out.push(K_LOG);
            put_varint(&mut out, n);
        }
        for a in &self.added {
            out.push(if a.meta.append.is_some() {
                K_ADD_APPENDABLE
            } else {
                K_ADD
            });
            put_varint(&mut out, u64::from(a.level));
            put_varint(&mut out, a.slot);
            out.push(a.format);
            let m = &a.meta;
            put_varint(&mut out, m.file_no);
            put_varint(&mut out, m.size);
            put_slice(&mut out, &m.smallest);
            put_slice(&mut out, &m.largest);
            put_varint(&mut out, m.entries);
            put_varint(&mut out, m.min_seq);
            put_varint(&mut out, m.max_seq);
            if let Some(ap) = m.append {
                put_varint(&mut out, ap.meta_offset);
                put_varint(&mut out, ap.dead_bytes);
            }
        }
        for f in &self.removed {
            out.push(K_REMOVE);
            put_varint(&mut out, *f);
        }
        for rec in &self.records {
            out.push(K_RECORD);
            out.push(rec.tag);
            put_slice(&mut out, &rec.data);
        }
        out
    }

    fn decode(buf: &[u8]) -> Result<KsEdit, (usize, String)> {
        let mut r = Reader::new(buf);
        let id = r
            .varint()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or((0, "keyspace id".to_string()))?;
        let mut k = KsEdit::new(id);
        while !r.is_empty() {
            let at = r.pos();
            let bad = |d: &str| (at, d.to_string());
            match r.u8() {
                Some(K_LOG) => k.log_number = Some(r.varint().ok_or_else(|| bad("log number"))?),
                Some(tag @ (K_ADD | K_ADD_APPENDABLE)) => {
                    let level = r
                        .varint()
                        .and_then(|v| u32::try_from(v).ok())
                        .ok_or_else(|| bad("level"))?;
                    let slot = r.varint().ok_or_else(|| bad("slot"))?;
                    let format = r.u8().ok_or_else(|| bad("format"))?;
                    let file_no = r.varint().ok_or_else(|| bad("file number"))?;
                    let size = r.varint().ok_or_else(|| bad("size"))?;
                    let smallest = r.slice().ok_or_else(|| bad("smallest key"))?.to_vec();
                    let largest = r.slice().ok_or_else(|| bad("largest key"))?.to_vec();
                    let entries = r.varint().ok_or_else(|| bad("entries"))?;
                    let min_seq = r.varint().ok_or_else(|| bad("min seq"))?;
                    let max_seq = r.varint().ok_or_else(|| bad("max seq"))?;
                    let append = if tag == K_ADD_APPENDABLE {
                        let meta_offset = r.varint().ok_or_else(|| bad("metadata offset"))?;
                        let dead_bytes = r.varint().ok_or_else(|| bad("dead bytes"))?;
                        // The metadata lies inside the table and is not empty; dead bytes lie
                        // before it (the metadata itself is live).
                        if meta_offset >= size {
                            return Err(bad(&format!(
                                "appendable table {file_no}: metadata at {meta_offset}, not inside its {size} bytes"
                            )));
                        }
                        if dead_bytes > meta_offset {
                            return Err(bad(&format!(
                                "appendable table {file_no}: {dead_bytes} dead bytes before its metadata at {meta_offset}"
                            )));
                        }
                        Some(AppendMeta {
                            meta_offset,
                            dead_bytes,
                        })
                    } else {
                        None
                    };
                    k.added.push(AddedTable {
                        level,
                        slot,
                        format,
                        meta: TableMeta {
                            file_no,
                            size,
                            smallest,
                            largest,
                            entries,
                            min_seq,
                            max_seq,
                            append,
                        },
                    });
                }
                Some(K_REMOVE) => k
                    .removed
                    .push(r.varint().ok_or_else(|| bad("removed file"))?),
                Some(K_RECORD) => {
                    let tag = r.u8().ok_or_else(|| bad("record tag"))?;
                    let data = r.slice().ok_or_else(|| bad("record data"))?.to_vec();
                    k.records.push(LayoutRecord { tag, data });
                }
                Some(t) => return Err(bad(&format!("unknown keyspace edit tag {t}"))),
                None => return Err(bad("truncated")),
            }
        }
        Ok(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let e = Edit {
            next_file_no: Some(9),
            last_seq: Some(77),
            hash_key: Some([7; 16]),
            features: Some(KNOWN_FEATURES),
            sealed_logs_from: Some(12),
            new_keyspaces: vec![KeyspaceDef {
                id: 1,
                name: "users".into(),
                layout: vec![1, 2],
            }],
            keyspaces: vec![KsEdit {
                id: 1,
                log_number: Some(4),
                added: vec![AddedTable {
                    level: 2,
                    slot: 5,
                    format: 0,
                    meta: TableMeta {
                        file_no: 8,
                        size: 100,
                        smallest: b"a\0\0\0\0\0\0\0\0".to_vec(),
                        largest: b"z\0\0\0\0\0\0\0\0".to_vec(),
                        entries: 3,
                        min_seq: 1,
                        max_seq: 3,
                        append: None,
                    },
                }],
                removed: vec![3, 4],
                records: vec![LayoutRecord {
                    tag: 1,
                    data: b"guard".to_vec(),
                }],
            }],
        };
        let b = e.encode();
        assert_eq!(Edit::decode(&b).expect("decodes"), e);
        for cut in 0..b.len() {
            // Truncations either fail or decode a prefix of the fields, never panic.
            let _ = Edit::decode(&b[..cut]);
        }
        assert!(!e.adds_appendable_tables());
        assert_eq!(e.features_needed(), ALWAYS_WRITTEN_FEATURES);
    }

    fn appendable(file_no: u64, size: u64, meta_offset: u64, dead_bytes: u64) -> AddedTable {
        AddedTable {
            level: 1,
            slot: 0,
            format: 0xff,
            meta: TableMeta {
                file_no,
                size,
                smallest: b"a\0\0\0\0\0\0\0\0".to_vec(),
                largest: b"z\0\0\0\0\0\0\0\0".to_vec(),
                entries: 3,
                min_seq: 1,
                max_seq: 3,
                append: Some(AppendMeta {
                    meta_offset,
                    dead_bytes,
                }),
            },
        }
    }

    /// An append switch (the table removed and added back at its new end) round-trips, under
    /// keyspace edit tag 6: the tag-3 fields, then the metadata offset and the dead bytes.
    #[test]
    fn an_append_switch_round_trips_as_tag_6() {
        let mut k = KsEdit::new(2);
        k.removed.push(9);
        k.added.push(appendable(9, 300, 280, 17));
        let e = Edit {
            keyspaces: vec![k],
            ..Default::default()
        };
        let b = e.encode();
        assert_eq!(Edit::decode(&b).expect("decodes"), e);
        assert!(e.adds_appendable_tables());
        assert_eq!(e.features_needed(), KNOWN_FEATURES);
        // The keyspace edit's bytes: id 2, tag 6, level 1, slot 0, format 0xff, file 9, size
        // 300, the keys, entries 3, seqs 1..3, metadata at 280, 17 dead bytes; then tag 4.
        let mut want = vec![2, 6, 1, 0, 0xff, 9, 0xac, 0x02, 9];
        want.extend_from_slice(b"a\0\0\0\0\0\0\0\0");
        want.push(9);
        want.extend_from_slice(b"z\0\0\0\0\0\0\0\0");
        want.extend_from_slice(&[3, 1, 3, 0x98, 0x02, 17, 4, 9]);
        assert_eq!(b[2..], want[..]);
        for cut in 0..b.len() {
            let _ = Edit::decode(&b[..cut]);
        }
    }

    /// Metadata outside the table, or dead bytes past the metadata's start, are refused.
    #[test]
    fn an_appendable_table_with_impossible_offsets_is_refused() {
        for (size, meta_offset, dead) in [(300, 300, 0), (300, 400, 0), (300, 100, 101)] {
            let mut k = KsEdit::new(1);
            k.added.push(appendable(5, size, meta_offset, dead));
            let e = Edit {
                keyspaces: vec![k],
                ..Default::default()
            };
            let err = Edit::decode(&e.encode()).expect_err("refused");
            assert!(err.1.contains("appendable table 5"), "{err:?}");
        }
    }
}
