//! Cache hints: starting to load memory a loop will read soon, where the loop's order of
//! reads is known ahead but random (cuckoo-filter buckets, memtable records in hash order).

/// Starts loading the cache line holding the start of `*r` without waiting for it. A hint: it
/// changes no value any load returns, only when the line arrives.
#[inline]
pub(crate) fn prefetch<T: ?Sized>(r: &T) {
    prefetch_at((r as *const T).cast::<u8>());
}

/// Starts loading the `lines` cache lines from `r`'s start on, which may reach past `r` (a
/// record whose length is not known yet, or the record that usually follows it): a prefetch
/// of any address is harmless.
#[inline]
pub(crate) fn prefetch_lines<T: ?Sized>(r: &T, lines: usize) {
    let p = (r as *const T).cast::<u8>();
    for i in 0..lines {
        prefetch_at(p.wrapping_add(i * 64));
    }
}

#[inline]
fn prefetch_at(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` only hints the cache: it never faults, whatever the address, and
    // it neither reads nor writes memory as far as the program can observe. It is `unsafe`
    // only as a `target_feature` function (SSE, which every x86-64 CPU has). Tests:
    // `hint::tests` and `filter::cuckoo`'s `insert_all_matches_one_by_one_inserts`.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::prefetch;

    #[test]
    fn prefetching_changes_no_value() {
        let v: Vec<u64> = (0..1024).collect();
        let s: &[u8] = b"bytes";
        for x in &v {
            prefetch(x);
        }
        prefetch(s);
        prefetch(&v[..0]);
        // Past the end, and from the last byte of an allocation on.
        super::prefetch_lines(s, 4);
        super::prefetch_lines(&v[1023], 3);
        assert_eq!(v.iter().sum::<u64>(), 1023 * 1024 / 2);
        assert_eq!(s, b"bytes");
    }
}
