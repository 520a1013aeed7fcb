//! The block cache: decoded data blocks keyed by (file number, offset), bounded in bytes
//! (quick_cache, a CLOCK-Pro cache). With `Options::cache_index_and_filter_blocks` it also
//! holds sorted tables' index blocks and Bloom filters, charged to the same budget; layouts
//! with a block format of their own (`semisorted`) keep their checked blocks in it: the bytes
//! of a block read into a buffer, a mark for one checked in the file's memory map.

use std::sync::Arc;

use quick_cache::sync::{Cache, GuardResult};
use quick_cache::Weighter;

use crate::filter::bloom::LoadedFilter;
use crate::table::block::DataBlock;
use crate::table::sep_index::TableIndex;

/// One cached item. A file's index and filter sit at offsets no data block of the same file
/// has, so one (file, offset) key space serves all three.
#[derive(Clone)]
pub(crate) enum Item {
    Data(Arc<DataBlock>),
    Index(Arc<TableIndex>),
    Filter(Arc<LoadedFilter>),
    Checked(Arc<CheckedBytes>),
    CheckedMapped(Arc<CheckedMapped>),
}

/// The bytes of a block whose checksum was verified when it was read, for a layout whose
/// blocks are not sorted-table blocks (the `semisorted` table's fixed-size blocks).
pub(crate) struct CheckedBytes(pub Box<[u8]>);

/// That a block of such a layout, read from the file's memory map, had a valid checksum: the
/// bytes stay in the map (the page cache holds them, and the table never changes), so a hit
/// costs neither a copy nor a checksum. Weighed as the block it stands for (its size is the
/// field), as a sorted table's block decoded from the map is weighed by the mapped bytes it
/// refers to: the budget holds as many blocks either way. It holds no reference to the map,
/// so a deleted table's marks keep nothing on disk alive (file numbers are never reused).
pub(crate) struct CheckedMapped(pub usize);

impl MetaItem for CheckedMapped {
    fn wrap(item: Arc<Self>) -> Item {
        Item::CheckedMapped(item)
    }
    fn unwrap(item: Item) -> Option<Arc<Self>> {
        match item {
            Item::CheckedMapped(b) => Some(b),
            _ => None,
        }
    }
}

impl MetaItem for CheckedBytes {
    fn wrap(item: Arc<Self>) -> Item {
        Item::Checked(item)
    }
    fn unwrap(item: Item) -> Option<Arc<Self>> {
        match item {
            Item::Checked(b) => Some(b),
            _ => None,
        }
    }
}

/// The kinds of item besides sorted tables' data blocks (index blocks, filters, checked
/// blocks of other formats), as they go in and out of an [`Item`].
pub(crate) trait MetaItem: Sized {
    fn wrap(item: Arc<Self>) -> Item;
    fn unwrap(item: Item) -> Option<Arc<Self>>;
}

impl MetaItem for TableIndex {
    fn wrap(item: Arc<Self>) -> Item {
        Item::Index(item)
    }
    fn unwrap(item: Item) -> Option<Arc<Self>> {
        match item {
            Item::Index(b) => Some(b),
            _ => None,
        }
    }
}

impl MetaItem for LoadedFilter {
    fn wrap(item: Arc<Self>) -> Item {
        Item::Filter(item)
    }
    fn unwrap(item: Item) -> Option<Arc<Self>> {
        match item {
            Item::Filter(f) => Some(f),
            _ => None,
        }
    }
}

#[derive(Clone)]
struct ItemWeighter;

impl Weighter<(u64, u64), Item> for ItemWeighter {
    fn weight(&self, _key: &(u64, u64), val: &Item) -> u64 {
        (match val {
            Item::Data(b) => b.weight(),
            Item::Index(b) => b.weight(),
            Item::Filter(f) => filter_weight(f),
            Item::Checked(b) => b.0.len() + 64,
            Item::CheckedMapped(b) => b.0 + 64,
        }) as u64
    }
}

/// What a filter weighs in the cache (and pins when it is not cached).
pub fn filter_weight(f: &LoadedFilter) -> usize {
    f.memory_bytes() + 64
}

