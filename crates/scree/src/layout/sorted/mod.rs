//! What the sorted layouts (`leveled`, `fragmented`) share: the flush of a memtable into one
//! sorted table, and the merge of compactions, which reads merged internal entries, drops
//! versions no snapshot can see (and tombstones at the bottom), zeroes the sequence numbers of
//! versions every snapshot sees at the bottom, and cuts output into sorted tables.

use std::sync::Arc;

use crate::compaction_filter::{decide, Filtered};
use crate::error::Result;
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
