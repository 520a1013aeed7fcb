"""Type stubs of the native module ``scree._scree`` (re-exported by ``scree``)."""

import os
import pathlib
from types import TracebackType
from typing import Any, Dict, Iterator as _Iterator, List, Literal, Optional, Tuple, Type, TypeVar, Union, final, overload

_T = TypeVar("_T")
_Path = Union[str, "os.PathLike[str]"]

__all__ = [
    "DB",
    "Iterator",
    "Keyspace",
    "Snapshot",
    "WriteBatch",
    "LAYOUTS",
    "MAX_KEY_BYTES",
    "MAX_VALUE_BYTES",
    "__version__",
]

MAX_KEY_BYTES: int
MAX_VALUE_BYTES: int
LAYOUTS: List[str]
__version__: str

@final
class Iterator(_Iterator[Any]):
    """A lazy iterator over a keyspace (items, keys or values); closed with its database."""

    def __iter__(self) -> "Iterator": ...
    def __next__(self) -> Any: ...

@final
class Keyspace:
    """A named keyspace: a mapping of ``bytes`` to ``bytes``. No ``len()`` (see the class
    docstring: the engine keeps no count of live keys)."""

    @property
    def name(self) -> str: ...
    @property
    def layout(self) -> str: ...
    def __getitem__(self, key: bytes, /) -> bytes: ...
    def __setitem__(self, key: bytes, value: bytes, /) -> None: ...
    def __delitem__(self, key: bytes, /) -> None: ...
    def __contains__(self, key: bytes, /) -> bool: ...
    def __iter__(self) -> _Iterator[bytes]: ...
    @overload
    def get(self, key: bytes) -> Optional[bytes]: ...
    @overload
    def get(self, key: bytes, default: _T) -> Union[bytes, _T]: ...
    def put(self, key: bytes, value: bytes, sync: bool = False) -> None: ...
    def put_if_absent(self, key: bytes, value: bytes, sync: bool = False) -> bool: ...
    def delete(self, key: bytes, sync: bool = False) -> None: ...
    def items(
        self,
        start: Optional[bytes] = None,
        stop: Optional[bytes] = None,
        prefix: Optional[bytes] = None,
        reverse: bool = False,
    ) -> _Iterator[Tuple[bytes, bytes]]: ...
    def keys(
        self,
        start: Optional[bytes] = None,
        stop: Optional[bytes] = None,
        prefix: Optional[bytes] = None,
        reverse: bool = False,
    ) -> _Iterator[bytes]: ...
    def values(
        self,
        start: Optional[bytes] = None,
        stop: Optional[bytes] = None,
        prefix: Optional[bytes] = None,
        reverse: bool = False,
    ) -> _Iterator[bytes]: ...

@final
class WriteBatch:
    """Puts and deletes applied atomically at the end of a ``with`` block; nothing is written
    if the block raises."""

    def put(self, ks: Keyspace, key: bytes, value: bytes) -> None: ...
    def delete(self, ks: Keyspace, key: bytes) -> None: ...
    def clear(self) -> None: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "WriteBatch": ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException] = None,
        tb: Optional[TracebackType] = None,
    ) -> bool: ...

@final
class Snapshot:
    """Reads of every keyspace at one moment."""

    @property
    def sequence(self) -> int: ...
    @overload
    def get(self, ks: Keyspace, key: bytes) -> Optional[bytes]: ...
    @overload
    def get(self, ks: Keyspace, key: bytes, default: _T) -> Union[bytes, _T]: ...
    def items(
        self,
        ks: Keyspace,
        start: Optional[bytes] = None,
        stop: Optional[bytes] = None,
        prefix: Optional[bytes] = None,
        reverse: bool = False,
    ) -> _Iterator[Tuple[bytes, bytes]]: ...
    def keys(
        self,
        ks: Keyspace,
        start: Optional[bytes] = None,
        stop: Optional[bytes] = None,
        prefix: Optional[bytes] = None,
        reverse: bool = False,
    ) -> _Iterator[bytes]: ...
    def values(
        self,
        ks: Keyspace,
        start: Optional[bytes] = None,
        stop: Optional[bytes] = None,
        prefix: Optional[bytes] = None,
        reverse: bool = False,
    ) -> _Iterator[bytes]: ...
    def release(self) -> None: ...
    def __enter__(self) -> "Snapshot": ...
    def __exit__(self, *exc: Any) -> bool: ...

@final
class DB:
    """An open Scree database."""

    def __new__(
        cls,
        path: _Path,
        *,
        device: Literal["files", "smr-host", "smr-drive"] = "files",
        band_mb: int = ...,
        **options: Any,
    ) -> "DB":
        """Opens the database at `path`; `device="smr-host"|"smr-drive"` (bands of `band_mb`
        MiB, default 40) runs it on the engine's emulated shingled device."""
        ...
    def keyspace(self, name: str, layout: str = "trie", **options: Any) -> Keyspace: ...
    def existing_keyspace(self, name: str) -> Keyspace: ...
    def keyspace_names(self) -> List[str]: ...
    def write_batch(self, sync: bool = False) -> WriteBatch: ...
    def snapshot(self) -> Snapshot: ...
    def flush(self) -> None: ...
    def compact(self) -> None: ...
    def wait_for_compactions(self) -> None: ...
    def stats(self) -> Dict[str, Any]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> "pathlib.Path": ...
    def __enter__(self) -> "DB": ...
    def __exit__(self, *exc: Any) -> bool: ...
