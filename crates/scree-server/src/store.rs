//! The Redis data model on Scree keyspaces: which keyspace holds what, the key and value
//! encodings (docs/server.md, "Key encoding"), expiry, and every data operation the commands
//! need, each atomic under the lock stripes of the keys it touches.
//!
//! - `redis` (the `--layout` keyspace): one entry per Redis key. Value: a header byte (type in
//!   the low bits, `0x80` when an expiry follows), the expiry as u64 LE milliseconds since the
//!   Unix epoch when present, then the body: a string's bytes, or a hash's or sorted set's
//!   generation (u64 LE) and element count (u64 LE). Under a `semisorted:N` layout the stored
//!   key is N bytes of the key's hash, then the key (every key then has its own group).
//! - `redis.hash`: one entry per field, key `group(8) | keylen(u32 BE) | key | gen(u64 BE) |
//!   field`, where `group` is the xxh3 hash of the Redis key. On `semisorted` it is a
//!   `semisorted:8` keyspace (a hash is one prefix group), else a sorted one.
//! - `redis.zset`: per member `sub | 'm' | member` → score (f64 LE bits), and the score index
//!   `sub | 's' | order-preserving score (8 bytes) | member` → empty, on a sorted layout.
//! - `redis.keys`, only when `redis` has no key order to walk (`trie`, `semisorted`): the key
//!   directory, one empty entry per Redis key on a `leveled` keyspace, put and deleted in the
//!   same batch as the key's header, so that `SCAN` and `FLUSHDB` can walk the keys. Keys that
//!   expire leave their directory entry until `SCAN` finds it stale and deletes it.
//! - `redis.sys`: the server's own records (the generation high-water mark; the fsync
//!   heartbeat).
//!
//! Sub-entries carry the generation of the header that made them, and a new header never
//! reuses a generation, so the sub-entries of a hash or sorted set that is replaced (a plain
//! `SET` or `MSET` writes its header blind, without reading the old one), expires or is
//! flushed are never read again: the compaction filter of `redis.hash` and `redis.zset`
//! (`gc.rs`) drops them. `DEL`, and a write that finds an expired collection, delete them at
//! once.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use scree::{Db, Keyspace, KeyspaceOptions, Layout, Order, WriteBatch, WriteOptions};

use crate::expiry::ExpiryFilter;
use crate::gc::OrphanFilter;
use crate::resp::Reply;

/// The keyspace of Redis keys.
pub const KS_MAIN: &str = "redis";
/// The keyspace of hash fields.
pub const KS_HASH: &str = "redis.hash";
/// The keyspace of sorted-set members and their score index.
pub const KS_ZSET: &str = "redis.zset";
/// The server's own records.
pub const KS_SYS: &str = "redis.sys";
/// The key directory of a `redis` keyspace without key order.
pub const KS_KEYS: &str = "redis.keys";

/// Bytes of the group hash that starts every sub-entry key.
pub const GROUP_BYTES: usize = 8;

const EXPIRES: u8 = 0x80;
const LOCK_STRIPES: usize = 1024;
/// Generations are handed out from blocks this large; the block's end is persisted first.
const GEN_BLOCK: u64 = 1 << 20;
const GEN_KEY: &[u8] = b"generation-high-water";
const FSYNC_KEY: &[u8] = b"fsync-heartbeat";

/// The type of a Redis key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A string.
    Str = 1,
    /// A hash.
    Hash = 2,
    /// A sorted set.
    Zset = 3,
}

impl Kind {
    /// The name `TYPE` replies.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Str => "string",
            Kind::Hash => "hash",
            Kind::Zset => "zset",
        }
    }

    fn from_byte(b: u8) -> Option<Kind> {
        match b & !EXPIRES {
            1 => Some(Kind::Str),
            2 => Some(Kind::Hash),
            3 => Some(Kind::Zset),
            _ => None,
        }
    }
}

/// A decoded header entry of the `redis` keyspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The type.
    pub kind: Kind,
    /// Expiry, milliseconds since the Unix epoch.
    pub expire_at: Option<u64>,
    /// A string's bytes, or a collection's generation and count.
    pub body: Vec<u8>,
}

impl Entry {
    /// Decodes a stored value.
    pub fn decode(v: &[u8]) -> Result<Entry, CmdError> {
        let (kind, expire_at, at) = Self::header(v)?;
        Ok(Entry {
            kind,
            expire_at,
            body: v.get(at..).unwrap_or_default().to_vec(),
        })
    }

    /// The type, expiry and body offset of a stored value, checked as [`Entry::decode`]
    /// checks them (without copying the body).
    fn header(v: &[u8]) -> Result<(Kind, Option<u64>, usize), CmdError> {
        let bad = || CmdError::Msg("ERR stored value has a bad header (corrupt data)".into());
        let (&h, rest) = v.split_first().ok_or_else(bad)?;
        let kind = Kind::from_byte(h).ok_or_else(bad)?;
        let (expire_at, body) = if h & EXPIRES != 0 {
            let (t, body) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
            (Some(u64::from_le_bytes(*t)), body)
        } else {
            (None, rest)
        };
        if kind != Kind::Str && body.len() != 16 {
            return Err(bad());
        }
        Ok((kind, expire_at, v.len() - body.len()))
    }

    /// Encodes for storage.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(9 + self.body.len());
        match self.expire_at {
            Some(t) => {
                v.push(self.kind as u8 | EXPIRES);
                v.extend_from_slice(&t.to_le_bytes());
            }
            None => v.push(self.kind as u8),
        }
        v.extend_from_slice(&self.body);
        v
    }

    fn string(value: &[u8], expire_at: Option<u64>) -> Entry {
        Entry {
            kind: Kind::Str,
            expire_at,
            body: value.to_vec(),
        }
    }

    fn collection(kind: Kind, gen: u64, count: u64, expire_at: Option<u64>) -> Entry {
        let mut body = gen.to_le_bytes().to_vec();
        body.extend_from_slice(&count.to_le_bytes());
        Entry {
            kind,
            expire_at,
            body,
        }
    }

    /// A collection's generation and element count.
    pub fn gen_count(&self) -> (u64, u64) {
        let g = self.body.first_chunk::<8>().copied().unwrap_or_default();
        let c = self
            .body
            .get(8..16)
            .and_then(|b| b.first_chunk::<8>())
            .copied()
            .unwrap_or_default();
        (u64::from_le_bytes(g), u64::from_le_bytes(c))
    }

    fn expired(&self, now: u64) -> bool {
        self.expire_at.is_some_and(|t| t <= now)
    }
}

/// Whether the stored header `v` has expired at `now_ms` (the compaction filter's question).
pub fn header_expired(v: &[u8], now_ms: u64) -> bool {
    match v.split_first() {
        Some((&h, rest)) if h & EXPIRES != 0 && Kind::from_byte(h).is_some() => rest
            .first_chunk::<8>()
            .is_some_and(|t| u64::from_le_bytes(*t) <= now_ms),
        _ => false,
    }
}

/// A failed command, replied as an error.
#[derive(Debug)]
pub enum CmdError {
    /// `-WRONGTYPE ...`
    WrongType,
    /// The full error text after `-` (with its code: `ERR ...`).
    Msg(String),
}