/// Items keyed by (file number, offset), weighed by their decoded size.
type Items = Cache<(u64, u64), Item, ItemWeighter>;

/// A shared cache of decoded blocks with a byte budget.
#[derive(Clone)]
pub struct BlockCache {
    inner: Option<Arc<Items>>,
    index_and_filter: bool,
    /// The largest item the cache is sure to admit (see [`BlockCache::max_item_bytes`]).
    max_item: usize,
}

impl BlockCache {
    /// A cache holding about `bytes` of decoded blocks; 0 disables caching.
    pub fn new(bytes: usize) -> Self {
        if bytes == 0 {
            return BlockCache {
                inner: None,
                index_and_filter: false,
                max_item: 0,
            };
        }
        let items = (bytes / 4096).max(16);
        let cache = Cache::with_weighter(items, bytes as u64, ItemWeighter);
        // Each shard holds its share of the budget and refuses an item heavier than ≈ 97 %
        // of it (quick_cache's hot allocation); the shard count follows the cores and the
        // expected item count, so the share is read back from the cache.
        let max_item = usize::try_from(cache.shard_capacity() / 10 * 9).unwrap_or(usize::MAX);
        BlockCache {
            inner: Some(Arc::new(cache)),
            index_and_filter: false,
            max_item,
        }
    }
    /// The largest index block or filter kept in the cache (90 % of one shard's share of the
    /// budget), by the cache's weight; a larger one stays pinned by its table, or the cache
    /// would refuse it and every use would read it again.
    pub fn max_item_bytes(&self) -> usize {
        self.max_item
    }
    /// The same cache, also holding sorted tables' index blocks and filters
    /// (`Options::cache_index_and_filter_blocks`) when `on` and the cache is enabled.
    pub fn holding_index_and_filter(mut self, on: bool) -> Self {
        self.index_and_filter = on && self.inner.is_some();
        self
    }
    /// Whether sorted tables keep their index and filter here instead of pinning them.
    pub fn holds_index_and_filter(&self) -> bool {
        self.index_and_filter
    }
    /// Looks a data block up.
    pub fn get(&self, file: u64, offset: u64) -> Option<Arc<DataBlock>> {
        match self.inner.as_ref()?.get(&(file, offset))? {
            Item::Data(b) => Some(b),
            _ => None,
        }
    }
    /// Inserts a data block.
    pub fn insert(&self, file: u64, offset: u64, block: Arc<DataBlock>) {
        if let Some(c) = &self.inner {
            c.insert((file, offset), Item::Data(block));
        }
    }
    /// Looks an index block or filter up.
    pub(crate) fn get_meta<T: MetaItem>(&self, file: u64, offset: u64) -> Option<Arc<T>> {
        T::unwrap(self.inner.as_ref()?.get(&(file, offset))?)
    }
    /// Inserts an index block or filter.
    pub(crate) fn insert_meta<T: MetaItem>(&self, file: u64, offset: u64, item: Arc<T>) {
        if let Some(c) = &self.inner {
            c.insert((file, offset), T::wrap(item));
        }
    }
    /// The index block or filter at (`file`, `offset`): cached, or `load`ed and inserted.
    /// Readers that miss it together wait for one load (a quick_cache placeholder) instead of
    /// each reading and decoding it. The flag is true when this call loaded it.
    pub(crate) fn meta_or_load<T: MetaItem, E>(
        &self,
        file: u64,
        offset: u64,
        load: impl FnOnce() -> Result<Arc<T>, E>,
    ) -> Result<(Arc<T>, bool), E> {
        let Some(c) = &self.inner else {
            return load().map(|t| (t, true));
        };
        match c.get_value_or_guard(&(file, offset), None) {
            GuardResult::Value(v) => match T::unwrap(v) {
                Some(t) => Ok((t, false)),
                None => load().map(|t| (t, true)),
            },
            // A failed load drops the guard: the next waiter loads (and fails) itself, so
            // under a lasting error waiters read one after another.
            GuardResult::Guard(g) => {
                let t = load()?;
                // An item heavier than the cache admits is dropped by quick_cache (callers
                // pin such items); `Err` only when a remove of this key (a deleted table)
                // took the placeholder meanwhile, and then it must not be cached.
                let _ = g.insert(T::wrap(t.clone()));
                Ok((t, true))
            }
            GuardResult::Timeout => load().map(|t| (t, true)),
        }
    }
    /// Drops the item of `file` at `offset`, if cached.
    pub fn remove(&self, file: u64, offset: u64) {
        if let Some(c) = &self.inner {
            c.remove(&(file, offset));
        }
    }
    /// Whether blocks are cached at all.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }
    /// Bytes held (by the weigher's count), 0 when disabled.
    pub fn usage_bytes(&self) -> u64 {
        self.inner.as_ref().map_or(0, |c| c.weight())
    }
    /// The budget in bytes, 0 when disabled.
    pub fn capacity_bytes(&self) -> u64 {
        self.inner.as_ref().map_or(0, |c| c.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::block::BlockBuilder;

    fn data_block(n: usize) -> Arc<DataBlock> {
        let mut b = BlockBuilder::new(16);
        for i in 0..n {
            b.add(format!("k{i:06}").as_bytes(), b"value");
        }
        Arc::new(DataBlock::decode(b.finish()).unwrap_or_else(|e| panic!("{e:?}")))
    }

    #[test]
    fn items_of_one_offset_are_told_apart_by_kind() {
        let c = BlockCache::new(1 << 20).holding_index_and_filter(true);
        assert!(c.holds_index_and_filter());
        c.insert(1, 0, data_block(10));
        c.insert_meta(1, 100, Arc::new(LoadedFilter::new(vec![0xff; 65])));
        assert!(c.get(1, 0).is_some());
        assert!(
            c.get_meta::<TableIndex>(1, 0).is_none(),
            "a data block is not an index"
        );
        assert!(
            c.get_meta::<LoadedFilter>(1, 0).is_none(),
            "a data block is not a filter"
        );
        assert!(c.get_meta::<LoadedFilter>(1, 100).is_some());
        assert!(c.get(1, 100).is_none(), "a filter is not a data block");
        assert!(c.usage_bytes() > 0);
        c.remove(1, 100);
        assert!(c.get_meta::<LoadedFilter>(1, 100).is_none());
    }

    #[test]
    fn a_disabled_cache_holds_nothing_and_never_holds_index_and_filter() {
        let c = BlockCache::new(0).holding_index_and_filter(true);
        assert!(!c.holds_index_and_filter());
        c.insert(1, 0, data_block(10));
        assert!(c.get(1, 0).is_none());
        assert_eq!((c.usage_bytes(), c.capacity_bytes()), (0, 0));
    }

    #[test]
    fn usage_stays_within_the_budget() {
        let c = BlockCache::new(64 << 10);
        for off in 0..200 {
            c.insert(7, off, data_block(50));
        }
        assert!(c.usage_bytes() <= c.capacity_bytes(), "{}", c.usage_bytes());
        assert!(c.usage_bytes() > 0);
    }

    /// An item of `max_item_bytes` is admitted, whatever the cache's size and the machine's
    /// core count (which decide the shards); a heavier one may be refused.
    #[test]
    fn an_item_of_the_largest_cached_size_is_admitted() {
        for bytes in [16 << 10, 64 << 10, 1 << 20, 32 << 20] {
            let c = BlockCache::new(bytes).holding_index_and_filter(true);
            let max = c.max_item_bytes();
            assert!(max > 0 && max < bytes, "{bytes}: {max}");
            // A plain filter's heap is its bytes (capacity = length here).
            let f = LoadedFilter::new(vec![0xff; max - 64]);
            assert_eq!(filter_weight(&f), max, "{bytes}");
            c.insert_meta(9, 1, Arc::new(f));
            assert!(
                c.get_meta::<LoadedFilter>(9, 1).is_some(),
                "{bytes}: {max} refused"
            );
        }
    }
}
