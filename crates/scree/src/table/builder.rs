//! Writing a sorted table: data blocks, the index block (a separator per data block), the
//! Bloom filter and the footer.

use crate::coding::{crc, put_u32, put_u64, put_varint};
use crate::error::{Error, Result};
use crate::filter::bloom;
use crate::fs::CountedWriter;
use crate::key;
use block::{tag_of, BlockBuilder};

use super::*;

/// Writes one sorted table.
pub struct TableBuilder {
    w: CountedWriter,
    file_no: u64,
    block: BlockBuilder,
    index: BlockBuilder,
    block_size: usize,
    bloom_bits: u32,
    hashes: Vec<u64>,
    last_user: Vec<u8>,
    smallest: Vec<u8>,
    largest: Vec<u8>,
    entries: u64,
    min_seq: u64,
    max_seq: u64,
    offset: u64,
    /// Where the first data block starts (the index's first entry records it).
    base: u64,
    /// The last flushed block's last internal key and size, until the next key (or the end of
    /// the table) gives its separator.
    pending: Option<(Vec<u8>, u64)>,
    /// Index entries written.
    blocks: usize,
}

/// The value of index entry `i` of a version-2 index (docs/format.md, "Index block"): the
/// first entry starts with `first` (the offset of data block 0), then `size << 1 | exact`,
/// then the tag of the separator's trailer when it has one.
pub(crate) fn index_value(i: usize, size: u64, first: u64, trailer: Option<u64>) -> Vec<u8> {
    let mut v = Vec::with_capacity(16);
    if i == 0 {
        put_varint(&mut v, first);
    }
    put_varint(&mut v, (size << 1) | u64::from(trailer.is_some()));
    if let Some(t) = trailer {
        put_varint(&mut v, tag_of(t));
    }
    v
}

impl TableBuilder {
    /// Starts a table in `w`.
    pub fn new(w: CountedWriter, file_no: u64, block_size: usize, bloom_bits: u32) -> Self {
        Self::at(w, file_no, 0, block_size, bloom_bits)
    }

    /// Starts a table whose first byte lands at offset `base` of its file (`w` positioned
    /// there): block handles and footer name offsets in the file, so a sorted table can be
    /// embedded after other bytes (a `lightweight` DTable's appended segments).
    pub fn at(
        w: CountedWriter,
        file_no: u64,
        base: u64,
        block_size: usize,
        bloom_bits: u32,
    ) -> Self {
        TableBuilder {
            w,
            file_no,
            block: BlockBuilder::for_internal_keys(16),
            index: BlockBuilder::for_separators(),
            block_size,
            bloom_bits,
            hashes: Vec::new(),
            last_user: Vec::new(),
            smallest: Vec::new(),
            largest: Vec::new(),
            entries: 0,
            min_seq: u64::MAX,
            max_seq: 0,
            offset: base,
            base,
            pending: None,
            blocks: 0,
        }
    }

    /// Counts `seq` in the table's largest sequence number ([`TableMeta::max_seq`]) for an
    /// entry added with sequence number 0 (a version every snapshot sees, written at the
    /// bottom): the table still holds that write, and `max_seq` bounds the writes it holds.
    pub fn note_seq(&mut self, seq: u64) {
        self.max_seq = self.max_seq.max(seq);
    }