impl CmdError {
    /// `ERR <msg>`.
    pub fn err(msg: impl std::fmt::Display) -> CmdError {
        CmdError::Msg(format!("ERR {msg}"))
    }

    /// The reply.
    pub fn reply(self) -> Reply {
        match self {
            CmdError::WrongType => Reply::Error(
                "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
            ),
            CmdError::Msg(m) => Reply::Error(m),
        }
    }
}

impl From<scree::Error> for CmdError {
    fn from(e: scree::Error) -> Self {
        CmdError::err(e)
    }
}

/// One `SCAN` step: the stored key to continue after (`None` at the end) and the keys found.
pub type ScanStep = (Option<Vec<u8>>, Vec<Vec<u8>>);

/// Result of a data operation.
pub type Res<T> = Result<T, CmdError>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `SET`'s condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cond {
    /// Always.
    Any,
    /// Only if the key has no value (`NX`).
    Absent,
    /// Only if it has one (`XX`).
    Present,
}

/// What a write does to the expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// Remove it (plain `SET`).
    Clear,
    /// Keep the key's current one (`KEEPTTL`).
    Keep,
    /// Expire at this time (ms since the epoch).
    At(u64),
}

/// `EXPIRE`'s `NX XX GT LT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpireCond {
    /// Always.
    Any,
    /// Only when the key has no expiry.
    Nx,
    /// Only when it has one.
    Xx,
    /// Only when the new one is later (no expiry counts as infinitely late).
    Gt,
    /// Only when the new one is earlier.
    Lt,
}

/// `ZADD`'s flags.
#[derive(Debug, Clone, Copy, Default)]
pub struct ZaddFlags {
    /// Only add new members.
    pub nx: bool,
    /// Only update existing members.
    pub xx: bool,
    /// Only update when the new score is greater.
    pub gt: bool,
    /// Only update when the new score is less.
    pub lt: bool,
    /// Count changed members too.
    pub ch: bool,
    /// Add the score to the member's (a single pair).
    pub incr: bool,
}

/// One end of a score range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreBound {
    /// The score.
    pub value: f64,
    /// Whether the score itself is excluded (`(1.5`).
    pub exclusive: bool,
}

impl ScoreBound {
    fn below_or_at_max(&self, s: f64) -> bool {
        if self.exclusive {
            s < self.value
        } else {
            s <= self.value
        }
    }
    fn above_or_at_min(&self, s: f64) -> bool {
        if self.exclusive {
            s > self.value
        } else {
            s >= self.value
        }
    }
}

/// The order-preserving 8-byte form of a score (byte order = numeric order; -0 is 0).
pub fn score_key(x: f64) -> [u8; 8] {
    let x = if x == 0.0 { 0.0 } else { x };
    let b = x.to_bits();
    let o = if b >> 63 == 1 { !b } else { b ^ (1 << 63) };
    o.to_be_bytes()
}

/// The next 8-byte big-endian value (`None` after all ones).
fn next_key8(k: [u8; 8]) -> Option<[u8; 8]> {
    u64::from_be_bytes(k).checked_add(1).map(u64::to_be_bytes)
}

fn score_from_key(b: [u8; 8]) -> f64 {
    let o = u64::from_be_bytes(b);
    let bits = if o >> 63 == 1 { o ^ (1 << 63) } else { !o };
    f64::from_bits(bits)
}

/// The keyspaces and locks of one database.
pub struct Store {
    db: Db,
    main: Keyspace,
    hash: Keyspace,
    zset: Keyspace,
    sys: Keyspace,
    /// The key directory, when `redis` has no order to walk: `Ok` when it holds every key,
    /// `Err` (why not) for a database made before there was one.
    keys: Option<Result<Keyspace, String>>,
    /// Bytes of hash before a Redis key in `redis` (semisorted's prefix length), else 0.
    main_prefix: usize,
    /// Whether `redis.hash` groups keys by an 8-byte prefix (scans filter by the full prefix).
    hash_grouped: bool,
    locks: Vec<Mutex<()>>,
    next_gen: Mutex<(u64, u64)>,
    expired_reads: AtomicU64,
}

/// The layouts of the four keyspaces for `--layout L`: `redis` takes L; `redis.hash` takes
/// L when it serves 8-byte prefix scans (sorted layouts), `semisorted:8` when L is
/// `semisorted`, else `leveled`; `redis.zset` takes L when it is sorted, else `leveled`.
pub fn layouts_for(l: Layout) -> Result<[Layout; 3], String> {
    let main = l;
    if let Order::PrefixGroups(n) = l.order() {
        if n > 16 {
            return Err(format!(
                "layout {l}: scree serve puts up to 16 bytes of a key's hash before it; \
                 choose a prefix length of 1..=16"
            ));
        }
    }
    let hash = match l.order() {
        Order::Total => l,
        Order::PrefixGroups(_) => Layout::SemiSorted {
            prefix_len: GROUP_BYTES,
        },
        _ => Layout::Leveled,
    };
    let zset = match l.order() {
        Order::Total => l,
        _ => Layout::Leveled,
    };
    Ok([main, hash, zset])
}

