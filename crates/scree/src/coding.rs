//! Byte encodings shared by every format: fixed-width little-endian integers, LEB128 varints,
//! length-prefixed slices, and the masked CRC32C used for every checksum.

/// Appends a little-endian u32.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a little-endian u64.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a varint length followed by the bytes.
pub fn put_slice(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Reads a little-endian u32 at `pos`.
pub fn get_u32(buf: &[u8], pos: usize) -> Option<u32> {
    let b = buf.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes(b.try_into().ok()?))
}

/// Reads a little-endian u64 at `pos`.
pub fn get_u64(buf: &[u8], pos: usize) -> Option<u64> {
    let b = buf.get(pos..pos.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// A forward reader over a byte slice; every getter returns `None` on truncation.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Current offset.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Whether all bytes were consumed.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.buf.len()
    }
    /// Reads one byte.
    pub fn u8(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    /// Reads a little-endian u32.
    pub fn u32(&mut self) -> Option<u32> {
        let v = get_u32(self.buf, self.pos)?;
        self.pos += 4;
        Some(v)
    }
    /// Reads a little-endian u64.
    pub fn u64(&mut self) -> Option<u64> {
        let v = get_u64(self.buf, self.pos)?;
        self.pos += 8;
        Some(v)
    }
    /// Reads a LEB128 varint (at most 10 bytes; a 10th byte above 1 would lose bits and is
    /// rejected like a truncated one).
    pub fn varint(&mut self) -> Option<u64> {
        // One byte (most lengths and shared prefixes of table entries): no loop.
        let first = self.u8()?;
        if first < 0x80 {
            return Some(u64::from(first));
        }
        let mut v = u64::from(first & 0x7f);
        for shift in (7..64).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b & 0x7f > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f).checked_shl(shift)?;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }
    /// Reads a varint that must fit in `usize`.
    pub fn len(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }
    /// Reads `n` raw bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    /// Reads a varint-length-prefixed slice.
    pub fn slice(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.bytes(n)
    }
}

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a raw CRC32C (so a CRC stored inside checksummed data does not checksum to itself).
pub fn mask(c: u32) -> u32 {
    c.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// The CRC32C a [`mask`]ed checksum was made from.
pub fn unmask(m: u32) -> u32 {
    m.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// CRC32C of `data`, masked as LevelDB does so that checksums of checksums stay strong.
pub fn crc(data: &[u8]) -> u32 {
    let c = crc32c::crc32c(data);
    c.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Masked CRC32C over two consecutive pieces.
pub fn crc2(a: &[u8], b: &[u8]) -> u32 {
    let c = crc32c::crc32c_append(crc32c::crc32c(a), b);
    c.rotate_right(15).wrapping_add(MASK_DELTA)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_truncation() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint(&mut b, v);
            assert_eq!(Reader::new(&b).varint(), Some(v));
            assert_eq!(Reader::new(&b[..b.len() - 1]).varint(), None);
        }
        // 11 continuation bytes never decode.
        assert_eq!(Reader::new(&[0xff; 11]).varint(), None);
        // A 10th byte above 1 overflows u64: rejected, not silently truncated.
        let mut over = [0xffu8; 10];
        over[9] = 0x02;
        assert_eq!(Reader::new(&over).varint(), None);
        over[9] = 0x01;
        assert_eq!(Reader::new(&over).varint(), Some(u64::MAX));
    }

    #[test]
    fn crc_detects_change() {
        assert_ne!(crc(b"abc"), crc(b"abd"));
        assert_eq!(crc2(b"ab", b"c"), crc(b"abc"));
    }
}
