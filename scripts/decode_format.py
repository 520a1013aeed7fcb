#!/usr/bin/env python3
"""Second, independent decoder of Scree's on-disk files, written from docs/format.md and
docs/format-htable.md alone (not from the Rust code), to cross-check those documents.

Given a database directory it decodes CURRENT, every MANIFEST-*, every WAL (*.log), every
sorted table (*.sst), semi-sorted table (*.sem), DTable (*.dtb), HTable (*.ht), BloomCluster (*.bc) and appendable segment table (*.seg,
the test-only format of "Appendable tables") and checks:
  * every checksum (masked CRC-32C; region checksums of HTables and BloomClusters);
  * magic numbers, format versions, sizes, counts, offsets that must tile a file;
  * key order (internal-key order in blocks and across them, restart points, index keys equal
    to each block's last key in version-1 tables; in version 2 each separator at least the
    block's last key and below the next block's first, the last one the table's last user key),
    varint limits, sequence and file number limits;
  * manifest: edit grammar, snapshot first, table adds/removes, feature bits against the
    record/block types the files use, table metadata (size, entries, smallest/largest,
    min/max seq) against the table's contents, the trie's layout records (containers,
    BloomClusters) and the fragmented layout's guard records (parsed); appendable tables
    (keyspace edit tag 6): the metadata offset inside the table, dead bytes before it, an
    append switch (the table removed and added back in one edit) only growing the table with
    its new metadata after the old end, the file at least as long as its named end (bytes past
    it are an unfinished switch's and are ignored), and the dead bytes against the segments the
    named metadata references;
  * Bloom filters: no false negative for any key a filter must cover (sorted-table filters,
    HTable per-bucket filters, BloomCluster columns), sizes and k against bits per key, with
    XXH3-64 implemented here;
  * HTables: the placement hash (keyed SipHash-1-3-128, implemented here) of every item, its
    home bucket, rank and migration records: every item is where a lookup looks for it; the
    container's hash prefix and bucket shift; BloomCluster packing and columns;
  * WAL: record types per log, the `synced` field, batch decoding, sequence ranges, and the
    end of each log: clean, zero tail, torn tail or corruption, with the stale-sector rules;
    seals (type 4, the log's last record: a record read right after it is corruption, a zero or
    torn tail after it is ignored in every WAL) and the chain of WALs from the manifest's first
    sealed WAL (tag 7): where the replayed history ends, and the corruption of a chain that
    ends before a WAL holding a completed sync (a type-3 record among those the later WAL
    yields before its first bad record), and of a history that ends (at a missing seal, or at a
    torn tail of the newest WAL) below a keyspace that already holds later writes (its log
    number is above the WAL the history ends in, and a table of it has a max_seq above the
    largest sequence number replayed up to there). WALs after the end of the history are not
    replayed and nothing else in them is checked or reported (what the decoder finds there is
    only a note); WALs below every keyspace's log number are not read (notes only). The newest
    WAL the manifest names (the largest of its first sealed WAL and the keyspaces' log numbers)
    must exist, unless the manifest has no first sealed WAL or is itself damaged.
Table and BloomCluster files the manifest does not name (an unfinished job's, torn or naming
that job's tables; the next open removes them) are decoded, but what is wrong in them is only
a note.
It prints a one-line summary per file, then per keyspace, then `OK` or the problems found.
`--dump-keys [FILE]` prints (or writes to FILE) the live keys after replay (newest version
wins, tombstones hide older ones; trie versions ordered by container depth and order key),
one `keyspace TAB hex(key) TAB hex(value)` line each, the format
crates/scree/examples/format_fixture.rs writes to `expected.tsv`.

Run:  python3 scripts/decode_format.py DB_DIR [--dump-keys [FILE]] [--quiet]
      (`pip install crc32c` makes it faster; without it a pure-Python CRC-32C is used.)
The exit status is 0 when no problem was found, 1 otherwise. A full cross-check:
  cargo build --release --example format_fixture
  target/release/examples/format_fixture /tmp/ff leveled,fragmented,trie 20000 1
  python3 scripts/decode_format.py /tmp/ff/db --dump-keys /tmp/ff/decoded.tsv
  diff /tmp/ff/expected.tsv /tmp/ff/decoded.tsv
scripts/wal_damage_crosscheck.py compares its WAL verdicts with `scree check` on damaged WALs.

Not checked: layouts other than leveled, fragmented and trie (semisorted, lightweight: their
tables are decoded, their layout records are not); fragmented guard semantics; sorted-table
block sizes against `block_size` (not recorded in the files).
"""

import argparse
import os
import re
import struct
import sys

M64 = (1 << 64) - 1
M32 = (1 << 32) - 1
MAX_SEQ = (1 << 56) - 1
MAX_FILE_NO = (1 << 63) - 1

# ---------------------------------------------------------------------------------------------
# CRC-32C (Castagnoli), masked as LevelDB.

try:
    import crc32c as _crc32c_mod

    def crc32c(data, crc=0):
        return _crc32c_mod.crc32c(data, crc)
except ImportError:  # pragma: no cover - pure Python fallback
    _T = []
    for _i in range(256):
        _c = _i
        for _ in range(8):
            _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
        _T.append(_c)

    def crc32c(data, crc=0):
        c = crc ^ M32
        t = _T
        for b in data:
            c = t[(c ^ b) & 0xFF] ^ (c >> 8)
        return c ^ M32


def mask(c):
    return ((((c >> 15) | (c << 17)) & M32) + 0xA282EAD8) & M32


def masked_crc(data):
    return mask(crc32c(data))


def region_crc(offset, data):
    return mask(crc32c(data, crc32c(struct.pack("<Q", offset))))


# ---------------------------------------------------------------------------------------------
# XXH3-64 (seed 0, default secret) and SipHash-1-3 with 128-bit output.

_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
)
P32_1, P32_2, P32_3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D
P64_1, P64_2, P64_3, P64_4, P64_5 = (
    0x9E3779B185EBCA87,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0x85EBCA77C2B2AE63,
    0x27D4EB2F165667C5,
)


def _r64(b, o):
    return int.from_bytes(b[o:o + 8], "little")


def _r32(b, o):
    return int.from_bytes(b[o:o + 4], "little")


def _xxh64_avalanche(x):
    x ^= x >> 33
    x = (x * P64_2) & M64
    x ^= x >> 29
    x = (x * P64_3) & M64
    return x ^ (x >> 32)


def _xxh3_avalanche(x):
    x ^= x >> 37
    x = (x * 0x165667919E3779F9) & M64
    return x ^ (x >> 32)