fn xxh(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

/// The stored key of Redis key `key` in `redis`: `prefix_len` bytes of its hash first (the
/// `semisorted:N` prefix), or the key alone (`prefix_len` 0).
pub fn main_key(prefix_len: usize, key: &[u8]) -> Vec<u8> {
    if prefix_len == 0 {
        return key.to_vec();
    }
    let h = xxhash_rust::xxh3::xxh3_128(key).to_be_bytes();
    let mut k = h.get(..prefix_len).unwrap_or(&h).to_vec();
    k.extend_from_slice(key);
    k
}

/// A sub-entry key (`group | keylen | key | gen | ...`) parsed: the Redis key, the
/// generation, and the length of the collection's sub-prefix. `None` for bytes that are not
/// one (a group that is not the key's hash included).
pub fn parse_sub_key(k: &[u8]) -> Option<(&[u8], u64, usize)> {
    let (group, rest) = k.split_first_chunk::<GROUP_BYTES>()?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
    let key = rest.get(..len)?;
    let gen = rest.get(len..)?.first_chunk::<8>()?;
    if *group != xxh(key).to_be_bytes() {
        return None;
    }
    Some((key, u64::from_be_bytes(*gen), GROUP_BYTES + 4 + len + 8))
}

impl Store {
    /// Opens (creating) the server's keyspaces in `db` with `layout`, the keyspace options
    /// `base` (their layout is replaced), the expiry compaction filter on `redis` and the
    /// orphan filter on `redis.hash` and `redis.zset`; with
    /// `directory`, the key directory where `layout` has no key order.
    pub fn open(
        db: Db,
        layout: Layout,
        base: &KeyspaceOptions,
        directory: bool,
    ) -> anyhow::Result<Store> {
        let [lm, lh, lz] = layouts_for(layout).map_err(anyhow::Error::msg)?;
        // The key directory, made before `redis` (so a crash between the two leaves it
        // complete); a `redis` without one was made by a server that kept none.
        let names = db.keyspace_names();
        let (made, has_dir) = (
            names.iter().any(|n| n == KS_MAIN),
            names.iter().any(|n| n == KS_KEYS),
        );
        if has_dir && !directory {
            anyhow::bail!(
                "this database keeps a key directory ({KS_KEYS}); without it (--no-key-directory) \
                 the directory would miss new keys and SCAN and FLUSHDB would skip them"
            );
        }
        let keys = match lm.order() {
            Order::Total => None,
            _ if !directory => Some(Err(
                "the server runs without a key directory (--no-key-directory), so its keys \
                 cannot be walked"
                    .to_string(),
            )),
            _ if made && !has_dir => Some(Err(format!(
                "this database's `{KS_MAIN}` keyspace was made without a key directory \
                     ({KS_KEYS}: --no-key-directory, or a server from before it), \
                     so its keys cannot be walked"
            ))),
            _ => {
                // Its entries are keys alone: a quarter of the others' memtable.
                let mut ko = base.clone();
                ko.layout = Layout::Leveled;
                ko.write_buffer_bytes = (base.write_buffer_bytes / 4).max(1 << 20);
                Some(Ok(db.keyspace(KS_KEYS, ko)?))
            }
        };
        let opts = |l: Layout| {
            let mut o = base.clone();
            o.layout = l;
            o
        };
        let mut mo = opts(lm);
        mo.compaction_filter = Some(Arc::new(ExpiryFilter));
        let main = db.keyspace(KS_MAIN, mo)?;
        let main_prefix = match lm.order() {
            Order::PrefixGroups(n) => n,
            _ => 0,
        };
        // Orphaned sub-entries go at compaction; the filters read `redis` through a handle
        // that does not keep the database open.
        let sub_opts = |l: Layout, kind: Kind| {
            let mut o = opts(l);
            o.compaction_filter = Some(Arc::new(OrphanFilter::new(
                main.downgrade(),
                main_prefix,
                kind,
            )));
            o
        };
        let hash = db.keyspace(KS_HASH, sub_opts(lh, Kind::Hash))?;
        let zset = db.keyspace(KS_ZSET, sub_opts(lz, Kind::Zset))?;
        let mut so = KeyspaceOptions::new(Layout::Leveled);
        so.write_buffer_bytes = 1 << 20;
        let sys = db.keyspace(KS_SYS, so)?;
        // Generations: never below one handed out before (the persisted high-water mark),
        // and after a restart above the clock in microseconds.
        let hw = match sys.get(GEN_KEY)? {
            Some(v) => u64::from_le_bytes(
                v.as_slice()
                    .try_into()
                    .map_err(|_| anyhow::anyhow!("corrupt generation record in {KS_SYS}"))?,
            ),
            None => 0,
        };
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        let start = hw.max(micros) + 1;
        sys.put_opt(
            GEN_KEY,
            (start + GEN_BLOCK).to_le_bytes(),
            &WriteOptions { sync: true },
        )?;
        Ok(Store {
            db,
            main,
            hash,
            zset,
            sys,
            keys,
            main_prefix,
            hash_grouped: matches!(lh.order(), Order::PrefixGroups(_)),
            locks: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            next_gen: Mutex::new((start, start + GEN_BLOCK)),
            expired_reads: AtomicU64::new(0),
        })
    }

    /// Adds `key`'s header `e` to `b`; `new` when the key had no live header before (the key
    /// directory, where there is one, then gains the key in the same batch).
    fn put_header(&self, b: &mut WriteBatch, key: &[u8], e: &Entry, new: bool) {
        b.put(&self.main, self.mkey(key), e.encode());
        if let (true, Some(Ok(keys))) = (new, &self.keys) {
            b.put(keys, key, []);
        }
    }

    /// Adds the deletion of `key`'s header (and directory entry) to `b`.
    fn delete_header(&self, b: &mut WriteBatch, key: &[u8]) {
        b.delete(&self.main, self.mkey(key));
        if let Some(Ok(keys)) = &self.keys {
            b.delete(keys, key);
        }
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The `redis` keyspace (tests look at what compactions left).
    pub fn main_keyspace(&self) -> &Keyspace {
        &self.main
    }

    /// The `redis.hash` keyspace.
    pub fn hash_keyspace(&self) -> &Keyspace {
        &self.hash
    }

    /// The `redis.zset` keyspace.
    pub fn zset_keyspace(&self) -> &Keyspace {
        &self.zset
    }

    /// The layout of the `redis` keyspace.
    pub fn layout(&self) -> Layout {
        self.main.layout()
    }

    /// Reads that found an expired key (INFO's `expired_keys` counts these).
    pub fn expired_reads(&self) -> u64 {
        self.expired_reads.load(Ordering::Relaxed)
    }

    fn new_gen(&self) -> Res<u64> {
        let mut g = self.next_gen.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 >= g.1 {
            let end = g.1 + GEN_BLOCK;
            self.sys
                .put_opt(GEN_KEY, end.to_le_bytes(), &WriteOptions { sync: true })?;
            g.1 = end;
        }
        let v = g.0;
        g.0 += 1;
        Ok(v)
    }

    /// Syncs the WAL: a synced write of the heartbeat record, which syncs every record
    /// appended before it (the engine's WAL is one sequence; retired logs are synced first).
    pub fn sync_wal(&self) -> Res<()> {
        self.sys.put_opt(
            FSYNC_KEY,
            now_ms().to_le_bytes(),
            &WriteOptions { sync: true },
        )?;
        Ok(())
    }

    /// Flushes every memtable to tables (`SAVE`, shutdown).
    pub fn flush(&self) -> Res<()> {
        self.db.flush()?;
        Ok(())
    }

    fn stripe(key: &[u8]) -> usize {
        (xxh(key) % LOCK_STRIPES as u64) as usize
    }

    /// Locks the stripes of `keys` in stripe order (no deadlock between multi-key commands).
    pub fn lock<'a>(&'a self, keys: &[&[u8]]) -> Vec<MutexGuard<'a, ()>> {
        let mut s: Vec<usize> = keys.iter().map(|k| Self::stripe(k)).collect();
        s.sort_unstable();
        s.dedup();
        s.into_iter()
            .filter_map(|i| self.locks.get(i))
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
            .collect()
    }

    fn lock_all(&self) -> Vec<MutexGuard<'_, ()>> {
        self.locks
            .iter()
            .map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
            .collect()
    }

    /// The stored key of a Redis key in `redis`.
    fn mkey(&self, key: &[u8]) -> Vec<u8> {
        main_key(self.main_prefix, key)
    }

    /// The Redis key of a stored key of `redis`.
    fn user_key<'k>(&self, stored: &'k [u8]) -> &'k [u8] {
        stored.get(self.main_prefix..).unwrap_or_default()
    }

    /// The live header of `key` (expired ones are `None`).
    fn entry(&self, key: &[u8], now: u64) -> Res<Option<Entry>> {
        self.entry_in(key, now, None)
    }

    /// [`Store::entry`] for a writer that will write `key` with batch `b`: the sub-entries of
    /// an expired hash or sorted set found there are deleted in `b`, so a key that expired
    /// and is written again leaves none behind.
    fn entry_w(&self, key: &[u8], now: u64, b: &mut WriteBatch) -> Res<Option<Entry>> {
        self.entry_in(key, now, Some(b))
    }

    fn entry_in(&self, key: &[u8], now: u64, purge: Option<&mut WriteBatch>) -> Res<Option<Entry>> {
        match self.main.get(self.mkey(key))? {
            None => Ok(None),
            Some(v) => {
                let e = Entry::decode(&v)?;
                if e.expired(now) {
                    self.expired_reads.fetch_add(1, Ordering::Relaxed);
                    if let Some(b) = purge {
                        self.purge_subs(b, key, &e)?;
                    }
                    Ok(None)
                } else {
                    Ok(Some(e))
                }
            }
        }
    }

    fn entry_of(&self, key: &[u8], kind: Kind, now: u64) -> Res<Option<Entry>> {
        Self::of_kind(self.entry(key, now)?, kind)
    }

    /// [`Store::entry_of`] for a writer (see [`Store::entry_w`]).
    fn entry_of_w(
        &self,
        key: &[u8],
        kind: Kind,
        now: u64,
        b: &mut WriteBatch,
    ) -> Res<Option<Entry>> {
        Self::of_kind(self.entry_w(key, now, b)?, kind)
    }

    fn of_kind(e: Option<Entry>, kind: Kind) -> Res<Option<Entry>> {
        match e {
            Some(e) if e.kind != kind => Err(CmdError::WrongType),
            e => Ok(e),
        }
    }

    /// Adds deletes of every sub-entry of the collection `e` (a hash or sorted set) at `key`
    /// to `b`: a deleted or replaced collection leaves nothing behind. (One that expires
    /// leaves its sub-entries until the key is written again or, on a layout with a key
    /// directory, until `SCAN` passes it: docs/server.md.)
    fn purge_subs(&self, b: &mut WriteBatch, key: &[u8], e: &Entry) -> Res<()> {
        let (ks, grouped) = match e.kind {
            Kind::Str => return Ok(()),
            Kind::Hash => (&self.hash, self.hash_grouped),
            Kind::Zset => (&self.zset, false),
        };
        let (gen, _) = e.gen_count();
        let prefix = Self::sub_prefix(key, gen);
        let it = if grouped {
            ks.prefix(prefix.get(..GROUP_BYTES).unwrap_or(&prefix))
        } else {
            ks.prefix(&prefix)
        };
        for item in it {
            let (k, _) = item?;
            if k.starts_with(&prefix) {
                b.delete(ks, k);
            }
        }
        Ok(())
    }

    fn write(&self, b: WriteBatch) -> Res<()> {
        self.db.write(b, &WriteOptions::default())?;
        Ok(())
    }

    // ---- strings ----

    /// `GET`, as [`Store::entry_of`] would answer it, without its copies: the stored key is
    /// the Redis key itself when there is no hash prefix, the header is checked and cut off
    /// the engine's value in place (the value's buffer becomes the reply's), and the clock is
    /// read only for a key with an expiry.
    pub fn get(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        let found = if self.main_prefix == 0 {
            self.main.get(key)?
        } else {
            self.main.get(self.mkey(key))?
        };
        let Some(mut v) = found else {
            return Ok(None);
        };
        let (kind, expire_at, at) = Entry::header(&v)?;
        if expire_at.is_some_and(|t| t <= now_ms()) {
            self.expired_reads.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        if kind != Kind::Str {
            return Err(CmdError::WrongType);
        }
        v.drain(..at);
        Ok(Some(v))
    }

    /// `SET` with its options: whether it was set, and the old value (for `GET`).
    ///
    /// Without `NX`, `XX`, `GET` and `KEEPTTL` nothing depends on the old value: the header
    /// is written blind (no read), with the key's directory entry when there is a directory
    /// (an idempotent put). A hash or sorted set it replaces leaves its sub-entries to the
    /// orphan filter.
    pub fn set(
        &self,
        key: &[u8],
        value: &[u8],
        cond: Cond,
        ttl: Ttl,
        want_old: bool,
    ) -> Res<(bool, Option<Vec<u8>>)> {
        let _g = self.lock(&[key]);
        let blind_ttl = match ttl {
            Ttl::Clear => Some(None),
            Ttl::At(t) => Some(Some(t)),
            Ttl::Keep => None,
        };
        if let (Cond::Any, Some(expire_at), false, false) =
            (cond, blind_ttl, want_old, self.has_directory())
        {
            let mut b = WriteBatch::new();
            self.put_header(&mut b, key, &Entry::string(value, expire_at), true);
            self.write(b)?;
            return Ok((true, None));
        }
        let now = now_ms();
        let mut b = WriteBatch::new();
        let old = self.entry_w(key, now, &mut b)?;
        let old_val = match &old {
            Some(e) if want_old && e.kind != Kind::Str => return Err(CmdError::WrongType),
            Some(e) if e.kind == Kind::Str => Some(e.body.clone()),
            _ => None,
        };
        let go = match cond {
            Cond::Any => true,
            Cond::Absent => old.is_none(),
            Cond::Present => old.is_some(),
        };
        if !go {
            return Ok((false, old_val));
        }
        let expire_at = match ttl {
            Ttl::Clear => None,
            Ttl::Keep => old.as_ref().and_then(|e| e.expire_at),
            Ttl::At(t) => Some(t),
        };
        if let Some(e) = &old {
            self.purge_subs(&mut b, key, e)?;
        }
        self.put_header(&mut b, key, &Entry::string(value, expire_at), old.is_none());
        self.write(b)?;
        Ok((true, old_val))
    }

    /// `MGET`: non-strings are nil.
    pub fn mget(&self, keys: &[&[u8]]) -> Res<Vec<Option<Vec<u8>>>> {
        let _g = self.lock(keys);
        let now = now_ms();
        keys.iter()
            .map(|k| {
                Ok(match self.entry(k, now)? {
                    Some(e) if e.kind == Kind::Str => Some(e.body),
                    _ => None,
                })
            })
            .collect()
    }

    /// `MSET`: all at once, blind as a plain [`Store::set`].
    pub fn mset(&self, pairs: &[(&[u8], &[u8])]) -> Res<()> {
        let keys: Vec<&[u8]> = pairs.iter().map(|p| p.0).collect();
        let _g = self.lock(&keys);
        let mut b = WriteBatch::new();
        if !self.has_directory() {
            for (k, v) in pairs {
                self.put_header(&mut b, k, &Entry::string(v, None), true);
            }
            return self.write(b);
        }
        let now = now_ms();
        let mut seen = HashSet::new();
        for (k, v) in pairs {
            let old = self.entry_w(k, now, &mut b)?;
            if let Some(e) = &old {
                self.purge_subs(&mut b, k, e)?;
            }
            // A key given twice is new only the first time.
            let new = old.is_none() && seen.insert(*k);
            self.put_header(&mut b, k, &Entry::string(v, None), new);
        }
        self.write(b)
    }

    /// Whether writes keep a key directory (`trie`, `semisorted`): a write must then know
    /// whether its key is new, so `SET` and `MSET` read the header first (a directory put on
    /// every blind write measured dearer than the header read on overwrites).
    fn has_directory(&self) -> bool {
        matches!(self.keys, Some(Ok(_)))
    }

    /// `DEL`/`UNLINK`: how many existed.
    pub fn del(&self, keys: &[&[u8]]) -> Res<i64> {
        let _g = self.lock(keys);
        let now = now_ms();
        let mut b = WriteBatch::new();
        let mut n = 0;
        let mut seen = HashSet::new();
        for k in keys {
            if !seen.insert(*k) {
                continue;
            }
            if let Some(e) = self.entry(k, now)? {
                n += 1;
                self.purge_subs(&mut b, k, &e)?;
                self.delete_header(&mut b, k);
            }
        }
        self.write(b)?;
        Ok(n)
    }

    /// `EXISTS`: keys that exist, each occurrence counted.
    pub fn exists(&self, keys: &[&[u8]]) -> Res<i64> {
        let _g = self.lock(keys);
        let now = now_ms();
        let mut n = 0;
        for k in keys {
            if self.entry(k, now)?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// `INCRBY` and friends.
    pub fn incr_by(&self, key: &[u8], delta: i64) -> Res<i64> {
        let _g = self.lock(&[key]);
        let now = now_ms();
        let mut b = WriteBatch::new();
        let old = self.entry_of_w(key, Kind::Str, now, &mut b)?;
        let cur = match &old {
            None => 0,
            Some(e) => std::str::from_utf8(&e.body)
                .ok()
                .and_then(|s| crate::resp::parse_i64(s.as_bytes()))
                .ok_or_else(|| CmdError::err("value is not an integer or out of range"))?,
        };
        let new = cur
            .checked_add(delta)
            .ok_or_else(|| CmdError::err("increment or decrement would overflow"))?;
        let exp = old.as_ref().and_then(|e| e.expire_at);
        let e = Entry::string(new.to_string().as_bytes(), exp);
        self.put_header(&mut b, key, &e, old.is_none());
        self.write(b)?;
        Ok(new)
    }

    /// `APPEND`: the new length.
    pub fn append(&self, key: &[u8], tail: &[u8]) -> Res<i64> {
        let _g = self.lock(&[key]);
        let mut b = WriteBatch::new();
        let old = self.entry_of_w(key, Kind::Str, now_ms(), &mut b)?;
        let new = old.is_none();
        let (mut v, exp) = match old {
            Some(e) => (e.body, e.expire_at),
            None => (Vec::new(), None),
        };
        v.extend_from_slice(tail);
        if v.len() > scree::MAX_VALUE_BYTES {
            return Err(CmdError::err(format!(
                "string exceeds maximum allowed size ({} bytes, Scree's value limit)",
                scree::MAX_VALUE_BYTES
            )));
        }
        self.put_header(&mut b, key, &Entry::string(&v, exp), new);
        self.write(b)?;
        Ok(v.len() as i64)
    }

    /// `GETDEL`.
    pub fn getdel(&self, key: &[u8]) -> Res<Option<Vec<u8>>> {
        let _g = self.lock(&[key]);
        let old = self.entry_of(key, Kind::Str, now_ms())?;
        if old.is_some() {
            let mut b = WriteBatch::new();
            self.delete_header(&mut b, key);
            self.write(b)?;
        }
        Ok(old.map(|e| e.body))
    }

    // ---- keys and expiry ----

    /// `TYPE`.
    pub fn kind(&self, key: &[u8]) -> Res<Option<Kind>> {
        Ok(self.entry(key, now_ms())?.map(|e| e.kind))
    }

    /// Sets the expiry of `key` to `at` (ms since the epoch) under `cond`; a time not after
    /// now deletes the key. Whether it applied.
    pub fn expire_at(&self, key: &[u8], at: u64, cond: ExpireCond) -> Res<bool> {
        let _g = self.lock(&[key]);
        let now = now_ms();
        let Some(mut e) = self.entry(key, now)? else {
            return Ok(false);
        };
        let ok = match (cond, e.expire_at) {
            (ExpireCond::Any, _) => true,
            (ExpireCond::Nx, cur) => cur.is_none(),
            (ExpireCond::Xx, cur) => cur.is_some(),
            (ExpireCond::Gt, cur) => cur.is_some_and(|c| at > c),
            (ExpireCond::Lt, cur) => cur.is_none_or(|c| at < c),
        };
        if !ok {
            return Ok(false);
        }
        if at <= now {
            let mut b = WriteBatch::new();
            self.purge_subs(&mut b, key, &e)?;
            self.delete_header(&mut b, key);
            self.write(b)?;
        } else {
            e.expire_at = Some(at);
            self.main.put(self.mkey(key), e.encode())?;
        }
        Ok(true)
    }

    /// Milliseconds to live: -2 no key, -1 no expiry.
    pub fn pttl(&self, key: &[u8]) -> Res<i64> {
        let now = now_ms();
        Ok(match self.entry(key, now)? {
            None => -2,
            Some(Entry {
                expire_at: None, ..
            }) => -1,
            Some(Entry {
                expire_at: Some(t), ..
            }) => t.saturating_sub(now) as i64,
        })
    }

    /// `PERSIST`.
    pub fn persist(&self, key: &[u8]) -> Res<bool> {
        let _g = self.lock(&[key]);
        match self.entry(key, now_ms())? {
            Some(mut e) if e.expire_at.is_some() => {
                e.expire_at = None;
                self.main.put(self.mkey(key), e.encode())?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The key directory, or why `what` cannot walk the keys.
    fn directory(&self, what: &str) -> Res<&Keyspace> {
        match &self.keys {
            Some(Ok(keys)) => Ok(keys),
            Some(Err(why)) => Err(CmdError::err(format!(
                "{what} is not supported on layout `{}`: {why} (docs/server.md)",
                self.main.layout()
            ))),
            None => Err(CmdError::err(format!(
                "{what}: no key directory on layout `{}`",
                self.main.layout()
            ))),
        }
    }

    /// One `SCAN` step from after `after` (the stored key): up to `count` keys examined;
    /// those matching `keep` are returned with the stored key to continue from (`None` at the
    /// end).
    pub fn scan(
        &self,
        after: Option<&[u8]>,
        count: usize,
        mut keep: impl FnMut(&[u8], Kind) -> bool,
    ) -> Res<ScanStep> {
        if self.keys.is_some() {
            return self.scan_directory(after, count, keep);
        }
        let lo = match after {
            Some(k) => Bound::Excluded(k.to_vec()),
            None => Bound::Unbounded,
        };
        let now = now_ms();
        let mut out = Vec::new();
        let mut last = None;
        for (n, item) in self
            .main
            .range::<Vec<u8>, _>((lo, Bound::Unbounded))
            .enumerate()
        {
            let (k, v) = item?;
            if n >= count.max(1) {
                return Ok((last, out));
            }
            let e = Entry::decode(&v)?;
            if !e.expired(now) && keep(self.user_key(&k), e.kind) {
                out.push(self.user_key(&k).to_vec());
            }
            last = Some(k);
        }
        Ok((None, out))
    }

    /// [`Store::scan`] over the key directory: each key's header is read (types, expiry);
    /// directory entries of keys that expired or are gone are deleted on the way.
    fn scan_directory(
        &self,
        after: Option<&[u8]>,
        count: usize,
        mut keep: impl FnMut(&[u8], Kind) -> bool,
    ) -> Res<ScanStep> {
        let keys = self.directory("SCAN")?;
        let lo = match after {
            Some(k) => Bound::Excluded(k.to_vec()),
            None => Bound::Unbounded,
        };
        let now = now_ms();
        let (mut out, mut stale) = (Vec::new(), Vec::new());
        let mut last = None;
        let mut next = None;
        for (n, item) in keys.range::<Vec<u8>, _>((lo, Bound::Unbounded)).enumerate() {
            let (k, _) = item?;
            if n >= count.max(1) {
                next = last;
                break;
            }
            match self.entry(&k, now)? {
                Some(e) if keep(&k, e.kind) => out.push(k.clone()),
                Some(_) => {}
                None => stale.push(k.clone()),
            }
            last = Some(k);
        }
        for k in stale {
            let _g = self.lock(&[&k]);
            // An expired header goes with its sub-entries and its directory entry.
            let mut b = WriteBatch::new();
            if self.entry_w(&k, now_ms(), &mut b)?.is_none() {
                self.delete_header(&mut b, &k);
                self.write(b)?;
            }
        }
        Ok((next, out))
    }

    /// `DBSIZE`: exact up to 100,000 keys on a sorted layout or one with a key directory;
    /// beyond that the entries of the keyspace's tables plus its memtable bytes over the tables'
    /// mean entry size, which counts overwritten versions, tombstones and expired keys
    /// until compaction removes them.
    pub fn dbsize(&self) -> Res<i64> {
        const EXACT: usize = 100_000;
        if self.main_prefix == 0 && self.main.layout().order().serves_range() {
            let now = now_ms();
            let mut n = 0;
            let mut all = true;
            for (i, item) in self.main.range::<Vec<u8>, _>(..).enumerate() {
                if i >= EXACT {
                    all = false;
                    break;
                }
                let (_, v) = item?;
                if !Entry::decode(&v)?.expired(now) {
                    n += 1;
                }
            }
            if all {
                return Ok(n);
            }
        }
        if let Some(Ok(keys)) = &self.keys {
            // The directory's keys, each checked against its header (expiry).
            let now = now_ms();
            let mut n = 0;
            let mut all = true;
            for (i, item) in keys.range::<Vec<u8>, _>(..).enumerate() {
                if i >= EXACT {
                    all = false;
                    break;
                }
                let (k, _) = item?;
                if self.entry(&k, now)?.is_some() {
                    n += 1;
                }
            }
            if all {
                return Ok(n);
            }
        }
        Ok(self.estimate_keys() as i64)
    }

    /// The estimate `DBSIZE` gives for large keyspaces (INFO's keyspace line too).
    pub fn estimate_keys(&self) -> u64 {
        let tables = self.main.tables();
        let entries: u64 = tables.iter().map(|t| t.entries).sum();
        let bytes: u64 = tables.iter().map(|t| t.size).sum();
        let mem = self
            .db
            .stats()
            .keyspaces
            .iter()
            .find(|k| k.name == KS_MAIN)
            .map_or(0, |k| k.memtable_bytes);
        let per = bytes.checked_div(entries).map_or(64, |p| p.max(1));
        entries + mem / per
    }

    /// `FLUSHDB`: deletes every key (their hash and sorted-set entries become unreachable
    /// and are dropped by compactions).
    pub fn flushdb(&self) -> Res<()> {
        if self.keys.is_some() {
            let keys = self.directory("FLUSHDB")?;
            let _g = self.lock_all();
            let mut b = WriteBatch::new();
            for item in keys.range::<Vec<u8>, _>(..) {
                let (k, _) = item?;
                self.delete_header(&mut b, &k);
                if b.len() >= 1000 {
                    self.write(std::mem::take(&mut b))?;
                }
            }
            return self.write(b);
        }
        let _g = self.lock_all();
        let mut b = WriteBatch::new();
        for item in self.main.range::<Vec<u8>, _>(..) {
            let (k, _) = item?;
            b.delete(&self.main, k);
            if b.len() >= 1000 {
                self.write(std::mem::take(&mut b))?;
            }
        }
        self.write(b)
    }

    // ---- sub-entries of hashes and sorted sets ----

    /// `group | keylen | key | gen`: the prefix of every sub-entry of one collection.
    fn sub_prefix(key: &[u8], gen: u64) -> Vec<u8> {
        let mut p = Vec::with_capacity(GROUP_BYTES + 4 + key.len() + 8 + 16);
        p.extend_from_slice(&xxh(key).to_be_bytes());
        p.extend_from_slice(&(key.len() as u32).to_be_bytes());
        p.extend_from_slice(key);
        p.extend_from_slice(&gen.to_be_bytes());
        p
    }

    fn sub_key(prefix: &[u8], tag: Option<u8>, item: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(prefix.len() + 1 + item.len());
        k.extend_from_slice(prefix);
        k.extend(tag);
        k.extend_from_slice(item);
        k
    }

    /// Every (field, value) of a hash's sub-prefix.
    fn hash_items(&self, prefix: &[u8]) -> Res<Vec<(Vec<u8>, Vec<u8>)>> {
        let it = if self.hash_grouped {
            self.hash
                .prefix(prefix.get(..GROUP_BYTES).unwrap_or(prefix))
        } else {
            self.hash.prefix(prefix)
        };
        let mut out = Vec::new();
        for item in it {
            let (k, v) = item?;
            if let Some(f) = k.strip_prefix(prefix) {
                out.push((f.to_vec(), v));
            }
        }
        Ok(out)
    }

    // ---- hashes ----

    fn hash_entry(&self, key: &[u8], now: u64) -> Res<Option<(Entry, Vec<u8>, u64)>> {
        Ok(self.entry_of(key, Kind::Hash, now)?.map(|e| {
            let (gen, count) = e.gen_count();
            (e, Self::sub_prefix(key, gen), count)
        }))
    }

    /// The generation, field count and expiry of hash `key`, or a new generation with no
    /// fields and no expiry when the key is absent (`WRONGTYPE` for a key of another type).
    /// An expired hash's fields are deleted in `b` (see [`Store::entry_w`]).
    fn hash_or_new(
        &self,
        key: &[u8],
        now: u64,
        b: &mut WriteBatch,
    ) -> Res<(u64, u64, Option<u64>)> {
        match self.entry_of_w(key, Kind::Hash, now, b)? {
            Some(e) => {
                let (g, c) = e.gen_count();
                Ok((g, c, e.expire_at))
            }
            None => Ok((self.new_gen()?, 0, None)),
        }
    }

    /// `HSET`: fields added.
    pub fn hset(&self, key: &[u8], pairs: &[(&[u8], &[u8])]) -> Res<i64> {
        let _g = self.lock(&[key]);
        let now = now_ms();
        let mut b = WriteBatch::new();
        let (gen, count, exp) = self.hash_or_new(key, now, &mut b)?;
        let prefix = Self::sub_prefix(key, gen);
        let mut added = 0u64;
        let mut fresh: HashSet<&[u8]> = HashSet::new();
        for (f, v) in pairs {
            let sk = Self::sub_key(&prefix, None, f);
            if !fresh.contains(f) && self.hash.get(&sk)?.is_none() {
                added += 1;
                fresh.insert(f);
            }
            b.put(&self.hash, sk, v);
        }
        let e = Entry::collection(Kind::Hash, gen, count + added, exp);
        // A live hash has a field: a count of 0 is a new one.
        self.put_header(&mut b, key, &e, count == 0);
        self.write(b)?;
        Ok(added as i64)
    }

    /// `HGET`.
    pub fn hget(&self, key: &[u8], field: &[u8]) -> Res<Option<Vec<u8>>> {
        Ok(self.hmget(key, &[field])?.into_iter().next().flatten())
    }

    /// `HMGET`.
    pub fn hmget(&self, key: &[u8], fields: &[&[u8]]) -> Res<Vec<Option<Vec<u8>>>> {
        let _g = self.lock(&[key]);
        let Some((_, prefix, _)) = self.hash_entry(key, now_ms())? else {
            return Ok(vec![None; fields.len()]);
        };
        fields
            .iter()
            .map(|f| Ok(self.hash.get(Self::sub_key(&prefix, None, f))?))
            .collect()
    }

    /// `HGETALL`.
    pub fn hgetall(&self, key: &[u8]) -> Res<Vec<(Vec<u8>, Vec<u8>)>> {
        let _g = self.lock(&[key]);
        match self.hash_entry(key, now_ms())? {
            Some((_, prefix, _)) => self.hash_items(&prefix),
            None => Ok(Vec::new()),
        }
    }

    /// Writes batch `b`, which removes `n` of the `count` sub-entries of collection `key`
    /// (header `e`, of `kind`), with the header's new count — or the key's deletion with its
    /// last sub-entry; returns `n`.
    fn finish_removal(
        &self,
        mut b: WriteBatch,
        key: &[u8],
        e: &Entry,
        kind: Kind,
        count: u64,
        n: u64,
    ) -> Res<i64> {
        if n == 0 {
            return Ok(0);
        }
        let left = count.saturating_sub(n);
        if left == 0 {
            self.delete_header(&mut b, key);
        } else {
            let (gen, _) = e.gen_count();
            let e = Entry::collection(kind, gen, left, e.expire_at);
            self.put_header(&mut b, key, &e, false);
        }
        self.write(b)?;
        Ok(n as i64)
    }

    /// `HDEL`: fields removed; the key goes with its last field.
    pub fn hdel(&self, key: &[u8], fields: &[&[u8]]) -> Res<i64> {
        let _g = self.lock(&[key]);
        let Some((e, prefix, count)) = self.hash_entry(key, now_ms())? else {
            return Ok(0);
        };
        let mut b = WriteBatch::new();
        let mut gone: HashSet<&[u8]> = HashSet::new();
        for f in fields {
            let sk = Self::sub_key(&prefix, None, f);
            if !gone.contains(f) && self.hash.get(&sk)?.is_some() {
                gone.insert(f);
                b.delete(&self.hash, sk);
            }
        }
        self.finish_removal(b, key, &e, Kind::Hash, count, gone.len() as u64)
    }

    /// `HLEN`.
    pub fn hlen(&self, key: &[u8]) -> Res<i64> {
        Ok(self
            .hash_entry(key, now_ms())?
            .map_or(0, |(_, _, c)| c as i64))
    }

    /// `HINCRBY`.
    pub fn hincrby(&self, key: &[u8], field: &[u8], delta: i64) -> Res<i64> {
        let _g = self.lock(&[key]);
        let now = now_ms();
        let mut b = WriteBatch::new();
        let (gen, count, exp) = self.hash_or_new(key, now, &mut b)?;
        let sk = Self::sub_key(&Self::sub_prefix(key, gen), None, field);
        let old = self.hash.get(&sk)?;
        let cur = match &old {
            None => 0,
            Some(v) => crate::resp::parse_i64(v)
                .ok_or_else(|| CmdError::err("hash value is not an integer"))?,
        };
        let new = cur
            .checked_add(delta)
            .ok_or_else(|| CmdError::err("increment or decrement would overflow"))?;
        b.put(&self.hash, sk, new.to_string());
        let e = Entry::collection(Kind::Hash, gen, count + u64::from(old.is_none()), exp);
        self.put_header(&mut b, key, &e, count == 0);
        self.write(b)?;
        Ok(new)
    }

    // ---- sorted sets ----

    fn zset_entry(&self, key: &[u8], now: u64) -> Res<Option<(Entry, Vec<u8>, u64)>> {
        Ok(self.entry_of(key, Kind::Zset, now)?.map(|e| {
            let (gen, count) = e.gen_count();
            (e, Self::sub_prefix(key, gen), count)
        }))
    }

    fn member_score(&self, prefix: &[u8], member: &[u8]) -> Res<Option<f64>> {
        Ok(self
            .zset
            .get(Self::sub_key(prefix, Some(b'm'), member))?
            .map(|v| f64::from_le_bytes(v.as_slice().try_into().unwrap_or([0; 8]))))
    }

    /// `ZADD`: members added (with `ch`, added or changed), or with `incr` the new score
    /// (`None` when a condition refused it).
    pub fn zadd(
        &self,
        key: &[u8],
        f: ZaddFlags,
        pairs: &[(f64, &[u8])],
    ) -> Res<(i64, Option<f64>)> {
        let _g = self.lock(&[key]);
        let now = now_ms();
        let mut b = WriteBatch::new();
        let (gen, count, exp) = match self.entry_of_w(key, Kind::Zset, now, &mut b)? {
            Some(e) => {
                let (g, c) = e.gen_count();
                (g, c, e.expire_at)
            }
            None => {
                if f.xx {
                    return Ok((0, None));
                }
                (self.new_gen()?, 0, None)
            }
        };
        let prefix = Self::sub_prefix(key, gen);
        // What `b` holds before the members: deletes of an expired set's entries.
        let purges = b.len();
        let (mut added, mut changed) = (0u64, 0u64);
        let mut last = None;
        // Later pairs see earlier ones of the same command.
        let mut pending: std::collections::HashMap<&[u8], f64> = Default::default();
        for (score, m) in pairs {
            let old = match pending.get(m) {
                Some(s) => Some(*s),
                None => self.member_score(&prefix, m)?,
            };
            let mut new = *score;
            match old {
                None => {
                    if f.xx {
                        continue;
                    }
                }
                Some(o) => {
                    if f.nx {
                        continue;
                    }
                    if f.incr {
                        new += o;
                        if new.is_nan() {
                            return Err(CmdError::err("resulting score is not a number (NaN)"));
                        }
                    }
                    if (f.gt && new <= o) || (f.lt && new >= o) {
                        continue;
                    }
                }
            }
            last = Some(new);
            if let Some(o) = old {
                if o == new {
                    continue;
                }
                b.delete(
                    &self.zset,
                    Self::sub_key(&prefix, Some(b's'), &[&score_key(o)[..], m].concat()),
                );
                changed += 1;
            } else {
                added += 1;
            }
            pending.insert(m, new);
            b.put(
                &self.zset,
                Self::sub_key(&prefix, Some(b'm'), m),
                new.to_le_bytes(),
            );
            b.put(
                &self.zset,
                Self::sub_key(&prefix, Some(b's'), &[&score_key(new)[..], m].concat()),
                [],
            );
        }
        if b.len() > purges {
            let e = Entry::collection(Kind::Zset, gen, count + added, exp);
            self.put_header(&mut b, key, &e, count == 0);
            self.write(b)?;
        }
        let n = if f.ch { added + changed } else { added };
        Ok((n as i64, last))
    }

    /// `ZREM`: members removed; the key goes with its last member.
    pub fn zrem(&self, key: &[u8], members: &[&[u8]]) -> Res<i64> {
        let _g = self.lock(&[key]);
        let Some((e, prefix, count)) = self.zset_entry(key, now_ms())? else {
            return Ok(0);
        };
        let mut b = WriteBatch::new();
        let mut gone: HashSet<&[u8]> = HashSet::new();
        for m in members {
            if gone.contains(m) {
                continue;
            }
            if let Some(s) = self.member_score(&prefix, m)? {
                gone.insert(m);
                b.delete(&self.zset, Self::sub_key(&prefix, Some(b'm'), m));
                b.delete(
                    &self.zset,
                    Self::sub_key(&prefix, Some(b's'), &[&score_key(s)[..], m].concat()),
                );
            }
        }
        self.finish_removal(b, key, &e, Kind::Zset, count, gone.len() as u64)
    }

    /// `ZSCORE`.
    pub fn zscore(&self, key: &[u8], member: &[u8]) -> Res<Option<f64>> {
        let _g = self.lock(&[key]);
        match self.zset_entry(key, now_ms())? {
            Some((_, prefix, _)) => self.member_score(&prefix, member),
            None => Ok(None),
        }
    }

    /// `ZCARD`.
    pub fn zcard(&self, key: &[u8]) -> Res<i64> {
        Ok(self
            .zset_entry(key, now_ms())?
            .map_or(0, |(_, _, c)| c as i64))
    }

    /// Members in score order (reverse with `rev`) with scores, skipping `skip` and taking
    /// up to `take` of those within `[min, max]`.
    pub fn zrange(
        &self,
        key: &[u8],
        min: ScoreBound,
        max: ScoreBound,
        rev: bool,
        skip: usize,
        take: usize,
    ) -> Res<Vec<(Vec<u8>, f64)>> {
        let _g = self.lock(&[key]);
        let Some((_, prefix, _)) = self.zset_entry(key, now_ms())? else {
            return Ok(Vec::new());
        };
        let idx = Self::sub_key(&prefix, Some(b's'), &[]);
        let lo = Bound::Included([&idx[..], &score_key(min.value)[..]].concat());
        // Just past every member of score `max`: the next score's key, or past the index.
        let hi = match next_key8(score_key(max.value)) {
            Some(n) => Bound::Excluded([&idx[..], &n[..]].concat()),
            None => {
                let mut end = idx.clone();
                if let Some(last) = end.last_mut() {
                    *last = b's' + 1;
                }
                Bound::Excluded(end)
            }
        };
        let it = self.zset.range::<Vec<u8>, _>((lo, hi));
        let mut out = Vec::new();
        let mut seen = 0usize;
        let mut visit = |k: Vec<u8>| -> bool {
            let Some(rest) = k.strip_prefix(idx.as_slice()) else {
                return true;
            };
            let Some((sk, member)) = rest.split_first_chunk::<8>() else {
                return true;
            };
            let s = score_from_key(*sk);
            if !min.above_or_at_min(s) || !max.below_or_at_max(s) {
                return true;
            }
            if seen >= skip {
                out.push((member.to_vec(), s));
            }
            seen += 1;
            out.len() < take
        };
        if take == 0 {
            return Ok(out);
        }
        if rev {
            for item in it.rev() {
                if !visit(item?.0) {
                    break;
                }
            }
        } else {
            for item in it {
                if !visit(item?.0) {
                    break;
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A sub-key parses back to its key and generation, whatever follows; cut short or
        /// with a group that is not the key's hash, it is not a sub-key.
        #[test]
        fn sub_keys_parse_back(
            key in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            gen in proptest::num::u64::ANY,
            rest in proptest::collection::vec(proptest::num::u8::ANY, 0..20),
            cut in 0usize..60,
        ) {
            let prefix = Store::sub_prefix(&key, gen);
            let k = Store::sub_key(&prefix, Some(b'm'), &rest);
            proptest::prop_assert_eq!(parse_sub_key(&k), Some((&key[..], gen, prefix.len())));
            let short = k.get(..prefix.len().saturating_sub(1 + cut % prefix.len())).unwrap();
            proptest::prop_assert_eq!(parse_sub_key(short), None);
            let mut other = k.clone();
            other[0] ^= 1;
            proptest::prop_assert_eq!(parse_sub_key(&other), None);
        }

        /// The score index's byte order is the scores' numeric order (and decodes back).
        #[test]
        fn score_keys_sort_as_the_scores(a in proptest::num::f64::ANY, b in proptest::num::f64::ANY) {
            proptest::prop_assume!(!a.is_nan() && !b.is_nan());
            let (ka, kb) = (score_key(a), score_key(b));
            proptest::prop_assert_eq!(ka.cmp(&kb), a.partial_cmp(&b).unwrap());
            proptest::prop_assert_eq!(score_from_key(ka), if a == 0.0 { 0.0 } else { a });
        }

        /// Headers decode to what was encoded, with and without an expiry.
        #[test]
        fn headers_round_trip(kind in 1u8..=3, exp in proptest::option::of(proptest::num::u64::ANY),
                              body in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let kind = Kind::from_byte(kind).unwrap();
            let body = if kind == Kind::Str { body } else { vec![7; 16] };
            let e = Entry { kind, expire_at: exp, body };
            let d = Entry::decode(&e.encode()).unwrap();
            proptest::prop_assert_eq!(d, e);
        }
    }

    #[test]
    fn bad_headers_are_errors_not_guesses() {
        for bad in [
            &b""[..],
            &[0u8][..],
            &[4u8, 1][..],
            &[0x81u8, 1, 2][..],
            &[2u8, 0][..],
        ] {
            assert!(Entry::decode(bad).is_err(), "{bad:?}");
        }
        assert!(!header_expired(&[0x81, 1, 2], u64::MAX));
    }

    #[test]
    fn semisorted_prefix_lengths_past_16_are_refused() {
        assert!(layouts_for(Layout::SemiSorted { prefix_len: 17 }).is_err());
        let [m, h, z] = layouts_for(Layout::SemiSorted { prefix_len: 4 }).unwrap();
        assert_eq!(m, Layout::SemiSorted { prefix_len: 4 });
        assert_eq!(h, Layout::SemiSorted { prefix_len: 8 });
        assert_eq!(z, Layout::Leveled);
        assert_eq!(
            layouts_for(Layout::Trie).unwrap(),
            [Layout::Trie, Layout::Leveled, Layout::Leveled]
        );
    }
}
