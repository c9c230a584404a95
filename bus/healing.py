"""A work queue that heals itself, and the dead letters of messages nobody can read.

``HealingQueue`` wraps a ``WorkQueue`` (the turn queue, the DONE queue): a stream or
consumer deleted under a running node is recreated, with a warning, on the next failed
pull or within ``CHECK_EVERY_S`` when pulls go quiet. ``dead_letter`` publishes what could
not be decoded on the dead-letter subject and terminates the message (never redelivered).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from actline.messages import DeadLetter

from .bus import Bus
from .conditions import Conditions
from .errors import BusError
from .jetstream import QueueItem, WorkQueue

log = logging.getLogger(__name__)

CHECK_EVERY_S = 5.0
"""How often a quiet pull loop checks that its stream and consumer still exist."""


class HealingQueue:
    """A ``WorkQueue`` that recreates its stream and consumer when they are gone (deleted
    by someone), with a warning: after a failed pull, or when pulls go quiet for
    ``CHECK_EVERY_S``. ``healed`` counts the recreations. Failed pulls while JetStream is
    out are logged once per outage, in ``conditions`` (the connection's, so that the
    node's loops share one line per outage; else the queue's own), and nothing is
    recreated while the server says the cluster has no quorum."""

    def __init__(
        self,
        what: str,
        open_queue: Callable[[], Awaitable[WorkQueue]],
        *,
        conditions: Conditions | None = None,
    ) -> None:
        self.what = what
        self._open = open_queue
        self.conditions = conditions or Conditions(None)
        self.queue: WorkQueue | None = None
        self.healed = 0
        self._checked = time.monotonic()

    async def open(self) -> WorkQueue:
        self.queue = await self._open()
        self._checked = time.monotonic()
        return self.queue

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()
            self.queue = None

    async def pull(self) -> QueueItem | None:
        """The next message; None when none came within a second, or after a failure
        (logged, the stream checked and recreated when missing). Never raises ``BusError``."""
        try:
            queue = self.queue or await self._heal("it was not open")
            if time.monotonic() - self._checked > CHECK_EVERY_S and not self.conditions.no_quorum:
                self._checked = time.monotonic()
                if not await queue.healthy():
                    queue = await self._heal("its stream or consumer is gone")
            item = await queue.pull(timeout=1.0)
        except BusError as exc:
            if not self.conditions.failed(self.what, exc):
                log.warning("%s: fetch failed (%s); checking the stream", self.what, exc)
            await asyncio.sleep(0.5)
            with contextlib.suppress(BusError):
                if self.conditions.no_quorum:  # "not found" then says nothing of the stream
                    return None
                if self.queue is None or not await self.queue.healthy():
                    await self._heal(str(exc))
            return None
        if item is not None:
            self._checked = time.monotonic()
            self.conditions.succeeded(self.what)
        return item

    async def _heal(self, why: str) -> WorkQueue:
        log.warning("%s: %s; recreating it (anything sent meanwhile is gone)", self.what, why)
        await self.close()
        self.healed += 1
        return await self.open()


async def dead_letter(bus: Bus, item: QueueItem, reason: str) -> None:
    """Republish an undecodable queue message on ``deadletter`` and drop it for good."""
    log.warning("undecodable message on %s (%d bytes): %s", item.subject, len(item.data), reason)
    letter = DeadLetter(
        subject=item.subject,
        reason=reason,
        raw=bytes(item.data[:65536]),
        raw_size=len(item.data),
    )
    with contextlib.suppress(BusError):
        await bus.publish(bus.subjects.deadletter, letter)
    with contextlib.suppress(BusError):
        await item.term()
