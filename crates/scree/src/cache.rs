//! The block cache: decoded data blocks keyed by (file number, offset), bounded in bytes
//! (quick_cache, a CLOCK-Pro cache).

use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::table::block::DataBlock as Block;

#[derive(Clone)]
struct BlockWeighter;

impl Weighter<(u64, u64), Arc<Block>> for BlockWeighter {
    fn weight(&self, _key: &(u64, u64), val: &Arc<Block>) -> u64 {
        val.weight() as u64
    }
}

/// Blocks keyed by (cache id of their file, offset), weighed by their decoded size.
type Blocks = Cache<(u64, u64), Arc<Block>, BlockWeighter>;

/// A shared cache of decoded blocks with a byte budget.
#[derive(Clone)]
pub struct BlockCache {
    inner: Option<Arc<Blocks>>,
}

impl BlockCache {
    /// A cache holding about `bytes` of decoded blocks; 0 disables caching.
    pub fn new(bytes: usize) -> Self {
        if bytes == 0 {
            return BlockCache { inner: None };
        }
        let items = (bytes / 4096).max(16);
        BlockCache {
            inner: Some(Arc::new(Cache::with_weighter(
                items,
                bytes as u64,
                BlockWeighter,
            ))),
        }
    }
    /// Looks a block up.
    pub fn get(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        self.inner.as_ref()?.get(&(file, offset))
    }
    /// Inserts a block.
    pub fn insert(&self, file: u64, offset: u64, block: Arc<Block>) {
        if let Some(c) = &self.inner {
            c.insert((file, offset), block);
        }
    }
    /// Drops the block of `file` at `offset`, if cached.
    pub fn remove(&self, file: u64, offset: u64) {
        if let Some(c) = &self.inner {
            c.remove(&(file, offset));
        }
    }
    /// Whether blocks are cached at all.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }
}
