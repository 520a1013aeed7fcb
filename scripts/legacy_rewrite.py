#!/usr/bin/env python3
"""Rewrites the sorted tables and WALs of a database IN PLACE (HTables are left as they are)
into the older encodings that docs/format.md says every build still reads, encoded from the
document alone: version-1 sorted tables with type-0 blocks (internal keys stored whole, index
blocks too, each block's last key and handle) and the standard Bloom filter (10 bits per key), WAL records of type 1 (fixed header).
The manifest is re-encoded with the tables' new sizes. The engine must read the result as
before; checked with `scree check`, format_fixture's `dump` mode (the engine's reading)
and decode_format.py:

  target/release/examples/format_fixture /tmp/lg leveled 20000 1
  python3 scripts/legacy_rewrite.py /tmp/lg/db
  target/release/scree check /tmp/lg/db
  target/release/examples/format_fixture /tmp/lg leveled 0 0 dump
  diff /tmp/lg/expected.tsv /tmp/lg/engine.tsv
"""
import glob
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_format as D  # noqa: E402


def uv(v):
    """Unsigned LEB128."""
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if not v:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def record(ty, payload):
    """One record of a record log (WAL or manifest)."""
    body = bytes([ty]) + payload
    return struct.pack("<II", D.masked_crc(body), len(payload)) + body


def type0_block(entries, interval):
    """A block of type 0: internal keys stored whole, a restart every `interval` entries."""
    body = bytearray()
    restarts = []
    prev = b""
    for i, (k, v) in enumerate(entries):
        shared = 0
        if i % interval == 0:
            restarts.append(len(body))
        else:
            while shared < min(len(prev), len(k)) and prev[shared] == k[shared]:
                shared += 1
        body += uv(shared) + uv(len(k) - shared) + uv(len(v)) + k[shared:] + v
        prev = k
    for r in restarts or [0]:
        body += struct.pack("<I", r)
    body += struct.pack("<I", len(restarts or [0])) + b"\x00"
    return bytes(body) + struct.pack("<I", D.masked_crc(bytes(body)))


