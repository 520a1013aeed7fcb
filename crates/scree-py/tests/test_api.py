"""Unit tests of every call of the Python API, checked against expected values."""

from __future__ import annotations

import pathlib

import pytest

import scree
from conftest import LAYOUTS, SORTED, small


def test_module_constants():
    assert scree.MAX_KEY_BYTES == 64 * 1024
    assert scree.MAX_VALUE_BYTES == 64 * 1024 * 1024
    assert set(scree.LAYOUTS) == {"leveled", "fragmented", "trie", "semisorted:N", "lightweight"}
    assert isinstance(scree.__version__, str) and scree.__version__


def test_open_is_db_and_context_manager(tmp_path):
    with scree.open(tmp_path / "d", **small()) as db:
        assert isinstance(db, scree.DB)
        assert not db.closed
        assert db.path == pathlib.Path(tmp_path / "d")
        assert "scree.DB" in repr(db)
    assert db.closed and "closed" in repr(db)
    db.close()  # twice is harmless
    # The lock was released: the directory opens again.
    with scree.DB(str(tmp_path / "d"), **small()) as db2:
        assert db2.keyspace_names() == []


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mapping_calls(db, layout):
    ks = db.keyspace("ks", layout=layout)
    assert ks.name == "ks" and ks.layout == layout
    assert "ks" in repr(ks)
    ks[b"k1"] = b"v1"
    assert ks[b"k1"] == b"v1"
    assert b"k1" in ks and b"k2" not in ks
    with pytest.raises(KeyError) as e:
        ks[b"k2"]
    assert e.value.args == (b"k2",)
    assert ks.get(b"k2") is None
    assert ks.get(b"k2", b"dflt") == b"dflt"
    assert ks.get(b"k1", b"dflt") == b"v1"
    ks.put(b"k2", b"v2", sync=True)
    assert ks[b"k2"] == b"v2"
    ks[b"k2"] = b"v2b"  # overwrite
    assert ks[b"k2"] == b"v2b"
    assert ks.put_if_absent(b"k2", b"zz") is False
    assert ks[b"k2"] == b"v2b"
    assert ks.put_if_absent(b"k3", b"v3", sync=True) is True
    assert ks[b"k3"] == b"v3"
    del ks[b"k1"]
    assert b"k1" not in ks
    del ks[b"never"]  # blind delete: no KeyError
    ks.delete(b"k3", sync=True)
    assert ks.get(b"k3") is None
    ks[b"ab"] = b""  # empty value
    assert ks[b"ab"] == b""
    assert not hasattr(ks, "__len__")
    with pytest.raises(TypeError):
        len(ks)


@pytest.mark.parametrize("layout", sorted(SORTED))
def test_iteration_sorted_layouts(db, layout):
    ks = db.keyspace("it", layout=layout)
    model = {bytes([a, b]): bytes([b, a]) * 3 for a in (1, 2, 3, 255) for b in (0, 7, 255)}
    for k, v in model.items():
        ks[k] = v
    ks[b""] = b"empty"
    model[b""] = b"empty"
    items = sorted(model.items())
    assert list(ks.items()) == items
    assert list(ks.keys()) == [k for k, _ in items]
    assert list(ks.values()) == [v for _, v in items]
    assert list(iter(ks)) == [k for k, _ in items]
    assert list(ks.items(reverse=True)) == items[::-1]
    assert list(ks.items(start=b"\x02")) == [kv for kv in items if kv[0] >= b"\x02"]
    assert list(ks.items(stop=b"\x02\x07")) == [kv for kv in items if kv[0] < b"\x02\x07"]
    assert list(ks.items(b"\x02", b"\x03\x07", reverse=True)) == [
        kv for kv in items if b"\x02" <= kv[0] < b"\x03\x07"
    ][::-1]
    assert list(ks.items(prefix=b"\x03")) == [kv for kv in items if kv[0].startswith(b"\x03")]
    assert list(ks.keys(prefix=b"\xff", reverse=True)) == [
        k for k, _ in items if k.startswith(b"\xff")
    ][::-1]
    # A prefix with bounds: the intersection.
    assert list(ks.keys(start=b"\x02\x07", stop=b"\x03", prefix=b"\x02")) == [b"\x02\x07", b"\x02\xff"]
    assert list(ks.keys(start=b"\x01", stop=b"\x09", prefix=b"\x02")) == [
        b"\x02\x00", b"\x02\x07", b"\x02\xff"
    ]
    # Laziness: an iterator reads the keyspace as it was when made.
    it = ks.keys()
    ks[b"\x00zzz"] = b"late"
    assert b"\x00zzz" not in list(it)
    assert b"\x00zzz" in list(ks.keys())
    # An exhausted iterator stays exhausted.
    it = ks.keys(prefix=b"\x01")
    assert len(list(it)) == 3
    assert list(it) == [] and next(it, None) is None


