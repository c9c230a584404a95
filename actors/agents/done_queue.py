"""DONE signals from a durable stream: none is lost while no node runs.

A work-queue stream (``Subjects.done_stream``) captures every agent's own DONE subject
``al.agent.<name>.done`` and the shared ``al.agent.done`` (accepted only with
authentication off): an outside agent's DONE is stored the moment it is published
(``Client.send_done`` waits for the stream's acknowledgement, retrying with backoff), and
every node pulls from one durable consumer. A node hands each signal, with the subject it
came on, to ``route`` (the node's DONE routing):

- a verdict (``Ack`` applied, or an ``ErrorReply`` such as ``no_outstanding_task``)
  settles the signal: it is acked and the verdict sent to the sender's reply inbox,
  named in the ``Actline-Reply`` header (a sender that is gone misses nothing: the
  signal was applied or refused for good). The header is the sender's word: a value
  that is not a reply inbox (``messages.subjects.reply_inbox``) gets no verdict, so
  no agent can aim the node's permissions at a key, a result or another's subject;
- ``Later`` hands it back for a moment: its turn is resuming on this node after a
  crash, or (cluster mode) another node may hold its task. The sender hears once that
  the signal is stored and waits. A signal nobody takes within ``horizon_s`` (from when
  it was stored, or this node started if later) gets its verdict; a ``Later`` may hold
  it longer (``hold_s``: a turn known to resume here whose parked message was handed
  back with a delay, past the node's beats, and comes back only when that delay runs
  out, ``actline.actors.services.parking``).

An undecodable payload is a dead letter and is terminated. A signal being routed is
kept *in progress*; a node that dies mid-way leaves it to be redelivered.

Cancellation: ``stop`` cancels the pull loop and the signals being routed; those are
redelivered after the consumer's ack wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from actline import messages
from actline.actors.client.agent import REPLY_HEADER, STORED
from actline.bus import Bus, BusError, QueueItem, WorkQueue
from actline.bus.healing import HealingQueue, dead_letter
from actline.messages import Ack, DecodeError, DoneSignal, ErrorReply, SubjectError, subjects

log = logging.getLogger(__name__)

ACK_WAIT_S = 10.0
"""The DONE consumer's ack wait (a signal being routed is marked every third of it)."""
CONCURRENCY = 16
"""DONE signals one node routes at once."""


@dataclass(frozen=True, slots=True)
class Later:
    """Not yet: hand the signal back for ``delay_s`` seconds (``reason`` says why)."""

    reason: str
    delay_s: float = 1.0
    hold_s: float = 0.0
    """Hold the signal this long past being stored (or this node starting), when longer
    than the queue's horizon."""


Route = Callable[[DoneSignal, float, str], Awaitable[messages.Message | Later]]
"""Routes one signal (its age in seconds since it was stored, the subject it came on) to
its turn."""


