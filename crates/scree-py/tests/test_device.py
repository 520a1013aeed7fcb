"""`scree.open(path, device=..., band_mb=...)`: the engine's emulated shingled (SMR) devices."""

from __future__ import annotations

import shutil

import pytest

import scree
from conftest import small

SMR = ["smr-host", "smr-drive"]


def fill(ks, n, tag=b"v"):
    for i in range(n):
        ks[b"%08d" % i] = tag * 100


@pytest.mark.parametrize("device", SMR)
def test_a_database_on_an_emulated_device_counts_its_bytes_and_reopens(tmp_path, device):
    path = tmp_path / "smr"
    with scree.open(path, device=device, band_mb=2, **small()) as db:
        ks = db.keyspace("k", layout="fragmented", write_buffer_bytes=256 << 10)
        fill(ks, 20_000)
        db.flush()
        dev = db.stats()["device"]
        mode = "host-managed" if device == "smr-host" else "drive-managed"
        assert dev["mode"] == mode and dev["band_bytes"] == 2 << 20
        # Tables went to the bands, the WAL to the conventional region: both counted.
        assert dev["bands_in_use"] >= 1 and dev["live_bytes"] > 0
        assert dev["host_bytes_written"] > dev["conventional_bytes_written"] > 0
        assert dev["device_bytes_written"] >= dev["host_bytes_written"]
        assert (path / "SMR-DEVICE").exists()
    # The same device again: the emulator of the first open, which knows the tables.
    with scree.open(path, device=device, band_mb=2, **small()) as db:
        ks = db.existing_keyspace("k")
        assert ks[b"00000007"] == b"v" * 100 and ks[b"00019999"] == b"v" * 100
        assert db.stats()["device"]["live_bytes"] > 0
        # Opened on files or on another device, its tables would be missing: refused.
    with pytest.raises(scree.InvalidArgumentError, match="opens with that device"):
        scree.open(path, **small())
    other = "smr-drive" if device == "smr-host" else "smr-host"
    with pytest.raises(scree.InvalidArgumentError, match="not " + other):
        scree.open(path, device=other, band_mb=2, **small())
    with pytest.raises(scree.InvalidArgumentError, match="not " + device + ", 4 MiB"):
        scree.open(path, device=device, band_mb=4, **small())


def test_files_is_the_default_and_has_no_device_stats(tmp_path):
    with scree.open(tmp_path / "f", device="files", **small()) as db:
        db.keyspace("k", layout="leveled")[b"a"] = b"1"
        assert db.stats()["device"] is None
    with scree.open(tmp_path / "f", **small()) as db:
        assert db.existing_keyspace("k")[b"a"] == b"1"
        assert db.stats()["device"] is None


def test_an_existing_database_does_not_open_on_a_new_emulator(tmp_path):
    with scree.open(tmp_path / "e", **small()) as db:
        db.keyspace("k", layout="leveled")[b"a"] = b"1"
    with pytest.raises(scree.UnsupportedError, match="placement in memory"):
        scree.open(tmp_path / "e", device="smr-host", **small())
    with scree.open(tmp_path / "e", **small()) as db:
        assert db.existing_keyspace("k")[b"a"] == b"1"


def test_a_removed_directory_gets_a_new_emulator(tmp_path):
    path = tmp_path / "r"
    for tag in (b"a", b"b"):
        with scree.open(path, device="smr-host", band_mb=1, **small()) as db:
            ks = db.keyspace("k", layout="leveled", write_buffer_bytes=128 << 10)
            assert ks.get(b"00000001") is None
            fill(ks, 3_000, tag)
            db.flush()
            assert ks[b"00000001"] == tag * 100
            # A new emulator counts from zero: no bytes of the removed database.
            assert db.stats()["device"]["live_bytes"] < 3_000 * 110 * 2
        shutil.rmtree(path)


@pytest.mark.parametrize(
    "kw, error, match",
    [
        (dict(device="smr"), scree.InvalidArgumentError, 'must be "files", "smr-host" or "smr-drive"'),
        (dict(device="smr-host", band_mb=0), scree.InvalidArgumentError, r"1\.\.=1024 MiB, got 0"),
        (dict(device="smr-drive", band_mb=1025), scree.InvalidArgumentError, "got 1025"),
        (dict(device="smr-host", band_mb=-1), scree.InvalidArgumentError, "band_mb must be within"),
        (dict(band_mb=40), scree.InvalidArgumentError, "needs device="),
        (dict(device="files", band_mb=40), scree.InvalidArgumentError, "needs device="),
        (dict(device=1), TypeError, "option device takes"),
        (dict(device="smr-host", band_mb=2.0), TypeError, "option band_mb takes an int"),
        (dict(device="smr-host", band_mb=True), TypeError, "option band_mb takes an int"),
    ],
)
def test_bad_device_options_raise_and_create_nothing(tmp_path, kw, error, match):
    with pytest.raises(error, match=match):
        scree.open(tmp_path / "bad", **kw)
    assert not (tmp_path / "bad").exists()