def standard_filter(ukeys, bpk):
    """The standard Bloom encoding of format.md."""
    nbytes = -(-max(64, len(ukeys) * bpk) // 8)
    k = min(30, max(1, int(0.69 * bpk)))
    bits = bytearray(nbytes)
    m = nbytes * 8
    for u in ukeys:
        h = D.xxh3_64(u)
        a = h & D.M32
        d = (h >> 32) | 1
        for i in range(k):
            b = ((a + i * d) & D.M32) % m
            bits[b // 8] |= 1 << (b % 8)
    return bytes(bits) + bytes([k])


def rewrite_table(chk, path):
    """Re-encodes a sorted table with type-0 blocks and a standard filter; returns its size."""
    name = os.path.basename(path)
    data = open(path, "rb").read()
    io, isz, fo, fsz, ver = struct.unpack_from("<QQQQI", data, len(data) - 48)
    _, idx = chk.parse_block(data, io, isz, True, name)
    out = bytearray()
    index = []
    ukeys = []
    boff = 0
    for i, (_, handle, _) in enumerate(idx):
        if ver == 1:
            boff, q = D.varint(handle, 0)
            bsz, _ = D.varint(handle, q)
        else:  # version 2: the first entry's offset, then each block's size << 1 | exact
            q = 0
            if i == 0:
                boff, q = D.varint(handle, 0)
            s2, _ = D.varint(handle, q)
            bsz = s2 >> 1
        _, ents = chk.parse_block(data, boff, bsz, False, name)
        es = [(e[0], e[1]) for e in ents]
        for k, _ in es:
            if not ukeys or ukeys[-1] != k[:-8]:
                ukeys.append(k[:-8])
        b = type0_block(es, 16)
        index.append((es[-1][0], uv(len(out)) + uv(len(b))))
        out += b
        boff += bsz
    filt_off = len(out)
    f = standard_filter(ukeys, 10) if fsz > 4 else b""  # keep "no filter" tables filterless
    out += f + struct.pack("<I", D.masked_crc(f))
    idx_off = len(out)
    ib = type0_block(index, 1)
    out += ib
    foot = struct.pack("<QQQQI", idx_off, len(ib), filt_off, idx_off - filt_off, 1)
    out += foot + struct.pack("<I", D.masked_crc(foot)) + struct.pack("<Q", 0x5343524545535354)
    with open(path, "wb") as fh:
        fh.write(out)
    return len(out)


def reencode_ks_edit(b, sizes):
    n = len(b)
    kid, pos = D.varint(b, 0)
    out = bytearray(uv(kid))
    while pos < n:
        tag = b[pos]
        pos += 1
        start = pos
        if tag in (1, 4):
            _, pos = D.varint(b, pos)
            out += bytes([tag]) + b[start:pos]
        elif tag == 3:
            level, pos = D.varint(b, pos)
            slot, pos = D.varint(b, pos)
            fmt = b[pos]
            pos += 1
            fno, pos = D.varint(b, pos)
            size, pos = D.varint(b, pos)
            rest = pos
            for _ in range(2):
                ln, pos = D.varint(b, pos)
                pos += ln
            for _ in range(3):
                _, pos = D.varint(b, pos)
            out += bytes([tag]) + uv(level) + uv(slot) + bytes([fmt]) + uv(fno)
            out += uv(sizes.get(fno, size)) + b[rest:pos]
        elif tag == 5:
            pos += 1
            ln, pos = D.varint(b, pos)
            pos += ln
            out += bytes([tag]) + b[start:pos]
        else:
            raise SystemExit(f"unknown keyspace edit tag {tag}")
    return bytes(out)


def reencode_edit(p, sizes):
    pos = 0
    out = bytearray()
    while pos < len(p):
        tag = p[pos]
        pos += 1
        start = pos
        if tag in (1, 2, 6, 7):
            _, pos = D.varint(p, pos)
        elif tag == 3:
            pos += 16
        elif tag == 4:
            _, pos = D.varint(p, pos)
            for _ in range(2):
                ln, pos = D.varint(p, pos)
                pos += ln
        elif tag == 5:
            ln, pos = D.varint(p, pos)
            body = reencode_ks_edit(p[pos:pos + ln], sizes)
            pos += ln
            out += bytes([tag]) + uv(len(body)) + body
            continue
        else:
            raise SystemExit(f"unknown edit tag {tag}")
        out += bytes([tag]) + p[start:pos]
    return bytes(out)


def main():
    db = sys.argv[1]
    chk = D.Checker(db, True)
    sizes = {}
    for path in sorted(glob.glob(os.path.join(db, "*.sst"))):
        sizes[int(os.path.basename(path)[:-4])] = rewrite_table(chk, path)
    for path in glob.glob(os.path.join(db, "MANIFEST-*")):
        recs, _, _ = chk.read_log("manifest", open(path, "rb").read(), {1}, False)
        with open(path, "wb") as fh:
            fh.write(b"".join(record(1, reencode_edit(p, sizes)) for _, _, p in recs))
    nrec = 0
    for path in glob.glob(os.path.join(db, "*.log")):
        recs, _, _ = chk.read_log("wal", open(path, "rb").read(), {1, 2, 3, 4}, True)
        out = bytearray()
        for _, ty, p in recs:
            if ty == 4:  # a seal names the next WAL: kept as it is (no older encoding)
                out += record(4, p)
                continue
            pos = D.varint(p, 0)[1] if ty == 3 else 0
            seq, ents = chk.decode_batch(p, pos, ty)
            pl = bytearray(struct.pack("<QI", seq, len(ents)))
            for ks, put, k, v in ents:
                pl += bytes([put]) + uv(ks) + uv(len(k)) + k + (uv(len(v)) + v if put else b"")
            out += record(1, bytes(pl))
            nrec += 1
        with open(path, "wb") as fh:
            fh.write(out)
    print(f"rewrote {len(sizes)} tables and {nrec} WAL records")


if __name__ == "__main__":
    main()
