"""How many calls one pool member takes at once, and how many it lets wait.

``Bus.subscribe(..., concurrency=N)`` runs at most N handlers of a subscription at once; a
message that arrives while N run waits in the NATS client, unbounded, for as long as the
calls before it take (its caller's request timeout: minutes for a model call), while
another member of the queue group may sit idle: the server picked this one at random.

``Admission`` bounds that wait: at most ``concurrency`` calls run, at most ``waiting``
more wait for a slot, and a call past both is refused at once (``admit`` is False; the
pools answer ``ErrorReply(code="busy")``, and ``actline.actors.turn.remote`` asks again,
which the queue group hands to a member picked anew). The subscription itself runs with
``subscription_concurrency`` handlers, one more than can run or wait, so a call to refuse
always finds a handler and never waits in the client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["BUSY", "Admission"]

BUSY = "busy"
"""The ``ErrorReply`` code of a call a pool member refused because it was full."""


class Admission:
    """``concurrency`` running calls, at most ``waiting`` waiting; the rest refused."""

    def __init__(self, concurrency: int, waiting: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        if waiting < 0:
            raise ValueError(f"waiting must be 0 or more, got {waiting}")
        self.concurrency = concurrency
        self.waiting = waiting
        self._slots = asyncio.Semaphore(concurrency)
        self.running = 0
        self.queued = 0
        self.refused = 0

    @property
    def subscription_concurrency(self) -> int:
        """The handlers the subscription runs: every running and waiting call, and one to
        refuse with."""
        return self.concurrency + self.waiting + 1

    def admit(self) -> bool:
        """True when a call may run or wait now; False (counted) when it is to be refused."""
        if self.running + self.queued >= self.concurrency + self.waiting:
            self.refused += 1
            return False
        return True

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the ``concurrency`` slots (waiting for it, counted as queued)."""
        self.queued += 1
        try:
            await self._slots.acquire()
        finally:
            self.queued -= 1
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1
            self._slots.release()

    def busy(self) -> str:
        """What a refused caller is told."""
        return (
            f"this pool member is full ({self.running} calls running, {self.queued} waiting; "
            f"concurrency {self.concurrency}, queue {self.waiting}): ask again"
        )
