//! What the sorted layouts (`leveled`, `fragmented`) share: the flush of a memtable into one
//! sorted table, and the merge of compactions, which reads merged internal entries, drops
//! versions no snapshot can see (and tombstones at the bottom), zeroes the sequence numbers of
//! versions every snapshot sees at the bottom, and cuts output into sorted tables; and the
//! split of one merge into key ranges merged in parallel (sub-compactions).

use std::sync::Arc;

use crate::compaction_filter::{decide, Filtered};
use crate::error::{Error, Result};
use crate::iter::InternalIter;
use crate::key::{self, ValueKind};
use crate::layout::JobCtx;
use crate::memtable::Memtable;
use crate::stats::WriteCause;
use crate::table::{table_path, TableBuilder, TableFile, TableMeta};

/// Where the merge may start a new output table.
pub trait Cutter {
    /// Called before adding the first version of each user key; `true` closes the current
    /// table (whose size is `current_bytes`) so the key starts a new one.
    fn cut_before(&mut self, user_key: &[u8], current_bytes: u64) -> bool;
}

/// Cuts at a target size only.
pub struct SizeCutter(pub u64);

impl Cutter for SizeCutter {
    fn cut_before(&mut self, _user_key: &[u8], current_bytes: u64) -> bool {
        current_bytes >= self.0
    }
}

/// The largest sequence number of the writes behind the entries that `tables` hold with
/// sequence number 0 (0 when none holds one): such an entry's own number is gone, and a table
/// made from it must still count it in its [`TableMeta::max_seq`].
pub fn zeroed_bound<'a>(tables: impl IntoIterator<Item = &'a Arc<TableFile>>) -> u64 {
    tables
        .into_iter()
        .filter(|t| t.meta.entries > 0 && t.meta.min_seq == 0)
        .map(|t| t.meta.max_seq)
        .max()
        .unwrap_or(0)
}

/// What the merge keeps of one version ([`merge_visible`]).
pub struct Kept<'a> {
    /// The internal key to write (sequence number 0 when `zeroed` is set).
    pub ikey: &'a [u8],
    /// The value.
    pub value: &'a [u8],
    /// Whether it is the first version of its user key that the merge keeps.
    pub first_of_key: bool,
    /// The largest sequence number of the write behind the entry when the key written has
    /// sequence number 0 (zeroed here, or arriving with 0): the output's `max_seq` must count
    /// it ([`TableBuilder::note_seq`]).
    pub note_seq: Option<u64>,
}

/// Rules of a merge.
#[derive(Debug, Clone, Copy)]
pub struct MergeRules {
    /// No older data for these keys exists below the output: tombstones invisible to every
    /// snapshot can be dropped.
    pub bottommost: bool,
    /// At the bottom, versions every snapshot sees are written with sequence number 0 (only
    /// where no older version of the key can ever be merged below them again).
    pub zero_seqs: bool,
    /// The [`zeroed_bound`] of the input tables.
    pub zeroed_max: u64,
}

