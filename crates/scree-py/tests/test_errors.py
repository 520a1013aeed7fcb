"""Bad input: a clear Python exception every time, and nothing already written is lost."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

import scree
from conftest import LAYOUTS, small

NOT_BYTES = ["key", 1, None, bytearray(b"key"), memoryview(b"key")]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_str_and_other_non_bytes_are_type_errors(db, layout):
    ks = db.keyspace("k", layout=layout)
    ks[b"kept"] = b"v"
    for bad in NOT_BYTES:
        calls = [
            lambda: ks[bad],
            lambda: ks.__setitem__(bad, b"v"),
            lambda: ks.__setitem__(b"kk", bad),
            lambda: ks.__delitem__(bad),
            lambda: bad in ks,
            lambda: ks.get(bad),
            lambda: ks.put(bad, b"v"),
            lambda: ks.put(b"kk", bad),
            lambda: ks.put_if_absent(bad, b"v"),
            lambda: ks.delete(bad),
            lambda: ks.items(start=bad) if bad is not None else ks.items(start=1),
        ]
        for call in calls:
            with pytest.raises(TypeError):
                call()
        with db.write_batch() as wb:
            with pytest.raises(TypeError):
                wb.put(ks, bad, b"v")
            with pytest.raises(TypeError):
                wb.delete(ks, bad)
            with pytest.raises(TypeError):
                wb.put("not a keyspace", b"k", b"v")
        with db.snapshot() as snap:
            with pytest.raises(TypeError):
                snap.get(ks, bad)
    assert ks[b"kept"] == b"v" and b"kk" not in ks


@pytest.mark.parametrize("layout", LAYOUTS)
def test_oversized_keys_and_values(db, layout):
    ks = db.keyspace("k", layout=layout)
    ks[b"kept"] = b"v"
    big_key = b"k" * (scree.MAX_KEY_BYTES + 1)
    for call in (
        lambda: ks.__setitem__(big_key, b"v"),
        lambda: ks.put(big_key, b"v"),
        lambda: ks.put_if_absent(big_key, b"v"),
        lambda: ks.delete(big_key),
        lambda: ks.__delitem__(big_key),
    ):
        with pytest.raises(scree.InvalidArgumentError, match=f"key of {scree.MAX_KEY_BYTES + 1} bytes exceeds"):
            call()
    # The largest key is accepted.
    ks[b"k" * scree.MAX_KEY_BYTES] = b"max"
    assert ks[b"k" * scree.MAX_KEY_BYTES] == b"max"
    assert ks[b"kept"] == b"v"


def test_oversized_value(db):
    ks = db.keyspace("k", layout="leveled")
    big = b"\0" * (scree.MAX_VALUE_BYTES + 1)
    with pytest.raises(scree.InvalidArgumentError, match="value of .* bytes exceeds the limit"):
        ks[b"a"] = big
    del big
    assert b"a" not in ks


def test_locked_directory(tmp_path):
    path = tmp_path / "locked"
    with scree.open(path, **small()) as db:
        db.keyspace("k", layout="leveled")[b"a"] = b"1"
        with pytest.raises(scree.LockedError) as e:
            scree.open(path, **small())
        assert e.value.path == str(path)
        assert "locked" in str(e.value)
        # Another process is refused too.
        code = (
            "import scree, sys\n"
            "try:\n"
            "    scree.open(sys.argv[1], background_threads=1)\n"
            "except scree.LockedError as e:\n"
            "    print('LockedError', e.path)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
        )
        assert out.stdout.strip() == f"LockedError {path}", out.stderr
        # The open database is unharmed.
        assert db.existing_keyspace("k")[b"a"] == b"1"


def test_corrupted_table_raises_corruption_with_file_and_offset(tmp_path):
    path = tmp_path / "corrupt"
    with scree.open(path, **small()) as db:
        ks = db.keyspace("k", layout="leveled")
        for i in range(2000):
            ks[b"%05d" % i] = b"v" * 50
        db.flush()
        other = db.keyspace("other", layout="leveled")
        other[b"safe"] = b"kept"
    tables = sorted(glob.glob(str(path / "*.sst")))
    assert len(tables) == 1
    table = tables[0]
    size = os.path.getsize(table)
    with open(table, "r+b") as f:
        f.seek(100)  # inside the first data block (keys 00000…)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0xFF]))
    with scree.open(path, **small()) as db:
        ks = db.existing_keyspace("k")
        with pytest.raises(scree.CorruptionError) as e:
            ks[b"00001"]
        err = e.value
        assert err.file == table
        assert isinstance(err.offset, int) and 0 <= err.offset < size
        assert err.detail == "block checksum mismatch"
        assert str(err) == f"corruption in {table} at offset {err.offset}: {err.detail}"
        # The error poisons nothing: keys of other blocks and the memtable's read as written.
        assert ks[b"01999"] == b"v" * 50
        assert db.existing_keyspace("other")[b"safe"] == b"kept"
        ks[b"new"] = b"write still works"
        assert ks[b"new"] == b"write still works"


def test_corrupted_wal_record_at_open(tmp_path):
    path = tmp_path / "wal"
    with scree.open(path, **small()) as db:
        ks = db.keyspace("k", layout="leveled")
        for i in range(200):
            ks[b"%05d" % i] = b"w" * 100
    logs = sorted(glob.glob(str(path / "*.log")))
    log = max(logs, key=os.path.getsize)
    size = os.path.getsize(log)
    with open(log, "r+b") as f:
        f.seek(size // 4)
        b = f.read(1)
        f.seek(size // 4)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(scree.CorruptionError) as e:
        scree.open(path, **small())
    assert e.value.file == log
    assert 0 <= e.value.offset < size
    # Point-in-time recovery opens it with the records before the damage.
    with scree.open(path, wal_recovery="point_in_time", **small()) as db:
        ks = db.existing_keyspace("k")
        assert ks[b"00000"] == b"w" * 100


def test_failed_background_compaction_raises_background_error(tmp_path):
    path = tmp_path / "bg"
    # pread, not a memory map: a truncated mapped file would be SIGBUS, not an error.
    db = scree.open(path, mmap_reads=False, block_cache_bytes=0, background_threads=1)
    ks = db.keyspace("k", layout="leveled", write_buffer_bytes=64 * 1024)
    for i in range(2000):
        ks[b"%05d" % i] = b"x" * 60
    db.flush()
    db.wait_for_compactions()
    # Damage the tables under the open database: the next compaction that reads them fails.
    for table in glob.glob(str(path / "*.sst")):
        os.truncate(table, 100)
    with pytest.raises(scree.BackgroundError, match="compaction of keyspace \"k\": corruption in"):
        for _ in range(50):
            for i in range(0, 2000, 2):
                ks[b"%05d" % i] = b"y" * 60
            db.flush()
            db.wait_for_compactions()
    # From then on the database takes no writes, with the same error, until reopened.
    with pytest.raises(scree.BackgroundError, match="read-only after a background error"):
        ks[b"more"] = b"v"
    db.close()
