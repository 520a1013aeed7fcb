#!/usr/bin/env python3
"""Cross-checks format.md's WAL recovery rules (torn tail, zero tail, stale sectors, corruption,
and the chain of sealed WALs) against the engine: damages one WAL of a copy of a database at
random (a flipped bit, a zeroed 512-byte sector, zeros up to a sector boundary, zeroed or random
bytes, a truncation), then compares the verdict of `scree check -v` with that of
scripts/decode_format.py, which implements the rules from the document alone. Prints every
disagreement and a tally. Verdicts: clean (including a zero or torn tail after a seal, which is
ignored, a WAL below every keyspace's log number, which is not read, and a WAL after the end of
the history, of which nothing is reported), torn (a torn tail in
the newest WAL, not after a seal), ends (the WAL history ends in a sealed WAL that is not the
newest: "WAL seals" in format.md), corruption (including a history that ends, at a missing seal
or at a torn tail of the newest WAL, below a keyspace that already holds later writes: a table
whose max_seq exceeds the largest sequence number replayed up to the end, in a keyspace whose
log number is above the WAL the history ends in; both sides report it as a problem at the end
of that WAL, and a torn tail or an end of the history below no such table stays torn or ends).
Besides the verdict and its offset, the two must name the same keyspaces, at the same offset,
as already holding later writes (that problem may follow another at the same offset).

Run:  python3 scripts/wal_damage_crosscheck.py DB_DIR TRIALS [SEED] [--scree target/release/scree]
(DB_DIR is only read; e.g. a database left by `format_fixture`, whose WALs hold type-2 and
type-3 records and a zero tail.) Exit status 1 when the two disagree.
"""

import argparse
import ast
import glob
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_format as D  # noqa: E402


LATER = "already holds later writes"


def scree_later(out, name):
    """The (offset, keyspace name) of each problem of `scree check` at WAL `name` saying that the
    history ends below a keyspace that already holds later writes."""
    found = set()
    for line in out.splitlines():
        if line.startswith("problem") and name in line and LATER in line:
            m = re.search(r'offset (\d+):.* keyspace "(.*)" ' + LATER, line)
            found.add((int(m.group(1)), m.group(2)) if m else (None, line))
    return frozenset(found)


def scree_verdict(scree, db, name):
    out = subprocess.run([scree, "check", "-v", db], capture_output=True, text=True).stdout
    later = scree_later(out, name)
    for line in out.splitlines():
        if name in line:
            m = re.search(r"offset (\d+)", line)
            off = int(m.group(1)) if m else None
            if line.startswith("problem"):
                return "corruption", off, line, later
            if "the history ends" in line:
                return "ends", off, line, later
            if "torn tail" in line:
                return "torn", off, line, later
    return "clean", None, "", later


def decoder_verdict(db, st, base, name, newest):
    """The decoder's verdict on the damaged WAL `name` (already written to `db`), the other WALs
    being as decoded in `base` (file number, name, decode_wal result)."""
    chk = D.Checker(db, True)
    infos = [chk.decode_wal(x, fno, st) if x == name else info for fno, x, info in base]
    chk.wal_chain(infos, st)
    mine = [(off, msg) for f, off, msg in chk.found if f == name]
    later = set()
    for off, msg in mine:
        if LATER in msg:
            m = re.search(r"keyspace \d+ (.*) \(log number \d+\) " + LATER, msg)
            later.add((off, ast.literal_eval(m.group(1))) if m else (None, msg))
    later = frozenset(later)
    if mine:
        return "corruption", mine[0][0], mine[0][1], later
    if chk.history_end is not None and chk.history_end[0] == name:
        return "ends", chk.history_end[1], chk.history_end[2], later
    info = next(i for i in infos if i["name"] == name)
    # a torn tail right after a seal is ignored, never cut, in every WAL; a WAL below every
    # keyspace's log number is not read at all, and nothing is reported of a WAL after the end
    # of the history ("WAL seals" in format.md)
    after_end = chk.history_end is not None and info["fno"] > D.fileno_of(chk.history_end[0])
    if info["torn"] and newest and not info["tail_after_seal"] and not info["unread"] and not after_end:
        return "torn", info["endpos"], info["end"], later
    return "clean", None, info["end"], later