/// Merges `input` (positioned by this function) and hands each version it keeps to `sink`,
/// in internal-key order: versions hidden by a newer one every snapshot sees are dropped, and
/// tombstones every snapshot sees when the merge is bottommost; the keyspace's compaction
/// filter drops puts by the rule of `compaction_filter` (nothing at the bottom, a tombstone
/// above it). The snapshot rule every compaction shares, whatever it writes to (sorted
/// tables, DTable segments).
pub fn merge_visible(
    ctx: &JobCtx<'_>,
    input: &mut dyn InternalIter,
    rules: MergeRules,
    sink: &mut dyn FnMut(Kept<'_>) -> Result<()>,
) -> Result<()> {
    let mut last_user: Option<Vec<u8>> = None;
    // Sequence number of the previous (newer) entry of the same user key.
    let mut last_seq_for_key = u64::MAX;
    // Whether a version of the current user key was kept.
    let mut kept_of_key = false;
    // An internal key rewritten with sequence number 0.
    let mut zeroed: Vec<u8> = Vec::new();
    input.seek_to_first()?;
    while input.valid() {
        let ik = input.key();
        let p = key::parse(ik);
        if last_user.as_deref() != Some(p.user_key) {
            last_user = Some(p.user_key.to_vec());
            last_seq_for_key = u64::MAX;
            kept_of_key = false;
        }
        let mut drop = false;
        if last_seq_for_key <= ctx.smallest_snapshot {
            // A newer version of this key is visible to every snapshot: this one is hidden.
            drop = true;
        } else if p.kind == ValueKind::Delete as u8
            && p.seq <= ctx.smallest_snapshot
            && rules.bottommost
        {
            drop = true;
        }
        last_seq_for_key = p.seq;
        let filtered = if drop {
            Filtered::Keep
        } else {
            decide(
                ctx,
                p.user_key,
                p.kind,
                p.seq,
                input.value(),
                rules.bottommost,
            )
        };
        if filtered == Filtered::Remove {
            // The filter dropped the version every reader sees, at the bottom: the key goes
            // (its older versions are hidden by it, as they would be by the put).
            drop = true;
        }
        if filtered == Filtered::Tombstone {
            let first_of_key = !kept_of_key;
            kept_of_key = true;
            zeroed.clear();
            zeroed.extend_from_slice(p.user_key);
            zeroed.extend_from_slice(&key::trailer(p.seq, ValueKind::Delete).to_le_bytes());
            sink(Kept {
                ikey: &zeroed,
                value: &[],
                first_of_key,
                note_seq: (p.seq == 0).then_some(rules.zeroed_max),
            })?;
        } else if !drop {
            let first_of_key = !kept_of_key;
            kept_of_key = true;
            if rules.bottommost && rules.zero_seqs && p.seq != 0 && p.seq <= ctx.smallest_snapshot {
                // Every snapshot sees this version and nothing older of its key exists
                // below: it is written with sequence number 0, whose block tag is one
                // byte instead of three or four (as RocksDB's bottommost level). It is the
                // last version of its key that the merge keeps (older ones are hidden),
                // so the output stays in internal-key order.
                zeroed.clear();
                zeroed.extend_from_slice(p.user_key);
                zeroed.extend_from_slice(&u64::from(p.kind).to_le_bytes());
                sink(Kept {
                    ikey: &zeroed,
                    value: input.value(),
                    first_of_key,
                    note_seq: Some(p.seq),
                })?;
            } else {
                sink(Kept {
                    ikey: ik,
                    value: input.value(),
                    first_of_key,
                    note_seq: (p.seq == 0).then_some(rules.zeroed_max),
                })?;
            }
        }
        input.next()?;
    }
    Ok(())
}

/// Merges `input` (positioned by this function) into new tables.
/// `bottommost` says that no older data for these keys exists below the output, so tombstones
/// invisible to every snapshot can be dropped and versions every snapshot sees are written
/// with sequence number 0. `zeroed_max` is the [`zeroed_bound`] of the input tables.
///
/// An output's `max_seq` bounds the sequence numbers of the writes it holds, those written
/// with 0 included (their own number, or `zeroed_max` for entries that arrive with 0):
/// point-in-time recovery compares it with the WAL's cut, and a fragmented guard orders its
/// tables by it. Read from the written entries, a table merged at the bottom claimed to hold
/// nothing newer than 0, and recovery kept such a table's writes from after the cut.
pub fn merge_into_tables(
    ctx: &JobCtx<'_>,
    input: &mut dyn InternalIter,
    bottommost: bool,
    zeroed_max: u64,
    cutter: &mut dyn Cutter,
    cause: WriteCause,
) -> Result<Vec<TableMeta>> {
    let mut out = Vec::new();
    let mut builder: Option<TableBuilder> = None;
    let rules = MergeRules {
        bottommost,
        zero_seqs: true,
        zeroed_max,
    };
    merge_visible(ctx, input, rules, &mut |k| {
        if k.first_of_key {
            if let Some(b) = builder.as_ref() {
                if cutter.cut_before(key::user_key(k.ikey), b.estimated_size()) {
                    if let Some(b) = builder.take() {
                        out.push(b.finish()?);
                    }
                    ctx.flush_point()?;
                }
            }
        }
        if builder.is_none() {
            let no = ctx.new_file_no();
            let w = ctx
                .tables
                .env
                .create(&table_path(&ctx.tables.dir, no), cause)?;
            builder = Some(TableBuilder::new(
                w,
                no,
                ctx.opts.block_size,
                ctx.opts.bloom_bits_per_key,
            ));
        }
        if let Some(b) = builder.as_mut() {
            b.add(k.ikey, k.value)?;
            if let Some(s) = k.note_seq {
                b.note_seq(s);
            }
        }
        Ok(())
    })?;
    if let Some(b) = builder.take() {
        if b.entries() > 0 {
            out.push(b.finish()?);
        }
    }
    Ok(out)
}

/// A range of user keys `[lo, hi)`, `None` for an open end: one part of a merge split by key.
pub type KeyRange = (Option<Arc<[u8]>>, Option<Arc<[u8]>>);

/// Boundaries that split a merge of `tables` into at most `parts` key ranges of about equal
/// input bytes, none expected below `min_part_bytes` (fewer parts when the inputs are
/// smaller; none when one part is all there is). They are user keys in increasing order,
/// taken from the tables' indexes (each data block's separator and size: no data block is
/// read), so the parts stay close to equal however the tables overlap: overlapping level-0
/// tables that each span the whole key space, or a few narrow tables beside many wide ones.
pub fn split_keys(
    tables: &[Arc<TableFile>],
    parts: usize,
    min_part_bytes: u64,
) -> Result<Vec<Arc<[u8]>>> {
    let total: u64 = tables.iter().map(|t| t.meta.size).sum();
    let by_size = usize::try_from(total / min_part_bytes.max(1)).unwrap_or(usize::MAX);
    let parts = parts.min(by_size);
    if parts <= 1 {
        return Ok(Vec::new());
    }
    let mut blocks: Vec<(Vec<u8>, u64)> = Vec::new();
    for t in tables {
        blocks.extend(t.reader()?.block_sizes()?);
    }
    blocks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let block_total: u128 = blocks.iter().map(|b| u128::from(b.1)).sum();
    let mut out: Vec<Arc<[u8]>> = Vec::with_capacity(parts - 1);
    let mut seen: u128 = 0;
    for (sep, size) in &blocks {
        // A boundary goes after the block that completes the next part's share: the keys up
        // to its separator belong to the part before (a block's keys are at most its
        // separator; the boundary itself starts the next part, which is empty at worst).
        let want = (out.len() + 1) as u128;
        if out.len() + 1 >= parts {
            break;
        }
        seen += u128::from(*size);
        if seen * parts as u128 >= block_total * want
            && !sep.is_empty()
            && out.last().is_none_or(|b| b.as_ref() < sep.as_slice())
        {
            out.push(Arc::from(sep.as_slice()));
        }
    }
    Ok(out)
}

/// The key ranges that `bounds` (increasing user keys, as [`split_keys`] returns) cut the key
/// space into: below the first, between each two, from the last on. Every user key lies in
/// exactly one of them.
pub fn key_ranges(bounds: &[Arc<[u8]>]) -> Vec<KeyRange> {
    let mut out = Vec::with_capacity(bounds.len() + 1);
    let mut lo: Option<Arc<[u8]>> = None;
    for b in bounds {
        out.push((lo.take(), Some(b.clone())));
        lo = Some(b.clone());
    }
    out.push((lo, None));
    out
}

/// Runs `f` on every item of `items` at once, the first on the calling thread and each other
/// on a scoped thread of its own, and returns the results in the order of `items`: the parts
/// of a job split by key, merged in parallel and installed together by one edit. The first
/// error is returned (after every part has ended); a part that panics becomes a
/// `BackgroundError` naming the bug; a thread the system refuses to start runs its part on the
/// calling thread afterwards.
pub fn run_parts<A: Sync, T: Send>(
    items: &[A],
    f: &(dyn Fn(&A) -> Result<T> + Sync),
) -> Result<Vec<T>> {
    let Some((first, rest)) = items.split_first() else {
        return Ok(Vec::new());
    };
    std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(rest.len());
        for item in rest {
            let h = std::thread::Builder::new()
                .name("scree-subcompaction".into())
                .spawn_scoped(s, move || f(item));
            handles.push((item, h.ok()));
        }
        let mut results = vec![f(first)];
        for (item, h) in handles {
            results.push(match h {
                Some(h) => h
                    .join()
                    .unwrap_or_else(|p| Err(Error::from_panic("sub-compaction", p.as_ref()))),
                None => f(item),
            });
        }
        results.into_iter().collect()
    })
}