def test_iteration_many_items_in_chunks(db):
    ks = db.keyspace("many", layout="leveled")
    n = 5000
    for i in range(n):
        ks[b"%06d" % i] = b"v%d" % i
    db.flush()
    got = list(ks.items())
    assert len(got) == n and got[0] == (b"000000", b"v0") and got[-1] == (b"004999", b"v4999")
    assert [k for k in ks.keys(reverse=True)] == [b"%06d" % i for i in reversed(range(n))]
    # Two iterators interleaved.
    a, b = ks.keys(), ks.keys(reverse=True)
    assert [next(a), next(b), next(a), next(b)] == [b"000000", b"004999", b"000001", b"004998"]


def test_trie_has_no_scans(db):
    ks = db.keyspace("t", layout="trie")
    ks[b"a"] = b"1"
    for call in (ks.items, ks.keys, ks.values, lambda: iter(ks), lambda: ks.items(prefix=b"a")):
        with pytest.raises(scree.UnsupportedError, match="places keys by hash"):
            call()
    assert ks[b"a"] == b"1"


def test_semisorted_prefix_groups(db):
    ks = db.keyspace("s", layout="semisorted:2")
    model = {}
    for g in (b"aa", b"ab", b"zz"):
        for i in range(20):
            model[g + b"%d" % i] = b"v%d" % i
    model[b"ab"] = b"just the prefix"
    for k, v in model.items():
        ks[k] = v
    got = list(ks.items(prefix=b"ab"))
    assert sorted(got) == sorted(kv for kv in model.items() if kv[0].startswith(b"ab"))
    assert len(got) == len(set(got))
    assert list(ks.items(prefix=b"ab", reverse=True)) == got[::-1]
    with pytest.raises(scree.UnsupportedError, match="exactly 2 bytes, not 1"):
        ks.items(prefix=b"a")
    with pytest.raises(scree.UnsupportedError, match="2-byte prefix"):
        ks.items()
    with pytest.raises(scree.UnsupportedError, match="start/stop with a prefix"):
        ks.items(start=b"ab1", prefix=b"ab")
    with pytest.raises(scree.InvalidArgumentError, match="at least their 2-byte prefix"):
        ks[b"a"] = b"short"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_write_batch(db, layout):
    ks = db.keyspace("b1", layout=layout)
    other = db.keyspace("b2", layout="leveled")
    ks[b"old"] = b"x"
    with db.write_batch() as wb:
        wb.put(ks, b"k1", b"v1")
        wb.put(other, b"k2", b"v2")
        wb.delete(ks, b"old")
        assert len(wb) == 3
        # Nothing is visible before the block ends.
        assert ks.get(b"k1") is None
    assert ks[b"k1"] == b"v1" and other[b"k2"] == b"v2" and b"old" not in ks
    with pytest.raises(ValueError, match="boom"):
        with db.write_batch(sync=True) as wb:
            wb.put(ks, b"k3", b"v3")
            wb.delete(ks, b"k1")
            raise ValueError("boom")
    assert b"k3" not in ks and ks[b"k1"] == b"v1"
    # A spent batch raises.
    with pytest.raises(scree.ClosedError, match="already written"):
        wb.put(ks, b"k4", b"v4")
    # clear() empties it.
    with db.write_batch() as wb:
        wb.put(ks, b"k5", b"v5")
        wb.clear()
        assert len(wb) == 0
        wb.put(ks, b"k6", b"v6")
    assert b"k5" not in ks and ks[b"k6"] == b"v6"
    assert "WriteBatch" in repr(wb)


def test_write_batch_refused_entry_writes_nothing(db):
    ks = db.keyspace("b", layout="leveled")
    with pytest.raises(scree.InvalidArgumentError, match="exceeds the limit"):
        with db.write_batch() as wb:
            wb.put(ks, b"good", b"1")
            wb.put(ks, b"k" * (scree.MAX_KEY_BYTES + 1), b"2")
    assert b"good" not in ks


