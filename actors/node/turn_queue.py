"""The node's side of the durable turn queue.

All nodes share one work-queue stream capturing ``al.turn.submit`` and one durable
pull consumer (``bus.WorkQueue``). A node pulls one request at a time while it has
room (``max_active_turns``), keeps each message *in progress* while its turn runs (a
heartbeat every ``ack_wait / 4``), acks it once the result is published (``settle``)
and hands it back at once when the conversation was lost to another node (``requeue``).
An undecodable request becomes a dead letter and is terminated (never redelivered).

Handoffs (cluster mode): a request pulled here for a conversation another live node holds
(or held back behind an earlier turn running there) is passed to that node as a
``turn.handoff`` on ``<prefix>.node.<node>.turns``, with its delivery's ack subject; the
holder adopts the delivery (``WorkQueue.adopt``) and settles it from then on
(``receive``), so the request does not go back through the queue. The holder refuses it,
with its reason, when it is full, no longer holds the conversation or an earlier turn is
unfinished elsewhere; the request is then handed back for ``DEFER_S``, as when no holder
could be named.

Parking (``actline.actors.services.parking``): a turn waiting on outside input (its state
machine in the waiting phase) is ``park``ed by its DecisionActor: it holds no slot, and its
message stays with this node, unacked, marked in progress by the same heartbeat (up to
``PARKED_BEATS_PER_S`` beats a second; past that, parked messages are handed back with a
delayed nak and parked again when they come back, recognised by their stream sequence).
``unpark`` (a DONE, skip, timeout, approval or cancel moved the turn) counts the same
delivery again at once, even past the limit. A request taken while a turn of its
conversation is parked here is parked too, until its own turn starts. After a crash a
parked turn comes back after ``ack_wait``, as a running one does.

A redelivered request deferred by its lease (cluster mode: a turn of a conversation whose
owner died and still holds the lease, or one its owner parked past its beats, which it
holds and needs no fetch of) is handed back for ``DEFER_S`` per delivery so far, at most
``ack_wait``, and the pull loop does not pause after it: such turns do not throttle the
other nodes' pulls.

Order: a conversation's turns run in the order they were submitted, once,
whatever crashes. The queue is the record of unfinished turns: a message leaves the
stream only when its turn's result is stored and published. So before a request is
handed to its conversation, the node looks at the unsettled messages stored before
it (from the stream's first sequence up to the request's own): when one of them is a
turn of the same conversation that does not run (or wait) on this node, the request
is deferred, and it is taken only once that earlier turn has settled or runs here.
Requests read for that check are remembered by sequence (a settled one never comes
back), so the check costs nothing while this node took every request before it, and
otherwise one stream-info request plus a read of each message it has not seen yet. An
earlier turn running here is fine: the conversation actor runs its turns in arrival
order.

Crashes: a node that dies leaves its messages unacked: after ``ack_wait`` (2 s by
default) they are redelivered (to the restarted node or another), and each turn
resumes from its own persisted rounds, before any later turn of its conversation.

Self-healing: a stream or consumer deleted under a running node is recreated (with
a warning) on the next failed pull, or within ``CHECK_EVERY_S`` when pulls go quiet.

Cancellation: ``stop`` cancels the pull loop and the heartbeat and naks what is in
flight; the handler passed to ``start`` runs in the pull loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from actline import messages
from actline.actors.services.parking import ParkedTurns, kept_for
from actline.bus import Bus, BusError, QueueItem, WorkQueue
from actline.bus.healing import HealingQueue, dead_letter
from actline.messages import Ack, DecodeError, ErrorReply, Message, TurnHandoff, TurnRequest

log = logging.getLogger(__name__)

DEFER_S = 0.2
"""How long a deferred request (leased elsewhere, or behind an earlier turn) stays out."""
RETAKE_S = 1.0
"""A request whose take failed (e.g. NATS away) comes back after this; the loop pauses."""

HANDOFF_TIMEOUT_S = 2.0
"""How long a node waits for the node holding a conversation to take a turn passed to it."""

Take = Callable[[TurnRequest], Awaitable[str | None]]
"""Hands a request to its conversation: None when taken; else the node holding the
conversation (empty when it cannot be named), and the request is not taken."""
Locate = Callable[[str], Awaitable[str | None]]
"""The live node other than this one holding a conversation (None: no such node)."""


@dataclass(frozen=True, slots=True)
class Admission:
    """What became of a delivery: ``taken`` here (run, joined, parked or dead-lettered), or
    not, because an earlier turn of its conversation is unfinished elsewhere (``ordered``)
    or another node holds the conversation; ``elsewhere`` names the node to pass it to."""

    taken: bool
    request: TurnRequest | None = None
    elsewhere: str | None = None
    ordered: bool = False

    @property
    def turn_id(self) -> str:
        return self.request.turn_id if self.request is not None else ""


class TurnQueue:
    """Pulls turn requests for one node and settles them (the ``Settler`` of its turns)."""

    def __init__(
        self,
        bus: Bus,
        *,
        ack_wait_s: float,
        max_active: int,
        park_s: float = 10.0,
        node_id: str = "",
    ) -> None:
        self.bus = bus
        self.node_id = node_id
        self.locate: Locate | None = None
        """Finds the node holding a conversation (cluster mode); None: no other node does."""
        self.ack_wait_s = ack_wait_s
        self.max_active = max_active
        self._source = HealingQueue(
            f"turn queue {bus.subjects.turn_stream}", self._open, conditions=bus.conditions
        )
        self._inflight: dict[str, list[QueueItem]] = {}
        """The deliveries of each turn that holds a slot here (taken, not parked)."""
        self.parked = ParkedTurns(park_s, kept_for(self.beat_s))
        """Turns waiting on outside input: no slot (``actline.actors.services.parking``)."""
        self._room = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._seen: dict[str, dict[int, str]] = {}
        """Requests read and not known settled: conversation id -> stream sequence -> turn."""
        self._seen_upto = 0
        """Every sequence below this one was read (those not in ``_seen`` are settled)."""
        self._conversation: dict[str, str] = {}
        """The conversation of each turn in flight (or parked) here."""
        self._checks = 0
        self.taken = 0
        self.settled = 0
        self.beats = 0
        """Heartbeats done (each marks every taken and every kept parked delivery)."""
        self.deferred = 0
        """Turn requests handed back because another node held the conversation's lease."""
        self.ordered = 0
        """Turn requests held back behind an unfinished earlier turn of their conversation."""
        self.handed_off = 0
        """Turn requests passed to the node holding their conversation, and taken there."""
        self.handoffs_refused = 0
        """Turn requests that node refused or did not answer (handed back to the queue)."""
        self.received = 0
        """Turn requests other nodes passed here and this node took."""

    @property
    def beat_s(self) -> float:
        """The heartbeat's period: a quarter of the ack wait."""
        return max(self.ack_wait_s / 4.0, 0.05)

    @property
    def active(self) -> int:
        """Turns holding a slot (parked ones do not)."""
        return len(self._inflight)

    @property
    def healed(self) -> int:
        """Times the stream or consumer was found missing and recreated."""
        return self._source.healed

    async def _open(self) -> WorkQueue:
        subjects = self.bus.subjects
        queue = await WorkQueue.open(
            self.bus,
            name=subjects.turn_stream,
            subject=subjects.turn_submit,
            consumer=subjects.turn_consumer,
            ack_wait_s=self.ack_wait_s,
            max_msg_size=messages.MAX_PAYLOAD,
        )
        if abs(queue.ack_wait_s - self.ack_wait_s) > 1e-3:
            log.warning(
                "the turn consumer %s keeps its ack wait of %.1f s (ACTLINE_ACK_WAIT is %.1f s): "
                "a killed node's turns resume after %.1f s; to change it, stop every node and "
                "delete the consumer (nats consumer rm %s %s)",
                subjects.turn_consumer,
                queue.ack_wait_s,
                self.ack_wait_s,
                queue.ack_wait_s,
                subjects.turn_stream,
                subjects.turn_consumer,
            )
            self.ack_wait_s = queue.ack_wait_s  # the heartbeat follows the consumer's
            self.parked.kept_max = kept_for(self.beat_s)
        return queue

    async def start(self, take: Take, locate: Locate | None = None) -> None:
        self.locate = locate
        await self._source.open()
        self._room.set()
        self._loops.append(asyncio.create_task(self._pull(take), name="queue:pull"))
        self._loops.append(asyncio.create_task(self._heartbeat(), name="queue:heartbeat"))

    async def stop(self) -> None:
        """Stop pulling; turns not finished are handed back to the queue (nak)."""
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._loops.clear()
        for items in [*self._inflight.values(), self.parked.clear()]:
            for item in items:
                with contextlib.suppress(BusError):
                    await item.nak()
        self._inflight.clear()
        self._conversation.clear()
        await self._source.close()

    async def settle(self, turn_id: str) -> None:
        cid = self._conversation.pop(turn_id, "")
        for item in self._deliveries(turn_id):
            self._forget(cid, item.stream_seq)
            try:
                await item.ack()
            except BusError as exc:
                log.warning("ack of turn %s failed: %s", turn_id, exc)
        self.settled += 1
        self._room.set()

    async def requeue(self, turn_id: str) -> None:
        self._conversation.pop(turn_id, None)
        for item in self._deliveries(turn_id):
            with contextlib.suppress(BusError):
                await item.nak()
        self._room.set()

    def _deliveries(self, turn_id: str) -> list[QueueItem]:
        """The turn's deliveries, taken out of the in-flight and parked sets."""
        items = self._inflight.pop(turn_id, [])
        parked = self.parked.pop(turn_id)
        return items if parked is None else [*items, parked]

    async def park(self, turn_id: str) -> None:
        """The turn waits on outside input: it gives its slot back; its message stays
        unacked, in progress (``actline.actors.services.parking``)."""
        items = self._inflight.pop(turn_id, None)
        if not items:
            return
        self._room.set()
        try:
            await self.parked.park(turn_id, self._conversation.get(turn_id, ""), items[-1])
        except BusError as exc:  # it comes back after the ack wait and is parked then
            log.warning("turn %s: parking its queue message failed: %s", turn_id, exc)

    async def unpark(self, turn_id: str) -> None:
        """The turn runs again: its delivery is marked in progress and holds a slot."""
        item = self.parked.pop(turn_id)
        if item is None:
            return
        self._inflight[turn_id] = [item]
        with contextlib.suppress(BusError):  # else redelivered, and joined
            await item.in_progress()

    def running(self) -> list[str]:
        """Every turn taken here and not settled, parked ones included."""
        return [*self._inflight, *self.parked.turns()]

    async def _pull(self, take: Take) -> None:
        healed = 0
        while True:
            if self.max_active - len(self._inflight) <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            item = await self._source.pull()
            if self._source.healed != healed:  # a new stream: its sequences start again
                healed = self._source.healed
                self._seen.clear()
                self._seen_upto = 0
            if item is None:
                continue
            try:
                deferred = await self._take(item, take)
            except BusError as exc:  # NATS away or electing: said once per outage
                if not self.bus.conditions.failed("turn queue", exc):
                    log.warning("could not take a turn request (%s); it comes back in %gs",
                                exc, RETAKE_S)  # fmt: skip
                with contextlib.suppress(BusError):
                    await item.nak(delay=RETAKE_S)
                await asyncio.sleep(RETAKE_S / 2)  # back off: the next one may fail alike
                continue
            except Exception:
                log.exception("could not take a turn request; it comes back in %gs", RETAKE_S)
                with contextlib.suppress(BusError):
                    await item.nak(delay=RETAKE_S)
                await asyncio.sleep(RETAKE_S / 2)  # back off: the next one may fail alike
                continue
            if deferred:
                # Stay off the queue a little longer than the request: a waiting fetch of
                # the owner gets it, instead of this node fetching it back at once.
                await asyncio.sleep(DEFER_S * (1.5 + random.random()))

    async def _take(self, item: QueueItem, take: Take) -> bool:
        """Admit a pulled request, hand it to the node holding its conversation, or hand it
        back to the queue; True when the pull loop should pause (a deferral)."""
        admission = await self._admit(item, take)
        if admission.taken:
            return False
        if admission.elsewhere and await self._hand_off(item, admission):
            return False
        if admission.ordered:
            await item.nak(delay=DEFER_S)
            return True
        log.debug("turn %s deferred: its conversation is leased elsewhere", admission.turn_id)
        if item.deliveries > 1:  # maybe parked by its owner, which needs no fetch of it
            await item.nak(delay=min(DEFER_S * item.deliveries, self.ack_wait_s))
            return False  # no pause: this node's pulls go on
        await item.nak(delay=DEFER_S)
        return True

    async def _admit(self, item: QueueItem, take: Take) -> Admission:
        """Take a delivery if this node may run its turn now. Not taken (the caller settles
        it): an earlier turn of its conversation is unfinished elsewhere (``ordered``), or
        another node holds the conversation (``elsewhere`` names it when it beats)."""
        if await self.parked.repark(item):
            return Admission(taken=True)
        try:
            request = messages.decode(item.data)
        except DecodeError as exc:
            await dead_letter(self.bus, item, exc.reason)
            return Admission(taken=True)
        if not isinstance(request, TurnRequest):
            await dead_letter(self.bus, item, f"expected turn.request, got {request.kind}")
            return Admission(taken=True)
        tid, cid = request.turn_id, request.conversation_id
        if tid in self._inflight:  # a redelivery of a turn this node already runs
            self._inflight[tid].append(item)
            await item.in_progress()
            return Admission(taken=True)
        self._note(item.stream_seq, cid, tid)
        earlier = await self._earlier(item.stream_seq, cid, tid)
        if earlier is not None:
            self.ordered += 1
            log.info(
                "turn %s waits: turn %s of conversation %s came before it and is unfinished",
                tid,
                earlier,
                cid,
            )
            holder = await self.locate(cid) if self.locate is not None else None
            return Admission(taken=False, request=request, elsewhere=holder, ordered=True)
        self._inflight[tid] = [item]
        self._conversation[tid] = cid
        try:
            holder = await take(request)
        except BaseException:
            self._inflight.pop(tid, None)
            self._conversation.pop(tid, None)
            raise
        if holder is not None:
            self._inflight.pop(tid, None)
            self._conversation.pop(tid, None)
            self.deferred += 1
            return Admission(taken=False, request=request, elsewhere=holder or None)
        self.taken += 1
        if self.parked.has_conversation(cid) and tid in self._inflight:
            await self.park(tid)  # behind a parked turn: it waits too, until it starts
        return Admission(taken=True)

    async def _hand_off(self, item: QueueItem, admission: Admission) -> bool:
        """Pass the delivery to the node holding its conversation (``turn.handoff``): True
        when that node took it and settles it from now on; False (the caller hands it back
        to the queue) when it refused or did not answer."""
        request, node = admission.request, admission.elsewhere
        assert request is not None and node
        handoff = TurnHandoff(
            request=request,
            ack_subject=item.ack_subject,
            from_node=self.node_id,
        )
        try:
            await self.bus.request(
                self.bus.subjects.node_turns(node), handoff, timeout=HANDOFF_TIMEOUT_S
            )
        except BusError as exc:
            self.handoffs_refused += 1
            log.debug("turn %s not taken by %s: %s", request.turn_id, node, exc)
            return False
        self.handed_off += 1
        return True

    async def receive(self, handoff: TurnHandoff, take: Take) -> Message:
        """A turn another node pulled and passes here (this node holds its conversation):
        taken (``ack``; this node settles the delivery from now on) or refused with the
        reason (``error.reply``; the sender hands it back to the queue, this node never
        touches it)."""
        request = handoff.request
        tid, cid = request.turn_id, request.conversation_id
        if not self._loops:
            return ErrorReply(code="not_serving", message=f"node {self.node_id} is stopping")
        room = len(self._inflight) < self.max_active
        if not room and not any(self._conversation.get(t) == cid for t in self._inflight):
            return ErrorReply(code="busy", message=f"{len(self._inflight)} turns run here")
        try:
            item = self._queue.adopt(handoff.ack_subject, messages.encode(request))
        except BusError as exc:
            return ErrorReply(code="bad_handoff", message=str(exc))
        try:
            admission = await self._admit(item, take)
        except Exception as exc:
            log.exception("could not take turn %s passed by %s", tid, handoff.from_node)
            return ErrorReply(code="take_failed", message=f"{type(exc).__name__}: {exc}")
        if not admission.taken:
            why = "an earlier turn is unfinished" if admission.ordered else "not held here"
            return ErrorReply(code="not_taken", message=f"turn {tid}: {why}")
        self.received += 1
        return Ack(ref=tid, detail=f"taken by {self.node_id}")

    def _note(self, seq: int, cid: str, tid: str) -> None:
        self._seen.setdefault(cid, {})[seq] = tid

    def _forget(self, cid: str, seq: int) -> None:
        seqs = self._seen.get(cid)
        if seqs is not None:
            seqs.pop(seq, None)
            if not seqs:
                del self._seen[cid]

    def _prune(self, first: int) -> None:
        """Drop what was read below the stream's first sequence (all of it settled)."""
        for cid, seqs in list(self._seen.items()):
            for at in [at for at in seqs if at < first]:
                del seqs[at]
            if not seqs:
                del self._seen[cid]

    @property
    def _queue(self) -> WorkQueue:
        assert self._source.queue is not None
        return self._source.queue

    async def _earlier(self, seq: int, cid: str, tid: str) -> str | None:
        """The turn id of an unsettled request of ``cid`` stored before ``seq`` that does
        not run here (None: nothing holds this request back).

        Requests below ``_seen_upto`` were read already; those still in ``_seen`` may be
        unsettled. Only a gap (sequences another node or an earlier run of this one
        took) costs requests: the stream's first sequence, then a read of each."""
        if self._seen_upto < seq:
            first = await self._queue.first_seq()
            self._checks += 1
            if self._checks % 100 == 0:
                self._prune(first)
            for at in range(max(first, self._seen_upto), seq):
                got = await self._queue.get(at)
                if got is None:
                    continue
                try:
                    other = messages.decode(got[1])
                except DecodeError:
                    continue  # a dead letter on its way out
                if isinstance(other, TurnRequest):
                    self._note(at, other.conversation_id, other.turn_id)
        self._seen_upto = max(self._seen_upto, seq + 1)
        seqs = self._seen.get(cid, {})
        for at in sorted(seqs):
            other_tid = seqs[at]
            if at >= seq:
                break
            if other_tid == tid or other_tid in self._inflight or other_tid in self.parked:
                continue
            if await self._queue.get(at) is None:  # settled since it was read
                del seqs[at]
                continue
            return other_tid
        return None

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.beat_s)
            beating = [item for items in self._inflight.values() for item in items]
            for item in [*beating, *self.parked.kept()]:
                with contextlib.suppress(BusError):
                    await item.in_progress()
            self.beats += 1
