"""The node's side of the durable turn queue (DESIGN.md §3).

All nodes share one work-queue stream capturing ``al.turn.submit`` and one durable
pull consumer (``bus.WorkQueue``). A node pulls one request at a time while it has
room (``max_active_turns``), keeps each message *in progress* while its turn waits or
runs (a heartbeat every ``ack_wait / 3``), acks it once the result is published
(``settle``) and hands it back at once when another node owns the conversation
(``requeue``, or ``defer`` for a moment while that node holds the lease). A node that
dies leaves its messages unacked: after ``ack_wait`` they go to another node, which
resumes each turn from the persisted timeline. An undecodable request becomes a
dead letter and is terminated (never redelivered).

Cancellation: ``stop`` cancels the pull loop and the heartbeat and naks what is in
flight; the handler passed to ``start`` runs in the pull loop's task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable

import messages
from bus import Bus, BusError, QueueItem, WorkQueue
from messages import DeadLetter, DecodeError, TurnRequest

log = logging.getLogger(__name__)

DEFER_S = 0.2
"""How long a turn of a conversation leased to another node stays out of the queue."""

Take = Callable[[TurnRequest], Awaitable[bool]]
"""Hands a request to its conversation; False when it must be deferred (leased elsewhere)."""


class TurnQueue:
    """Pulls turn requests for one node and settles them (the ``Settler`` of its turns)."""

    def __init__(self, bus: Bus, *, ack_wait_s: float, max_active: int) -> None:
        self.bus = bus
        self.ack_wait_s = ack_wait_s
        self.max_active = max_active
        self._queue: WorkQueue | None = None
        self._inflight: dict[str, list[QueueItem]] = {}
        self._room = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.taken = 0
        self.settled = 0
        self.deferred = 0
        """Turn requests handed back because another node held the conversation's lease."""

    @property
    def active(self) -> int:
        return len(self._inflight)

    async def start(self, take: Take) -> None:
        subjects = self.bus.subjects
        self._queue = await WorkQueue.open(
            self.bus,
            name=subjects.turn_stream,
            subject=subjects.turn_submit,
            consumer=subjects.turn_consumer,
            ack_wait_s=self.ack_wait_s,
            max_msg_size=messages.MAX_PAYLOAD,
        )
        self._room.set()
        self._tasks.append(asyncio.create_task(self._pull(take), name="queue:pull"))
        self._tasks.append(asyncio.create_task(self._heartbeat(), name="queue:heartbeat"))

    async def stop(self) -> None:
        """Stop pulling; turns not finished are handed back to the queue (nak)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for items in self._inflight.values():
            for item in items:
                with contextlib.suppress(BusError):
                    await item.nak()
        self._inflight.clear()
        if self._queue is not None:
            await self._queue.close()
            self._queue = None

    async def settle(self, turn_id: str) -> None:
        for item in self._inflight.pop(turn_id, []):
            try:
                await item.ack()
            except BusError as exc:
                log.warning("ack of turn %s failed: %s", turn_id, exc)
        self.settled += 1
        self._room.set()

    async def requeue(self, turn_id: str) -> None:
        for item in self._inflight.pop(turn_id, []):
            with contextlib.suppress(BusError):
                await item.nak()
        self._room.set()

    def running(self) -> list[str]:
        return list(self._inflight)

    async def _pull(self, take: Take) -> None:
        assert self._queue is not None
        while True:
            if self.max_active - len(self._inflight) <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                item = await self._queue.pull(timeout=1.0)
            except BusError as exc:
                log.warning("turn queue fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            if item is None:
                continue
            try:
                deferred = await self._take(item, take)
            except Exception:
                log.exception("could not take a turn request; it will be redelivered")
                continue
            if deferred:
                # Stay off the queue a little longer than the request: a waiting fetch of
                # the owner gets it, instead of this node fetching it back at once.
                await asyncio.sleep(DEFER_S * (1.5 + random.random()))

    async def _take(self, item: QueueItem, take: Take) -> bool:
        try:
            request = messages.decode(item.data)
        except DecodeError as exc:
            await self._dead_letter(item, exc.reason)
            return False
        if not isinstance(request, TurnRequest):
            await self._dead_letter(item, f"expected turn.request, got {request.kind}")
            return False
        tid = request.turn_id
        if tid in self._inflight:  # a redelivery of a turn this node already runs
            self._inflight[tid].append(item)
            await item.in_progress()
            return False
        self._inflight[tid] = [item]
        try:
            taken = await take(request)
        except BaseException:
            self._inflight.pop(tid, None)
            with contextlib.suppress(BusError):
                await item.nak()
            raise
        if not taken:
            self._inflight.pop(tid, None)
            self.deferred += 1
            log.debug("turn %s deferred: its conversation is leased elsewhere", tid)
            await item.nak(delay=DEFER_S)
            return True
        self.taken += 1
        return False

    async def _heartbeat(self) -> None:
        period = max(self.ack_wait_s / 3.0, 0.05)
        while True:
            await asyncio.sleep(period)
            for items in list(self._inflight.values()):
                for item in items:
                    with contextlib.suppress(BusError):
                        await item.in_progress()

    async def _dead_letter(self, item: QueueItem, reason: str) -> None:
        log.warning("undecodable turn request (%d bytes): %s", len(item.data), reason)
        letter = DeadLetter(
            subject=item.subject,
            reason=reason,
            raw=bytes(item.data[:65536]),
            raw_size=len(item.data),
        )
        with contextlib.suppress(BusError):
            await self.bus.publish(self.bus.subjects.deadletter, letter)
        with contextlib.suppress(BusError):
            await item.term()