class DoneQueue:
    """Pulls DONE signals for one node and settles them."""

    def __init__(self, bus: Bus, *, horizon_s: float) -> None:
        self.bus = bus
        self.horizon_s = horizon_s
        self._source = HealingQueue(
            f"DONE stream {bus.subjects.done_stream}", self._open, conditions=bus.conditions
        )
        self._puller: asyncio.Task[None] | None = None
        self._handling: set[asyncio.Task[None]] = set()
        self._room = asyncio.Semaphore(CONCURRENCY)
        self._started_at = 0.0
        self.applied = 0
        self.refused = 0
        self.held = 0
        self.refused_replies = 0
        """Verdicts not sent because the reply header named no reply inbox."""

    async def _open(self) -> WorkQueue:
        subjects = self.bus.subjects
        return await WorkQueue.open(
            self.bus,
            name=subjects.done_stream,
            subject=(subjects.agent_done_any, subjects.agent_done),
            consumer=subjects.done_consumer,
            ack_wait_s=ACK_WAIT_S,
            max_msg_size=messages.MAX_PAYLOAD,
        )

    async def start(self, route: Route) -> None:
        self._started_at = time.time()
        await self._source.open()
        self._puller = asyncio.create_task(self._pull(route), name="dones:pull")

    async def stop(self) -> None:
        jobs: list[asyncio.Task[None]] = []
        if self._puller is not None:
            jobs.append(self._puller)
        jobs.extend(self._handling)
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        self._puller = None
        self._handling.clear()
        await self._source.close()

    @property
    def healed(self) -> int:
        """Times the stream or consumer was found missing and recreated."""
        return self._source.healed

    async def _pull(self, route: Route) -> None:
        while True:
            await self._room.acquire()
            item = await self._source.pull()
            if item is None:
                self._room.release()
                continue
            job = asyncio.create_task(self._handle(item, route), name="dones:route")
            self._handling.add(job)
            job.add_done_callback(self._finished)

    def _finished(self, job: asyncio.Task[None]) -> None:
        self._handling.discard(job)
        self._room.release()
        if not job.cancelled() and job.exception() is not None:
            log.error("routing a DONE failed", exc_info=job.exception())

    async def _handle(self, item: QueueItem, route: Route) -> None:
        reply = item.headers.get(REPLY_HEADER, "")
        try:
            signal = messages.decode(item.data)
        except DecodeError as exc:
            await dead_letter(self.bus, item, exc.reason)
            await self._reply(reply, ErrorReply(code="decode_error", message=exc.reason))
            return
        if not isinstance(signal, DoneSignal):
            reason = f"expected agent.done, got {signal.kind}"
            await dead_letter(self.bus, item, reason)
            await self._reply(reply, ErrorReply(code="unexpected_message", message=reason))
            return
        # Its age counts from when it was stored or this node started, whichever is later:
        # a DONE sent while no node ran gets the whole horizon once one is back.
        age = max(0.0, time.time() - max(item.stored_at, self._started_at))
        beat = asyncio.create_task(self._beat(item), name="dones:beat")
        try:
            outcome = await route(signal, age, item.subject)
        except Exception as exc:
            log.exception("DONE %s of %s could not be routed", signal.signal_id, signal.agent)
            outcome = Later(f"{type(exc).__name__}: {exc}", 1.0)
        finally:
            beat.cancel()
            await asyncio.gather(beat, return_exceptions=True)
        if isinstance(outcome, Later) and age >= max(self.horizon_s, outcome.hold_s):
            outcome = ErrorReply(
                code="no_outstanding_task",
                message=f"no node took this DONE of {signal.agent} within "
                f"{self.horizon_s:.0f} s ({outcome.reason}); nothing was applied",
            )
        if isinstance(outcome, Later):
            self.held += 1
            log.info("DONE %s of %s held: %s", signal.signal_id, signal.agent, outcome.reason)
            if item.deliveries == 1:
                await self._reply(
                    reply,
                    Ack(
                        ref=signal.task_id or signal.turn_id or signal.agent,
                        detail=f"{STORED} it is applied when its turn runs ({outcome.reason})",
                    ),
                )
            with contextlib.suppress(BusError):
                await item.nak(delay=outcome.delay_s)
            return
        if isinstance(outcome, ErrorReply):
            self.refused += 1
        else:
            self.applied += 1
        with contextlib.suppress(BusError):
            await item.ack()
        await self._reply(reply, outcome)

    async def _beat(self, item: QueueItem) -> None:
        while True:
            await asyncio.sleep(ACK_WAIT_S / 3)
            with contextlib.suppress(BusError):
                await item.in_progress()

    async def _reply(self, inbox: str, verdict: messages.Message) -> None:
        if not inbox:
            return
        try:
            subjects.reply_inbox(inbox)
        except SubjectError as exc:  # the header is the sender's word: never a subject
            self.refused_replies += 1
            log.warning("DONE verdict not sent: %s", exc)
            return
        try:
            await self.bus.publish(inbox, verdict)
        except BusError as exc:
            log.warning("could not send a DONE verdict to %s: %s", inbox, exc)
