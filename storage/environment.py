"""The store's LMDB environment: opening it, its transactions and the growth of its map.

Locking: LMDB's lock file serialises writers across processes (one write
transaction at a time per environment) while readers run on MVCC snapshots and
are never blocked. Several processes on one node may open the same
environment; each opens it once (LMDB refuses a second open in one process)
and never uses it across ``fork()``. Stale reader slots of killed processes are
cleared on open (``reader_check``). A map grown by another process is adopted
on the next transaction.

Map growth: a write that hits ``MapFullError`` is aborted, the map doubles (up
to ``max_map_size``) and the transaction is retried from the start; past the
limit ``StoreFull`` is raised. ENOSPC from the file system becomes ``DiskFull``.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Self, TypeVar

import lmdb

from .errors import DiskFull, StorageError, StoreFull
from .layout import DATABASES

T = TypeVar("T")
DEFAULT_MAP_SIZE = 64 << 20
DEFAULT_MAX_MAP_SIZE = 1 << 40
LOW_DISK_BYTES = 64 << 20
"""An I/O error at commit with less than this free is reported as a full disk."""


class Gate:
    """Shared for transactions, exclusive for a map resize; per process.

    A thread that needs a resize while it holds a shared slot itself (it writes
    from inside an ``iter_blocks`` loop) gets a ``StorageError`` instead of a
    deadlock.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._holders: dict[int, int] = {}
        """Shared slots per thread that took them (an iteration may end on another thread)."""

    def _hold(self, ident: int, delta: int) -> None:
        count = self._holders.get(ident, 0) + delta
        if count:
            self._holders[ident] = count
        else:
            self._holders.pop(ident, None)

    @contextmanager
    def shared(self) -> Iterator[None]:
        ident = threading.get_ident()
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._shared += 1
            self._hold(ident, 1)
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._hold(ident, -1)
                self._cond.notify_all()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give this thread's shared slot up for a moment (to resize before a read)."""
        ident = threading.get_ident()
        with self._cond:
            self._shared -= 1
            self._hold(ident, -1)
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                while self._exclusive:
                    self._cond.wait()
                self._shared += 1
                self._hold(ident, 1)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            mine = self._holders.get(threading.get_ident(), 0)
        if mine:
            raise StorageError(
                "the map must grow but this thread is iterating the store; "
                "finish the iteration (or list() it) before writing"
            )
        with self._cond:
            while self._exclusive or self._shared:
                self._cond.wait()
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Environment:
    """One LMDB environment with the store's named databases; thread-safe; open once per
    process. ``read`` and ``write`` run a function in a transaction."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        max_map_size: int = DEFAULT_MAX_MAP_SIZE,
        sync: bool = True,
    ) -> None:
        self.path = Path(path)
        self.synced = sync
        """Commits are fsync-ed (``sync=False`` risks the last commits on an OS crash)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.max_map_size = max(max_map_size, map_size)
        try:
            self.env = lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=len(DATABASES) + 2,
                sync=sync,
                metasync=sync,
                readahead=False,
                max_readers=256,
            )
        except lmdb.Error as exc:
            raise self._translate(exc) from exc
        self.env.reader_check()
        # Inside an explicit transaction: a bare open_db() waits for the writer lock
        # while holding the GIL, freezing every thread of this process meanwhile.
        try:
            with self.env.begin(write=True) as txn:
                self.db = {name: self.env.open_db(name.encode(), txn=txn) for name in DATABASES}
        except lmdb.Error as exc:
            raise self._translate(exc) from exc
        self._gate = Gate()

    # -- plumbing --------------------------------------------------------------------------------

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def map_size(self) -> int:
        return int(self.env.info()["map_size"])

    def _translate(self, exc: lmdb.Error) -> Exception:
        """ENOSPC, or the EIO LMDB reports for a short write, on a full disk -> DiskFull."""
        text = str(exc)
        code = getattr(exc, "errno", None)
        short_write = code == errno.EIO or "Input/output error" in text
        if code == errno.ENOSPC or "No space left" in text:
            return DiskFull(str(self.path), text)
        if short_write:
            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
            if limit != resource.RLIM_INFINITY:
                return DiskFull(str(self.path), f"{text}; file size limit {limit:,} bytes")
            free = shutil.disk_usage(self.path).free
            if free < LOW_DISK_BYTES:
                return DiskFull(str(self.path), f"{text}; {free:,} bytes free")
        return exc

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn`` in one write transaction, growing the map and retrying when full."""
        while True:
            try:
                with self._gate.shared(), self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._resize(0)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.Error as exc:
                raise self._translate(exc) from exc

    def read(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn`` in a read transaction (an MVCC snapshot; never blocked by writers)."""
        while True:
            try:
                with self._gate.shared(), self.env.begin(buffers=False) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._resize(0)

    def _grow(self) -> None:
        current = self.map_size
        if current >= self.max_map_size:
            raise StoreFull(current, self.max_map_size)
        self._resize(min(self.max_map_size, current * 2))

    def _resize(self, size: int) -> None:
        """``set_mapsize`` (0 = adopt another process's size) with no transaction open here.

        py-lmdb invalidates every open transaction of the process on a resize, so it
        waits for this process's readers and writers to finish (the gate).
        """
        with self._gate.exclusive():
            if size and self.map_size >= size:
                return  # another thread grew it meanwhile
            try:
                self.env.set_mapsize(size)
            except lmdb.Error as exc:
                raise self._translate(exc) from exc
