//! Compaction filters: a keyspace's hook that drops values while compactions merge them
//! (expiry being the use it is made for), and the one rule every layout's merge applies it by
//! (docs/compaction-filter.md).
//!
//! The rule: a filter is asked only about a put whose sequence number is at or below the
//! smallest snapshot, which makes it the version of its key that every reader sees (older
//! versions of the key in the merge are hidden by it and dropped). When the filter drops it,
//! a bottommost merge writes nothing for the key (nothing older exists below), and any other
//! merge writes a tombstone with the put's sequence number in its place, so that an older
//! version below is never resurrected. A filtered key therefore reads as absent, at the tip
//! and in every snapshot, once the compaction has installed; a snapshot never sees an older
//! version come back. Puts above the smallest snapshot are kept until a later compaction.

use std::fmt::Debug;

use crate::key::ValueKind;
use crate::layout::JobCtx;

/// Decides, during compactions, which values to drop. Set it in
/// [`KeyspaceOptions::compaction_filter`](crate::KeyspaceOptions::compaction_filter).
///
/// A dropped value disappears for every reader, snapshots included, when the compaction that
/// dropped it installs, and not before (flushes and reads do not consult the filter): drop
/// only values that are dead whenever they are read, such as values past an expiry time.
/// The filter runs on background threads and must not write to the database.
pub trait CompactionFilter: Send + Sync + Debug {
    /// Whether the put of `value` under `key` is dropped.
    fn drop_value(&self, key: &[u8], value: &[u8]) -> bool;
}

/// What a merge writes for a put the filter was asked about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filtered {
    /// The put as it is.
    Keep,
    /// Nothing (a bottommost merge).
    Remove,
    /// A tombstone with the put's sequence number (a merge with data below it).
    Tombstone,
}

/// The filter's decision for one entry of a merge, by the rule of the module comment.
/// `bottommost`: nothing older of this key can exist below the merge's output.
pub(crate) fn decide(
    ctx: &JobCtx<'_>,
    user_key: &[u8],
    kind: u8,
    seq: u64,
    value: &[u8],
    bottommost: bool,
) -> Filtered {
    let Some(f) = ctx.opts.compaction_filter.as_deref() else {
        return Filtered::Keep;
    };
    if kind != ValueKind::Put as u8 || seq > ctx.smallest_snapshot {
        return Filtered::Keep;
    }
    if !f.drop_value(user_key, value) {
        Filtered::Keep
    } else if bottommost {
        Filtered::Remove
    } else {
        Filtered::Tombstone
    }
}
