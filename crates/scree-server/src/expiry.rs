//! The compaction filter of the `redis` keyspace: compactions drop keys whose expiry time has
//! passed (docs/compaction-filter.md gives the engine's rule; reads check expiry themselves,
//! so an expired key is never returned before a compaction reaches it).

use crate::store::{header_expired, now_ms};

/// Drops a stored header whose expiry time is at or before now.
#[derive(Debug, Default)]
pub struct ExpiryFilter;

impl scree::CompactionFilter for ExpiryFilter {
    fn drop_value(&self, _key: &[u8], value: &[u8]) -> bool {
        header_expired(value, now_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Entry, Kind};
    use scree::CompactionFilter;

    #[test]
    fn only_expired_headers_are_dropped() {
        let now = now_ms();
        let e = |kind, expire_at| {
            let body = if kind == Kind::Str {
                b"v".to_vec()
            } else {
                vec![0; 16]
            };
            Entry {
                kind,
                expire_at,
                body,
            }
            .encode()
        };
        let f = ExpiryFilter;
        assert!(f.drop_value(b"k", &e(Kind::Str, Some(now - 1))));
        assert!(f.drop_value(b"k", &e(Kind::Hash, Some(1))));
        assert!(!f.drop_value(b"k", &e(Kind::Str, Some(now + 60_000))));
        assert!(!f.drop_value(b"k", &e(Kind::Zset, None)));
        assert!(!f.drop_value(b"k", &e(Kind::Str, None)));
        // Bytes that are no header are kept, never guessed at.
        assert!(!f.drop_value(b"k", b""));
        assert!(!f.drop_value(b"k", &[0x85, 1, 2]));
    }
}
