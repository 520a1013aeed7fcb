"""Scree for Python: an embeddable key-value storage engine with five write-optimized layouts.

>>> import scree
>>> with scree.open("/tmp/example-db") as db:
...     ks = db.keyspace("users", layout="leveled")
...     ks[b"alice"] = b"1"
...     with db.write_batch() as wb:
...         wb.put(ks, b"bob", b"2")
...         wb.delete(ks, b"alice")
...     list(ks.items())
[(b'bob', b'2')]

See docs/python.md for the API, threading and errors.
"""

from __future__ import annotations

import os
from typing import Any, Union

from ._errors import (
    BackgroundError,
    ClosedError,
    CorruptionError,
    Error,
    InvalidArgumentError,
    IoError,
    LockedError,
    ReadOnlyError,
    UnsupportedError,
)
from ._scree import (
    DB,
    LAYOUTS,
    MAX_KEY_BYTES,
    MAX_VALUE_BYTES,
    Iterator,
    Keyspace,
    Snapshot,
    WriteBatch,
    __version__,
)


def open(path: Union[str, "os.PathLike[str]"], **options: Any) -> DB:  # noqa: A001
    """Opens the database at ``path`` (``scree.DB(path, **options)``).

    ``device="smr-host"`` or ``"smr-drive"`` (with ``band_mb=40``) runs it on the engine's
    emulated shingled device; ``db.stats()["device"]`` then holds the device's counters.
    """
    return DB(path, **options)


__all__ = [
    "DB",
    "open",
    "Keyspace",
    "Iterator",
    "Snapshot",
    "WriteBatch",
    "LAYOUTS",
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "Error",
    "IoError",
    "CorruptionError",
    "InvalidArgumentError",
    "UnsupportedError",
    "LockedError",
    "BackgroundError",
    "ReadOnlyError",
    "ClosedError",
    "__version__",
]
