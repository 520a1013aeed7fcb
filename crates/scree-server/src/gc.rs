//! The compaction filter of `redis.hash` and `redis.zset`: compactions drop the sub-entries
//! (hash fields, sorted-set members and score entries) whose collection is gone — the
//! `redis` header of their key is absent, expired, of another type, or of another
//! generation (docs/server.md, "Orphaned sub-entries").
//!
//! Why a dropped sub-entry is never one a reader could see: a reader reaches sub-entries only
//! through the live header of their key and its generation, and generations are never
//! reused, so once the header a sub-entry belongs to is replaced, deleted or expired, no
//! header can lead to it again. The filter is asked only about puts every reader sees
//! (docs/compaction-filter.md); a collection's header and its sub-entries are written in one
//! batch, which becomes visible as a whole, so the header of such a put is visible to the
//! filter's read. The server takes no snapshots (a snapshot older than a `SET` over a hash
//! could otherwise still see the old header while the fields were dropped).

use std::sync::Mutex;

use scree::WeakKeyspace;

use crate::store::{main_key, now_ms, parse_sub_key, Entry, Kind};

/// Drops the sub-entries of a collection of `kind` whose header no longer names them.
#[derive(Debug)]
pub struct OrphanFilter {
    main: WeakKeyspace,
    main_prefix: usize,
    kind: Kind,
    /// The sub-prefix (`group | keylen | key | gen`) last found orphaned: a collection's
    /// sub-entries are adjacent in a merge, and an orphan stays one (its generation never
    /// comes back), so the next ones are dropped without reading the header again. Live
    /// collections are not cached: their header may be replaced at any moment.
    dead: Mutex<Vec<u8>>,
}

impl OrphanFilter {
    /// A filter of the sub-entries of collections of `kind`, whose headers `main` holds
    /// (stored keys with `main_prefix` bytes of hash before the Redis key).
    pub fn new(main: WeakKeyspace, main_prefix: usize, kind: Kind) -> OrphanFilter {
        OrphanFilter {
            main,
            main_prefix,
            kind,
            dead: Mutex::new(Vec::new()),
        }
    }

    /// Whether the collection (`key`, `gen`) is gone; `None` when that cannot be told (the
    /// header cannot be read or is not a header): the sub-entry is then kept.
    fn orphaned(&self, key: &[u8], gen: u64) -> Option<bool> {
        let Some(v) = self.main.get(main_key(self.main_prefix, key)).ok()? else {
            return Some(true);
        };
        let e = Entry::decode(&v).ok()?;
        Some(
            e.expire_at.is_some_and(|t| t <= now_ms()) || e.kind != self.kind || {
                let (g, _) = e.gen_count();
                g != gen
            },
        )
    }
}

impl scree::CompactionFilter for OrphanFilter {
    fn drop_value(&self, key: &[u8], _value: &[u8]) -> bool {
        let Some((user_key, gen, plen)) = parse_sub_key(key) else {
            return false;
        };
        let sub = key.get(..plen).unwrap_or(key);
        let dead = || self.dead.lock().unwrap_or_else(|p| p.into_inner());
        if *dead() == sub {
            return true;
        }
        // Read without the cache's lock held (two compactions may run at once).
        if self.orphaned(user_key, gen) == Some(true) {
            let mut d = dead();
            d.clear();
            d.extend_from_slice(sub);
            true
        } else {
            false
        }
    }
}
