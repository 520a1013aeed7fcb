//! The HTable's and the BloomCluster's entries in the format registry (`crate::table_format`):
//! reading a whole file for `scree check` (every bucket, filter and column block checked), an
//! HTable's entries, and descriptions from footers and trailers.

use std::path::Path;

use super::cluster::{
    BloomClusterBuilder, BloomClusterReader, BLOOM_CLUSTER, CLUSTER_FORMAT_VERSION,
};
use super::{HTableReader, FORMAT_VERSION, HTABLE};
use crate::error::{Error, Result};
use crate::fs::Env;
use crate::key;
use crate::stats::ReadKind;
use crate::table::TableFile;
use crate::table_format::{Description, EntryVisitor, Verified};

/// Opens the HTable `f` names with its filters (footer, metadata and filter block checked).
fn open_htable(f: &TableFile) -> Result<HTableReader> {
    let file = f.ctx().env.open(&f.path(), false)?;
    HTableReader::open_kind(file, true, ReadKind::Compaction)
}

/// Reads every block of the HTable `f` names: footer, metadata, filters and every bucket and
/// overflow record; every entry key an internal key, and the recorded entry count (when the
/// manifest records one).
pub(super) fn verify_htable(f: &TableFile, out: &mut Verified) -> Result<()> {
    let path = f.path();
    let r = open_htable(f)?;
    out.blocks += u64::from(r.n_buckets());
    let mut n = 0u64;
    r.for_each(|_, ikey, _| {
        if !key::valid_ikey(ikey) {
            return Err(Error::corruption(
                &path,
                0,
                "entry key is not an internal key",
            ));
        }
        n += 1;
        Ok(())
    })?;
    out.entries += n;
    if f.meta.entries != 0 && n != f.meta.entries {
        out.problems.push(Error::corruption(
            &path,
            0,
            format!("{n} entries, the manifest says {}", f.meta.entries),
        ));
    }
    Ok(())
}

/// Every entry of the HTable, in (hash, internal key) order.
pub(super) fn for_each_htable(f: &TableFile, visit: EntryVisitor<'_>) -> Result<()> {
    open_htable(f)?.for_each(|_, ikey, value| visit(ikey, value))
}

/// The footer's bucket count and shift, items, filter bits per key, and the metadata's
/// migration records and overflow keys.
pub(super) fn describe_htable(env: &Env, path: &Path) -> Result<Description> {
    let r = HTableReader::open(env.open(path, false)?, false)?;
    Ok(Description {
        format: HTABLE.name,
        version: FORMAT_VERSION,
        size: r.file_size(),
        facts: vec![
            ("buckets", u64::from(r.n_buckets())),
            ("bucket_shift", u64::from(r.bucket_shift())),
            ("items", r.item_count()),
            ("bloom_bits_per_key", u64::from(r.bits_per_key())),
            ("migration_records", r.migration_records() as u64),
            ("overflow_keys", r.overflow_keys() as u64),
        ],
    })
}

/// Reads the BloomCluster `f` names: its trailer and every column block.
pub(super) fn verify_cluster(f: &TableFile, out: &mut Verified) -> Result<()> {
    let r = BloomClusterReader::open(f.ctx().env.open(&f.path(), false)?)?;
    BloomClusterBuilder::from_reader_kind(&r, ReadKind::Compaction)?;
    out.blocks += r.n_blocks() as u64;
    Ok(())
}

/// The trailer's columns, sub-levels and blocks.
pub(super) fn describe_cluster(env: &Env, path: &Path) -> Result<Description> {
    let file = env.open(path, false)?;
    let size = file.len();
    let r = BloomClusterReader::open(file)?;
    Ok(Description {
        format: BLOOM_CLUSTER.name,
        version: CLUSTER_FORMAT_VERSION,
        size,
        facts: vec![
            ("columns", u64::from(r.n_columns())),
            ("sublevels", r.n_sublevels() as u64),
            ("blocks", r.n_blocks() as u64),
        ],
    })
}