def test_write_batch_of_another_database(tmp_path, db):
    with scree.open(tmp_path / "other", **small()) as db2:
        ks2 = db2.keyspace("x", layout="leveled")
        with db.write_batch() as wb:
            with pytest.raises(scree.InvalidArgumentError, match="belongs to the database"):
                wb.put(ks2, b"k", b"v")
        with db.snapshot() as snap:
            with pytest.raises(scree.InvalidArgumentError, match="belongs to the database"):
                snap.get(ks2, b"k")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_snapshot(db, layout):
    ks = db.keyspace("s", layout=layout)
    ks[b"k1"] = b"old"
    ks[b"k2"] = b"gone"
    with db.snapshot() as snap:
        assert isinstance(snap.sequence, int)
        ks[b"k1"] = b"new"
        del ks[b"k2"]
        ks[b"k3"] = b"later"
        db.flush()
        assert snap.get(ks, b"k1") == b"old"
        assert snap.get(ks, b"k2") == b"gone"
        assert snap.get(ks, b"k3") is None
        assert snap.get(ks, b"k3", b"d") == b"d"
        if layout in SORTED:
            assert list(snap.items(ks)) == [(b"k1", b"old"), (b"k2", b"gone")]
            assert list(snap.keys(ks, reverse=True)) == [b"k2", b"k1"]
            assert list(snap.values(ks, start=b"k2")) == [b"gone"]
            assert list(ks.items()) == [(b"k1", b"new"), (b"k3", b"later")]
        elif layout.startswith("semisorted"):
            assert sorted(snap.items(ks, prefix=b"k1")) == [(b"k1", b"old")]
        else:
            with pytest.raises(scree.UnsupportedError):
                snap.items(ks)
    with pytest.raises(scree.ClosedError, match="released"):
        snap.get(ks, b"k1")
    snap.release()  # twice is harmless
    assert ks[b"k1"] == b"new"


def test_flush_compact_stats(db):
    ks = db.keyspace("f", layout="leveled", write_buffer_bytes=64 * 1024)
    for i in range(2000):
        ks[b"%05d" % i] = b"x" * 100
    db.flush()
    db.compact()
    db.wait_for_compactions()
    st = db.stats()
    assert isinstance(st, dict)
    assert st["user_bytes"] == 2000 * 105
    assert st["flushes"] >= 1
    assert st["bytes_written"]["wal"] > 0 and st["bytes_written"]["flush"] > 0
    assert [k["name"] for k in st["keyspaces"]] == ["f"]
    assert st["keyspaces"][0]["layout"] == "leveled"
    assert all(ks[b"%05d" % i] == b"x" * 100 for i in range(0, 2000, 97))


def test_keyspace_reopen_and_layout_persisted(tmp_path):
    path = tmp_path / "db"
    with scree.open(path, **small()) as db:
        ks = db.keyspace("a", layout="fragmented", max_sstables_per_guard=2)
        ks[b"k"] = b"v"
        # The same name again: the same keyspace.
        assert db.keyspace("a", layout="fragmented")[b"k"] == b"v"
        with pytest.raises(scree.InvalidArgumentError, match="created with layout `fragmented`"):
            db.keyspace("a", layout="leveled")
    with scree.open(path, **small()) as db:
        assert db.keyspace_names() == ["a"]
        ks = db.existing_keyspace("a")
        assert ks.layout == "fragmented" and ks[b"k"] == b"v"
        with pytest.raises(scree.InvalidArgumentError, match="no keyspace named"):
            db.existing_keyspace("b")


