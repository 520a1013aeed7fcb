//! The sorted table's entry in the format registry (`crate::table_format`): reading a whole
//! table for `scree check` (every block's checksum, key order, the manifest's key range and
//! entry count), its entries in order, and a description from its footer and index.

use std::path::Path;

use super::reader::load_index;
use super::{Footer, TableFile, TableMeta};
use crate::error::{Error, Result};
use crate::fs::Env;
use crate::iter::InternalIter;
use crate::key::{self, cmp_ikey};
use crate::table_format::{Description, EntryVisitor, Verified};

/// Reads every block of the table `f` names: footer, index, filter and every data block; keys
/// strictly increasing and inside the recorded key range, and the recorded entry count.
pub(super) fn verify(f: &TableFile, out: &mut Verified) -> Result<()> {
    let path = f.path();
    let reader = f.reader()?;
    out.blocks += reader.blocks()? as u64;
    let mut it = f.iter(false)?;
    it.seek_to_first()?;
    let mut prev: Option<Vec<u8>> = None;
    let mut n = 0u64;
    while it.valid() {
        let k = it.key();
        if prev
            .as_deref()
            .is_some_and(|p| cmp_ikey(p, k) != std::cmp::Ordering::Less)
        {
            out.problems
                .push(Error::corruption(&path, 0, "keys out of order"));
            return Ok(());
        }
        if n == 0 || n + 1 == f.meta.entries {
            check_key_range(&path, &f.meta, k, out);
        }
        prev = Some(k.to_vec());
        n += 1;
        it.next()?;
    }
    if let Some(last) = &prev {
        check_key_range(&path, &f.meta, last, out);
    }
    out.entries += n;
    if n != f.meta.entries {
        out.problems.push(Error::corruption(
            &path,
            0,
            format!("{n} entries, the manifest says {}", f.meta.entries),
        ));
    }
    Ok(())
}

fn check_key_range(path: &Path, meta: &TableMeta, ikey: &[u8], out: &mut Verified) {
    if cmp_ikey(ikey, &meta.smallest).is_lt() || cmp_ikey(ikey, &meta.largest).is_gt() {
        out.problems.push(Error::corruption(
            path,
            0,
            format!(
                "entry {:?} outside the key range the manifest records",
                String::from_utf8_lossy(key::user_key(ikey))
            ),
        ));
    }
}

/// Every entry of the table, in key order.
pub(super) fn for_each(f: &TableFile, visit: EntryVisitor<'_>) -> Result<()> {
    let mut it = f.iter(false)?;
    it.seek_to_first()?;
    while it.valid() {
        visit(it.key(), it.value())?;
        it.next()?;
    }
    Ok(())
}

/// The footer's version, the data blocks the index lists, and the index and filter sizes.
pub(super) fn describe(env: &Env, path: &Path) -> Result<Description> {
    let file = env.open(path, false)?;
    let footer = Footer::read(&file)?;
    let index = load_index(&file, footer.index)?;
    Ok(Description {
        format: super::SORTED.name,
        version: footer.version,
        size: file.len(),
        facts: vec![
            ("data_blocks", index.len() as u64),
            ("index_bytes", footer.index.1 as u64),
            ("index_memory_bytes", index.weight() as u64),
            ("filter_bytes", footer.filter.1 as u64),
        ],
    })
}
