"""Group commit: the writes that meet in one event-loop iteration share one transaction.

A synced LMDB commit costs an fsync (about 0.3 ms here) whatever it holds. The
``Committer`` takes write functions from the event loop (``submit``) and runs every
function submitted during the same loop iteration in ONE write transaction, each in a
nested transaction of its own: a function that raises (a ``SequenceGap``, a
``RevisionConflict``) is rolled back alone and its future gets the error, the others
commit together. Conversations that end a round at the same moment share one fsync.

Where the transaction runs depends on the load, measured on this machine:

- one write and nothing in flight (a lone conversation, the latency case): on the
  event loop, right after the iteration that submitted it. A writer thread would
  cost more than the fsync it hides: after the sync it needs the GIL back, and the
  loop, busy with the next round, holds it (a 0.3 ms commit took 0.7-1.0 ms to be seen).
- several writes, or a commit already in flight (many conversations, the throughput
  case): on one writer thread, so the loop keeps serving while the disk syncs; what
  arrives meanwhile waits for the next batch.
- a store opened without sync: always on the loop (a commit is ~10 us).

A map that must grow, or a disk that is full, fails or retries the whole batch as
``Store.write`` does for one function.

Cancellation: cancelling the awaiting coroutine does not cancel the write (it may be
committed already); ``close`` commits what is queued.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import lmdb

from .errors import StorageError
from .store import Store

log = logging.getLogger(__name__)

T = TypeVar("T")


BATCH_ERRORS = (
    lmdb.MapFullError,
    lmdb.MapResizedError,
    lmdb.DiskError,
    lmdb.PanicError,
    lmdb.CorruptedError,
    lmdb.InvalidError,
    lmdb.VersionMismatchError,
)
"""LMDB errors about the environment, not one write: they fail (or retry) the whole batch."""


@dataclass(slots=True)
class _Job(Generic[T]):
    fn: Callable[[lmdb.Transaction], T]
    future: asyncio.Future[T]
    loop: asyncio.AbstractEventLoop


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
        self._batch: list[_Job[Any]] = []
        self._waiting: list[_Job[Any]] = []
        """Writes queued while the writer thread commits."""
        self._thread: ThreadPoolExecutor | None = None
        self._in_flight = False
        self._scheduled = False
        self._started = False
        self._closed = False
        self.transactions = 0
        """Write transactions committed (each one fsync on a synced store)."""
        self.writes = 0
        """Write functions committed; ``writes / transactions`` is the batching factor."""
        self.inline = 0
        """Transactions committed on the event loop (the rest on the writer thread)."""
        self.seconds = 0.0
        """Wall time spent in the committed transactions (the fsync included)."""

    def start(self) -> None:
        self._started = True

    def submit(self, fn: Callable[[lmdb.Transaction], T]) -> asyncio.Future[T]:
        """Queue ``fn`` for this iteration's group transaction; the future gets its result
        once the transaction is durable, or the exception ``fn`` raised (then nothing of
        it is written)."""
        if self._closed or not self._started:
            raise CommitterClosed()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._batch.append(_Job(fn, future, loop))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def close(self) -> None:
        """Commit what is queued (waiting for the writer thread); later submits fail with
        ``CommitterClosed``. Blocking: call it when the loop has nothing else to do."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None
        pending, self._batch, self._waiting = [*self._waiting, *self._batch], [], []
        if pending:
            _resolve(self._commit(pending, inline=True))

    def _flush(self) -> None:
        self._scheduled = False
        batch, self._batch = self._batch, []
        if not batch:
            return
        if self._in_flight:
            self._waiting.extend(batch)
        elif len(batch) == 1 or not self.store.synced:
            _resolve(self._commit(batch, inline=True))
        else:
            self._to_thread(batch)

    def _to_thread(self, batch: list[_Job[Any]]) -> None:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="actline-commit")
        self._in_flight = True
        done = asyncio.get_running_loop().run_in_executor(self._thread, self._commit, batch, False)
        done.add_done_callback(self._thread_done)

    def _thread_done(self, done: asyncio.Future[list[tuple[_Job[Any], bool, Any]]]) -> None:
        self._in_flight = False
        if not done.cancelled():
            _resolve(done.result())  # _commit never raises: errors are per write
        waiting, self._waiting = self._waiting, []
        if waiting and not self._closed:
            self._to_thread(waiting)

    def _commit(self, batch: list[_Job[Any]], inline: bool) -> list[tuple[_Job[Any], bool, Any]]:
        env = self.store.env

        def run(txn: lmdb.Transaction) -> list[tuple[bool, Any]]:
            out: list[tuple[bool, Any]] = []
            for job in batch:
                try:
                    with env.begin(write=True, parent=txn) as child:
                        out.append((True, job.fn(child)))
                except BATCH_ERRORS:
                    raise  # the map or the disk: the whole batch (Store.write grows and retries)
                except Exception as exc:  # this write's own error: rolled back alone
                    out.append((False, exc))
            return out

        started = time.perf_counter()
        try:
            outcomes = self.store.write(run)
        except Exception as exc:
            log.error("group commit of %d writes failed: %s", len(batch), exc)
            outcomes = [(False, exc)] * len(batch)
        else:
            self.seconds += time.perf_counter() - started
            self.transactions += 1
            self.inline += inline
            self.writes += sum(ok for ok, _ in outcomes)
        return [(job, ok, value) for job, (ok, value) in zip(batch, outcomes, strict=True)]


def stats(committer: Committer) -> dict[str, float | int]:
    """The committer's counters and what they imply (a node's ``stats``): transactions,
    writes, writes per transaction, those committed on the event loop, the seconds spent
    committing and their mean per transaction in ms."""
    n = committer.transactions
    return {
        "transactions": n,
        "writes": committer.writes,
        "writes_per_transaction": committer.writes / n if n else 0.0,
        "inline": committer.inline,
        "seconds": committer.seconds,
        "mean_ms": committer.seconds / n * 1e3 if n else 0.0,
    }


def _resolve(done: list[tuple[_Job[Any], bool, Any]]) -> None:
    for job, ok, value in done:
        if job.future.done():
            continue
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)
