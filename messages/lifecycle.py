"""The start/stop lifecycle of a local server, as a (sync or async) context manager.

Three local servers of the project share it: ``actline.bus.embedded.EmbeddedNats`` (a
nats-server child process), ``actline.bus.nats_cluster.EmbeddedCluster`` (several of them)
and ``actline.llm.fake_anthropic.thread.ServerThread`` (the fake Messages API on its own
event loop in a daemon thread). Each has a blocking ``start()`` that returns once it serves
and a ``stop()`` that ends it and is safe to call again; what they share is this protocol,
not a thread (only ``ServerThread`` runs one; the nats-servers are processes).

- ``Service``: ``with`` starts it and stops it; ``async with`` does the same without
  blocking the event loop (``astart()``, by default ``start`` in a worker thread, and
  ``stop`` in a worker thread).
- ``Stoppable``: a server handed out already started (``run_in_thread()`` starts the
  ``ServerThread`` it returns): ``with`` gives it as it is and stops it on the way out.

Why in ``messages``: ``bus`` and ``llm`` may import nothing of each other, and the base
layer is the one package both may import; like ``diag``, this module serves every package
the same way and imports nothing of the project.
"""

from __future__ import annotations

import abc
import asyncio
from types import TracebackType
from typing import Self


class Stoppable(abc.ABC):
    """A running server that ``with`` stops on the way out (entering leaves it as it is)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """End it (and wait until it has ended); a second call does nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Service(Stoppable):
    """A server that ``with`` (or ``async with``) starts, then stops on the way out."""

    @abc.abstractmethod
    def start(self) -> Self:
        """Start it and block until it serves; returns it."""

    async def astart(self) -> Self:
        """``start`` without blocking the event loop: in a worker thread, unless overridden."""
        return await asyncio.to_thread(self.start)

    def __enter__(self) -> Self:
        return self.start()

    async def __aenter__(self) -> Self:
        return await self.astart()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)