def test_keyspace_options(db):
    for layout, opts in [
        ("leveled", dict(l0_compaction_trigger=2, target_table_bytes=1 << 20)),
        ("fragmented", dict(aggressive_ratio=0.5, parallel_seeks=False)),
        ("trie", dict(pile_size=4, bloom_bits_per_key=12, target_fill=0.9)),
        ("semisorted:3", dict(sub_levels=4, plan=[6, 2])),
        ("lightweight", dict(division_count=4, balance_factor=0)),
    ]:
        ks = db.keyspace("o-" + layout, layout=layout, write_buffer_bytes=1 << 20, block_size=8192, **opts)
        ks[b"key"] = b"v"
        assert ks[b"key"] == b"v"
    with pytest.raises(scree.InvalidArgumentError, match="write_buffer_bytes must be at least 64 KiB"):
        db.keyspace("x", layout="leveled", write_buffer_bytes=1000)
    with pytest.raises(scree.InvalidArgumentError, match="fragmented: aggressive_ratio"):
        db.keyspace("x", layout="fragmented", aggressive_ratio=2.0)
    with pytest.raises(scree.InvalidArgumentError, match="no Table 1 row 9"):
        db.keyspace("x", layout="semisorted:3", plan=[9])
    with pytest.raises(scree.InvalidArgumentError, match="bad prefix length"):
        db.keyspace("x", layout="semisorted:x")
    with pytest.raises(scree.InvalidArgumentError, match="unknown layout"):
        db.keyspace("x", layout="btree")
    with pytest.raises(TypeError, match="unknown option \"pile_size\" for a keyspace of layout `leveled`"):
        db.keyspace("x", layout="leveled", pile_size=4)
    with pytest.raises(TypeError, match="takes an int, not str"):
        db.keyspace("x", layout="leveled", block_size="big")
    with pytest.raises(TypeError, match="takes an int, not bool"):
        db.keyspace("x", layout="leveled", block_size=True)
    with pytest.raises(scree.InvalidArgumentError, match="must be within 0.."):
        db.keyspace("x", layout="leveled", block_size=-1)
    with pytest.raises(scree.InvalidArgumentError, match="keyspace names are 1..=255 bytes"):
        db.keyspace("", layout="leveled")
    assert "x" not in db.keyspace_names()


def test_db_options(tmp_path):
    with pytest.raises(TypeError, match="unknown database option \"cache_size\""):
        scree.open(tmp_path / "a", cache_size=1)
    with pytest.raises(scree.InvalidArgumentError, match="background_threads must be 1..=256"):
        scree.open(tmp_path / "a", background_threads=0)
    with pytest.raises(TypeError, match="takes a bool"):
        scree.open(tmp_path / "a", read_only=1)
    with pytest.raises(scree.InvalidArgumentError, match="wal_recovery must be"):
        scree.open(tmp_path / "a", wal_recovery="whatever")
    with pytest.raises(scree.InvalidArgumentError):
        scree.open(tmp_path / "missing", create_if_missing=False)
    with scree.open(tmp_path / "b", wal_recovery="point_in_time", mmap_reads=False, **small()) as db:
        db.keyspace("k", layout="leveled")[b"a"] = b"1"


def test_read_only(tmp_path):
    path = tmp_path / "ro"
    with scree.open(path, **small()) as db:
        db.keyspace("k", layout="leveled")[b"a"] = b"1"
    with scree.open(path, read_only=True, **small()) as db:
        ks = db.existing_keyspace("k")
        assert ks[b"a"] == b"1"
        with pytest.raises(scree.ReadOnlyError) as e:
            ks[b"b"] = b"2"
        assert e.value.op and pathlib.Path(e.value.path) == path
        with pytest.raises(scree.ReadOnlyError, match="flush refused"):
            db.flush()
        with pytest.raises(scree.ReadOnlyError, match="creating a keyspace"):
            db.keyspace("new", layout="leveled")


def test_closed_database_raises_everywhere(tmp_path):
    db = scree.open(tmp_path / "c", **small())
    ks = db.keyspace("k", layout="leveled")
    for i in range(1000):
        ks[b"%04d" % i] = b"v"
    it = ks.keys()
    assert next(it) == b"0000"  # buffered items are dropped with the database too
    snap = db.snapshot()
    wb = db.write_batch()
    db.close()
    calls = [
        lambda: ks[b"0001"],
        lambda: ks.__setitem__(b"a", b"b"),
        lambda: ks.__delitem__(b"a"),
        lambda: b"a" in ks,
        lambda: ks.get(b"a"),
        lambda: ks.put(b"a", b"b"),
        lambda: ks.put_if_absent(b"a", b"b"),
        lambda: ks.delete(b"a"),
        lambda: ks.items(),
        lambda: next(it),
        lambda: snap.get(ks, b"a"),
        lambda: snap.items(ks),
        lambda: wb.put(ks, b"a", b"b"),
        lambda: db.keyspace("k", layout="leveled"),
        lambda: db.existing_keyspace("k"),
        lambda: db.keyspace_names(),
        lambda: db.snapshot(),
        lambda: db.write_batch(),
        lambda: db.flush(),
        lambda: db.compact(),
        lambda: db.wait_for_compactions(),
        lambda: db.stats(),
    ]
    for call in calls:
        with pytest.raises(scree.ClosedError, match="closed|released"):
            call()
    assert isinstance(scree.ClosedError("x"), scree.Error)
    # Nothing held the database open: it reopens with its data.
    with scree.open(tmp_path / "c", **small()) as db:
        assert db.existing_keyspace("k")[b"0999"] == b"v"


