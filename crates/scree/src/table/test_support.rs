//! Tables that exist only as metadata, for unit tests of layout versions and policies.

use std::sync::Arc;

use super::{TableCtx, TableMeta};
use crate::cache::BlockCache;
use crate::fs::{std_fs::StdFs, Env};
use crate::key::{make_ikey, ValueKind};
use crate::manifest::edit::AddedTable;

/// Table files in `dir` on the real file system (`pread`), with a block cache of
/// `cache_bytes`.
pub(crate) fn std_ctx(dir: &std::path::Path, cache_bytes: usize) -> Arc<TableCtx> {
    std_ctx_with(dir, BlockCache::new(cache_bytes))
}

/// [`std_ctx`] with a given block cache.
pub(crate) fn std_ctx_with(dir: &std::path::Path, cache: BlockCache) -> Arc<TableCtx> {
    ctx_with(dir, cache, super::purge::Purger::inline())
}

/// [`std_ctx`] (no block cache) whose obsolete tables are torn down on a purge thread.
pub(crate) fn std_ctx_purged(dir: &std::path::Path) -> Arc<TableCtx> {
    let purge = super::purge::Purger::spawn("scree-purge-test");
    ctx_with(dir, BlockCache::new(0), purge)
}

fn ctx_with(
    dir: &std::path::Path,
    cache: BlockCache,
    purge: super::purge::Purger,
) -> Arc<TableCtx> {
    Arc::new(TableCtx {
        env: Env::plain(Arc::new(StdFs)),
        cache,
        dir: dir.to_path_buf(),
        open: super::OpenTables::default(),
        purge,
        compaction_wanted: Default::default(),
    })
}

/// A context whose directory holds no files (tables are never opened).
pub(crate) fn metadata_only_ctx() -> Arc<TableCtx> {
    std_ctx(&std::env::temp_dir().join("scree-unit-no-files"), 0)
}

/// A table of `level` holding user keys `lo..=hi` with sequence numbers `seqs` (min, max).
pub(crate) fn metadata_only_table(
    level: u32,
    no: u64,
    lo: &str,
    hi: &str,
    seqs: (u64, u64),
    size: u64,
) -> AddedTable {
    AddedTable {
        level,
        slot: 0,
        format: 0,
        meta: TableMeta {
            file_no: no,
            size,
            smallest: make_ikey(lo.as_bytes(), seqs.1, ValueKind::Put),
            largest: make_ikey(hi.as_bytes(), seqs.0, ValueKind::Put),
            entries: 2,
            min_seq: seqs.0,
            max_seq: seqs.1,
            append: None,
        },
    }
}
