#!/usr/bin/env python3
"""A second decoder of the multi-level cuckoo filter, written from docs/format.md alone
("Multi-level cuckoo filter (semisorted)"), Python 3 standard library only.

    cargo run --release -p scree --example cuckoo_tables -- fixture /tmp/mlcf
    python3 scripts/decode_mlcf.py /tmp/mlcf        # last line: OK

The fixture directory holds `filter.mlcf` (an encoded filter), `hash_key.hex` (the 16-byte
hash key) and `answers.tsv` (hex key, then the engine's answer: `absent`, `probe-all` or a
sub-level id). The decoder checks the checksum and every structural rule the document states,
answers each key's lookup from the bytes alone and compares.
"""

import struct
import sys
from pathlib import Path

M64 = (1 << 64) - 1


def rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & M64


def siphash13(key16, data):
    k0, k1 = struct.unpack("<QQ", key16)
    v = [
        k0 ^ 0x736F6D6570736575,
        k1 ^ 0x646F72616E646F6D,
        k0 ^ 0x6C7967656E657261,
        k1 ^ 0x7465646279746573,
    ]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & M64
            v[1] = rotl(v[1], 13) ^ v[0]
            v[0] = rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & M64
            v[3] = rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & M64
            v[3] = rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & M64
            v[1] = rotl(v[1], 17) ^ v[2]
            v[2] = rotl(v[2], 32)

    whole = len(data) // 8 * 8
    for i in range(0, whole, 8):
        m = struct.unpack_from("<Q", data, i)[0]
        v[3] ^= m
        rounds(1)
        v[0] ^= m
    last = (len(data) & 0xFF) << 56
    for i, b in enumerate(data[whole:]):
        last |= b << (8 * i)
    v[3] ^= last
    rounds(1)
    v[0] ^= last
    v[2] ^= 0xFF
    rounds(3)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = crc32c_table()


def masked_crc(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


class Corrupt(Exception):
    pass


def varint(buf, pos):
    v, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise Corrupt(f"bad varint at {pos}")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, pos


class Filter:
    def __init__(self, data, hash_key):
        if len(data) < 4:
            raise Corrupt("shorter than its checksum")
        body = data[:-4]
        if masked_crc(body) != struct.unpack("<I", data[-4:])[0]:
            raise Corrupt("checksum mismatch")
        if len(body) < 57:
            raise Corrupt("truncated header")
        version, kind, v, b, flags = body[0:5]
        if version != 3:
            raise Corrupt(f"version {version}")
        (kicks, big_f, s, m, prefix, _budget, check, occupied, n_words) = struct.unpack_from(
            "<IIIIIQQQQ", body, 5
        )
        words_at = 57
        if (kind, prefix == 0) == (1, True):
            self.prefix_len = None
        elif kind == 2:
            self.prefix_len = prefix
        else:
            raise Corrupt("unknown key hashing")
        if not (1 <= v <= 8 and 1 <= b <= 8) or flags > 1 or kicks > 65536 or m == 0 or s == 0:
            raise Corrupt("parameters out of range")
        self.t = (-(-big_f // s)).bit_length()
        if m * s > (1 << 31) or self.t < 2:
            raise Corrupt("parameters out of range")
        if check != siphash13(hash_key, b"scree multi-level cuckoo filter"):
            raise Corrupt("another hash key")
        self.hash_key, self.big_f, self.s, self.v, self.b, self.m = hash_key, big_f, s, v, b, m
        self.overflowed = flags == 1
        self.w = self.t + v
        self.lb = [-(-(i * big_f) // s) for i in range(s + 1)]
        total_slots = m * s * b
        if n_words != (total_slots * self.w + 63) // 64:
            raise Corrupt("bit array size")
        end = words_at + 8 * n_words
        if end > len(body):
            raise Corrupt("truncated bit array")
        self.bits = int.from_bytes(body[words_at:end], "little")
        seen = 0
        for i in range(total_slots):
            c = self.slot(i)
            if c == 0:
                continue
            seen += 1
            tag = c & ((1 << self.t) - 1)
            seg = (i // b) // m
            if tag == 0 or tag > self.lb[seg + 1] - self.lb[seg]:
                raise Corrupt(f"slot {i} outside its segment's fingerprints")
        if seen != occupied:
            raise Corrupt("occupied count")
        n_keys, pos = varint(body, end)
        self.secondary = {}
        prev = None
        for _ in range(n_keys):
            n, pos = varint(body, pos)
            if pos + n + 1 > len(body):
                raise Corrupt("truncated secondary key")
            key, kid = bytes(body[pos : pos + n]), body[pos + n]
            pos += n + 1
            if kid >= (1 << v) - 1 or n > (1 << 24) - 1:
                raise Corrupt("secondary id or length")
            if prev is not None and prev >= key:
                raise Corrupt("secondary keys out of order")
            prev = key
            if not self.overflowed and self.find(key) is None:
                raise Corrupt("secondary key without a primary entry")
            self.secondary[key] = kid
        if pos != len(body):
            raise Corrupt("bytes after the secondary table")

    def slot(self, i):
        return (self.bits >> (i * self.w)) & ((1 << self.w) - 1)

    def find(self, key):
        """The value of the entry of `key`'s class, or None."""
        if self.prefix_len is None:
            h = siphash13(self.hash_key, key)
        else:
            ph = siphash13(self.hash_key, key[: self.prefix_len])
            sh = siphash13(self.hash_key, key[self.prefix_len :])
            h = mix64(ph ^ mix64(sh))
        x = ((h >> 32) * self.big_f) >> 32
        seg = x * self.s // self.big_f
        tag = x - self.lb[seg] + 1
        j = ((h & 0xFFFFFFFF) * self.m) >> 32
        big_h = (mix64(x) * self.m) >> 64
        for jj in (j, (big_h - j) % self.m):
            bucket = seg * self.m + jj
            for k in range(self.b):
                c = self.slot(bucket * self.b + k)
                if c != 0 and c & ((1 << self.t) - 1) == tag:
                    return c >> self.t
        return None

    def lookup(self, key):
        entry = self.find(key)
        if key in self.secondary and (entry is not None or self.overflowed):
            return str(self.secondary[key])
        if self.overflowed:
            return "probe-all"
        if entry is None:
            return "absent"
        return "probe-all" if entry == (1 << self.v) - 1 else str(entry)


def main():
    d = Path(sys.argv[1])
    hash_key = bytes.fromhex(d.joinpath("hash_key.hex").read_text().strip())
    flt = Filter(d.joinpath("filter.mlcf").read_bytes(), hash_key)
    bad = 0
    n = 0
    for line in d.joinpath("answers.tsv").read_text().splitlines():
        key_hex, want = line.split("\t")
        got = flt.lookup(bytes.fromhex(key_hex))
        n += 1
        if got != want:
            bad += 1
            print(f"{key_hex}: engine {want}, decoder {got}")
    print(
        f"{n} lookups, {len(flt.secondary)} secondary keys, {flt.s} segments, "
        f"overflowed {flt.overflowed}: {bad} disagreements"
    )
    print("OK" if bad == 0 else "MISMATCH")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