    /// Adds an entry; internal keys must arrive in increasing order.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        if !key::valid_ikey(ikey) {
            return Err(Error::InvalidArgument(
                "sorted table entry with a malformed internal key".into(),
            ));
        }
        if let Some((last, size)) = self.pending.take() {
            let (sep, trailer) = sep_index::separator(&last, ikey);
            self.add_index_entry(&sep, size, trailer);
        }
        let p = key::parse(ikey);
        if self.entries == 0 {
            self.smallest = ikey.to_vec();
        }
        if self.entries == 0 || p.user_key != self.last_user.as_slice() {
            self.hashes.push(bloom::bloom_hash(p.user_key));
            self.last_user.clear();
            self.last_user.extend_from_slice(p.user_key);
        }
        self.min_seq = self.min_seq.min(p.seq);
        self.max_seq = self.max_seq.max(p.seq);
        self.block.add(ikey, value);
        self.largest.clear();
        self.largest.extend_from_slice(ikey);
        self.entries += 1;
        if self.block.estimated_size() >= self.block_size {
            self.flush_block()?;
        }
        Ok(())
    }

    fn flush_block(&mut self) -> Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let last = self.block.last_key().to_vec();
        let raw = self.block.finish();
        self.w.append(&raw)?;
        self.offset += raw.len() as u64;
        self.pending = Some((last, raw.len() as u64));
        Ok(())
    }

    /// Adds the index entry of the next data block: separator user key `sep` (with its own
    /// trailer, or after every version of `sep`), its size.
    fn add_index_entry(&mut self, sep: &[u8], size: u64, trailer: Option<u64>) {
        let v = index_value(self.blocks, size, self.base, trailer);
        self.index.add(sep, &v);
        self.blocks += 1;
    }

    /// Bytes written so far (approximate final size).
    pub fn estimated_size(&self) -> u64 {
        self.offset + self.block.estimated_size() as u64
    }
    /// An upper bound on the offset where the table would end if an entry of `ikey_len` +
    /// `value_len` bytes were added now and the table finished: the data (the open block,
    /// the entry with its varints and a restart), the filter with one more key, the index with
    /// the entries still to come (the open block's and one the entry may start), the footer.
    pub fn finished_bound_with(&self, ikey_len: usize, value_len: usize) -> u64 {
        let entry = (ikey_len + value_len + 4 * 10 + 4) as u64;
        let filter = if self.bloom_bits > 0 {
            bloom::encoded_local_len(self.hashes.len() as u64 + 1, self.bloom_bits)
        } else {
            0
        } + 4;
        let max_key = ikey_len.max(self.block.last_key().len()) as u64;
        let index = self.index.estimated_size() as u64 + 2 * (max_key + 4 * 10 + 2 * 10 + 4);
        self.offset + self.block.estimated_size() as u64 + entry + filter + index + FOOTER as u64
    }
    /// Entries added.
    pub fn entries(&self) -> u64 {
        self.entries
    }
    /// The last internal key added.
    pub fn last_key(&self) -> &[u8] {
        &self.largest
    }

    /// Writes filter, index and footer, syncs, and returns the table's metadata.
    pub fn finish(self) -> Result<TableMeta> {
        let (meta, mut w) = self.finish_unsynced()?;
        w.sync()?;
        Ok(meta)
    }

    /// Writes filter, index and footer without syncing, and returns the table's metadata
    /// (`size`: the offset in the file where the footer ends) and the writer, for a caller
    /// that appends more after the table before one sync.
    pub fn finish_unsynced(mut self) -> Result<(TableMeta, CountedWriter)> {
        self.flush_block()?;
        if let Some((last, size)) = self.pending.take() {
            // The last block's separator: its last user key, after every version of it.
            self.add_index_entry(key::user_key(&last), size, None);
        }
        let mut filter = if self.bloom_bits > 0 {
            bloom::encode_local(&self.hashes, self.bloom_bits)
        } else {
            Vec::new()
        };
        let filter_off = self.offset;
        let fc = crc(&filter);
        put_u32(&mut filter, fc);
        self.w.append(&filter)?;
        self.offset += filter.len() as u64;
        let index_raw = self.index.finish();
        let index_off = self.offset;
        self.w.append(&index_raw)?;
        self.offset += index_raw.len() as u64;
        let mut footer = Vec::with_capacity(FOOTER);
        put_u64(&mut footer, index_off);
        put_u64(&mut footer, index_raw.len() as u64);
        put_u64(&mut footer, filter_off);
        put_u64(&mut footer, filter.len() as u64);
        put_u32(&mut footer, VERSION);
        let c = crc(&footer);
        put_u32(&mut footer, c);
        put_u64(&mut footer, MAGIC);
        self.w.append(&footer)?;
        self.offset += footer.len() as u64;
        let meta = TableMeta {
            file_no: self.file_no,
            size: self.offset,
            smallest: self.smallest,
            largest: self.largest,
            entries: self.entries,
            min_seq: if self.entries == 0 { 0 } else { self.min_seq },
            max_seq: self.max_seq,
            append: None,
        };
        Ok((meta, self.w))
    }
}
