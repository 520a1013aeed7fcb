"""A Hypothesis state machine of random put/delete/put_if_absent/batch/snapshot/iterate/flush/
reopen sequences on one keyspace of each layout, checked against a Python dict after every
step."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

import scree
from conftest import LAYOUTS, SORTED, small

# Few distinct bytes, so keys collide and share prefixes often.
BYTE = st.sampled_from([0, 1, 2, 0x61, 0xFF])


def keys_for(layout: str):
    min_len = int(layout.split(":")[1]) if layout.startswith("semisorted") else 0
    return st.lists(BYTE, min_size=min_len, max_size=min_len + 3).map(bytes)


VALUES = st.binary(max_size=40)


def machine_for(layout: str):
    keys = keys_for(layout)
    prefix_len = int(layout.split(":")[1]) if layout.startswith("semisorted") else None
    ordered = layout in SORTED

    class KeyspaceMachine(RuleBasedStateMachine):
        snapshots = Bundle("snapshots")

        def __init__(self):
            super().__init__()
            self.dir = tempfile.mkdtemp(prefix="scree-sm-")
            self.model: dict[bytes, bytes] = {}
            self.open()

        def open(self):
            self.db = scree.open(self.dir, **small())
            self.ks = self.db.keyspace("ks", layout=layout, write_buffer_bytes=64 * 1024)

        def teardown(self):
            self.db.close()
            shutil.rmtree(self.dir, ignore_errors=True)

        @rule(k=keys, v=VALUES)
        def put(self, k, v):
            self.ks[k] = v
            self.model[k] = v

        @rule(k=keys)
        def delete(self, k):
            del self.ks[k]
            self.model.pop(k, None)

        @rule(k=keys, v=VALUES)
        def put_if_absent(self, k, v):
            written = self.ks.put_if_absent(k, v)
            assert written == (k not in self.model)
            self.model.setdefault(k, v)

        @rule(k=keys)
        def get(self, k):
            assert self.ks.get(k) == self.model.get(k)
            assert (k in self.ks) == (k in self.model)
            if k not in self.model:
                with pytest.raises(KeyError):
                    self.ks[k]

        @rule(ops=st.lists(st.tuples(st.booleans(), keys, VALUES), max_size=8), fail=st.booleans())
        def batch(self, ops, fail):
            staged = dict(self.model)
            try:
                with self.db.write_batch() as wb:
                    for is_put, k, v in ops:
                        if is_put:
                            wb.put(self.ks, k, v)
                            staged[k] = v
                        else:
                            wb.delete(self.ks, k)
                            staged.pop(k, None)
                    if fail:
                        raise RuntimeError("abort the batch")
            except RuntimeError:
                assert fail
                return
            self.model = staged

        @rule(target=snapshots)
        def take_snapshot(self):
            return (self.db.snapshot(), dict(self.model))

        @rule(s=snapshots, k=keys)
        def read_snapshot(self, s, k):
            snap, seen = s
            if self.db.closed or not isinstance(snap, scree.Snapshot):
                return
            try:
                got = snap.get(self.ks, k)
            except scree.ClosedError:
                return  # released by a reopen
            assert got == seen.get(k)
            if ordered:
                assert list(snap.items(self.ks)) == sorted(seen.items())

        @rule(s=consumes(snapshots))
        def release_snapshot(self, s):
            s[0].release()

        @rule(
            start=st.none() | keys,
            stop=st.none() | keys,
            prefix=st.none() | keys,
            reverse=st.booleans(),
        )
        def iterate(self, start, stop, prefix, reverse):
            if layout == "trie":
                with pytest.raises(scree.UnsupportedError):
                    self.ks.items(start=start, stop=stop, prefix=prefix, reverse=reverse)
                return
            if prefix_len is not None:
                p = prefix[:prefix_len] if prefix is not None else None
                if p is None or len(p) != prefix_len or start or stop:
                    with pytest.raises(scree.UnsupportedError):
                        self.ks.items(start=start, stop=stop, prefix=p, reverse=reverse)
                    return
                got = list(self.ks.items(prefix=p, reverse=reverse))
                want = {k: v for k, v in self.model.items() if k.startswith(p)}
                assert len(got) == len(want) and dict(got) == want
                back = list(self.ks.items(prefix=p, reverse=not reverse))
                assert back == got[::-1]
                return
            want = sorted(
                (k, v)
                for k, v in self.model.items()
                if (start is None or k >= start)
                and (stop is None or k < stop)
                and (prefix is None or k.startswith(prefix))
            )
            if reverse:
                want.reverse()
            assert list(self.ks.items(start=start, stop=stop, prefix=prefix, reverse=reverse)) == want
            assert list(self.ks.keys(start=start, stop=stop, prefix=prefix, reverse=reverse)) == [
                k for k, _ in want
            ]

        @rule()
        def flush(self):
            self.db.flush()

        @precondition(lambda self: len(self.model) > 0)
        @rule()
        def compact(self):
            self.db.compact()

        @rule()
        def reopen(self):
            self.db.close()
            self.open()

        @invariant()
        def all_keys_read_back(self):
            # Cheap enough for the small models this machine builds: every key's value, and
            # the whole content where the layout can list it.
            for k, v in self.model.items():
                assert self.ks[k] == v
            if ordered:
                assert list(self.ks.items()) == sorted(self.model.items())

    KeyspaceMachine.__name__ = f"Machine_{layout.replace(':', '_')}"
    return KeyspaceMachine


@pytest.mark.parametrize("layout", LAYOUTS)
def test_state_machine(layout):
    machine_for(layout).TestCase().runTest()