def test_batch_with_puts_open_at_close_holds_nothing(tmp_path):
    # A batch keeps the engine handles of the keyspaces it names; close() drops them, so the
    # directory opens again at once, and the batch raises ClosedError (written: nothing).
    db = scree.open(tmp_path / "b", **small())
    ks = db.keyspace("k", layout="leveled")
    other = db.keyspace("o", layout="trie")
    ks[b"kept"] = b"1"
    with pytest.raises(RuntimeError, match="boom"):
        with db.write_batch() as wb:
            wb.put(ks, b"a", b"1")
            wb.put(other, b"b", b"2")
            db.close()
            with pytest.raises(scree.ClosedError, match="closed"):
                wb.put(ks, b"c", b"3")
            with pytest.raises(scree.ClosedError, match="closed"):
                wb.clear()
            assert len(wb) == 0
            raise RuntimeError("boom")  # the block's own exception goes on
    wb2 = None
    with scree.open(tmp_path / "b", **small()) as db2:
        ks2 = db2.existing_keyspace("k")
        assert ks2[b"kept"] == b"1" and b"a" not in ks2
        assert b"b" not in db2.existing_keyspace("o")
        wb2 = db2.write_batch()
        wb2.put(ks2, b"late", b"x")
    with pytest.raises(scree.ClosedError, match="closed"):
        wb2.__exit__(None, None, None)
    with scree.open(tmp_path / "b", **small()) as db3:
        assert b"late" not in db3.existing_keyspace("k")


def test_dropped_batch_with_puts_releases_the_lock(tmp_path):
    import gc

    db = scree.open(tmp_path / "d", **small())
    ks = db.keyspace("k", layout="leveled")
    wb = db.write_batch()
    wb.put(ks, b"a", b"1")
    del db, ks, wb
    gc.collect()
    with scree.open(tmp_path / "d", **small()) as db:
        assert b"a" not in db.existing_keyspace("k")


def test_dropping_handles_without_close_releases_the_lock(tmp_path):
    import gc

    db = scree.open(tmp_path / "g", **small())
    ks = db.keyspace("k", layout="leveled")
    ks[b"a"] = b"1"
    it = ks.keys()
    del db, ks, it
    gc.collect()
    with scree.open(tmp_path / "g", **small()) as db:
        assert db.existing_keyspace("k")[b"a"] == b"1"


def test_exception_hierarchy():
    assert issubclass(scree.InvalidArgumentError, ValueError)
    assert issubclass(scree.UnsupportedError, NotImplementedError)
    assert issubclass(scree.IoError, OSError)
    for cls in (
        scree.IoError,
        scree.CorruptionError,
        scree.InvalidArgumentError,
        scree.UnsupportedError,
        scree.LockedError,
        scree.BackgroundError,
        scree.ReadOnlyError,
        scree.ClosedError,
    ):
        assert issubclass(cls, scree.Error)


def test_io_error_carries_path_and_errno(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"not a directory")
    with pytest.raises(scree.IoError) as e:
        scree.open(f / "db", **small())
    assert e.value.errno is not None and e.value.path is not None
    assert str(f) in e.value.path


def test_an_iterator_keeps_an_unclosed_database_open(tmp_path):
    import gc

    db = scree.open(tmp_path / "i", **small())
    ks = db.keyspace("k", layout="leveled")
    for i in range(300):
        ks[b"%03d" % i] = b"v%d" % i
    it = ks.items(start=b"100")
    snap = db.snapshot()
    del db, ks
    gc.collect()
    # The iterator (and the snapshot) still hold the database: it is open, and locked.
    with pytest.raises(scree.LockedError):
        scree.open(tmp_path / "i", **small())
    assert next(it) == (b"100", b"v100")
    assert len(list(it)) == 199
    del it, snap
    gc.collect()
    with scree.open(tmp_path / "i", **small()) as db:
        assert db.existing_keyspace("k")[b"299"] == b"v299"
