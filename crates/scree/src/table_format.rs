//! The table-format registry: every on-disk table format a layout writes, with its manifest
//! code, file extension and the functions tools read it with. `scree check`, `scree dump`, the
//! orphan sweep at open and the fuzz corpus maker find formats here, never by naming an
//! extension. A format's module owns its code, extension and [`TableFormat`] descriptor;
//! adding a format is that module plus one line of [`FORMATS`].

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::fs::{Env, FileSystem};
use crate::table::TableFile;

/// A visitor of a table's entries: `(internal key, value)`.
pub type EntryVisitor<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> Result<()>;

/// One on-disk table format.
#[derive(Debug, Clone, Copy)]
pub struct TableFormat {
    /// What reports call it ("sorted table").
    pub name: &'static str,
    /// The code [`AddedTable::format`](crate::manifest::edit::AddedTable::format) records for
    /// it; `None` for files a layout names in its own records instead (a `trie` BloomCluster).
    pub code: Option<u8>,
    /// The file name extension (`NNNNNN.<ext>`).
    pub ext: &'static str,
    /// Reads every byte of the file the handle names and checks every checksum, counting
    /// blocks and entries into the [`Verified`] as it goes. An unreadable or damaged file is
    /// `Err` (a typed error naming the file and offset); contents that decode but disagree with
    /// the manifest's record (key range, entry count, order) are pushed to
    /// [`Verified::problems`]. Used by `scree check`.
    pub verify: fn(&TableFile, &mut Verified) -> Result<()>,
    /// Calls the visitor with every entry of the file, each checksum verified; `None` for files
    /// that hold no entries. `scree check` looks each one up through its keyspace's layout.
    pub for_each: Option<fn(&TableFile, EntryVisitor<'_>) -> Result<()>>,
    /// A short account of the file at the path from its footer and metadata, checked as it is
    /// read (the data blocks are not read). Used by `scree dump` and `scree check -v`.
    pub describe: fn(&Env, &Path) -> Result<Description>,
    /// The fuzz target that decodes files of this format (its seed corpus takes them).
    pub fuzz_target: Option<&'static str>,
}

/// Every table format, in code order (formats without a code last).
pub static FORMATS: &[TableFormat] = &[
    crate::table::SORTED,
    crate::htable::HTABLE,
    crate::layout::semisorted::table::SEMISORTED,
    crate::layout::lightweight::dtable::DTABLE,
    crate::htable::cluster::BLOOM_CLUSTER,
    #[cfg(test)]
    crate::layout::segments::SEGMENTS,
];

/// The format whose manifest code is `code`.
pub fn by_code(code: u8) -> Option<&'static TableFormat> {
    FORMATS.iter().find(|f| f.code == Some(code))
}

/// The format whose files end in `.<ext>`.
pub fn by_ext(ext: &str) -> Option<&'static TableFormat> {
    FORMATS.iter().find(|f| f.ext == ext)
}

/// The format of the tables a keyspace of layout `kind` writes (what its edits add), or an
/// error if this build does not implement the layout.
pub fn written_by(kind: crate::Layout) -> Result<&'static TableFormat> {
    let code = crate::layout::new_layout(kind)?.table_format();
    by_code(code).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "layout `{kind}` writes format {code}, which is not registered"
        ))
    })
}

/// Whether `ext` is the extension of a table format (a file the open removes when the manifest
/// does not name it).
pub fn is_table_ext(ext: &str) -> bool {
    by_ext(ext).is_some()
}

/// What [`TableFormat::verify`] counted and found.
#[derive(Debug, Default)]
pub struct Verified {
    /// Blocks read and verified (data blocks, buckets, filter blocks).
    pub blocks: u64,
    /// Entries read.
    pub entries: u64,
    /// What is wrong with contents that decode: each an [`Error::Corruption`] naming the file.
    pub problems: Vec<Error>,
}

/// A short account of one table file (`scree dump`, `scree check -v`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description {
    /// The format's [`TableFormat::name`].
    pub format: &'static str,
    /// The format version the file records.
    pub version: u32,
    /// File size in bytes.
    pub size: u64,
    /// Counts and parameters read from the footer and metadata, named in snake case
    /// (`data_blocks`, `buckets`), in the format's order.
    pub facts: Vec<(&'static str, u64)>,
}

impl fmt::Display for Description {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} version {}, {} bytes",
            self.format, self.version, self.size
        )?;
        for (i, (name, value)) in self.facts.iter().enumerate() {
            let sep = if i == 0 { ": " } else { ", " };
            write!(f, "{sep}{value} {}", name.replace('_', " "))?;
        }
        Ok(())
    }
}

