#!/usr/bin/env python3
"""Cross-checks format.md's WAL recovery rules (torn tail, zero tail, stale sectors, corruption,
and the chain of sealed WALs) against the engine: damages one WAL of a copy of a database at
random (a flipped bit, a zeroed 512-byte sector, zeros up to a sector boundary, such zeros where
the lost bytes held one set bit, zeroed or random bytes, a truncation), then compares the verdict of `scree check -v` with that of
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

A quarter of the trials remove WAL files instead ("The newest named WAL must exist" in
format.md): every WAL (a copy without *.log), the newest WAL the manifest names (the largest of
its first sealed WAL and the keyspaces' log numbers), the newest WAL, the oldest, one in the
middle, every WAL after the newest named one (not detected, by the document), the newest named
one and every WAL after it, a random set, or the newest named one while another WAL is damaged
as above. These are compared over the whole database: for every file, the offset of the first
problem either side reports at it; the (file, offset, keyspace) of every "already holds later
writes" problem; and where the history ends (`scree check`'s note, the decoder's history end)
unless that WAL has a problem. A `format_fixture` database has no WAL after the newest named
one (it waits for its flushes); one killed (SIGKILL) while it writes often has some.

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


PROBLEM = re.compile(r"problem: (.+?)(?: at offset (\d+))?: (.*)")


def scree_summary(scree, db):
    """`scree check -v` over the whole database: ({file: offset of its first problem},
    {(file, offset, keyspace) of "already holds later writes"}, (file, offset) where the
    history ends, unless that file has a problem, or None)."""
    out = subprocess.run([scree, "check", "-v", db], capture_output=True, text=True).stdout
    first, later, ends = {}, set(), None
    for line in out.splitlines():
        m = PROBLEM.match(line)
        if m:
            f = os.path.basename(m.group(1))
            off = int(m.group(2)) if m.group(2) is not None else None
            first.setdefault(f, off)
            if LATER in line:
                k = re.search(r'keyspace "(.*)" ' + LATER, line)
                later.add((f, off, k.group(1) if k else line))
        elif line.startswith("note:") and "the history ends" in line and ends is None:
            e = re.match(r"note: (\S+): the history ends at offset (\d+)", line)
            ends = (os.path.basename(e.group(1)), int(e.group(2))) if e else (None, line)
    if ends is not None and ends[0] in first:
        ends = None
    return first, frozenset(later), ends, out


def decoder_summary(db, st, infos):
    """The decoder's counterpart of scree_summary on the WALs `infos` (decode_wal results of the
    WALs left in `db`, in file-number order)."""
    chk = D.Checker(db, True)
    chk.wal_chain(infos, st)
    first, later = {}, set()
    for f, off, msg in chk.found:
        first.setdefault(f, off)
        if LATER in msg:
            k = re.search(r"keyspace \d+ (.*) \(log number \d+\) " + LATER, msg)
            later.add((f, off, ast.literal_eval(k.group(1)) if k else msg))
    ends = chk.history_end[:2] if chk.history_end is not None else None
    if ends is not None and ends[0] in first:
        ends = None
    return first, frozenset(later), ends, chk.problems


def removal(rng, logs, named, orig):
    """Picks WAL files to remove: (kind, [paths], path of a WAL to damage or None). `named` is
    the path of the newest WAL the manifest names, None when it names none or it is not there."""
    no = D.fileno_of
    after = [p for p in logs if named is not None and no(os.path.basename(p)) > no(os.path.basename(named))]
    kinds = ["rm_all", "rm_newest", "rm_oldest", "rm_random"]
    if named is not None:
        kinds += ["rm_named", "rm_named", "rm_from_named", "rm_named+damage"]
    if after:
        kinds.append("rm_after_named")
    if len(logs) >= 3:
        kinds.append("rm_middle")
    kind = rng.choice(kinds)
    if kind == "rm_all":
        return kind, list(logs), None
    if kind == "rm_newest":
        return kind, [logs[-1]], None
    if kind == "rm_oldest":
        return kind, [logs[0]], None
    if kind == "rm_middle":
        return kind, [rng.choice(logs[1:-1])], None
    if kind == "rm_named":
        return kind, [named], None
    if kind == "rm_from_named":
        return kind, [named] + after, None
    if kind == "rm_after_named":
        return kind, after, None
    if kind == "rm_named+damage":
        rest = [p for p in logs if p != named and orig[p]]
        return kind, [named], rng.choice(rest) if rest else None
    return kind, rng.sample(logs, rng.randrange(1, len(logs) + 1)), None


def damage(rng, data):
    real = len(data.rstrip(b"\0")) or 1
    kind = rng.choice(["flip", "sector", "zeros", "zeros_to_sector", "stale_one_bit", "trunc",
                       "garbage"])
    pos = rng.randrange(real)
    if kind == "stale_one_bit":
        # zeros up to a sector boundary where the lost bytes held a single set bit: a stale
        # sector that is also one flipped bit ("Stale sectors", step 2)
        for _ in range(400):
            a = (rng.randrange(real) // 512 + 1) * 512
            runs = [s for s in range(a - 8, a) if s >= 0
                    and sum(bin(b).count("1") for b in data[s:a]) == 1]
            if a <= len(data) and runs:
                s = rng.choice(runs)
                data[s:a] = bytes(a - s)
                return kind, s, data
        kind = "zeros_to_sector"
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


def removal_trial(a, rng, t, db, st, base, logs, named, orig, tally):
    """Removes WAL files (and perhaps damages another), compares the whole-database summaries,
    restores the files. Returns (1 on a disagreement, 1 when `scree check` reports a history
    ending below a keyspace that already holds later writes)."""
    kind, gone, hurt = removal(rng, logs, named, orig)
    what = ",".join(os.path.basename(p) for p in gone)
    for p in gone:
        os.remove(p)
    infos = [info for fno, x, info in base if os.path.join(db, x) not in gone]
    if hurt is not None:
        dk, pos, data = damage(rng, bytearray(orig[hurt]))
        with open(hurt, "wb") as f:
            f.write(data)
        what += f"; {dk} at {pos} of {os.path.basename(hurt)}"
        chk = D.Checker(db, True)
        infos = [chk.decode_wal(info["name"], info["fno"], st) if os.path.join(db, info["name"]) == hurt
                 else info for info in infos]
    try:
        s = scree_summary(a.scree, db)
        m = decoder_summary(db, st, infos)
    finally:
        for p in gone + ([hurt] if hurt is not None else []):
            with open(p, "wb") as f:
                f.write(orig[p])
    verdict = "corruption" if s[0] else "ends" if s[2] is not None else "clean"
    tally[(kind, verdict)] = tally.get((kind, verdict), 0) + 1
    if s[:3] == m[:3]:
        return 0, bool(s[1])
    print(f"trial {t}: {kind}: removed {what}\n  scree check: problems at {s[0]}, ends {s[2]}\n"
          f"  decoder:     problems at {m[0]}, ends {m[2]}")
    if s[1] != m[1]:
        print(f"  later writes: scree check {sorted(s[1])}\n                decoder     {sorted(m[1])}")
    for line in s[3].splitlines():
        if line.startswith("problem") or "history ends" in line:
            print("  scree check> " + line[:240])
    for line in m[3]:
        print("  decoder>     " + line[:240])
    return 1, bool(s[1])


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
        logs = sorted(glob.glob(os.path.join(db, "*.log")), key=lambda p: D.fileno_of(os.path.basename(p)) or 0)
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
        named_no = D.newest_named_wal_no(st)
        named = next((p for p in logs if D.fileno_of(os.path.basename(p)) == named_no), None)
        print(f"WALs {', '.join(os.path.basename(p) for p in logs)}; the newest the manifest names: "
              f"{'none' if named_no is None else f'{named_no:06d}.log'}"
              + ("" if named is not None or named_no is None else " (not there)"))
        # An empty WAL (a fresh one after a reopen) has no byte to damage.
        targets = [p for p in logs if orig[p]]
        for t in range(a.trials):
            if rng.random() < 0.25:
                disagree, later = removal_trial(a, rng, t, db, st, base, logs, named, orig, tally)
                bad += disagree
                ahead += later
                continue
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
