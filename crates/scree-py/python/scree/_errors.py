"""The exceptions Scree raises: ``scree.Error`` and one subclass per engine error.

The native module builds them from the engine's errors (``scree::Error``), one class per
variant, with the variant's fields as attributes.
"""

from __future__ import annotations

from typing import Optional


class Error(Exception):
    """Base class of every error Scree raises."""


class IoError(Error, OSError):
    """An operating-system I/O error.

    ``path`` (also ``filename``) is the file or directory it happened on, ``errno`` the OS
    error code (``None`` when the error has none).
    """

    path: Optional[str]


class CorruptionError(Error):
    """Bytes on disk failed a checksum or structural check.

    ``file`` is the file holding the bad bytes, ``offset`` the byte offset of the bad record
    or block, ``detail`` what was wrong.
    """

    file: str
    offset: int
    detail: str


class InvalidArgumentError(Error, ValueError):
    """An argument or option was out of range or inconsistent with stored state (a key over
    ``MAX_KEY_BYTES``, another layout for an existing keyspace, an option out of range, …)."""


class UnsupportedError(Error, NotImplementedError):
    """The operation is not offered by this keyspace's layout (a range scan of a ``trie``
    keyspace, a ``semisorted:N`` prefix scan whose prefix is not N bytes) or this build."""


class LockedError(Error):
    """Another process, or another open ``DB`` in this one, holds the database's lock.

    ``path`` is the database directory.
    """

    path: str


class BackgroundError(Error):
    """A background flush or compaction failed earlier: the database takes no more writes
    until it is reopened."""


class ReadOnlyError(Error):
    """The database was opened with ``read_only=True``: ``op`` names the refused operation,
    ``path`` the database directory."""

    path: str
    op: str


class ClosedError(Error):
    """The database was closed (or the snapshot released, the batch already written)."""


__all__ = [
    "Error",
    "IoError",
    "CorruptionError",
    "InvalidArgumentError",
    "UnsupportedError",
    "LockedError",
    "BackgroundError",
    "ReadOnlyError",
    "ClosedError",
]
