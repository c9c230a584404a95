"""Group commit: one writer thread that commits many rounds in one synced transaction.

A synced LMDB commit costs an fsync (about 0.3 ms here) whatever it holds. The
``Committer`` takes write functions from the event loop (``submit``), and its writer
thread runs every function queued meanwhile in ONE write transaction, each in a nested
transaction of its own: a function that raises (a ``SequenceGap``, a ``RevisionConflict``)
is rolled back alone and its future gets the error, the others commit together. So
fifty conversations that each end a round in the same millisecond pay for one fsync,
and the event loop never blocks on a disk.

The futures resolve on the submitting loop once the transaction is durable (synced
when the store is). A map that must grow, or a disk that is full, fails or retries
the whole batch as ``Store.write`` does for one function.

Cancellation: cancelling the awaiting coroutine does not cancel the write (it may be
committed already); ``close`` finishes what is queued, then stops the thread.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import lmdb

from .errors import StorageError
from .store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_BATCH = 256
"""Write functions one transaction takes at most."""


@dataclass(slots=True)
class _Job(Generic[T]):
    fn: Callable[[lmdb.Transaction], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop


class _Stop:
    pass


class CommitterClosed(StorageError):
    """A write was submitted to a committer that is closed."""

    def __init__(self) -> None:
        super().__init__("the committer is closed; open the store's node again")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), ())


class Committer:
    """Group commit over one ``Store``; ``start()`` before ``submit``, ``close()`` at the end."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: queue.SimpleQueue[_Job[Any] | _Stop] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.transactions = 0
        """Write transactions committed (each one fsync on a synced store)."""
        self.writes = 0
        """Write functions committed; ``writes / transactions`` is the batching factor."""

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="actline-committer", daemon=True)
            self._thread.start()

    def submit(self, fn: Callable[[lmdb.Transaction], T]) -> asyncio.Future[T]:
        """Queue ``fn`` for the next group transaction; the future gets its result once the
        transaction is durable, or the exception ``fn`` raised (then nothing of it is written)."""
        if self._closed or self._thread is None:
            raise CommitterClosed()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put(_Job(fn, future, loop))
        return future

    def close(self) -> None:
        """Commit what is queued, then stop the writer thread (blocking)."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(_Stop())
            self._thread.join()

    # -- the writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if isinstance(first, _Stop):
                break
            batch: list[_Job[Any]] = [first]
            while len(batch) < MAX_BATCH:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, _Stop):
                    stop = True
                    break
                batch.append(item)
            self._commit(batch)

    def _commit(self, batch: list[_Job[Any]]) -> None:
        env = self.store.env

        def run(txn: lmdb.Transaction) -> list[tuple[bool, Any]]:
            out: list[tuple[bool, Any]] = []
            for job in batch:
                try:
                    with env.begin(write=True, parent=txn) as child:
                        out.append((True, job.fn(child)))
                except lmdb.Error:
                    raise  # the map or the disk: the whole batch (Store.write grows and retries)
                except Exception as exc:  # this write's own error: rolled back alone
                    out.append((False, exc))
            return out

        try:
            outcomes = self.store.write(run)
        except Exception as exc:
            log.error("group commit of %d writes failed: %s", len(batch), exc)
            outcomes = [(False, exc)] * len(batch)
        else:
            self.transactions += 1
            self.writes += sum(ok for ok, _ in outcomes)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job[Any], bool, Any]]] = {}
        for job, (ok, value) in zip(batch, outcomes, strict=True):
            by_loop.setdefault(job.loop, []).append((job, ok, value))
        for loop, done in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, done)
            except RuntimeError:  # the loop closed meanwhile: nobody waits any more
                pass


def _resolve(done: list[tuple[_Job[Any], bool, Any]]) -> None:
    for job, ok, value in done:
        if job.future.done():
            continue
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)