def damage(rng, data):
    real = len(data.rstrip(b"\0")) or 1
    kind = rng.choice(["flip", "sector", "zeros", "zeros_to_sector", "trunc", "garbage"])
    pos = rng.randrange(real)
    if kind == "flip":
        data[pos] ^= 1 << rng.randrange(8)
    elif kind == "sector":
        a = pos // 512 * 512
        data[a:a + 512] = bytes(len(data[a:a + 512]))
    elif kind == "zeros":
        n = rng.randrange(1, 64)
        data[pos:pos + n] = bytes(len(data[pos:pos + n]))
    elif kind == "zeros_to_sector":
        a = (pos // 512 + 1) * 512
        s = max(0, a - rng.randrange(1, 40))
        data[s:a] = bytes(len(data[s:a]))
    elif kind == "trunc":
        del data[pos:]
    else:
        n = rng.randrange(1, 64)
        data[pos:pos + n] = bytes(rng.randrange(256) for _ in range(len(data[pos:pos + n])))
    return kind, pos, data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("db")
    ap.add_argument("trials", type=int)
    ap.add_argument("seed", type=int, nargs="?", default=1)
    ap.add_argument("--scree", default="target/release/scree")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="wal_damage_")
    try:
        db = os.path.join(tmp, "db")
        shutil.copytree(a.db, db)
        logs = sorted(glob.glob(os.path.join(db, "*.log")))
        if not logs:
            print("no WAL in", a.db)
            return 1
        orig = {p: open(p, "rb").read() for p in logs}
        chk = D.Checker(db, True)
        cur = open(os.path.join(db, "CURRENT"), "rb").read().split(b" ")[0].decode()
        st = chk.decode_manifest(cur)
        base = []
        for p in logs:
            x = os.path.basename(p)
            base.append((D.fileno_of(x), x, chk.decode_wal(x, D.fileno_of(x), st)))
        # decode_wal holds a WAL's problems until wal_chain knows whether the history reaches it
        chk.wal_chain([info for _, _, info in base], st)
        if chk.problems:
            print("the undamaged database has problems:", *chk.problems, sep="\n  ")
            return 1
        tally = {}
        bad = 0
        ahead = 0  # trials whose history ends below a keyspace that already holds later writes
        # An empty WAL (a fresh one after a reopen) has no byte to damage.
        targets = [p for p in logs if orig[p]]
        for t in range(a.trials):
            p = rng.choice(targets)
            name = os.path.basename(p)
            kind, pos, data = damage(rng, bytearray(orig[p]))
            with open(p, "wb") as f:
                f.write(data)
            s = scree_verdict(a.scree, db, name)
            m = decoder_verdict(db, st, base, name, p == logs[-1])
            tally[(kind, s[0])] = tally.get((kind, s[0]), 0) + 1
            ahead += bool(s[3])
            # the verdict and where, and (offset, keyspace) of every "already holds later writes"
            # problem at this WAL (another problem, at the same offset, may be the first)
            if (s[0], s[1], s[3]) != (m[0], m[1], m[3]):
                bad += 1
                print(f"trial {t}: {kind} at {pos} of {name}\n  scree check: {s[0]} {s[1]} {s[2][:160]}\n"
                      f"  decoder:     {m[0]} {m[1]} {m[2][:160]}")
                if s[3] != m[3]:
                    print(f"  later writes: scree check {sorted(s[3])}\n                decoder     {sorted(m[3])}")
            with open(p, "wb") as f:
                f.write(orig[p])
        for (kind, v), n in sorted(tally.items()):
            print(f"{kind:16} {v:10} {n}")
        print(f"{ahead} trials end the history below a keyspace that already holds later writes")
        print(f"{a.trials} trials, {bad} disagreements")
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
