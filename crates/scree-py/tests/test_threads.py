"""Several Python threads on one database: writes, reads, iterators and batches checked against
what each thread wrote; the GIL released during engine calls; close() racing with calls."""

from __future__ import annotations

import random
import sys
import threading
import time

import pytest

import scree
from conftest import small


def run_threads(targets):
    errors = []

    def wrap(f):
        def run():
            try:
                f()
            except BaseException as e:  # noqa: BLE001 - reported to the test below
                errors.append(e)

        return run

    threads = [threading.Thread(target=wrap(f)) for f in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("layout", ["leveled", "trie", "fragmented"])
def test_threads_write_and_read_their_own_keys(tmp_path, layout):
    with scree.open(tmp_path / "t", background_threads=2, block_cache_bytes=1 << 20) as db:
        ks = db.keyspace("k", layout=layout, write_buffer_bytes=256 * 1024)
        shared_it = None
        n_threads, n = 4, 1500
        if layout != "trie":
            for i in range(3000):
                ks[b"pre%05d" % i] = b"p"
            shared_it = ks.keys(prefix=b"pre")
        seen_by_shared = []
        lock = threading.Lock()

        def worker(t):
            def run():
                mine = {}
                for i in range(n):
                    k = b"t%d-%05d" % (t, i)
                    if i % 10 == 3:
                        with db.write_batch() as wb:
                            wb.put(ks, k, b"b%d" % i)
                            wb.delete(ks, b"t%d-%05d" % (t, i - 1))
                        mine[k] = b"b%d" % i
                        mine.pop(b"t%d-%05d" % (t, i - 1), None)
                    elif i % 10 == 7:
                        ks.delete(b"t%d-%05d" % (t, i - 2))
                        mine.pop(b"t%d-%05d" % (t, i - 2), None)
                    else:
                        ks[k] = b"v%d" % i
                        mine[k] = b"v%d" % i
                    if i % 50 == 0:
                        # Reads of this thread's keys see its own writes.
                        for kk, vv in list(mine.items())[-5:]:
                            assert ks[kk] == vv
                    if shared_it is not None and i % 7 == 0:
                        # One iterator shared by every thread: each key comes out once.
                        k2 = next(shared_it, None)
                        if k2 is not None:
                            with lock:
                                seen_by_shared.append(k2)
                for kk, vv in mine.items():
                    assert ks[kk] == vv
                if layout != "trie":
                    got = dict(ks.items(prefix=b"t%d-" % t))
                    assert got == mine
                results[t] = mine

            return run

        results = {}
        run_threads([worker(t) for t in range(n_threads)])
        assert len(results) == n_threads
        db.flush()
        for mine in results.values():
            for k, v in mine.items():
                assert ks[k] == v
        if shared_it is not None:
            rest = list(shared_it)
            assert sorted(seen_by_shared + rest) == [b"pre%05d" % i for i in range(3000)]


def interleaved(call) -> int:
    """How many times the main thread ran Python code while `call` ran in another thread.

    Both threads take timestamps only while holding the GIL, and the switch interval is made
    long (30 s), so the interpreter never takes the GIL from a thread: the main thread runs
    during `call` only if `call` releases the GIL itself. (The main thread gives the GIL back
    with `time.sleep(0)` between its timestamps.)"""
    span = {}

    def run():
        span["start"] = time.perf_counter()
        call()
        span["end"] = time.perf_counter()

    old = sys.getswitchinterval()
    sys.setswitchinterval(30)
    try:
        t = threading.Thread(target=run)
        stamps = []
        t.start()
        while t.is_alive():
            stamps.append(time.perf_counter())
            time.sleep(0)
        t.join()
    finally:
        sys.setswitchinterval(old)
    return sum(1 for s in stamps if span["start"] < s < span["end"])


def releases_the_gil(call, attempts=5) -> bool:
    """Whether the main thread ran during `call` in one of `attempts` runs (a short call may
    hand the GIL back before the main thread wakes up; one that keeps it never lets it run)."""
    return any(interleaved(call) > 0 for _ in range(attempts))


def test_the_gil_is_released_during_engine_calls(tmp_path):
    # The measure tells: a C call that keeps the GIL (a sort) lets the main thread run zero
    # times.
    data = [random.random() for _ in range(200_000)]
    assert interleaved(lambda: sorted(data)) == 0
    with scree.open(tmp_path / "g", **small()) as db:
        ks = db.keyspace("k", layout="leveled", write_buffer_bytes=64 * 1024)

        def fill():
            for i in range(20000):
                ks.put(b"%06d" % i, b"x" * 200)

        assert releases_the_gil(fill, attempts=3)

        def compact():
            for i in range(0, 20000, 3):
                ks[b"%06d" % i] = b"y" * 200
            db.compact()

        assert releases_the_gil(compact)

        def scan():
            assert sum(1 for _ in ks.items()) == 20000

        assert releases_the_gil(scan)

        def reads():
            for i in range(0, 20000, 2):
                assert ks[b"%06d" % i]

        assert releases_the_gil(reads)


def test_close_racing_with_calls_never_crashes(tmp_path):
    for round_ in range(5):
        db = scree.open(tmp_path / "race", **small())
        ks = db.keyspace("k", layout="leveled", write_buffer_bytes=64 * 1024)
        for i in range(500):
            ks[b"%04d" % i] = b"v"
        outcomes = {"ok": 0, "closed": 0}
        lock = threading.Lock()

        def hammer():
            it = ks.items()
            while True:
                try:
                    ks[b"x"] = b"y"
                    ks.get(b"0001")
                    next(it, None)
                    with db.write_batch() as wb:
                        wb.put(ks, b"z", b"z")
                    with db.snapshot() as s:
                        s.get(ks, b"0002")
                    with lock:
                        outcomes["ok"] += 1
                except scree.ClosedError:
                    with lock:
                        outcomes["closed"] += 1
                    return

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.05)
        db.close()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
        assert outcomes["closed"] == 3
        # Every acknowledged write is there after the race.
        with scree.open(tmp_path / "race", **small()) as db2:
            ks2 = db2.existing_keyspace("k")
            assert ks2[b"0499"] == b"v"
            if outcomes["ok"]:
                assert ks2[b"x"] == b"y" and ks2[b"z"] == b"z"