def _rotl64(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _fold(a, b):
    p = a * b
    return (p & M64) ^ (p >> 64)


def _mix16(inp, o, so):
    return _fold(_r64(inp, o) ^ _r64(_SECRET, so), _r64(inp, o + 8) ^ _r64(_SECRET, so + 8))


def xxh3_64(inp):
    n = len(inp)
    s = _SECRET
    if n == 0:
        return _xxh64_avalanche(_r64(s, 56) ^ _r64(s, 64))
    if n <= 3:
        combo = (inp[0] << 16) | (inp[n >> 1] << 24) | inp[n - 1] | (n << 8)
        flip = _r32(s, 0) ^ _r32(s, 4)
        return _xxh64_avalanche(combo ^ flip)
    if n <= 8:
        i1 = _r32(inp, 0)
        i2 = _r32(inp, n - 4)
        flip = _r64(s, 8) ^ _r64(s, 16)
        x = ((i2 + (i1 << 32)) & M64) ^ flip
        x ^= _rotl64(x, 49) ^ _rotl64(x, 24)
        x = (x * 0x9FB21C651E98DF25) & M64
        x ^= (x >> 35) + n
        x &= M64
        x = (x * 0x9FB21C651E98DF25) & M64
        return x ^ (x >> 28)
    if n <= 16:
        lo = _r64(inp, 0) ^ (_r64(s, 24) ^ _r64(s, 32))
        hi = _r64(inp, n - 8) ^ (_r64(s, 40) ^ _r64(s, 48))
        swapped = int.from_bytes(lo.to_bytes(8, "little"), "big")
        acc = (n + swapped + hi + _fold(lo, hi)) & M64
        return _xxh3_avalanche(acc)
    if n <= 128:
        acc = (n * P64_1) & M64
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(inp, 48, 96) + _mix16(inp, n - 64, 112)
                acc += _mix16(inp, 32, 64) + _mix16(inp, n - 48, 80)
            acc += _mix16(inp, 16, 32) + _mix16(inp, n - 32, 48)
        acc += _mix16(inp, 0, 0) + _mix16(inp, n - 16, 16)
        return _xxh3_avalanche(acc & M64)
    if n <= 240:
        acc = (n * P64_1) & M64
        rounds = n // 16
        for i in range(8):
            acc += _mix16(inp, 16 * i, 16 * i)
        acc = _xxh3_avalanche(acc & M64)
        for i in range(8, rounds):
            acc += _mix16(inp, 16 * i, 16 * (i - 8) + 3)
        acc += _mix16(inp, n - 16, 136 - 17)
        return _xxh3_avalanche(acc & M64)
    # long input
    acc = [P32_3, P64_1, P64_2, P64_3, P64_4, P32_2, P64_5, P32_1]

    def accumulate(stripe_off, sec_off):
        for i in range(8):
            dv = _r64(inp, stripe_off + 8 * i)
            dk = dv ^ _r64(s, sec_off + 8 * i)
            acc[i ^ 1] = (acc[i ^ 1] + dv) & M64
            acc[i] = (acc[i] + (dk & M32) * (dk >> 32)) & M64

    nb_stripes = (len(s) - 64) // 8
    block_len = 64 * nb_stripes
    nb_blocks = (n - 1) // block_len
    for b in range(nb_blocks):
        for st in range(nb_stripes):
            accumulate(b * block_len + st * 64, st * 8)
        for i in range(8):
            a = acc[i]
            a ^= a >> 47
            a ^= _r64(s, len(s) - 64 + 8 * i)
            acc[i] = (a * P32_1) & M64
    last = ((n - 1) - block_len * nb_blocks) // 64
    for st in range(last):
        accumulate(nb_blocks * block_len + st * 64, st * 8)
    accumulate(n - 64, len(s) - 64 - 7)
    result = (n * P64_1) & M64
    for i in range(4):
        result += _fold(acc[2 * i] ^ _r64(s, 11 + 16 * i), acc[2 * i + 1] ^ _r64(s, 11 + 16 * i + 8))
    return _xxh3_avalanche(result & M64)


def _sipround(v0, v1, v2, v3):
    v0 = (v0 + v1) & M64
    v1 = _rotl64(v1, 13) ^ v0
    v0 = _rotl64(v0, 32)
    v2 = (v2 + v3) & M64
    v3 = _rotl64(v3, 16) ^ v2
    v0 = (v0 + v3) & M64
    v3 = _rotl64(v3, 21) ^ v0
    v2 = (v2 + v1) & M64
    v1 = _rotl64(v1, 17) ^ v2
    v2 = _rotl64(v2, 32)
    return v0, v1, v2, v3


def siphash13_128(key16, msg):
    k0 = int.from_bytes(key16[:8], "little")
    k1 = int.from_bytes(key16[8:], "little")
    v0 = k0 ^ 0x736F6D6570736575
    v1 = k1 ^ 0x646F72616E646F83  # 0x...6d ^ 0xee: the 128-bit variant
    v2 = k0 ^ 0x6C7967656E657261
    v3 = k1 ^ 0x7465646279746573
    n = len(msg)
    end = n - (n & 7)
    for i in range(0, end, 8):
        m = int.from_bytes(msg[i:i + 8], "little")
        v3 ^= m
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
        v0 ^= m
    b = ((n & 0xFF) << 56) | int.from_bytes(msg[end:], "little")
    v3 ^= b
    v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    v0 ^= b
    v2 ^= 0xEE
    for _ in range(3):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    h1 = v0 ^ v1 ^ v2 ^ v3
    v1 ^= 0xDD
    for _ in range(3):
        v0, v1, v2, v3 = _sipround(v0, v1, v2, v3)
    h2 = v0 ^ v1 ^ v2 ^ v3
    return h1 | (h2 << 64)


# ---------------------------------------------------------------------------------------------
# Bloom filters (format.md, "Filter block").


def bloom_may_contain(filt, h):
    """Returns True/False for a well-formed filter, None for an unrecognised encoding."""
    if not filt:
        return True
    last = filt[-1]
    bits = filt[:-1]
    a = h & M32
    if last & 0x80:
        k = last & 0x7F
        if not (1 <= k <= 24) or len(bits) == 0 or len(bits) % 64:
            return None
        nb = len(bits) // 64
        blk = (((h >> 32) * nb) >> 32) * 64
        for _ in range(k):
            bit = a >> 23
            if not (bits[blk + bit // 8] >> (bit % 8)) & 1:
                return False
            a = (a * 0x9E3779B9) & M32
        return True
    k = last
    if not (1 <= k <= 30) or len(bits) < 8:
        return None
    m = len(bits) * 8
    delta = (h >> 32) | 1
    for i in range(k):
        bit = ((a + i * delta) & M32) % m  # the probe sum wraps at 2^32
        if not (bits[bit // 8] >> (bit % 8)) & 1:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Decoding helpers.


class Bad(Exception):
    def __init__(self, offset, msg):
        super().__init__(msg)
        self.offset = offset
        self.msg = msg


def varint(b, pos, end=None, what="varint"):
    if end is None:
        end = len(b)
    v = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise Bad(start, f"unterminated {what}")
        if pos - start >= 10:
            raise Bad(start, f"{what} longer than 10 bytes")
        x = b[pos]
        pos += 1
        v |= (x & 0x7F) << shift
        shift += 7
        if not x & 0x80:
            break
    if v > M64:
        raise Bad(start, f"{what} overflows 64 bits")
    return v, pos


def take(b, pos, n, end, what):
    if n > end - pos:
        raise Bad(pos, f"{what} runs past the end ({n} bytes at {pos}, end {end})")
    return b[pos:pos + n], pos + n


def ikey_split(ik):
    t = int.from_bytes(ik[-8:], "little")
    return ik[:-8], t >> 8, t & 0xFF


def ikey_sort_key(ik):
    """Internal key order: user key ascending, then trailer descending."""
    t = int.from_bytes(ik[-8:], "little")
    return (ik[:-8], M64 - t)


def make_ikey(ukey, seq, kind):
    return ukey + ((seq << 8) | kind).to_bytes(8, "little")


def newest_named_wal_no(st):
    """The file number of the newest WAL a manifest's state `st` names ("The newest named WAL
    must exist" in format.md): the largest of the first sealed WAL and every keyspace's log
    number (0 names none); None when the manifest names no first sealed WAL (not checked)."""
    if st["sealed_from"] is None:
        return None
    return max([st["sealed_from"]] + [k["log"] for k in st["ks"].values() if k["log"] != 0])


def fileno_of(name):
    m = re.fullmatch(r"(\d+)\.(log|sst|ht|bc|seg|dtb|sem|dbtmp)", name)
    return int(m.group(1)) if m else None


LAYOUTS = {1: "leveled", 2: "fragmented", 3: "trie", 4: "semisorted", 5: "lightweight",
           255: "test-segments"}
# Table format bytes of the manifest's table records, and their file name extensions.
TABLE_EXT = {0: ".sst", 1: ".ht", 2: ".sem", 3: ".dtb", 255: ".seg"}
# Formats whose tables may be appendable (keyspace edit tag 6): the DTable and the test-only
# segment table.
APPENDABLE_FORMATS = {3, 255}


class Checker:
    def __init__(self, db, quiet):
        self.db = db
        self.quiet = quiet
        self.problems = []
        self.notes = []
        # (ks_id, user key) -> list of (rank tuple, kind, value, source)
        self.versions = {}
        self.features_used = set()
        self.found = []  # the problems as (file, offset, message)
        self.history_end = None  # (WAL, offset, why): where the WAL chain ends before the newest WAL
        # while decoding a WAL nothing reads, or a file the manifest does not name (an
        # unfinished job's, removed at the next open): why its problems are only notes
        self.muted = False
        self.deferred = None  # while decoding a WAL: its problems, held until wal_chain knows
                              # whether the WAL is in the history (reported) or after it (notes)

    def problem(self, fname, offset, msg):
        where = f"{fname}" + (f" @{offset}" if offset is not None else "")
        if self.muted:
            self.notes.append(f"{where}: {msg} ({self.muted})")
            return
        if self.deferred is not None:
            self.deferred.append((fname, offset, msg))
            return
        self.problems.append(f"{where}: {msg}")
        self.found.append((fname, offset, msg))

    def say(self, line):
        if not self.quiet:
            print(line)

    def path(self, name):
        return os.path.join(self.db, name)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def add_version(self, ks, ukey, rank, kind, value, source):
        self.versions.setdefault((ks, ukey), []).append((rank, kind, value, source))

    # -----------------------------------------------------------------------------------------
    # Record log

    def read_log(self, name, data, allowed_types, is_wal):
        """Returns (records [(offset, type, payload)], end_state, end_offset)."""
        recs = []
        pos = 0
        n = len(data)

        def valid_at(p):
            if n - p < 9:
                return None
            crc, ln, ty = struct.unpack_from("<IIB", data, p)
            if ln > (1 << 30) or p + 9 + ln > n or ty not in allowed_types:
                return None
            if masked_crc(data[p + 8:p + 9 + ln]) != crc:
                return None
            return ln

        while pos < n:
            ln = valid_at(pos)
            if ln is None:
                why = self._why_bad(data, pos, allowed_types)
                if not any(data[pos:]):
                    return recs, "zero tail", pos
                later = None
                for q in range(pos + 1, n - 8):
                    if valid_at(q) is not None:
                        later = q
                        break
                if later is None:
                    return recs, f"torn tail ({why})", pos
                if not is_wal:
                    return recs, f"bad record ({why}) followed by a valid record at {later}", pos
                verdict, reason = judge_wal_gap(data, pos, allowed_types, valid_at, later)
                if verdict == "torn":
                    return recs, f"torn tail ({why}; {reason})", pos
                return recs, f"bad record ({why}) followed by a valid record at {later}: {reason}", pos
            recs.append((pos, data[pos + 8], data[pos + 9:pos + 9 + ln]))
            pos += 9 + ln
        return recs, "clean end", pos

    @staticmethod
    def _why_bad(data, p, allowed):
        n = len(data)
        if n - p < 9:
            return "short header"
        crc, ln, ty = struct.unpack_from("<IIB", data, p)
        if ln > (1 << 30):
            return f"length {ln} above 2^30"
        if p + 9 + ln > n:
            return f"length {ln} runs past the end"
        if ty not in allowed:
            return f"unknown type {ty}"
        return "checksum mismatch"

    # -----------------------------------------------------------------------------------------
    # CURRENT

    def check_current(self, names):
        if "CURRENT" not in names:
            self.problem("CURRENT", None, "missing")
            return None
        data = self.read("CURRENT")
        m = re.fullmatch(rb"(MANIFEST-(\d+)) ([0-9a-f]{8})\n", data)
        if not m:
            self.problem("CURRENT", 0, f"malformed: {data[:80]!r}")
            return None
        name = m.group(1)
        if int(m.group(3), 16) != masked_crc(name):
            self.problem("CURRENT", 0, f"crc {m.group(3).decode()} != {masked_crc(name):08x}")
        if int(m.group(2)) > MAX_FILE_NO:
            self.problem("CURRENT", 0, "manifest number beyond 2^63-1")
        self.say(f"CURRENT: {name.decode()}")
        return name.decode()

    # -----------------------------------------------------------------------------------------
    # Manifest

    def decode_manifest(self, name):
        data = self.read(name)
        found_before = len(self.problems)
        recs, end, endpos = self.read_log(name, data, {1}, False)
        if end.startswith("bad record"):
            self.problem(name, endpos, f"manifest ends with {end}")
        elif end != "clean end":
            # a torn tail (a crash during an append) is dropped, a zero tail ends the log: neither
            # is damage ("Record log" in format.md)
            self.notes.append(f"{name}: manifest ends with {end} at {endpos} (dropped by recovery)")
        st = {
            "next_file": None,
            "last_seq": None,
            "hash_key": None,
            "features": None,
            "sealed_from": None,  # tag 7, first sealed WAL; None: no WAL is sealed
            "ks": {},
            "edits": len(recs),
        }
        for i, (off, ty, payload) in enumerate(recs):
            try:
                tags = self.apply_edit(st, payload, name, off)
            except Bad as e:
                self.problem(name, off + 9 + e.offset, f"edit {i}: {e.msg}")
                continue
            if i == 0:
                for t, what in ((1, "next file number"), (2, "last sequence"), (3, "hash key"), (6, "features")):
                    if t not in tags:
                        self.problem(name, off, f"first edit (snapshot) lacks tag {t} ({what})")
        # a damaged manifest (or, in main, CURRENT): its state is not to be trusted for "the
        # newest named WAL must exist"
        st["damaged"] = len(self.problems) > found_before
        return st

    def apply_edit(self, st, p, name, rec_off):
        pos = 0
        n = len(p)
        tags = set()
        while pos < n:
            tag = p[pos]  # one byte
            pos += 1
            tags.add(tag)
            if tag == 1:
                v, pos = varint(p, pos, n)
                if v > MAX_FILE_NO:
                    raise Bad(pos, "next file number beyond 2^63-1")
                st["next_file"] = v
            elif tag == 2:
                v, pos = varint(p, pos, n)
                if v > MAX_SEQ:
                    raise Bad(pos, "last sequence beyond 2^56-1")
                st["last_seq"] = v
            elif tag == 3:
                st["hash_key"], pos = take(p, pos, 16, n, "hash key")
            elif tag == 4:
                kid, pos = varint(p, pos, n)
                ln, pos = varint(p, pos, n)
                kname, pos = take(p, pos, ln, n, "keyspace name")
                ln, pos = varint(p, pos, n)
                lay, pos = take(p, pos, ln, n, "layout")
                if not lay or lay[0] not in LAYOUTS:
                    raise Bad(pos, f"unknown layout bytes {lay.hex()}")
                if lay[0] == 4:
                    _, q = varint(lay, 1)
                    if q != len(lay):
                        raise Bad(pos, "bad semisorted layout bytes")
                elif len(lay) != 1:
                    raise Bad(pos, f"layout bytes {lay.hex()} too long")
                if kid in st["ks"]:
                    raise Bad(pos, f"keyspace {kid} created twice")
                try:
                    kname = kname.decode("utf-8")
                except UnicodeDecodeError:
                    raise Bad(pos, "keyspace name not UTF-8")
                st["ks"][kid] = {
                    "name": kname,
                    "layout": LAYOUTS[lay[0]],
                    "log": 0,
                    "tables": {},
                    "records": {},
                    "clusters": {},  # trie: container id -> cluster record
                }
            elif tag == 5:
                ln, pos = varint(p, pos, n)
                body, pos2 = take(p, pos, ln, n, "keyspace edit")
                try:
                    self.apply_ks_edit(st, body)
                except Bad as e:
                    raise Bad(pos + e.offset, e.msg)
                pos = pos2
            elif tag == 6:
                v, pos = varint(p, pos, n)
                if v & ~0b1111111:
                    raise Bad(pos, f"unknown feature bits {v:#x}")
                st["features"] = v
            elif tag == 7:
                v, pos = varint(p, pos, n)
                if v > MAX_FILE_NO:
                    raise Bad(pos, "first sealed WAL beyond 2^63-1")
                st["sealed_from"] = v  # the last value in the manifest holds
            else:
                raise Bad(pos - 1, f"unknown edit tag {tag}")
        return tags

    def apply_ks_edit(self, st, b):
        n = len(b)
        kid, pos = varint(b, 0, n, "keyspace id")
        if kid not in st["ks"]:
            raise Bad(0, f"edit of unknown keyspace {kid}")
        ks = st["ks"][kid]
        adds = []
        removes = []
        records = []
        while pos < n:
            tag = b[pos]  # one byte
            pos += 1
            if tag == 1:
                ks["log"], pos = varint(b, pos, n)
            elif tag in (3, 6):
                at = pos
                level, pos = varint(b, pos, n)
                slot, pos = varint(b, pos, n)
                fmt, pos = take(b, pos, 1, n, "format")
                fmt = fmt[0]
                fno, pos = varint(b, pos, n)
                size, pos = varint(b, pos, n)
                ln, pos = varint(b, pos, n)
                smallest, pos = take(b, pos, ln, n, "smallest key")
                ln, pos = varint(b, pos, n)
                largest, pos = take(b, pos, ln, n, "largest key")
                entries, pos = varint(b, pos, n)
                min_seq, pos = varint(b, pos, n)
                max_seq, pos = varint(b, pos, n)
                append = None
                if tag == 6:
                    # an appendable table: the offset of its current metadata (which ends at the
                    # table's size) and the dead bytes before it
                    meta_offset, pos = varint(b, pos, n)
                    dead, pos = varint(b, pos, n)
                    if meta_offset >= size:
                        raise Bad(at, f"appendable table {fno}: metadata at {meta_offset}, not inside its {size} bytes")
                    if dead > meta_offset:
                        raise Bad(at, f"appendable table {fno}: {dead} dead bytes before its metadata at {meta_offset}")
                    if fmt not in APPENDABLE_FORMATS:
                        raise Bad(at, f"appendable table {fno} of format {fmt}, which is not appendable")
                    append = dict(meta_offset=meta_offset, dead=dead)
                    self.features_used.add(5)
                if fmt not in TABLE_EXT:
                    raise Bad(at, f"table format {fmt}")
                if fno > MAX_FILE_NO:
                    raise Bad(at, "file number beyond 2^63-1")
                if st["next_file"] is not None and fno >= st["next_file"]:
                    raise Bad(at, f"table {fno} not below next file number {st['next_file']}")
                if max_seq > MAX_SEQ or min_seq > max_seq:
                    raise Bad(at, f"seq range {min_seq}..{max_seq}")
                # An appendable table with no segment (a compacted victim's range reset, holding
                # only an aggregation block) has empty smallest/largest and zero counts.
                no_segment = append is not None and smallest == b"" and largest == b""
                if no_segment and (entries, min_seq, max_seq) != (0, 0, 0):
                    raise Bad(at, f"appendable table {fno} without keys has entries or seqs")
                if not no_segment and (len(smallest) < 8 or len(largest) < 8):
                    raise Bad(at, "smallest/largest shorter than an internal key")
                # A semi-sorted table's first and last entries are in hash order, not key order.
                if not no_segment and fmt != 2 and ikey_sort_key(smallest) > ikey_sort_key(largest):
                    raise Bad(at, "smallest key after largest")
                adds.append((at, fno, dict(
                    level=level, slot=slot, fmt=fmt, size=size, smallest=smallest,
                    largest=largest, entries=entries, min_seq=min_seq, max_seq=max_seq,
                    append=append)))
            elif tag == 4:
                at = pos
                fno, pos = varint(b, pos, n)
                removes.append((at, fno))
            elif tag == 5:
                at_rec = pos
                rt, pos = take(b, pos, 1, n, "layout record tag")
                ln, pos = varint(b, pos, n)
                data, pos = take(b, pos, ln, n, "layout record")
                ks["records"].setdefault(rt[0], []).append(data)
                records.append((at_rec, rt[0], data))
            else:
                raise Bad(pos - 1, f"unknown keyspace edit tag {tag}")
        # Removals apply before additions (a trivial move is removed and added in one edit),
        # then the layout records.
        removed = {}
        for at, fno in removes:
            if fno in ks["tables"]:
                removed[fno] = ks["tables"].pop(fno)
                continue
            cl = [c for c, r in ks["clusters"].items() if r["file_no"] == fno]
            if cl:
                del ks["clusters"][cl[0]]
                continue
            raise Bad(at, f"removal of {fno}: no live table or cluster")
        trie = ks["layout"] == "trie"
        for at, fno, t in adds:
            if fno in ks["tables"]:
                raise Bad(at, f"table {fno} added twice")
            old = removed.get(fno)
            table_of = lambda m: {k: v for k, v in m.items() if k not in ("level", "slot")}
            if old is not None and table_of(old) != table_of(t):
                # removed and added back changed (not only moved to another level or slot): an
                # append switch, whose new end lies past the old one, with the new metadata
                # after the old end
                a, o = t["append"], old["append"]
                if a is None or o is None:
                    raise Bad(at, f"table {fno} re-added changed, but not as an appendable table")
                if t["size"] <= old["size"] or a["meta_offset"] < old["size"] or a["dead"] < o["dead"]:
                    raise Bad(at, f"append switch of table {fno}: {old['size']} bytes (metadata at "
                                  f"{o['meta_offset']}) to {t['size']} (metadata at {a['meta_offset']})")
            if ks["layout"] == "test-segments":
                if t["fmt"] != 255 or t["append"] is None or t["level"] > 1:
                    raise Bad(at, f"segment table {fno}: format {t['fmt']}, level {t['level']}")
            elif ks["layout"] == "lightweight":
                if t["fmt"] != 3 or t["append"] is None:
                    raise Bad(at, f"lightweight table {fno}: format {t['fmt']}, not appendable")
            elif ks["layout"] == "semisorted":
                if t["fmt"] != 2 or t["append"] is not None:
                    raise Bad(at, f"semisorted table {fno}: format {t['fmt']}")
            elif trie:
                if t["fmt"] != 1:
                    raise Bad(at, f"trie table {fno} of format {t['fmt']}")
                if not valid_container(t["slot"]) or t["slot"] >> 56 != t["level"]:
                    raise Bad(at, f"trie table {fno}: level {t['level']}, container {t['slot']:#x}")
            elif t["fmt"] != 0:
                raise Bad(at, f"table {fno} of format {t['fmt']} in a sorted layout")
            ks["tables"][fno] = t
        if trie:
            for at, rt, data in records:
                self.apply_trie_record(ks, rt, data, at)
        elif ks["layout"] == "fragmented":
            for at, rt, data in records:
                self.check_fragmented_record(rt, data, at)
        elif ks["layout"] == "lightweight":
            for at, rt, data in records:
                self.apply_lightweight_record(ks, rt, data, at)
        elif records:
            raise Bad(records[0][0], f"layout record in a {ks['layout']} keyspace")

    def apply_lightweight_record(self, ks, rt, d, at):
        """docs/format.md, "DTable": tag 1 = varint file_no, varint-len routing bound."""
        try:
            if rt != 1:
                raise Bad(0, f"unknown tag {rt}")
            fno, q = varint(d, 0)
            ln, q = varint(d, q)
            lo, q = take(d, q, ln, len(d), "routing bound")
            if q != len(d):
                raise Bad(q, "bytes after the routing bound")
        except Bad as e:
            raise Bad(at, f"lightweight record {rt}: {e.msg}")
        t = ks["tables"].get(fno)
        if t is None or t["level"] < 1:
            raise Bad(at, f"routing bound for table {fno}, which is not in levels 1..")
        ks.setdefault("ranges", {})[fno] = lo

    def check_fragmented_record(self, rt, d, at):
        """docs/architecture-fragmented.md, "Records": varint level, then varint-len keys
        (tags 1 PENDING, 2 COMMIT, 3 DELETE), or varint number of levels (tag 4 LEVELS)."""
        try:
            level, q = varint(d, 0)
            if rt == 4:
                if q != len(d) or not 2 <= level <= 63:
                    raise Bad(0, f"LEVELS record {d.hex()}")
            elif rt in (1, 2, 3):
                while q < len(d):
                    ln, q = varint(d, q)
                    _, q = take(d, q, ln, len(d), "guard key")
            else:
                raise Bad(0, f"unknown tag {rt}")
        except Bad as e:
            raise Bad(at, f"fragmented record {rt}: {e.msg}")

    def apply_trie_record(self, ks, rt, d, at):
        """The trie layout's records (docs/format-htable.md, "The trie in the manifest")."""
        vals = []
        q = 0
        try:
            while q < len(d):
                v, q = varint(d, q)
                vals.append(v)
        except Bad as e:
            raise Bad(at, f"trie record {rt}: {e.msg}")
        if rt == 1:
            if len(vals) != 2 or vals[0] != 1 or not 1 <= vals[1] <= 9:
                raise Bad(at, f"trie params record {vals}")
            ks["last_depth"] = vals[1]
        elif rt == 2:
            if len(vals) < 5 or len(vals) != 5 + vals[4] or not valid_container(vals[0]) or not 1 <= vals[3] <= M32:
                raise Bad(at, f"trie cluster record {vals[:6]}")
            old = ks["clusters"].get(vals[0])
            if old is not None and old["file_no"] != vals[1]:
                self.notes.append(f"cluster {old['file_no']} replaced without its removal")
            ks["clusters"][vals[0]] = dict(file_no=vals[1], size=vals[2], n=vals[3], ids=vals[5:])
        elif rt == 3:
            if len(vals) != 1:
                raise Bad(at, f"trie cluster drop record {vals}")
            ks["clusters"].pop(vals[0], None)
        elif rt == 4:
            if len(vals) != 3 or not valid_container(vals[0]) or vals[2] > 1_000_000:
                raise Bad(at, f"trie gc record {vals}")
        else:
            raise Bad(at, f"unknown trie record tag {rt}")

    # -----------------------------------------------------------------------------------------
    # WAL

    def decode_wal(self, name, fno, st):
        """Decodes one WAL. Its entries are not replayed here: they are returned (with what the
        WAL chain needs: its end, its seal, whether it holds a type-3 record) for wal_chain.
        format.md, "WAL seals": a WAL below every keyspace's log number is neither replayed nor
        read (the next open removes it), so what is wrong in it is only a note. The problems of
        a read WAL are returned in the result ("problems"), not reported: wal_chain reports them
        for the WALs the history reaches, and only notes them for the WALs after its end
        ("nothing else in the later WALs is checked or reported")."""
        unread = bool(st["ks"]) and fno < min(k["log"] for k in st["ks"].values())
        was_muted, was_deferred = self.muted, self.deferred
        self.muted = was_muted or ("in a WAL that is not read" if unread else False)
        self.deferred = []
        try:
            if fno >= st["next_file"]:
                # not a problem: a WAL started after the manifest's last edit (a crash before the
                # next edit) is numbered past the persisted counter; the open counts on from it
                self.notes.append(f"{name}: WAL number not below the manifest's next file number "
                                  f"{st['next_file']} (started after its last edit)")
            info = self._decode_wal(name, fno, st, unread)
            info["problems"] = self.deferred
        finally:
            self.muted, self.deferred = was_muted, was_deferred
        info["unread"] = unread
        return info

    def _decode_wal(self, name, fno, st, unread):
        data = self.read(name)
        allowed = {1, 2, 3, 4}
        recs, end, endpos = self.read_log(name, data, allowed, True)
        counts = {1: 0, 2: 0, 3: 0, 4: 0}
        entries = 0
        seen3 = False
        last_synced = 0
        prev_end_seq = None
        seal = None  # (offset, next file number or None when the payload is bad)
        after_seal = False
        yielded3 = 0  # type-3 records the log yields: before its first bad record, a record
                      # read right after the seal being one
        max_seq = None  # the largest sequence number of its replayed records' entries, of any
                        # keyspace, those skipped as already flushed included (for wal_chain)
        features = set()  # feature bits its records use (counted by wal_chain if it is read)
        versions = []  # (ks, key, rank, kind, value), replayed by wal_chain
        for off, ty, p in recs:
            counts[ty] += 1
            if seal is None and ty == 3:
                yielded3 += 1
            if not unread:
                features.add({1: None, 2: 0, 3: 2, 4: 3}[ty])
            if seal is not None:
                # the seal is the log's last record: a record read right after it is corruption,
                # reported at that record's offset (format.md's type-4 row)
                if not after_seal:
                    self.problem(name, off, f"valid record (type {ty}) after the seal at {seal[0]}")
                    after_seal = True
                continue  # the history of this WAL ends at its seal
            if ty == 4:
                # `next: varint` and nothing else; a bad payload is corruption at the seal
                # record's offset. `next` is checked only against the WAL that follows (wal_chain).
                try:
                    nxt, q = varint(p, 0, len(p), "next")
                    if q != len(p):
                        raise Bad(q, f"{len(p) - q} bytes after the seal's varint")
                except Bad as e:
                    self.problem(name, off, f"WAL seal: {e.msg} (payload offset {e.offset})")
                    nxt = None
                seal = (off, nxt)
                continue
            try:
                pos = 0
                if ty == 3:
                    synced, pos = varint(p, 0, len(p), "synced")
                    if synced > off:
                        self.problem(name, off, f"type-3 synced {synced} past the record's own offset")
                    if synced < last_synced:
                        self.problem(name, off, f"synced {synced} below an earlier record's {last_synced}")
                    last_synced = synced
                    seen3 = True
                elif ty == 2 and seen3:
                    self.problem(name, off, "type-2 record after a type-3 record")
                batch = self.decode_batch(p, pos, ty)
            except Bad as e:
                self.problem(name, off + 9 + e.offset, f"WAL batch: {e.msg}")
                continue
            seq, ents = batch
            if ents:
                max_seq = max(max_seq or 0, seq + len(ents) - 1)
            if prev_end_seq is not None and seq <= prev_end_seq:
                self.problem(name, off, f"batch seq {seq} not after the previous batch's last {prev_end_seq}")
            if ents:
                prev_end_seq = seq + len(ents) - 1
            for i, (ksid, is_put, key, val) in enumerate(ents):
                entries += 1
                ks = st["ks"].get(ksid)
                if ks is None:
                    self.problem(name, off, f"entry of unknown keyspace {ksid}")
                    continue
                if fno < ks["log"]:
                    continue  # already in tables
                versions.append((ksid, key, (2, seq + i, 0, 0), is_put, val))
        # the end of the log, after its records' problems (in file order)
        if end.startswith("bad record"):
            self.problem(name, endpos, end)
        torn = end.startswith("torn tail")
        # "WAL seals": the log is read by the rules above first. In every WAL (of either group,
        # and the newest too), bytes after a seal that end the log as a zero tail or a torn tail
        # (a stale-sector gap included, whatever valid-looking records lie behind it) are
        # ignored and never cut; a record read right after the seal is corruption (above).
        ends_with_seal = seal is not None and recs[-1][0] == seal[0] and not end.startswith("bad record")
        tail_after_seal = ends_with_seal and torn  # ignored: neither a torn tail nor corruption
        self.say(f"{name}: WAL, {len(recs)} records (type1 {counts[1]}, type2 {counts[2]}, "
                 f"type3 {counts[3]}, type4 {counts[4]}), {entries} entries, {len(data)} bytes, {end} at {endpos}"
                 + (f", sealed at {seal[0]} naming {seal[1]}" if seal is not None else ""))
        return dict(name=name, fno=fno, end=end, endpos=endpos, torn=torn, seal=seal,
                    ends_with_seal=ends_with_seal, tail_after_seal=tail_after_seal,
                    has3=yielded3 > 0, features=features, versions=versions, max_seq=max_seq)

    def newest_named_wal(self, wals, st):
        """format.md, "The newest named WAL must exist": when the manifest names a first sealed
        WAL (tag 7), the WAL numbered the largest of it and every keyspace's log number (log
        number 0 names none) must be in the directory; if it is missing, the writes it held are
        gone: a problem naming it, at offset 0 (unless the manifest itself is damaged). Manifests
        without a first sealed WAL are not checked; WALs missing after that one are not detected
        (the newest remaining WAL then ends where it was sealed, which a crash can also leave).
        `wals` are decode_wal's results of the WALs in the directory. Returns the missing WAL's
        file number, or None."""
        if st.get("damaged"):
            return None
        present = {w["fno"] for w in wals}
        logs = [k["log"] for k in st["ks"].values() if k["log"] != 0]
        required = {}
        # Both rules apply only to manifests with feature bit 4 (format.md).
        if not (st["features"] or 0) & 16:
            return None
        fno = newest_named_wal_no(st)
        if fno is not None:
            required[fno] = (f"missing: the newest WAL the manifest names (the largest of its first "
                             f"sealed WAL {st['sealed_from']} and its keyspaces' log numbers, largest "
                             f"{max(logs) if logs else 'none'}); the writes it held are gone")
        # Feature bit 4 ("Every keyspace's log number names a WAL that exists"): each nonzero
        # log number's WAL must be there too. Of several missing, the smallest is reported.
        if (st["features"] or 0) & 16:
            for n in logs:
                required.setdefault(n, "missing: a keyspace's log number names it; the oldest of "
                                       "that keyspace's writes not yet in tables are gone")
        missing = sorted(n for n in required if n not in present)
        if not missing:
            return None
        fno = missing[0]
        self.problem(f"{fno:06d}.log", 0, required[fno])
        return fno

    def wal_chain(self, wals, st):
        """format.md, "WAL seals": which WALs recovery replays, and how far. `wals` are
        decode_wal's results in file-number order. Reports the problems decode_wal found in the
        WALs the history reaches and replays their entries; of the WALs after the end of the
        history only the type-3 records they yield (before their first bad record) count, for
        the corruption of a chain that ends before a completed sync; nothing else in them is
        checked or reported (what the decoder found there becomes a note)."""
        self.newest_named_wal(wals, st)
        # A WAL below every keyspace's log number is neither replayed nor read (decode_wal only
        # noted its problems); the chain starts at the oldest WAL a keyspace needs (its entries
        # are skipped per keyspace log number all the same).
        for w in wals:
            if w["unread"]:
                self.notes.append(f"{w['name']}: below every keyspace's log number: not read, "
                                  f"removed at the next open")
        replayed = [w for w in wals if not w["unread"]]
        if not replayed:
            return
        sealed_from = st["sealed_from"]
        # 1. where the history ends (nothing reported yet)
        end_at = None  # (index in replayed, why)
        for i, w in enumerate(replayed[:-1]):
            nxt = replayed[i + 1]
            if sealed_from is None or w["fno"] < sealed_from:
                continue  # goes on to the next WAL whatever its end (its torn tail: below)
            if w["ends_with_seal"] and w["seal"][1] == nxt["fno"]:
                continue
            if w["ends_with_seal"] and w["seal"][1] is None:
                why = f"its seal at {w['seal'][0]} does not decode"
            elif w["ends_with_seal"]:
                why = f"its seal names {w['seal'][1]}, not the next WAL {nxt['name']}"
            elif w["seal"] is not None:
                why = f"its seal at {w['seal'][0]} is not its last record"
            else:
                why = f"no seal ({w['end']} at {w['endpos']})"
            end_at = (i, why)
            break
        history = replayed if end_at is None else replayed[:end_at[0] + 1]
        later = [] if end_at is None else replayed[end_at[0] + 1:]
        # 2. the WALs the history reaches: their problems (in file order), the chain's
        for w in history:
            for fname, off, msg in w["problems"]:
                self.problem(fname, off, msg)
            self.features_used |= w["features"]
            if (sealed_from is None or w["fno"] < sealed_from) and w is not replayed[-1]:
                # written whole and synced before any newer WAL held writes: a torn tail in it
                # is corruption unless it comes after its seal (then it is ignored); its seal,
                # if any, is not checked
                if w["torn"] and not w["tail_after_seal"]:
                    self.problem(w["name"], w["endpos"], f"{w['end']} in a WAL that is not the newest "
                                                         f"(below the first sealed WAL {sealed_from})")
        if end_at is not None:
            w, why = history[-1], end_at[1]
            self.history_end = (w["name"], w["endpos"], why)
            self.notes.append(f"{w['name']}: the WAL history ends here: {why}; recovery removes the "
                              f"later WALs {', '.join(x['name'] for x in later)} and does not replay them")
            # 3. the later WALs: only the type-3 records each yields before its first bad record
            # count; what else the decoder found in them is not reported
            synced = [x["name"] for x in later if x["has3"]]
            if synced:
                # a completed sync of a later WAL synced every retired WAL first: corruption
                self.problem(w["name"], w["endpos"],
                             f"the WAL history ends here ({why}), but the later WAL {synced[0]} holds a type-3 "
                             f"record (a completed sync): the end of this WAL was durable and is missing")
            for x in later:
                if x["problems"]:
                    fname, off, msg = x["problems"][0]
                    more = len(x["problems"]) - 1
                    at = f" @{off}" if off is not None else ""
                    self.notes.append(f"{x['name']}: after the end of the WAL history, not checked; the decoder "
                                      f"would have reported{at}: {msg}"
                                      + (f" (and {more} more)" if more else ""))
        last = replayed[-1]
        # 4. wherever the history ends (at a missing seal; at a torn tail of the newest WAL, not
        # one after its seal, which is ignored; a point-in-time cut is not this decoder's mode),
        # no keyspace whose log number is above the WAL it ends in may hold a table whose max_seq
        # exceeds the largest sequence number replayed up to there (every entry of the records
        # replayed, of any keyspace, those skipped as already flushed included): that table
        # holds writes from after the end ("WAL seals" in format.md). A missing seal: the WAL
        # ends (clean, zero tail or torn tail) without one, or its seal names a WAL that is not
        # there. A WAL whose own end is corruption (a bad record followed by valid ones, a seal
        # that does not decode, a record after the seal) ends the history only at a
        # point-in-time cut: recovery refuses it in the default mode, before any end.
        ended = None  # the WAL the history ends in
        if end_at is not None:
            e = history[-1]
            if ((e["seal"] is None and not e["end"].startswith("bad record"))
                    or (e["ends_with_seal"] and e["seal"][1] is not None)):
                ended = e
        elif last["torn"] and not last["tail_after_seal"]:
            ended = last
        if ended is not None:
            seqs = [x["max_seq"] for x in history if x["max_seq"] is not None]
            upto = max(seqs) if seqs else 0  # nothing replayed: none (0)
            for kid, ks in sorted(st["ks"].items()):
                if ks["log"] <= ended["fno"]:
                    continue
                ahead = sorted(((t["max_seq"], fno) for fno, t in ks["tables"].items() if t["max_seq"] > upto),
                               reverse=True)
                if ahead:
                    self.problem(ended["name"], ended["endpos"],
                                 f"the WAL history ends here, but keyspace {kid} {ks['name']!r} (log number "
                                 f"{ks['log']}) already holds later writes: table {ahead[0][1]:06d} has max_seq "
                                 f"{ahead[0][0]} > {upto}, the largest sequence number replayed up to there"
                                 + (f" ({len(ahead)} such tables)" if len(ahead) > 1 else "")
                                 + ": no consistent point in time")
        if last["ends_with_seal"] and history[-1] is last:
            self.notes.append(f"{last['name']}: the newest WAL ends with a seal naming {last['seal'][1]}, "
                              f"which is not there")
        for w in history:
            for ks, key, rank, kind, val in w["versions"]:
                self.add_version(ks, key, rank, kind, val, w["name"])

    def decode_batch(self, p, pos, ty):
        n = len(p)
        if ty == 1:
            if n - pos < 12:
                raise Bad(pos, "short fixed header")
            seq, count = struct.unpack_from("<QI", p, pos)
            pos += 12
        else:
            seq, pos = varint(p, pos, n, "seq")
            cpos = pos
            count, pos = varint(p, pos, n, "count")
            if count > M32:
                raise Bad(cpos, "count above 2^32-1")
        if count and seq + count - 1 > MAX_SEQ:
            raise Bad(0, "sequence range past 2^56-1")
        ents = []
        for _ in range(count):
            if pos >= n:
                raise Bad(pos, f"short count: {len(ents)} of {count} entries")
            at = pos
            if ty == 1:
                kind = p[pos]
                pos += 1
                if kind not in (0, 1):
                    raise Bad(at, f"entry kind {kind}")
                ksid, pos = varint(p, pos, n, "keyspace id")
            else:
                tag, pos = varint(p, pos, n, "tag")
                kind = tag & 1
                ksid = tag >> 1
            if ksid > M32:
                raise Bad(at, "keyspace id above 2^32-1")
            kl, pos = varint(p, pos, n, "key length")
            key, pos = take(p, pos, kl, n, "key")
            val = b""
            if kind:
                vl, pos = varint(p, pos, n, "value length")
                val, pos = take(p, pos, vl, n, "value")
            ents.append((ksid, kind, key, val))
        if pos != n:
            raise Bad(pos, f"{n - pos} bytes after the last entry")
        return seq, ents

    # -----------------------------------------------------------------------------------------
    # Sorted tables

    def parse_block(self, data, off, size, is_index, name):
        """Returns (type, [(internal key, value, entry offset)]); in a type-2 (separator index)
        block the keys are the stored user keys."""
        if size < 5 + 4 or off + size > len(data):
            raise Bad(off, f"block size {size} invalid")
        b = data[off:off + size]
        crc = struct.unpack_from("<I", b, size - 4)[0]
        if masked_crc(b[:size - 4]) != crc:
            raise Bad(off, "block checksum mismatch")
        btype = b[size - 5]
        if btype not in ((0, 1, 2) if is_index else (0, 1)):
            raise Bad(off, f"block type {btype}")
        nr = struct.unpack_from("<I", b, size - 9)[0]
        if nr < 1 or 4 * nr + 9 > size:
            raise Bad(off, f"num_restarts {nr}")
        rstart = size - 9 - 4 * nr
        restarts = list(struct.unpack_from(f"<{nr}I", b, rstart))
        entries = []
        pos = 0
        prev = b""
        restart_at = []
        while pos < rstart:
            at = pos
            shared, pos = varint(b, pos, rstart, "shared")
            nsh, pos = varint(b, pos, rstart, "non_shared")
            vl, pos = varint(b, pos, rstart, "value_len")
            if btype == 1:
                tag, pos = varint(b, pos, rstart, "tag")
                if tag >> 1 > MAX_SEQ:
                    raise Bad(off + at, f"tag seq {tag >> 1} beyond 2^56-1")
                prev_u = prev[:-8] if prev else b""
                if shared > len(prev_u):
                    raise Bad(off + at, "shared longer than the previous user key")
                suffix, pos = take(b, pos, nsh, rstart, "key")
                ukey = prev_u[:shared] + suffix
                ik = make_ikey(ukey, tag >> 1, tag & 1)
            elif btype == 2:
                if shared > len(prev):
                    raise Bad(off + at, "shared longer than the previous key")
                suffix, pos = take(b, pos, nsh, rstart, "key")
                ik = prev[:shared] + suffix
            else:
                if shared > len(prev):
                    raise Bad(off + at, "shared longer than the previous key")
                suffix, pos = take(b, pos, nsh, rstart, "key")
                ik = prev[:shared] + suffix
                if len(ik) < 8:
                    raise Bad(off + at, "internal key shorter than 8 bytes")
                if ik[-8] not in (0, 1):
                    raise Bad(off + at, f"kind {ik[-8]}")
            val, pos = take(b, pos, vl, rstart, "value")
            if shared == 0:
                restart_at.append(at)
            entries.append((ik, val, at, shared))
            prev = ik
        # restarts: every 16th entry of a data block, every entry of an index block
        step = 1 if is_index else 16
        want = [entries[i][2] for i in range(0, len(entries), step)]
        if not entries:
            want = [0]
        if restarts != want:
            raise Bad(off, f"restart array {restarts[:8]}... != expected {want[:8]}... "
                           f"({len(restarts)} vs {len(want)})")
        for i in range(0, len(entries), step):
            if entries[i][3] != 0:
                raise Bad(off + entries[i][2], "restart entry with shared != 0")
        if is_index:
            entry_bytes = rstart
            total = sum(len(e[0]) for e in entries)
            if total > 16 * entry_bytes + 8 * len(entries):
                raise Bad(off, "index keys exceed 16x entry bytes + 8 per entry")
        return btype, [(e[0], e[1], e[2]) for e in entries]

    def sorted_region(self, name, data, base, n):
        """A sorted table occupying data[base:n] (offsets in it are offsets of the file: a
        whole .sst has base 0, a DTable segment its start). Returns None after reporting a
        problem, else a dict of what it holds."""
        if n - base < 48 or n > len(data):
            self.problem(name, base, "shorter than the footer")
            return None
        f = n - 48
        io, isz, fo, fsz, ver, crc, magic = struct.unpack_from("<QQQQIIQ", data, f)
        if magic != 0x5343524545535354:
            self.problem(name, f + 40, f"bad magic {magic:#x}")
            return None
        if masked_crc(data[f:f + 36]) != crc:
            self.problem(name, f + 36, "footer checksum mismatch")
            return None
        if ver not in (1, 2):
            self.problem(name, f + 32, f"format version {ver}")
            return None
        if fo + fsz != io or io + isz != f:
            self.problem(name, f, f"regions do not tile: filter {fo}+{fsz}, index {io}+{isz}, footer {f}")
            return None
        try:
            itype, idx = self.parse_block(data, io, isz, True, name)
        except Bad as e:
            self.problem(name, e.offset, f"index block: {e.msg}")
            return None
        if itype == 1:
            self.features_used.add(1)
        if (itype == 2) != (ver == 2):
            self.problem(name, io, f"index block of type {itype} in a version-{ver} table")
            return None
        if ver == 2:
            self.features_used.add(6)
        pos = base
        keys = []
        btypes = {0: 0, 1: 0}
        prev_sk = None
        seps = []  # version 2: (separator as an internal key, entry offset)
        for i, (ik, v, at) in enumerate(idx):
            try:
                if ver == 1:
                    boff, q = varint(v, 0, len(v), "block offset")
                    bsz, q = varint(v, q, len(v), "block size")
                else:
                    # first entry: offset of data block 0; then size << 1 | exact [, tag]
                    q = 0
                    if i == 0:
                        boff, q = varint(v, q, len(v), "first block offset")
                    else:
                        boff = pos
                    s2, q = varint(v, q, len(v), "block size")
                    bsz = s2 >> 1
                    trailer = 0
                    if s2 & 1:
                        tag, q = varint(v, q, len(v), "separator tag")
                        if tag >> 1 > MAX_SEQ:
                            raise Bad(0, f"separator tag seq {tag >> 1} beyond 2^56-1")
                        trailer = (tag >> 1) << 8 | (tag & 1)
                    seps.append((ik + struct.pack("<Q", trailer), at, bool(s2 & 1)))
                if q != len(v):
                    raise Bad(0, "bytes after the block handle")
            except Bad as e:
                self.problem(name, io + at, f"index entry {i}: {e.msg}")
                return None
            if boff != pos:
                self.problem(name, io + at, f"data block {i} at {boff}, expected {pos}")
                return None
            try:
                bt, ents = self.parse_block(data, boff, bsz, False, name)
            except Bad as e:
                self.problem(name, e.offset, f"data block {i}: {e.msg}")
                return None
            btypes[bt] += 1
            if bt == 1:
                self.features_used.add(1)
            if not ents:
                self.problem(name, boff, "empty data block")
            for ek, ev, eat in ents:
                sk = ikey_sort_key(ek)
                if prev_sk is not None and sk <= prev_sk:
                    self.problem(name, boff + eat, "keys not in strictly ascending internal-key order")
                prev_sk = sk
                keys.append((ek, ev))
            if ver == 1 and ents and ents[-1][0] != ik:
                self.problem(name, io + at, f"index key of block {i} is not the block's last key")
            if ver == 2 and ents:
                sep, _, exact = seps[i]
                if ikey_sort_key(sep) < ikey_sort_key(ents[-1][0]):
                    self.problem(name, io + at, f"separator of block {i} below the block's last key")
                if i > 0 and ikey_sort_key(seps[i - 1][0]) >= ikey_sort_key(ents[0][0]):
                    self.problem(name, io + seps[i - 1][1], f"separator of block {i - 1} not below block {i}'s first key")
                if i + 1 == len(idx) and (exact or sep[:-8] != ents[-1][0][:-8]):
                    self.problem(name, io + at, "the last separator is not the table's last user key")
            pos = boff + bsz
        if pos != fo:
            self.problem(name, pos, f"data blocks end at {pos}, filter block at {fo}")
        # filter
        fb = data[fo:fo + fsz]
        distinct = []
        for ek, _ in keys:
            u = ek[:-8]
            if not distinct or distinct[-1] != u:
                distinct.append(u)
        fdesc = "no filter"
        if fsz < 4:
            self.problem(name, fo, f"filter block of {fsz} bytes (no room for its crc)")
        else:
            filt = fb[:-4]
            if masked_crc(filt) != struct.unpack_from("<I", fb, fsz - 4)[0]:
                self.problem(name, fo, "filter checksum mismatch")
            elif filt:
                fdesc = self.check_sorted_filter(name, fo, filt, distinct)
        return dict(keys=keys, idx=idx, btypes=btypes, itype=itype, distinct=distinct, fdesc=fdesc)

    def decode_sst(self, name, fno, meta, ksid, st):
        data = self.read(name)
        n = len(data)
        r = self.sorted_region(name, data, 0, n)
        if r is None:
            return
        keys, idx, btypes, itype, distinct, fdesc = (r[k] for k in ("keys", "idx", "btypes", "itype", "distinct", "fdesc"))
        # manifest metadata
        seqs = [ikey_split(k)[1] for k, _ in keys]
        if meta is not None:
            want = dict(size=n, entries=len(keys))
            if keys:
                want.update(smallest=keys[0][0], largest=keys[-1][0], min_seq=min(seqs))
                # max_seq bounds the writes the table holds, including versions a bottommost
                # merge wrote with sequence number 0 (format.md): at least the largest written.
                if meta["max_seq"] < max(seqs):
                    self.problem(name, None, f"manifest max_seq {meta['max_seq']} below the "
                                 f"table's largest sequence number {max(seqs)}")
            for k2, v2 in want.items():
                if meta[k2] != v2:
                    self.problem(name, None, f"manifest {k2} {fmt_v(meta[k2])} != table's {fmt_v(v2)}")
            if meta["fmt"] != 0:
                self.problem(name, None, f"manifest format {meta['fmt']} for a .sst")
            for ek, ev in keys:
                u, seq, kind = ikey_split(ek)
                self.add_version(ksid, u, (1, seq, -meta["level"], fno), kind, ev, name)
        self.say(f"{name}: sst, {len(idx)} data blocks (type0 {btypes[0]}, type1 {btypes[1]}), "
                 f"index type {itype}, {len(keys)} entries, {len(distinct)} user keys, "
                 f"seq {min(seqs) if seqs else '-'}..{max(seqs) if seqs else '-'}, filter {fdesc}, "
                 f"{n} bytes" + (f", level {meta['level']}" if meta else ", not in the manifest"))

    def open_appendable(self, name, meta, what, ext, fmt, word):
        """An appendable table's bytes as the manifest names them (docs/format.md, "Appendable
        tables"): `(data, file length, append record, named end, metadata offset)`, or None
        (after saying why) when it is not in the manifest, not recorded as appendable with format
        `fmt`, or shorter than its named end. Bytes past the end are an unfinished `word`."""
        data = self.read(name)
        n = len(data)
        if meta is None:
            self.say(f"{name}: {what}, {n} bytes, not in the manifest")
            return None
        ap = meta["append"]
        if ap is None or meta["fmt"] != fmt:
            self.problem(name, None, f"a {ext} table the manifest does not record as appendable")
            return None
        size, mo = meta["size"], ap["meta_offset"]
        if n < size:
            self.problem(name, n, f"file is {n} bytes, the manifest says the table ends at {size}")
            return None
        if n > size:
            self.notes.append(f"{name}: {n - size} bytes past the table's named end (an unfinished {word}), ignored")
        return data, n, ap, size, mo

    def decode_seg(self, name, fno, meta, ksid):
        """The test-only appendable segment table (docs/format.md, "Appendable tables"): the
        manifest names its metadata (meta_offset .. size), which names its live segments."""
        opened = self.open_appendable(name, meta, "segment table", ".seg", 255, "switch")
        if opened is None:
            return
        data, n, ap, size, mo = opened
        body = data[mo:size]
        if len(body) < 4 or masked_crc(body[:-4]) != struct.unpack_from("<I", body, len(body) - 4)[0]:
            self.problem(name, mo, "segment table metadata checksum mismatch")
            return
        try:
            cnt, q = varint(body, 0, len(body) - 4, "segment count")
            segs = []
            for _ in range(cnt):
                off, q = varint(body, q, len(body) - 4, "segment offset")
                ln, q = varint(body, q, len(body) - 4, "segment length")
                segs.append((off, ln))
            if q != len(body) - 4:
                raise Bad(q, "bytes after the segment handles")
        except Bad as e:
            self.problem(name, mo + e.offset, f"segment table metadata: {e.msg}")
            return
        prev_end = 0
        keys = []
        for i, (off, ln) in enumerate(segs):
            if off < prev_end or off + ln > mo:
                self.problem(name, mo, f"segment {i} at {off}+{ln}: overlaps, or runs past the metadata at {mo}")
                return
            prev_end = off + ln
            seg = data[off:off + ln]
            if ln < 4 or masked_crc(seg[:-4]) != struct.unpack_from("<I", seg, ln - 4)[0]:
                self.problem(name, off, f"segment {i} checksum mismatch")
                return
            try:
                m, q = varint(seg, 0, ln - 4, "entry count")
                prev = None
                for _ in range(m):
                    kl, q = varint(seg, q, ln - 4, "key length")
                    k, q = take(seg, q, kl, ln - 4, "key")
                    vl, q = varint(seg, q, ln - 4, "value length")
                    v, q = take(seg, q, vl, ln - 4, "value")
                    if len(k) < 8:
                        raise Bad(q, "key shorter than an internal key")
                    if prev is not None and ikey_sort_key(k) <= ikey_sort_key(prev):
                        raise Bad(q, "keys not in strictly ascending internal-key order")
                    prev = k
                    keys.append((k, v))
                if q != ln - 4:
                    raise Bad(q, "bytes after the last entry")
            except Bad as e:
                self.problem(name, off + e.offset, f"segment {i}: {e.msg}")
                return
        live = sum(ln for _, ln in segs)
        if ap["dead"] != mo - live:
            self.problem(name, None, f"manifest dead bytes {ap['dead']}, but {mo - live} of the {mo} bytes "
                                     f"before the metadata are in no live segment")
        seqs = [ikey_split(k)[1] for k, _ in keys]
        want = dict(entries=len(keys))
        if keys:
            ks_sorted = sorted((k for k, _ in keys), key=ikey_sort_key)
            want.update(smallest=ks_sorted[0], largest=ks_sorted[-1], min_seq=min(seqs), max_seq=max(seqs))
        for k2, v2 in want.items():
            if meta[k2] != v2:
                self.problem(name, None, f"manifest {k2} {fmt_v(meta[k2])} != table's {fmt_v(v2)}")
        for ek, ev in keys:
            u, seq, kind = ikey_split(ek)
            self.add_version(ksid, u, (1, seq, -meta["level"], fno), kind, ev, name)
        self.say(f"{name}: segment table, {len(segs)} segments, {len(keys)} entries, ends at {size} "
                 f"(metadata at {mo}, {ap['dead']} dead bytes), {n - size} bytes past the end, "
                 f"level {meta['level']}")

    def decode_sem(self, name, fno, meta, ksid):
        """A semi-sorted table (docs/format.md, "Semi-sorted table"): fixed-size data blocks of
        tagged entries, a blob area, the compact index (its placement checked, not its bits:
        the engine's own decoder and fuzz target cover those), a 56-byte footer."""
        data = self.read(name)
        n = len(data)
        if n < 56:
            self.problem(name, 0, f"{n} bytes: too short for a semi-sorted table footer")
            return
        f = n - 56
        io, il, bo, nb, bs, ne, ver, crc, magic = struct.unpack_from("<QQQIIQIIQ", data, f)
        if magic != 0x53454D4953525431:
            self.problem(name, f + 48, "bad semi-sorted table magic")
            return
        if masked_crc(data[f:f + 44]) != crc:
            self.problem(name, f + 44, "footer checksum mismatch")
            return
        if ver != 1 or not 256 <= bs <= 1 << 20 or nb * bs != bo or io < bo or io + il != f:
            self.problem(name, f, f"footer: version {ver}, {nb} blocks of {bs}, blobs at {bo}, "
                                  f"index {io}+{il}, footer at {f}: inconsistent")
            return
        keys = []
        try:
            for b in range(nb):
                blk = data[b * bs:(b + 1) * bs]
                if masked_crc(blk[:-4]) != struct.unpack_from("<I", blk, bs - 4)[0]:
                    raise Bad(b * bs + bs - 4, f"data block {b} checksum mismatch")
                cnt = struct.unpack_from("<H", blk, 0)[0]
                if cnt == 0:
                    raise Bad(b * bs, f"data block {b} is empty")
                q, end = 2, bs - 4
                for _ in range(cnt):
                    tag = blk[q]
                    q += 1
                    if tag in (0, 1):
                        kl, q = varint(blk, q, end, "key length")
                        k, q = take(blk, q, kl, end, "key")
                        if tag == 0:
                            vl, q = varint(blk, q, end, "value length")
                            v, q = take(blk, q, vl, end, "value")
                        else:
                            off, q = varint(blk, q, end, "blob offset")
                            ln, q = varint(blk, q, end, "blob length")
                            v = self.sem_blob(data, bo, io, off, ln)
                    elif tag == 2:
                        if q + 16 > end:
                            raise Bad(b * bs + q, "blob entry header")
                        trailer = struct.unpack_from("<Q", blk, q)[0]
                        q += 16
                        off, q = varint(blk, q, end, "blob offset")
                        ln, q = varint(blk, q, end, "blob length")
                        blob = self.sem_blob(data, bo, io, off, ln)
                        kl, r = varint(blob, 0, len(blob), "blob key length")
                        k, r = take(blob, r, kl, len(blob), "blob key")
                        v = blob[r:]
                        if len(k) < 8 or struct.unpack_from("<Q", k, len(k) - 8)[0] != trailer:
                            raise Bad(bo + off, "blob entry's key does not match its block entry")
                    else:
                        raise Bad(b * bs + q - 1, f"entry tag {tag}")
                    if len(k) < 8:
                        raise Bad(b * bs + q, "key shorter than an internal key")
                    keys.append((k, v))
                if any(blk[q:end]):
                    raise Bad(b * bs + q, f"data block {b}: non-zero padding after its entries")
        except Bad as e:
            self.problem(name, e.offset, e.msg)
            return
        if len(keys) != ne:
            self.problem(name, f + 32, f"footer says {ne} entries, the blocks hold {len(keys)}")
        if meta is None:
            self.say(f"{name}: semi-sorted table, {len(keys)} entries, not in the manifest")
            return
        seqs = [ikey_split(k)[1] for k, _ in keys]
        want = dict(entries=len(keys), size=n)
        if keys:
            # First and last entry in the table's (hash) order, as the manifest records them.
            want.update(smallest=keys[0][0], largest=keys[-1][0], min_seq=min(seqs), max_seq=max(seqs))
        for k2, v2 in want.items():
            if meta.get(k2) != v2:
                self.problem(name, None, f"manifest {k2} {fmt_v(meta.get(k2))} != table's {fmt_v(v2)}")
        for ek, ev in keys:
            u, seq, kind = ikey_split(ek)
            self.add_version(ksid, u, (1, seq, -meta["level"], fno), kind, ev, name)
        self.say(f"{name}: semi-sorted table, {nb} blocks of {bs} bytes, {len(keys)} entries, "
                 f"{io - bo} blob bytes, index {il} bytes, level {meta['level']}")

    def sem_blob(self, data, bo, io, off, ln):
        """A blob of the semi-sorted table at `off` in its blob area, with its checksum."""
        start = bo + off
        if start + ln + 4 > io:
            raise Bad(start, "blob runs past the blob area")
        blob = data[start:start + ln]
        if masked_crc(blob) != struct.unpack_from("<I", data, start + ln)[0]:
            raise Bad(start + ln, "blob checksum mismatch")
        return blob

    def decode_dtb(self, name, fno, meta, ksid):
        """A lightweight DTable (docs/format.md, "DTable"): the manifest names its tail
        (meta_offset .. size), which names its live segments (each an embedded sorted table)
        and its aggregation block."""
        opened = self.open_appendable(name, meta, "DTable", ".dtb", 3, "append")
        if opened is None:
            return
        data, n, ap, size, mo = opened
        try:
            segs, agg = self.dtb_tail(data[mo:size], mo)
        except Bad as e:
            self.problem(name, e.offset, f"DTable tail: {e.msg}")
            return
        keys = []
        for i, sg in enumerate(segs):
            r = self.sorted_region(name, data, sg["start"], sg["end"])
            if r is None:
                return
            sk = r["keys"]
            if len(sk) != sg["entries"] or not sk or sk[0][0] != sg["smallest"] or sk[-1][0] != sg["largest"]:
                self.problem(name, sg["start"], f"segment {i}: entries or key range differ from the tail")
            seqs = [ikey_split(k)[1] for k, _ in sk]
            if seqs and (min(seqs) != sg["min_seq"] or max(seqs) > sg["max_seq"]):
                self.problem(name, sg["start"], f"segment {i}: sequence range differs from the tail")
            for ek, ev in sk:
                keys.append((ek, ev, sg["seq"]))
        agg_len = 0
        if agg is not None:
            off, ln = agg
            agg_len = ln
            blk = data[off:off + ln]
            if ln < 4 or masked_crc(blk[:-4]) != struct.unpack_from("<I", blk, ln - 4)[0]:
                self.problem(name, off, "aggregation block checksum mismatch")
            else:
                try:
                    cnt, q = varint(blk, 0, ln - 4, "copy count")
                    for _ in range(cnt):
                        _, q = varint(blk, q, ln - 4, "file number")
                        cmo, q = varint(blk, q, ln - 4, "tail offset")
                        tl, q = varint(blk, q, ln - 4, "tail length")
                        tb, q = take(blk, q, tl, ln - 4, "tail")
                        self.dtb_tail(tb, cmo)
                    if q != ln - 4:
                        raise Bad(q, "bytes after the last copy")
                except Bad as e:
                    self.problem(name, off, f"aggregation block: {e.msg}")
        live = sum(sg["end"] - sg["start"] for sg in segs)
        if ap["dead"] != mo - live - agg_len:
            self.problem(name, None, f"manifest dead bytes {ap['dead']}, but {mo - live - agg_len} of the "
                                     f"{mo} bytes before the tail are in no live segment or block")
        seqs = [ikey_split(k)[1] for k, _, _ in keys]
        want = dict(entries=len(keys))
        if keys:
            ks_sorted = sorted((k for k, _, _ in keys), key=ikey_sort_key)
            want.update(smallest=ks_sorted[0], largest=ks_sorted[-1], min_seq=min(seqs), max_seq=max(seqs))
        for k2, v2 in want.items():
            if meta[k2] != v2:
                self.problem(name, None, f"manifest {k2} {fmt_v(meta[k2])} != table's {fmt_v(v2)}")
        for ek, ev, sseq in keys:
            u, seq, kind = ikey_split(ek)
            self.add_version(ksid, u, (1, seq, -meta["level"], fno), kind, ev, name)
        self.say(f"{name}: DTable, {len(segs)} segments, {len(keys)} entries, ends at {size} "
                 f"(tail at {mo}, {ap['dead']} dead bytes, aggregation {agg_len} bytes), "
                 f"{n - size} bytes past the end, level {meta['level']}")

    def dtb_tail(self, t, at):
        """Decodes a DTable tail starting at file offset `at`; returns (segments, agg)."""
        if len(t) < 20:
            raise Bad(at, "tail shorter than its footer")
        f = len(t) - 20
        body_len, ver, crc, magic = struct.unpack_from("<IIIQ", t, f)
        if magic != 0x5354444545524353:
            raise Bad(at + f + 12, f"bad tail magic {magic:#x}")
        if masked_crc(t[:f + 8]) != crc:
            raise Bad(at + f + 8, "tail checksum mismatch")
        if ver != 1:
            raise Bad(at + f + 4, f"tail version {ver}")
        if body_len != f:
            raise Bad(at + f, f"tail body length {body_len}, expected {f}")
        try:
            cnt, q = varint(t, 0, f, "segment count")
            segs = []
            prev_end, prev_seq = 0, None
            for _ in range(cnt):
                sg = {}
                for fld in ("seq", "start", "end", "entries", "min_seq", "max_seq"):
                    sg[fld], q = varint(t, q, f, fld)
                for fld in ("smallest", "largest", "mid"):
                    ln, q = varint(t, q, f, fld + " length")
                    sg[fld], q = take(t, q, ln, f, fld)
                if sg["start"] < prev_end or sg["end"] <= sg["start"] or sg["end"] > at:
                    raise Bad(q, f"segment at {sg['start']}..{sg['end']} out of place")
                if prev_seq is not None and sg["seq"] <= prev_seq:
                    raise Bad(q, "segment sequence numbers not increasing")
                if sg["entries"] == 0 or sg["min_seq"] > sg["max_seq"] or len(sg["smallest"]) < 8 \
                        or len(sg["largest"]) < 8 or ikey_sort_key(sg["smallest"]) > ikey_sort_key(sg["largest"]):
                    raise Bad(q, "bad segment key range or counts")
                prev_end, prev_seq = sg["end"], sg["seq"]
                segs.append(sg)
            if q >= f:
                raise Bad(q, "no aggregation flag")
            flag = t[q]
            q += 1
            agg = None
            if flag == 1:
                off, q = varint(t, q, f, "aggregation offset")
                ln, q = varint(t, q, f, "aggregation length")
                if off + ln > at:
                    raise Bad(q, "aggregation block past the tail")
                agg = (off, ln)
            elif flag != 0:
                raise Bad(q, f"aggregation flag {flag}")
            if q != f:
                raise Bad(q, "bytes after the aggregation handle")
        except Bad as e:
            raise Bad(at + e.offset, e.msg)
        return segs, agg

    def check_sorted_filter(self, name, fo, filt, ukeys):
        last = filt[-1]
        if last & 0x80:
            k = last & 0x7F
            nb = (len(filt) - 1) / 64
            ok_len = (len(filt) - 1) % 64 == 0 and nb >= 1
            bpks = [b for b in range(1, 200)
                    if max(1, -(-b * len(ukeys) // 512)) == nb and min(24, max(1, round(0.69 * b))) == k]
            desc = f"cache-local k={k}, {int(nb)} blocks, bits/key {bpks[:3]}"
        else:
            k = last
            ok_len = len(filt) - 1 >= 8
            bpks = [b for b in range(1, 200)
                    if max(8, -(-b * len(ukeys) // 8)) == len(filt) - 1 and int(0.69 * b) == k]
            desc = f"standard k={k}, {len(filt) - 1} bytes, bits/key {bpks[:3]}"
        if not ok_len or not (1 <= k <= (24 if last & 0x80 else 30)):
            self.problem(name, fo, f"filter of unknown encoding ({desc})")
            return desc
        if not bpks:
            self.problem(name, fo, f"filter size/k fits no bits_per_key for {len(ukeys)} keys ({desc})")
        miss = 0
        for u in ukeys:
            if bloom_may_contain(filt, xxh3_64(u)) is False:
                miss += 1
        if miss:
            self.problem(name, fo, f"filter rejects {miss} of its {len(ukeys)} keys ({desc})")
        return desc

    # -----------------------------------------------------------------------------------------
    # HTables

    def decode_ht(self, name, fno, meta, ksid, st):
        data = self.read(name)
        n = len(data)
        if n < 112:
            self.problem(name, 0, "shorter than the footer")
            return None
        F = n - 112
        if data[F + 104:F + 112] != b"SCREE-HT":
            self.problem(name, F + 104, "bad magic")
            return None
        if region_crc(F, data[F:F + 100]) != struct.unpack_from("<I", data, F + 100)[0]:
            self.problem(name, F + 100, "footer checksum mismatch")
            return None
        (ver, bsize, nb, shift, items, ovo, ovl, mo, ml, fo, fl) = struct.unpack_from("<IIIIQQQQQQQ", data, F)
        hkey = data[F + 72:F + 88]
        bpk = struct.unpack_from("<I", data, F + 88)[0]
        base_seq = struct.unpack_from("<Q", data, F + 92)[0]
        if ver != 3:
            self.problem(name, F, f"format version {ver}")
            return None
        errs = []
        if bsize != 4096:
            errs.append(f"bucket size {bsize}")
        if not (1 <= nb <= (1 << 32) - 2):
            errs.append(f"n_buckets {nb}")
        if shift > 127:
            errs.append(f"bucket shift {shift}")
        if ovo != nb * 4096 or mo != ovo + ovl or fo != mo + ml or fo + fl != F or ml < 4 or fl < 4:
            errs.append(f"regions do not tile: overflow {ovo}+{ovl} meta {mo}+{ml} filter {fo}+{fl} footer {F}")
        if items > mo // 3:
            errs.append(f"item count {items} above a third of {mo}")
        if base_seq > MAX_SEQ:
            errs.append(f"base_seq {base_seq}")
        if st["hash_key"] is not None and hkey != st["hash_key"]:
            errs.append("placement-hash key differs from the manifest's")
        if errs:
            for e in errs:
                self.problem(name, F, "footer: " + e)
            return None
        # metadata block
        mb = data[mo:mo + ml]
        if region_crc(mo, mb[:-4]) != struct.unpack_from("<I", mb, ml - 4)[0]:
            self.problem(name, mo, "metadata checksum mismatch")
            return None
        records = []
        ovf = []
        try:
            end = ml - 4
            nr, p = varint(mb, 0, end, "n_records")
            for _ in range(nr):
                src, p = varint(mb, p, end, "src")
                mk, p = take(mb, p, 4, end, "mark")
                dest, p = varint(mb, p, end, "dest")
                records.append((src, int.from_bytes(mk, "little"), dest))
            no, p = varint(mb, p, end, "n_overflow")
            for _ in range(no):
                h, p = take(mb, p, 16, end, "hash")
                ro, p = varint(mb, p, end, "rel_offset")
                ln, p = varint(mb, p, end, "len")
                ovf.append((int.from_bytes(h, "little"), ro, ln))
            if p != end:
                raise Bad(p, f"{end - p} bytes after the overflow index")
        except Bad as e:
            self.problem(name, mo + e.offset, f"metadata: {e.msg}")
            return None
        for i, (src, mk, dest) in enumerate(records):
            if src >= nb or dest > nb:
                self.problem(name, mo, f"record {i} ({src},{mk},{dest}) out of range")
            if i and (records[i - 1][0], records[i - 1][1]) >= (src, mk):
                self.problem(name, mo, f"records not strictly ascending at {i}")
            # one record wherever the destination changes along ascending rank, from home
            prev_dest = records[i - 1][2] if i and records[i - 1][0] == src else src
            if dest == prev_dest:
                self.problem(name, mo, f"record {i} ({src},{mk},{dest}) does not change the destination")
        # balancing never makes a destination a source (groups sent to the overflow region
        # for their size are no balancing)
        sources = {src for src, _, dest in records if dest != src and dest < nb}
        for src, mk, dest in records:
            if dest != src and dest < nb and dest in sources:
                self.problem(name, mo, f"bucket {dest} is both a destination (of {src}) and a source")
        expect_ro = 0
        for i, (h, ro, ln) in enumerate(ovf):
            if i and ovf[i - 1][0] >= h:
                self.problem(name, mo, f"overflow index not strictly ascending at {i}")
            if ro != expect_ro or ln < 5:
                self.problem(name, mo, f"overflow entry {i}: rel_offset {ro} len {ln}, expected offset {expect_ro}")
            expect_ro = ro + ln
        if expect_ro != ovl:
            self.problem(name, mo, f"overflow index covers {expect_ro} bytes of {ovl}")
        by_src = {}
        for src, mk, dest in records:
            by_src.setdefault(src, []).append((mk, dest))
        # filter block
        fbk = data[fo:fo + fl]
        filters = []
        if region_crc(fo, fbk[:-4]) != struct.unpack_from("<I", fbk, fl - 4)[0]:
            self.problem(name, fo, "filter block checksum mismatch")
            filters = None
        else:
            try:
                end = fl - 4
                cnt, p = varint(fbk, 0, end, "n filters")
                if cnt != nb:
                    raise Bad(0, f"{cnt} filters for {nb} buckets")
                for _ in range(cnt):
                    ln, p = varint(fbk, p, end, "filter len")
                    fl_, p = take(fbk, p, ln, end, "filter")
                    filters.append(fl_)
                if p != end:
                    raise Bad(p, "bytes after the last filter")
            except Bad as e:
                self.problem(name, fo + e.offset, f"filter block: {e.msg}")
                filters = None
        # buckets
        all_items = []  # (location, hash, ikey, value)
        for b in range(nb):
            o = b * 4096
            bk = data[o:o + 4096]
            if region_crc(o, bk[4:]) != struct.unpack_from("<I", bk, 0)[0]:
                self.problem(name, o, f"bucket {b} checksum mismatch")
                continue
            cnt = struct.unpack_from("<H", bk, 4)[0]
            p = 6
            try:
                for _ in range(cnt):
                    ik, v, p = self.ht_entry(bk, p, 4096, base_seq)
                    all_items.append((b, ik, v, o))
            except Bad as e:
                self.problem(name, o + e.offset, f"bucket {b}: {e.msg}")
                continue
            if p - 6 > 4090:
                self.problem(name, o, f"bucket {b} holds {p - 6} bytes of entries (> 4090)")
            if any(bk[p:]):
                self.problem(name, o + p, f"bucket {b}: padding not zero")
        for i, (h, ro, ln) in enumerate(ovf):
            o = ovo + ro
            rb = data[o:o + ln]
            if len(rb) != ln or region_crc(o, rb[4:]) != struct.unpack_from("<I", rb, 0)[0]:
                self.problem(name, o, f"overflow record {i} checksum mismatch")
                continue
            try:
                cnt, p = varint(rb, 4, ln, "entry count")
                if cnt < 1:
                    raise Bad(4, "empty overflow record")
                prev = None
                for _ in range(cnt):
                    ik, v, p = self.ht_entry(rb, p, ln, base_seq)
                    if prev is not None and ikey_sort_key(ik) <= ikey_sort_key(prev):
                        self.problem(name, o, f"overflow record {i}: entries not in internal key order")
                    prev = ik
                    all_items.append((("ovf", h), ik, v, o))
                if p != ln:
                    raise Bad(p, f"{ln - p} bytes after the last entry")
            except Bad as e:
                self.problem(name, o + e.offset, f"overflow record {i}: {e.msg}")
        if len(all_items) != items:
            self.problem(name, F + 16, f"footer item count {items} != {len(all_items)} items found")
        # placement, order, filters
        hcache = {}
        home_keys = {}
        prefix = None
        seqs = []
        misplaced = 0
        prev_in_bucket = {}
        for loc, ik, v, o in all_items:
            u, seq, kind = ikey_split(ik)
            seqs.append(seq)
            h = hcache.get(u)
            if h is None:
                h = hcache[u] = siphash13_128(hkey, u)
            home = bucket_of(h, nb, shift)
            rank = rotl32(h & M32, home % 32)
            dest = home
            for mk, ds in by_src.get(home, []):
                if mk <= rank:
                    dest = ds
            want = ("ovf", h) if dest == nb else dest
            if loc != want:
                misplaced += 1
                if misplaced <= 3:
                    self.problem(name, o, f"item {u[:24].hex()} in {loc}, a lookup reads {want} "
                                          f"(home {home}, rank {rank:#x})")
            if isinstance(loc, tuple) and loc[1] != h:
                self.problem(name, o, f"overflow item {u[:24].hex()} of hash {h:#x} in record of {loc[1]:#x}")
            if isinstance(loc, int):
                sk = (h, ikey_sort_key(ik))
                pv = prev_in_bucket.get(loc)
                if pv is not None and sk <= pv:
                    self.problem(name, o, f"bucket {loc}: entries not in (hash, internal key) order")
                prev_in_bucket[loc] = sk
            home_keys.setdefault(home, set()).add(u)
            pre = h >> (128 - shift) if shift else 0
            if prefix is None:
                prefix = pre
            elif pre != prefix:
                self.problem(name, o, f"items differ in their top {shift} hash bits")
                prefix = pre
            if meta is not None:
                # trie: containers root first, each pile newest first by order key (the
                # manifest's max_seq), then by sequence number inside the table
                self.add_version(ksid, u, (1, -meta["level"], meta["max_seq"], fno, seq), kind, v, name)
        if misplaced > 3:
            self.problem(name, None, f"{misplaced} items misplaced in all")
        if seqs and min(seqs) != base_seq:
            self.problem(name, F + 92, f"base_seq {base_seq} != oldest item seq {min(seqs)}")
        if filters is not None:
            miss = 0
            for b in range(nb):
                keys_b = home_keys.get(b, set())
                if not keys_b and filters[b]:
                    self.problem(name, fo, f"filter of bucket {b} non-empty for a bucket with no home key")
                if keys_b and not filters[b]:
                    self.problem(name, fo, f"filter of bucket {b} empty, {len(keys_b)} home keys")
                    continue
                for u in keys_b:
                    r = bloom_may_contain(filters[b], xxh3_64(u))
                    if r is None:
                        self.problem(name, fo, f"filter of bucket {b}: unknown encoding")
                        break
                    if r is False:
                        miss += 1
                if filters[b] and filters[b][-1] & 0x80:
                    self.problem(name, fo, f"filter of bucket {b} uses the cache-local encoding")
                elif filters[b] and not std_filter_size_ok(filters[b], len(keys_b), bpk):
                    self.problem(name, fo, f"filter of bucket {b}: {len(filters[b])} bytes, k={filters[b][-1]} "
                                           f"for {len(keys_b)} keys at {bpk} bits/key")
            if miss:
                self.problem(name, fo, f"per-bucket filters reject {miss} home keys")
        if meta is not None:
            sorted_keys = sorted((ik for _, ik, _, _ in all_items), key=ikey_sort_key)
            want = dict(size=n, entries=len(all_items))
            if sorted_keys:
                want.update(smallest=sorted_keys[0], largest=sorted_keys[-1], min_seq=min(seqs))
                # max_seq is the trie's order key: the largest sequence number of the data the
                # table was made from, at least the largest it holds
                if meta["max_seq"] < max(seqs):
                    self.problem(name, None, f"manifest order key {meta['max_seq']} below the table's "
                                             f"largest seq {max(seqs)}")
            for k2, v2 in want.items():
                if meta[k2] != v2:
                    self.problem(name, None, f"manifest {k2} {fmt_v(meta[k2])} != table's {fmt_v(v2)}")
            if meta["fmt"] != 1:
                self.problem(name, None, f"manifest format {meta['fmt']} for a .ht")
            if shift != 3 * meta["level"]:
                self.problem(name, F + 12, f"bucket shift {shift} != 3 x depth {meta['level']}")
            cprefix = meta["slot"] & ((1 << 56) - 1)
            if prefix is not None and prefix != cprefix:
                self.problem(name, None, f"items' top {shift} hash bits {prefix:#x} != container prefix {cprefix:#x}")
        self.say(f"{name}: htable, {nb} buckets, shift {shift}, {len(all_items)} items "
                 f"({sum(1 for x in all_items if isinstance(x[0], tuple))} in {len(ovf)} overflow records), "
                 f"{len(records)} migration records, {len(hcache)} user keys, base_seq {base_seq}, "
                 f"bloom {bpk} bits/key, {n} bytes"
                 + (f", level {meta['level']} slot {meta['slot']}" if meta else ", not in the manifest"))
        return dict(nb=nb, shift=shift, filters=filters, hashes=hcache, hkey=hkey, bpk=bpk,
                    slot=meta["slot"] if meta else None)

    def ht_entry(self, b, p, end, base_seq):
        ul, p = varint(b, p, end, "ulen")
        vl, p = varint(b, p, end, "vlen")
        at = p
        tag, p = varint(b, p, end, "tag")
        seq = base_seq + (tag >> 1)
        if seq > MAX_SEQ:
            raise Bad(at, f"sequence {seq} beyond 2^56-1")
        u, p = take(b, p, ul, end, "user key")
        v, p = take(b, p, vl, end, "value")
        return make_ikey(u, seq, tag & 1), v, p

    # -----------------------------------------------------------------------------------------
    # BloomClusters

    def decode_bc(self, name, hts, rec):
        data = self.read(name)
        n = len(data)
        if n < 36 or data[n - 8:] != b"SCREE-BC":
            self.problem(name, max(0, n - 8), "bad magic or too short")
            return None
        ncols, S, B, ver, bsz, crc = struct.unpack_from("<QIIIII", data, n - 36)
        T = B * 4096
        if n != B * 4096 + 8 * S + 4 * B + 36:
            self.problem(name, n - 36, f"length {n} != B*4096 + 8S + 4B + 36 (B={B}, S={S})")
            return None
        if region_crc(T, data[T:n - 12]) != crc:
            self.problem(name, n - 12, "trailer checksum mismatch")
            return None
        if ver != 3 or bsz != 4096:
            self.problem(name, n - 20, f"version {ver}, block size {bsz}")
            return None
        ids = list(struct.unpack_from(f"<{S}Q", data, T))
        dirs = list(struct.unpack_from(f"<{B}I", data, T + 8 * S))
        if B and dirs[0] != 0:
            self.problem(name, T + 8 * S, "directory does not start at 0")
        for i in range(B):
            nxt = dirs[i + 1] if i + 1 < B else ncols
            if dirs[i] >= ncols or nxt <= dirs[i] or nxt - dirs[i] > 65535:
                self.problem(name, T + 8 * S + 4 * i, f"directory entry {i}: {dirs[i]} (next {nxt}, n {ncols})")
                return None
        cols = []  # cols[c][s] = filter bytes
        for i in range(B):
            o = i * 4096
            bk = data[o:o + 4096]
            if region_crc(o, bk[4:]) != struct.unpack_from("<I", bk, 0)[0]:
                self.problem(name, o, f"block {i} checksum mismatch")
                return None
            first, k, s2 = struct.unpack_from("<IHH", bk, 4)
            nxt = dirs[i + 1] if i + 1 < B else ncols
            if first != dirs[i] or k != nxt - first or s2 != S:
                self.problem(name, o, f"block {i} header first {first} k {k} S {s2}")
                return None
            p = 12
            try:
                for _ in range(k):
                    col = []
                    for _ in range(S):
                        ln, p = varint(bk, p, 4096, "filter len")
                        fb, p = take(bk, p, ln, 4096, "filter")
                        col.append(fb)
                    cols.append(col)
            except Bad as e:
                self.problem(name, o + e.offset, f"block {i}: {e.msg}")
                return None
            if any(bk[p:]):
                self.problem(name, o + p, f"block {i}: padding not zero")
            if i:  # greedy packing: this block's first column did not fit in the previous one
                need = sum(vlen(len(f)) + len(f) for f in cols[dirs[i]])
                if 12 + prev_used + need <= 4096:
                    self.problem(name, o, f"block {i}: column {dirs[i]} would have fit in block {i - 1}")
            prev_used = p - 12
        if rec is not None:
            r = rec[1]
            if r["size"] != n or r["n"] != ncols or r["ids"] != ids:
                self.problem(name, None, f"cluster record (size {r['size']}, n {r['n']}, ids {r['ids']}) "
                                         f"!= file (size {n}, n {ncols}, ids {ids})")
        # cross-check with the sub-level tables
        checked = 0
        for s, tid in enumerate(ids):
            ht = hts.get(tid)
            if ht is None:
                self.problem(name, T + 8 * s, f"sub-level {s}: table id {tid} is no live HTable")
                continue
            if rec is not None and ht["slot"] != rec[0]:
                self.problem(name, T + 8 * s, f"sub-level {s}: table {tid} is in container {ht['slot']:#x}, "
                                              f"not the cluster's {rec[0]:#x}")
            colkeys = {}
            for u, h in ht["hashes"].items():
                colkeys.setdefault(bucket_of(h, ncols, ht["shift"]), []).append(u)
            for c in range(ncols):
                f = cols[c][s]
                ks = colkeys.get(c, [])
                if not f and ks:
                    self.problem(name, None, f"column {c} sub-level {s}: empty filter, {len(ks)} keys")
                    continue
                if f and not ks:
                    self.problem(name, None, f"column {c} sub-level {s}: filter for a column with no key")
                if f and ht["bpk"] and not std_filter_size_ok(f, len(ks), ht["bpk"]):
                    self.problem(name, None, f"column {c} sub-level {s}: {len(f)} bytes for {len(ks)} keys")
                for u in ks:
                    if bloom_may_contain(f, xxh3_64(u)) is not True:
                        self.problem(name, None, f"column {c} sub-level {s} rejects key {u[:24].hex()}")
                        break
                    checked += 1
            if ht["nb"] == ncols and ht["filters"] is not None:
                if [cols[c][s] for c in range(ncols)] != ht["filters"]:
                    self.problem(name, None, f"sub-level {s} ({tid}): columns differ from the table's filters")
        self.say(f"{name}: bloomcluster, {ncols} columns, {S} sub-levels {ids}, {B} blocks, "
                 f"{checked} keys checked")
        return ids


def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC_T = _crc_table()


def unmask(m):
    x = (m - 0xA282EAD8) & M32
    return ((x << 15) | (x >> 17)) & M32


def single_flip_explains(msg, want_raw):
    """Whether flipping one bit of `msg` gives the raw CRC-32C `want_raw` (CRC linearity: the
    change a flipped bit makes depends only on its distance from the end)."""
    target = crc32c(msg) ^ want_raw
    if target == 0:
        return None
    t = _CRC_T
    diffs = [t[1 << b] for b in range(8)]
    for k in range(len(msg) - 1, -1, -1):
        for b in range(8):
            if diffs[b] == target:
                return k, b
        diffs = [t[d & 0xFF] ^ (d >> 8) for d in diffs]
    return None


def judge_wal_gap(data, p, allowed, valid_at, nxt):
    """format.md, "Stale sectors": a bad WAL record at `p` followed by valid records, the first
    at `nxt`. Returns ("corruption" | "torn", reason)."""
    n = len(data)
    crc, ln, ty = struct.unpack_from("<IIB", data, p) if n - p >= 9 else (0, n, 0)
    extent_end = p + 9 + ln
    # the counted records: those starting at or after the claimed extent's end, and the
    # records chained after the first of them
    q = None
    for r in range(max(p + 1, extent_end), n - 8):
        if valid_at(r) is not None:
            q = r
            break
    chain = []
    r = q
    while r is not None and r < n:
        lr = valid_at(r)
        if lr is None:
            break
        chain.append((r, data[r + 8], data[r + 9:r + 9 + lr]))
        r += 9 + lr
    # 1. a later type-3 record announcing a sync past the bad record
    for r, t, pl in chain:
        if t == 3:
            try:
                synced, _ = varint(pl, 0)
            except Bad:
                continue
            if synced > p:
                return "corruption", f"a type-3 record at {r} announces a sync of {synced} bytes"
    # 2. one flipped bit explains the bad record, unless it lies in zeros that run from its
    #    byte to a 512-byte boundary before the next valid record (a stale sector explains it
    #    as well)

    def stale(at):
        a = (at // 512 + 1) * 512
        return a <= nxt and not any(data[at:a])

    whole = n - p >= 9 and ln <= (1 << 30) and extent_end <= n
    if n - p >= 9:
        for j in range(32):
            l2 = ln ^ (1 << j)
            if l2 <= (1 << 30) and p + 9 + l2 <= n and ty in allowed \
                    and masked_crc(data[p + 8:p + 9 + l2]) == crc and not stale(p + 4 + j // 8):
                return "corruption", f"one flipped bit of its length ({ln} for {l2})"
        if whole:
            body = data[p + 8:extent_end]
            good = masked_crc(body)
            d = good ^ crc
            if ty in allowed and bin(d).count("1") == 1 \
                    and not stale(p + (d.bit_length() - 1) // 8):
                return "corruption", "one flipped bit of its checksum"
            hit = single_flip_explains(body, unmask(crc))
            if hit is not None:
                k, b = hit
                t2 = ty ^ (1 << b) if k == 0 else ty
                if t2 in allowed and not stale(p + 8 + k):
                    return "corruption", f"one flipped bit at offset {p + 8 + k}"
    # 3. nothing counted after the claimed extent
    if q is None:
        return "torn", "no valid record after the bad record's extent"
    # 4. a stale sector: a zero byte just before a 512-byte boundary inside the gap [p, q)
    for a in range((p // 512 + 1) * 512, q + 1, 512):
        if data[a - 1] == 0:
            return "torn", f"stale sector: zero byte before {a}"
    return "corruption", f"valid record at {q}, no stale sector in the gap"


def vlen(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def std_filter_size_ok(f, nkeys, bpk):
    """A standard filter's size and k for `nkeys` keys at `bpk` bits per key (at least 64 bits)."""
    nbytes = -(-max(64, nkeys * bpk) // 8)
    return len(f) == nbytes + 1 and f[-1] == min(30, max(1, int(0.69 * bpk)))


def valid_container(cid):
    d = cid >> 56
    return d <= 9 and (cid & ((1 << 56) - 1)) >> (3 * d) == 0


def bucket_of(h, n, s):
    w = ((h << s) & ((1 << 128) - 1)) >> 64
    return (w * max(n, 1)) >> 64


def rotl32(x, r):
    r %= 32
    return ((x << r) | (x >> (32 - r))) & M32 if r else x


def fmt_v(v):
    if isinstance(v, (bytes, bytearray)):
        return v[:40].hex()
    return str(v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db")
    ap.add_argument("--dump-keys", nargs="?", const="-", default=None, metavar="FILE")
    ap.add_argument("--quiet", action="store_true", help="no per-file lines")
    a = ap.parse_args()
    c = Checker(a.db, a.quiet)
    names = sorted(os.listdir(a.db))
    cur = c.check_current(names)
    current_bad = bool(c.problems)  # a CURRENT that fails its checks may name the wrong manifest
    if "LOCK" in names and os.path.getsize(c.path("LOCK")) != 0:
        c.problem("LOCK", None, "not empty")
    manifests = [x for x in names if re.fullmatch(r"MANIFEST-\d+", x)]
    st = None
    for m in manifests:
        s = c.decode_manifest(m)
        ntab = sum(len(k["tables"]) for k in s["ks"].values())
        c.say(f"{m}: manifest, {s['edits']} edits, next file {s['next_file']}, last seq {s['last_seq']}, "
              f"features {s['features']}, first sealed WAL {s['sealed_from']}, {len(s['ks'])} keyspaces, "
              f"{ntab} live tables"
              + (" (named by CURRENT)" if m == cur else ""))
        if m == cur:
            st = s
            st["damaged"] = st["damaged"] or current_bad
    if st is None:
        c.problem("CURRENT", None, "names no manifest in the directory")
        print("\n".join(["PROBLEMS:"] + c.problems))
        return 1
    live = {}
    for kid, ks in st["ks"].items():
        for fno, t in ks["tables"].items():
            live[fno] = (kid, t)
    # WALs
    wals = sorted((fileno_of(x), x) for x in names if x.endswith(".log") and fileno_of(x) is not None)
    infos = []
    for fno, x in wals:
        infos.append(c.decode_wal(x, fno, st))
    c.wal_chain(infos, st)
    # tables
    hts = {}
    seen = set()
    for x in names:
        fno = fileno_of(x)
        if fno is None or x.endswith(".log") or x.endswith(".bc") or x.endswith(".dbtmp"):
            continue
        kid, meta = live.get(fno, (None, None))
        if meta is None:
            c.notes.append(f"{x}: not named by the manifest (removed at the next open)")
            # a file an unfinished job left (torn, or naming tables of that job): not part of
            # the database, so what is wrong in it is only a note
            c.muted = "in a file the manifest does not name"
        seen.add(fno)
        if x.endswith(".sst"):
            c.decode_sst(x, fno, meta, kid, st)
        elif x.endswith(".seg"):
            c.decode_seg(x, fno, meta, kid)
        elif x.endswith(".dtb"):
            c.decode_dtb(x, fno, meta, kid)
        elif x.endswith(".sem"):
            c.decode_sem(x, fno, meta, kid)
        elif x.endswith(".ht"):
            r = c.decode_ht(x, fno, meta, kid, st)
            if r is not None and meta is not None:
                hts[fno] = r
        c.muted = False
    for fno, (kid, t) in sorted(live.items()):
        if fno not in seen:
            c.problem(f"{fno:06d}", None, f"table named by the manifest (keyspace {kid}) is missing")
        ext = TABLE_EXT[t["fmt"]]
        if f"{fno:06d}{ext}" not in names:
            c.problem(f"{fno:06d}{ext}", None, "manifest names it, no such file name")
    clusters = {}
    for kid, ks in st["ks"].items():
        for cid, r in ks["clusters"].items():
            clusters[r["file_no"]] = (cid, r)
    for fno, (cid, r) in sorted(clusters.items()):
        if f"{fno:06d}.bc" not in names:
            c.problem(f"{fno:06d}.bc", None, f"named by the cluster record of container {cid:#x}, missing")
    for x in names:
        if x.endswith(".bc") and fileno_of(x) is not None:
            rec = clusters.get(fileno_of(x))
            if rec is None:
                c.notes.append(f"{x}: not named by the manifest (removed at the next open)")
                c.muted = "in a file the manifest does not name"
            c.decode_bc(x, hts, rec)
            c.muted = False
    # feature bits
    feats = st["features"] or 0
    if st["sealed_from"] is not None:
        c.features_used.add(3)  # bit 3 also covers manifest tag 7
    for bit in sorted(b for b in c.features_used if b is not None):
        if not feats >> bit & 1:
            c.problem(cur, None, f"files use feature bit {bit}, the manifest's features {feats} lack it")
    # replay: newest version wins
    live_keys = {}
    for (kid, u), vs in c.versions.items():
        vs.sort(key=lambda x: x[0], reverse=True)
        best = vs[0]
        sorted_layout = st["ks"][kid]["layout"] != "trie"
        if len(vs) > 1 and sorted_layout and vs[1][0][:2] == best[0][:2] and vs[1][0] != best[0]:
            c.notes.append(f"keyspace {kid} key {u[:24].hex()}: versions of equal seq {best[0][1]} "
                           f"in {best[3]} and {vs[1][3]}")
        if best[1] == 1:
            live_keys.setdefault(kid, {})[u] = best[2]
    for kid, ks in sorted(st["ks"].items()):
        levels = {}
        for t in ks["tables"].values():
            levels[t["level"]] = levels.get(t["level"], 0) + 1
        if ks["tables"] or live_keys.get(kid):
            c.say(f"keyspace {kid} {ks['name']!r} ({ks['layout']}): log {ks['log']}, tables per level "
                  f"{dict(sorted(levels.items()))}, {len(live_keys.get(kid, {}))} live keys, layout records "
                  f"{ {t: len(v) for t, v in sorted(ks['records'].items())} }")
    for nt in c.notes[:20]:
        print("note:", nt)
    if len(c.notes) > 20:
        print(f"note: ... {len(c.notes) - 20} more notes")
    if a.dump_keys is not None:
        lines = sorted(f"{st['ks'][kid]['name']}\t{u.hex()}\t{v.hex()}"
                       for kid, kv in live_keys.items() for u, v in kv.items())
        if a.dump_keys == "-":
            for ln in lines:
                print(ln)
        else:
            with open(a.dump_keys, "w") as f:
                f.write("".join(ln + "\n" for ln in lines))
    if c.problems:
        print(f"PROBLEMS ({len(c.problems)}):")
        for p in c.problems:
            print("  " + p)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
