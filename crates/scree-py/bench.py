#!/usr/bin/env python3
"""Scree from Python against rocksdict, plyvel (LevelDB) and lmdb: the same data, in one run.

Workloads, each on every store:

- ``fill``: N puts in random order, one call per put (the per-call cost from Python);
- ``batch``: N puts in random order, ``--batch`` puts per atomic write batch, on a new store;
- ``get``: ``--gets`` random point lookups of present keys, one call each, after the fill (with
  the memtables flushed, for the stores that have a flush call: Scree, rocksdict);
- ``scan``: ``--scans`` prefix scans of random groups (keys are a 4-byte group + a 12-byte
  suffix, about 100 keys a group), reading every pair. ``trie`` has no scans;
  ``semisorted:4`` serves prefix scans of the 4-byte group.

Stores: Scree in each layout, ``rocksdict`` (RocksDB, raw bytes mode), ``plyvel`` (LevelDB),
``lmdb`` (a transaction per put; ``sync=False, metasync=False`` so that, like the others'
default, a write survives a process crash but not a power loss). Every store runs with its
defaults otherwise. Stores whose package is missing are left out, with a note.

Usage::

    python crates/scree-py/bench.py [--keys 200000] [--value-size 100] [--png bench.png]

Prints a table of operations per second (the best of ``--repeat`` rounds, each round running
every store in turn) and, per row, the ratio to rocksdict measured in the same run. The machine is shared and noisy: compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Tuple

GROUP_BYTES = 4
KEYS_PER_GROUP = 100


class Store:
    """One store under test: how to open it, write, batch-write, read and prefix-scan."""

    name = "?"

    def open(self, path: str) -> None: ...
    def put_fn(self) -> Callable[[bytes, bytes], None]: ...
    def get_fn(self) -> Callable[[bytes], Optional[bytes]]: ...
    def write_batch(self, pairs: List[Tuple[bytes, bytes]]) -> None: ...
    def scan_prefix(self, prefix: bytes) -> int: ...
    def settle(self) -> None:
        """After the fill, before reads: flush memtables where the store has a call for it."""

    def close(self) -> None: ...

    def can_scan(self) -> bool:
        return True


class ScreeStore(Store):
    def __init__(self, layout: str):
        self.layout = layout
        self.name = f"scree {layout}"

    def open(self, path):
        import scree

        self.db = scree.open(path)
        self.ks = self.db.keyspace("bench", layout=self.layout)

    def put_fn(self):
        return self.ks.put

    def get_fn(self):
        return self.ks.get

    def write_batch(self, pairs):
        ks = self.ks
        with self.db.write_batch() as wb:
            put = wb.put
            for k, v in pairs:
                put(ks, k, v)

    def scan_prefix(self, prefix):
        n = 0
        for _ in self.ks.items(prefix=prefix):
            n += 1
        return n

    def can_scan(self):
        return self.layout != "trie"

    def settle(self):
        self.db.flush()

    def close(self):
        self.db.close()


class RocksdictStore(Store):
    name = "rocksdict"

    def open(self, path):
        from rocksdict import Options, Rdict

        self.db = Rdict(path, options=Options(raw_mode=True))

    def put_fn(self):
        return self.db.put

    def get_fn(self):
        return self.db.get

    def write_batch(self, pairs):
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        put = wb.put
        for k, v in pairs:
            put(k, v)
        self.db.write(wb)

    def scan_prefix(self, prefix):
        n = 0
        for k, _ in self.db.items(from_key=prefix):
            if not k.startswith(prefix):
                break
            n += 1
        return n

    def settle(self):
        self.db.flush()

    def close(self):
        self.db.close()


class PlyvelStore(Store):
    name = "plyvel"

    def open(self, path):
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True)

    def put_fn(self):
        return self.db.put

    def get_fn(self):
        return self.db.get

    def write_batch(self, pairs):
        with self.db.write_batch() as wb:
            put = wb.put
            for k, v in pairs:
                put(k, v)

    def scan_prefix(self, prefix):
        n = 0
        for _ in self.db.iterator(prefix=prefix):
            n += 1
        return n

    def close(self):
        self.db.close()


class LmdbStore(Store):
    name = "lmdb"

    def open(self, path):
        import lmdb

        self.env = lmdb.open(path, map_size=8 << 30, sync=False, metasync=False)

    def put_fn(self):
        env = self.env

        def put(k, v):
            with env.begin(write=True) as txn:
                txn.put(k, v)

        return put

    def get_fn(self):
        env = self.env

        def get(k):
            with env.begin() as txn:
                return txn.get(k)

        return get

    def write_batch(self, pairs):
        with self.env.begin(write=True) as txn:
            put = txn.put
            for k, v in pairs:
                put(k, v)

    def scan_prefix(self, prefix):
        n = 0
        with self.env.begin() as txn:
            cur = txn.cursor()
            if cur.set_range(prefix):
                for k, _ in cur:
                    if not k.startswith(prefix):
                        break
                    n += 1
        return n

    def close(self):
        self.env.close()


def available_stores(names: Optional[List[str]]) -> Tuple[List[Store], List[str]]:
    import scree

    layouts = [("semisorted:%d" % GROUP_BYTES if l == "semisorted:N" else l) for l in scree.LAYOUTS]
    stores: List[Store] = [ScreeStore(l) for l in layouts]
    notes = []
    for mod, cls in (("rocksdict", RocksdictStore), ("plyvel", PlyvelStore), ("lmdb", LmdbStore)):
        try:
            __import__(mod)
            stores.append(cls())
        except ImportError:
            notes.append(f"{mod} is not installed (pip install {mod}): left out")
    if names:
        stores = [s for s in stores if s.name in names or s.name.split(" ")[-1] in names]
    return stores, notes


def make_data(n: int, value_size: int, seed: int):
    rng = random.Random(seed)
    groups = max(1, n // KEYS_PER_GROUP)
    keys = set()
    while len(keys) < n:
        g = rng.randrange(groups)
        keys.add(g.to_bytes(GROUP_BYTES, "big") + rng.randbytes(12))
    keys = list(keys)
    rng.shuffle(keys)
    value = bytes(rng.randrange(256) for _ in range(value_size))
    return keys, value, groups


CPU: Dict[str, float] = {}


def timed(f: Callable[[], object], cpu_key: Optional[str] = None) -> float:
    """Wall seconds of `f`; with `cpu_key`, also records the calling thread's CPU seconds (what
    the calls cost the caller, without the time the shared machine kept it waiting)."""
    gc.collect()
    gc.disable()
    try:
        c = time.thread_time()
        t = time.perf_counter()
        f()
        wall = time.perf_counter() - t
        if cpu_key is not None:
            CPU[cpu_key] = time.thread_time() - c
        return wall
    finally:
        gc.enable()


def run_store(store: Store, root: str, keys, value, groups, args) -> Dict[str, float]:
    out: Dict[str, float] = {}
    n = len(keys)
    rng = random.Random(args.seed + 1)
    lookups = [keys[rng.randrange(n)] for _ in range(args.gets)]
    prefixes = [rng.randrange(groups).to_bytes(GROUP_BYTES, "big") for _ in range(args.scans)]

    path = os.path.join(root, store.name.replace(" ", "-").replace(":", "_") + "-fill")
    store.open(path)
    put = store.put_fn()

    def fill():
        for k in keys:
            put(k, value)

    out["fill"] = n / timed(fill, "fill")
    out["fill_cpu_us"] = CPU["fill"] / n * 1e6
    store.settle()
    get = store.get_fn()

    def gets():
        for k in lookups:
            if get(k) is None:
                raise AssertionError(f"{store.name}: a written key reads as missing")

    out["get"] = len(lookups) / timed(gets, "get")
    out["get_cpu_us"] = CPU["get"] / len(lookups) * 1e6
    if store.can_scan():
        counted = []

        def scans():
            for p in prefixes:
                counted.append(store.scan_prefix(p))

        out["scan"] = len(prefixes) / timed(scans)
        expected = {}
        for k in keys:
            expected[k[:GROUP_BYTES]] = expected.get(k[:GROUP_BYTES], 0) + 1
        if counted != [expected.get(p, 0) for p in prefixes]:
            raise AssertionError(f"{store.name}: a prefix scan returned the wrong count")
    store.close()
    shutil.rmtree(path, ignore_errors=True)

    path = os.path.join(root, store.name.replace(" ", "-").replace(":", "_") + "-batch")
    store.open(path)
    chunks = [
        [(k, value) for k in keys[i : i + args.batch]] for i in range(0, n, args.batch)
    ]

    def batches():
        for c in chunks:
            store.write_batch(c)

    out["batch"] = n / timed(batches)
    get = store.get_fn()
    if any(get(k) != value for k in keys[:: max(1, n // 1000)]):
        raise AssertionError(f"{store.name}: a batched key reads wrong")
    store.close()
    shutil.rmtree(path, ignore_errors=True)
    return out


WORKLOADS = ["fill", "batch", "get", "scan"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--gets", type=int, default=200_000)
    ap.add_argument("--scans", type=int, default=5_000)
    ap.add_argument("--batch", type=int, default=1000, help="puts per write batch")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; each figure is the best")
    ap.add_argument("--dir", default=None, help="where the stores are made (default: a temp dir)")
    ap.add_argument("--stores", nargs="*", help="names to run (e.g. trie rocksdict)")
    ap.add_argument("--png", default=None, help="also draw the table into this PNG (matplotlib)")
    args = ap.parse_args(argv)

    stores, notes = available_stores(args.stores)
    keys, value, groups = make_data(args.keys, args.value_size, args.seed)
    root = tempfile.mkdtemp(prefix="scree-bench-", dir=args.dir)
    print(
        f"{args.keys} keys of 16 bytes, values of {args.value_size} bytes, {args.gets} gets, "
        f"{args.scans} prefix scans (~{KEYS_PER_GROUP} keys each), batches of {args.batch}, "
        f"best of {args.repeat} rounds; "
        f"Python {sys.version.split()[0]}; in {root}",
        flush=True,
    )
    for note in notes:
        print("note:", note)
    results: Dict[str, Dict[str, float]] = {}
    try:
        # Rounds go over every store in turn, so a noisy moment of the shared machine hits
        # several stores rather than all rounds of one; each figure is the best round's.
        for r in range(args.repeat):
            for s in stores:
                got = run_store(s, root, keys, value, groups, args)
                best = results.setdefault(s.name, {})
                for w, v in got.items():
                    # Rates: the highest round; CPU costs per call: the lowest.
                    pick = min if w.endswith("_cpu_us") else max
                    best[w] = pick(best[w], v) if w in best else v
                print(f"  round {r + 1}: {s.name} done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    base = results.get("rocksdict")
    header = f"{'store':<22}" + "".join(f"{w + ' op/s':>14}{'×rocks':>8}" for w in WORKLOADS)
    print()
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        row = f"{name:<22}"
        for w in WORKLOADS:
            if w in r:
                ratio = f"{r[w] / base[w]:.2f}" if base and w in base else "-"
                row += f"{r[w]:>14,.0f}{ratio:>8}"
            else:
                row += f"{'n/a':>14}{'':>8}"
        print(row)
    print("\nper call, µs (wall; the calling thread's CPU time in parentheses):")
    for name, r in results.items():
        print(
            f"  {name:<20} put {1e6 / r['fill']:6.2f} ({r['fill_cpu_us']:.2f})"
            f"   get {1e6 / r['get']:6.2f} ({r['get_cpu_us']:.2f})"
        )
    if args.png:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("matplotlib is not installed: no PNG")
            return 0
        fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(4 * len(WORKLOADS), 4.5))
        names = list(results)
        for ax, w in zip(axes, WORKLOADS):
            vals = [results[n].get(w, 0) for n in names]
            ax.barh(names, vals, color=["#3a7" if n.startswith("scree") else "#888" for n in names])
            ax.set_title(f"{w} (op/s)")
            ax.invert_yaxis()
            ax.tick_params(axis="y", labelsize=8)
        fig.suptitle(f"{args.keys} keys, {args.value_size}-byte values")
        fig.tight_layout()
        fig.savefig(args.png, dpi=110)
        print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