/// Writes a frozen memtable as one sorted table (None if it is empty).
pub fn flush_to_table(ctx: &JobCtx<'_>, mem: &Memtable) -> Result<Option<TableMeta>> {
    if mem.is_empty() {
        return Ok(None);
    }
    let no = ctx.new_file_no();
    let w = ctx.tables.env.create(
        &crate::table::table_path(&ctx.tables.dir, no),
        WriteCause::Flush,
    )?;
    let mut b =
        crate::table::TableBuilder::new(w, no, ctx.opts.block_size, ctx.opts.bloom_bits_per_key);
    mem.for_each_in_order(|k, v| b.add(k, v))?;
    Ok(Some(b.finish()?))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{key_ranges, run_parts, split_keys, KeyRange};
    use crate::error::Error;
    use crate::key::{make_ikey, ValueKind};
    use crate::stats::WriteCause;
    use crate::table::test_support::std_ctx;
    use crate::table::{table_path, TableBuilder, TableCtx, TableFile};

    /// A table of `keys` (ascending, each with one put of a 40-byte value), 256-byte blocks.
    fn table(ctx: &Arc<TableCtx>, no: u64, keys: &[String]) -> Arc<TableFile> {
        let w = ctx
            .env
            .create(&table_path(&ctx.dir, no), WriteCause::Flush)
            .expect("create");
        let mut b = TableBuilder::new(w, no, 256, 10);
        for (i, k) in keys.iter().enumerate() {
            b.add(
                &make_ikey(k.as_bytes(), i as u64 + 1, ValueKind::Put),
                &[7u8; 40],
            )
            .expect("add");
        }
        TableFile::new(b.finish().expect("finish"), ctx.clone())
    }

    fn in_range(r: &KeyRange, k: &[u8]) -> bool {
        r.0.as_deref().is_none_or(|lo| k >= lo) && r.1.as_deref().is_none_or(|hi| k < hi)
    }

    /// Two tables over the whole key space and a narrow one: the boundaries increase, every
    /// input key lies in exactly one range, and the parts hold about equal shares of the
    /// entries. Small inputs are not split.
    #[test]
    fn a_split_covers_every_key_once_in_parts_of_about_equal_size() {
        let dir = tempfile::tempdir().expect("dir");
        let ctx = std_ctx(dir.path(), 0);
        let key = |i: u32| format!("key{i:06}");
        let even: Vec<String> = (0..4000).filter(|i| i % 2 == 0).map(key).collect();
        let thirds: Vec<String> = (0..4000).filter(|i| i % 3 == 0).map(key).collect();
        let narrow: Vec<String> = (1000..1400).map(key).collect();
        let tables = vec![
            table(&ctx, 1, &even),
            table(&ctx, 2, &thirds),
            table(&ctx, 3, &narrow),
        ];
        let all: Vec<&String> = even.iter().chain(&thirds).chain(&narrow).collect();
        let total: u64 = tables.iter().map(|t| t.meta.size).sum();
        for parts in [2usize, 3, 5, 8] {
            let bounds = split_keys(&tables, parts, 1).expect("split");
            assert_eq!(bounds.len(), parts - 1, "{parts} parts: {bounds:?}");
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
            let ranges = key_ranges(&bounds);
            assert_eq!(ranges.len(), parts);
            let mut per_part = vec![0usize; parts];
            for k in &all {
                let holding: Vec<usize> = (0..parts)
                    .filter(|&p| in_range(&ranges[p], k.as_bytes()))
                    .collect();
                assert_eq!(holding.len(), 1, "{k} in parts {holding:?}");
                per_part[holding[0]] += 1;
            }
            let share = all.len() as f64 / parts as f64;
            for (p, &n) in per_part.iter().enumerate() {
                assert!(
                    (n as f64 - share).abs() <= share * 0.25,
                    "{parts} parts: part {p} holds {n} of {} entries",
                    all.len()
                );
            }
        }
        // Parts of at least half the input: two; of more than all of it: none.
        assert_eq!(split_keys(&tables, 8, total / 2).expect("split").len(), 1);
        assert!(split_keys(&tables, 8, total + 1).expect("split").is_empty());
        assert!(split_keys(&tables, 1, 1).expect("split").is_empty());
        // No boundary: one range holding everything.
        let whole = key_ranges(&[]);
        assert_eq!(whole.len(), 1);
        assert!(in_range(&whole[0], b"") && in_range(&whole[0], b"\xff\xff"));
    }

    /// Parts run at once, results in order; an error or a panic in any part fails the whole.
    #[test]
    fn parts_run_in_parallel_and_fail_together() {
        let items: Vec<u32> = (0..6).collect();
        let got = run_parts(&items, &|&i| Ok(i * 10)).expect("run");
        assert_eq!(got, vec![0, 10, 20, 30, 40, 50]);
        // All parts are running at the same time: each waits for all the others.
        let barrier = std::sync::Barrier::new(items.len());
        let got = run_parts(&items, &|&i| {
            barrier.wait();
            Ok(i)
        })
        .expect("run");
        assert_eq!(got, items);
        let err = run_parts(&items, &|&i| {
            if i == 4 {
                Err(Error::InvalidArgument("part 4".into()))
            } else {
                Ok(i)
            }
        });
        assert!(matches!(err, Err(Error::InvalidArgument(m)) if m == "part 4"));
        let err = run_parts(&items, &|&i| {
            if i == 3 {
                panic!("part 3 broke");
            }
            Ok(i)
        });
        match err {
            Err(Error::BackgroundError(m)) => {
                assert!(
                    m.contains("sub-compaction panicked") && m.contains("part 3 broke"),
                    "{m}"
                )
            }
            other => panic!("unexpected {other:?}"),
        }
        let none: Vec<u32> = Vec::new();
        assert!(run_parts(&none, &|&i| Ok(i)).expect("run").is_empty());
    }
}
