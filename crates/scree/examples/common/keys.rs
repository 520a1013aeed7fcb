//! Keys of the measuring examples (`frag_fill`, `trie_fill`, `mem_probe`): 16 hex bytes of a
//! bijection on u64, so keys are unique and arrive in random order.

/// A bijection on u64 (splitmix64's finalizer).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Key number `i`.
pub fn key(i: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    let s = format!("{:016x}", mix(i));
    k.copy_from_slice(s.as_bytes());
    k
}