/// Describes the table file at `path` on `fs` by the format its extension names.
pub fn describe(fs: Arc<dyn FileSystem>, path: &Path) -> Result<Description> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let format = by_ext(ext)
        .ok_or_else(|| Error::InvalidArgument(format!("{}: not a table file", path.display())))?;
    let env = Env::plain(fs);
    (format.describe)(&env, path)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashSet};
    use std::path::Path;

    use super::*;
    use crate::manifest::{self, edit::Edit};
    use crate::testing::fault::FaultFs;
    use crate::{Db, KeyspaceOptions, Options};

    #[test]
    fn codes_extensions_and_names_are_unique() {
        let mut codes = HashSet::new();
        let mut exts = HashSet::new();
        let mut names = HashSet::new();
        for f in FORMATS {
            if let Some(c) = f.code {
                assert!(codes.insert(c), "code {c} registered twice");
                assert_eq!(by_code(c).map(|g| g.ext), Some(f.ext));
            }
            assert!(exts.insert(f.ext), "extension {} registered twice", f.ext);
            assert!(names.insert(f.name), "name {} registered twice", f.name);
            assert_eq!(by_ext(f.ext).map(|g| g.name), Some(f.name));
            // Not another kind of file the directory holds.
            assert!(!["log", "dbtmp", ""].contains(&f.ext), "{}", f.ext);
            assert!(f.ext.bytes().all(|b| b.is_ascii_lowercase()), "{}", f.ext);
        }
        assert!(by_ext("log").is_none() && by_ext("csv").is_none());
    }

    /// Every format code a layout writes into the manifest is registered, every file a layout
    /// writes has a registered extension (and the one its code names), and every registered
    /// format is written by some layout (so this test covers each one).
    #[test]
    fn every_code_and_file_a_layout_writes_is_registered() {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for layout in crate::layout::implemented() {
            let fs = FaultFs::new(11);
            let mut o = Options::default();
            o.fs = Some(fs.as_dyn());
            o.background_threads = 1;
            {
                let db = Db::open("/db", o.clone()).expect("open");
                let mut ko = KeyspaceOptions::new(layout);
                ko.write_buffer_bytes = 64 * 1024;
                ko.trie.pile_size = 2;
                ko.trie.last_level_depth = 2;
                let ks = db.keyspace("k", ko).expect("keyspace");
                for round in 0..3u32 {
                    for i in 0..300u32 {
                        ks.put(format!("key{i:05}"), format!("v{round}-{i}"))
                            .expect("put");
                    }
                    db.flush().expect("flush");
                }
                db.compact().expect("compact");
            }
            // The open rewrites the manifest as one snapshot of the live files.
            drop(Db::open("/db", o).expect("reopen"));
            let dir = Path::new("/db");
            let env = Env::plain(fs.as_dyn());
            let n = manifest::read_current(&env, dir).expect("CURRENT");
            let data = env
                .read_all(&manifest::manifest_path(dir, n))
                .expect("manifest");
            let (records, _) = crate::log::read_records(&data);
            for r in records {
                let e = Edit::decode(r).expect("edit");
                for a in e.keyspaces.iter().flat_map(|k| &k.added) {
                    let f = by_code(a.format).unwrap_or_else(|| {
                        panic!("{layout}: format code {} is not registered", a.format)
                    });
                    let file = dir.join(format!("{:06}.{}", a.meta.file_no, f.ext));
                    assert!(fs.file_bytes(&file).is_some(), "{layout}: {file:?} missing");
                }
            }
            for p in fs.files() {
                let name = p.file_name().and_then(|n| n.to_str()).expect("name");
                let Some((num, ext)) = name.split_once('.') else {
                    continue;
                };
                if num.parse::<u64>().is_err() || ext == "log" {
                    continue;
                }
                let f = by_ext(ext)
                    .unwrap_or_else(|| panic!("{layout}: {name}: extension not registered"));
                seen.insert(f.name);
                let d = describe(fs.as_dyn(), &p).expect("describe");
                assert_eq!(
                    (d.format, d.size),
                    (f.name, fs.file_bytes(&p).expect("bytes").len() as u64)
                );
            }
        }
        // The test-only segment table has tests of its own (`layout::segments`).
        let all: BTreeSet<&str> = FORMATS
            .iter()
            .map(|f| f.name)
            .filter(|n| *n != crate::layout::segments::SEGMENTS.name)
            .collect();
        assert_eq!(seen, all, "formats no layout wrote in this test");
    }
}
