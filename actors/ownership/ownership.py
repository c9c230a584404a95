"""Where a conversation lives: the one seam between local mode and cluster mode.

A node chooses its ``Ownership`` once, when it starts (``ACTLINE_CLUSTER``):

- ``LocalOwnership``: this node is the only one; every conversation is its own, its
  LMDB is the only copy, every input is answered here.
- ``ClusterOwnership``: several nodes share the turn queue. A node leases a
  conversation in JetStream KV before running its turn (``claim``; another node's
  turn is handed back for a moment), brings its LMDB to the durable copy before
  loading a conversation (``prepare``), copies committed rounds to JetStream under a
  check-and-set on the conversation's head (a lost race raises ``ConversationLost`` and
  the turn goes back to the queue), checks its leases when its own beat lapsed
  (``KvLeases.recheck``) and answers only the inputs of conversations it owns.

Copy points. A committed round is kept (``committed``) and copied with the others not yet
copied, merged into one append and one head update, when the turn does something outside
the node or ends (``settled``: before an external tool call, an agent's task, entering the
wait, the result) and at the latest ``copy_every_s`` after the first round kept (0: each
round as it commits). A turn of five model rounds so costs one replicated append and one
head update instead of five of each; what a node that dies mid-turn had not copied is run
again by the node that takes the turn over, from the last copy, and nothing the dead node
did outside it is lost, since every such act waited for its copy. A copy that fails (NATS
away, or a stream electing a new leader while a NATS server fails over) is kept and sent
again, merged with any later round, until it is copied.

Nothing outside this module asks which mode runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

from actline import messages
from actline.actors.errors import ConversationLost, HeadConflict
from actline.bus import Bus, BusError
from actline.messages import ErrorReply
from actline.storage import Store
from actline.storage.rounds import PersistedRound
from actline.timeline import Block
from actline.tools.react.memsearch import index_rows

from .durable import JetStreamCopy, adopt, merge_rounds
from .leases import KvLeases

log = logging.getLogger(__name__)

RECOPY_S = (0.25, 2.0)
"""First and longest wait between two tries of a copy that failed (doubling)."""
NOT_MINE = frozenset({"unknown_task", "unknown_turn", "no_outstanding_task"})
"""DONE verdicts a node keeps to itself in cluster mode (another node may run the turn)."""
COPY = "the durable copy"
"""The durable copy's name in the connection's outage log (``actline.bus.conditions``)."""


class Ownership(Protocol):
    """How a node holds conversations (see the module docstring)."""

    @property
    def input_queue(self) -> str | None:
        """The queue group of the feedback subscription (None: every node hears it)."""
        ...

    @property
    def renew_every_s(self) -> float:
        """How often ``renew`` runs."""
        ...

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def claim(self, cid: str) -> str | None:
        """None when this node may run ``cid``'s turns now; else the node that holds ``cid``
        (empty when it cannot be named)."""
        ...

    async def holder(self, cid: str) -> str | None:
        """The live node other than this one that holds ``cid`` now, if any (a read: this
        node claims nothing)."""
        ...

    async def prepare(self, cid: str, store: Store) -> None:
        """Bring ``store`` to the newest copy of ``cid`` before it is loaded."""
        ...

    async def committed(self, cid: str, persisted: PersistedRound) -> None:
        """A round of ``cid`` was committed to ``store`` (raises ``ConversationLost``)."""
        ...

    async def settled(self, cid: str) -> None:
        """Return once every committed round of ``cid`` is as durable as the mode makes it:
        a copy point, before a turn does anything outside the node (an external tool call,
        an agent's task, the wait, its result). Raises ``ConversationLost``."""
        ...

    async def release(self, cid: str) -> None:
        """This node dropped ``cid`` (evicted or lost)."""
        ...

    async def renew(self) -> list[str]:
        """Keep what this node holds; returns the conversations it lost."""
        ...

    async def accepts(self, cid: str, msg: messages.Message, *, loaded: bool) -> bool:
        """Whether this node answers a followup or feedback for ``cid``."""
        ...

    def quiet(self, verdict: messages.Message) -> bool:
        """Whether a DONE verdict is kept to this node (another may run the turn)."""
        ...


async def renewal_ticks(ownership: Ownership) -> AsyncIterator[None]:
    """Every ``renew_every_s``, at a fixed rate: a long ``renew`` pass does not stretch the
    period."""
    due = time.monotonic()
    while True:
        due = max(due + ownership.renew_every_s, time.monotonic())
        await asyncio.sleep(due - time.monotonic())  # the schedule, not a wait on an event
        yield


class LocalOwnership:
    """One node: every conversation is this node's."""

    input_queue: str | None = "feedback"
    renew_every_s = 60.0

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def claim(self, cid: str) -> str | None:
        return None

    async def holder(self, cid: str) -> str | None:
        return None

    async def prepare(self, cid: str, store: Store) -> None:
        return None

    async def committed(self, cid: str, persisted: PersistedRound) -> None:
        return None

    async def settled(self, cid: str) -> None:
        return None  # the synced LMDB commit is the only copy

    async def release(self, cid: str) -> None:
        return None

    async def renew(self) -> list[str]:
        return []

    async def accepts(self, cid: str, msg: messages.Message, *, loaded: bool) -> bool:
        return True

    def quiet(self, verdict: messages.Message) -> bool:
        return False


class ClusterOwnership:
    """Leases in JetStream KV and the durable copy of every conversation in JetStream."""

    input_queue: str | None = None

    def __init__(
        self, bus: Bus, node_id: str, *, node_ttl_s: float = 2.0, copy_every_s: float = 0.0
    ) -> None:
        self.node_id = node_id
        self.copy_every_s = copy_every_s
        self.copies = 0
        """Appends to the durable copy (each holds one round or several merged)."""
        self.leases = KvLeases(bus, node_id, node_ttl_s=node_ttl_s)
        self.durable = JetStreamCopy(bus, writer=node_id)
        self._heads: dict[str, int | None] = {}
        """The KV revision of each conversation's durable head as this node last wrote it."""
        self._unpublished: dict[str, list[PersistedRound]] = {}
        """Rounds committed here but not yet in the durable copy (NATS was away)."""
        self._copying: dict[str, asyncio.Lock] = {}
        """One copy of a conversation's rounds at a time (a retry and a new round)."""
        self._recopies: dict[str, asyncio.Task[None]] = {}

    @property
    def unpublished(self) -> int:
        """Rounds committed here that the durable copy does not hold yet."""
        return sum(len(rounds) for rounds in self._unpublished.values())

    @property
    def renew_every_s(self) -> float:
        return max(self.leases.node_ttl_s / 2.0, 0.05)  # a lapsed beat found within it

    async def start(self) -> None:
        await self.leases.start()
        await self.durable.start()

    async def stop(self) -> None:
        """A graceful stop copies what is not copied yet and hands every conversation on
        at once."""
        for task in self._recopies.values():
            task.cancel()
        await asyncio.gather(*self._recopies.values(), return_exceptions=True)
        self._recopies.clear()
        for cid in sorted(self._unpublished):
            try:
                await self._copy(cid)
            except ConversationLost as exc:
                log.warning("conversation %s lost before its last rounds were copied: %s", cid, exc)
        for cid in sorted(self.leases.held):
            try:
                await self.leases.release(cid)
            except BusError as exc:
                log.warning("lease of %s not released: %s", cid, exc)
        await self.leases.stop()

    async def claim(self, cid: str) -> str | None:
        return await self.leases.claim(cid)

    async def holder(self, cid: str) -> str | None:
        owner = await self.leases.owner(cid)
        if not owner or owner == self.node_id or not await self.leases.alive(owner):
            return None
        return owner

    async def prepare(self, cid: str, store: Store) -> None:
        """Fast path: the head was written by this node at the length stored here.
        Otherwise the rounds are read from JetStream and adopted (appended, or the local
        copy replaced). A conversation stored here but never copied is published whole."""
        durable = self.durable
        head = await durable.head(cid)
        _, stored = await asyncio.to_thread(store.cursor, cid)
        if head is None:
            if not stored:
                self._heads[cid] = None
                return
            blocks, header, rows, records = await asyncio.to_thread(_whole, store, cid)
            self._heads[cid] = await durable.publish_round(
                cid, blocks, [], header, expect=None, records=records, rows=rows
            )
            return
        header, revision = head
        if header.get("writer") == self.node_id and int(header.get("stored_seq", -1)) == stored:
            self._heads[cid] = revision
            return
        copy = await durable.read(cid)
        if copy is None:
            self._heads[cid] = None
            return
        await asyncio.to_thread(adopt, store, cid, copy, index=index_rows)
        log.info("conversation %s taken over from the durable copy (head %d)", cid, revision)
        self._heads[cid] = copy.kv_revision

    async def committed(self, cid: str, persisted: PersistedRound) -> None:
        self._unpublished.setdefault(cid, []).append(persisted)
        if self.copy_every_s > 0:
            self._recopy_later(cid, first_wait=self.copy_every_s)
        elif not await self._copy(cid):
            self._recopy_later(cid)

    async def settled(self, cid: str) -> None:
        """Copy what is still pending, trying again (waiting longer each time) until it is
        copied. A turn's result goes out only then: a result whose last rounds live only in
        this node's LMDB would be lost to the node that takes the conversation over (its
        beat stalled for a node TTL while NATS failed over, say), which would see the turn
        still running and answer the next one without it. A lost race raises
        ``ConversationLost``: the turn goes back to the queue and its new owner runs it."""
        wait = RECOPY_S[0]
        while not await self._copy(cid):
            await asyncio.sleep(wait)  # NATS is away or electing: no event says it is back
            wait = min(wait * 2, RECOPY_S[1])

    async def _copy(self, cid: str) -> bool:
        """Copy the rounds of ``cid`` not copied yet, merged; False when NATS refused (they
        stay, for the next try). Raises ``ConversationLost`` when another node wrote."""
        async with self._copying.setdefault(cid, asyncio.Lock()):
            pending = self._unpublished.get(cid)
            if not pending:
                return True
            copied = len(pending)  # rounds committed while this copy is on its way stay
            try:
                self._heads[cid] = await self.durable.publish_persisted(
                    cid, merge_rounds(pending[:copied]), expect=self._heads.get(cid)
                )
            except HeadConflict as exc:
                raise ConversationLost(cid, str(exc)) from None
            except (BusError, TimeoutError) as exc:  # kept: tried again, merged with later ones
                if not self.leases.bus.conditions.failed(COPY, exc):  # else logged once
                    log.warning("round of %s not copied to JetStream yet: %s", cid, exc)
                return False
            del pending[:copied]
            self.copies += 1
            self.leases.bus.conditions.succeeded(COPY)
            return True

    def _recopy_later(self, cid: str, *, first_wait: float = RECOPY_S[0]) -> None:
        running = self._recopies.get(cid)
        if running is None or running.done():
            self._recopies[cid] = asyncio.create_task(
                self._recopy(cid, first_wait), name=f"recopy:{cid}"
            )

    async def _recopy(self, cid: str, first_wait: float) -> None:
        """Copy what ``cid`` keeps after ``first_wait``, then again, waiting longer each time,
        until it goes through (a copy point may send it first) or the conversation is
        dropped here."""
        wait = first_wait
        while self._unpublished.get(cid):
            await asyncio.sleep(wait)  # the copy deadline, or NATS away: no event to wait on
            wait = min(max(wait, RECOPY_S[0]) * 2, RECOPY_S[1])
            try:
                if await self._copy(cid):
                    log.debug("rounds of %s copied to JetStream", cid)
                    return
            except ConversationLost as exc:  # the lease renewal finds it lost and drops it
                log.warning("rounds of %s not copied: %s", cid, exc)
                return

    def _forget(self, cid: str) -> None:
        self._heads.pop(cid, None)
        self._unpublished.pop(cid, None)
        self._copying.pop(cid, None)
        task = self._recopies.pop(cid, None)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self.durable.forget(cid)

    async def release(self, cid: str) -> None:
        if self._unpublished.get(cid):  # what the next owner adopts must hold them
            try:
                await self._copy(cid)
            except ConversationLost as exc:
                log.warning("rounds of %s not copied at release: %s", cid, exc)
        self._forget(cid)
        await self.leases.release(cid)

    async def renew(self) -> list[str]:
        lost = await self.leases.recheck()
        for cid in lost:
            self._forget(cid)
        return lost

    async def accepts(self, cid: str, msg: messages.Message, *, loaded: bool) -> bool:
        """Every node hears followups and feedback; the conversation's owner answers."""
        if isinstance(msg, messages.Followup):
            return loaded
        return await self.leases.acquire(cid)

    def quiet(self, verdict: messages.Message) -> bool:
        return isinstance(verdict, ErrorReply) and verdict.code in NOT_MINE


def _whole(
    store: Store, cid: str
) -> tuple[list[Block], dict[str, Any], Mapping[str, Any], dict[str, dict[str, Any]]]:
    """Everything stored of ``cid``: blocks, header, header rows and turn records (to
    publish whole: a turn left running here resumes from its checkpoint elsewhere)."""
    blocks: Sequence[Block] = [Block.from_dict(b) for b in store.iter_blocks(cid)]
    header = dict(store.header(cid) or {})
    return list(blocks), header, store.header_rows(cid), store.turn_records(cid)
