"""Which node works on which conversation: leases in a JetStream KV bucket.

One key per conversation in the bucket ``Subjects.leases_bucket`` (no TTL, history 1),
naming the node that holds it. ``acquire`` is a create; ``renew`` is an update with
``last=<our revision>`` (it proves the lease is still ours); ``release`` deletes with
``last=``.

A lease lasts as long as its node beats: every node keeps a key alive in the nodes bucket
(``Subjects.nodes_bucket``, TTL ``node_ttl_s``, a beat every quarter of it), and a lease
whose owner's key is gone is taken over at once (an update with ``last=`` its revision).
So a killed node's conversations move within ``node_ttl_s`` (2 s), and a living node keeps
its leases without renewing them: holding 10,000 conversations (turns parked while they
wait on outside agents) costs no KV traffic. (Leases with a TTL of their own, renewed every
third of it, cost one KV update per conversation per 5 s: at 10,000 held, renewal passes
took 6-8 s on this machine, halved the node's turn rate and let leases lapse.)

A node whose own key went away (a stall or an outage longer than the node TTL: its beat
finds its key gone or a gap that long since the last beat that went through) may have lost
any lease to a node that judged it dead; its next ``recheck`` renews every held lease and
returns those another node took (a lease is lost when its revision moved: the taker may
have written the conversation). The durable copy's check-and-set on the conversation's
head fences a stale owner's writes meanwhile (``actline.actors.ownership.durable``).

A key never ages out: a conversation whose node died keeps its key until another node
takes it (one small key per conversation so left). A bucket made with a TTL by an older
version loses it at ``start`` (logged).

Cancellation: every method is one or two KV requests; cancelling one propagates.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

from actline.actors.errors import NodeNotStarted
from actline.bus import Bus, BusError, KeyExists, KvBucket, WrongRevision
from actline.storage.layout import pack, unpack

log = logging.getLogger(__name__)

BEAT = "the node beat"
"""The beat's name in the connection's outage log (``actline.bus.conditions``)."""

RENEW_CONCURRENCY = 64
"""Lease renewals in flight at once during a ``recheck``."""
CLAIM_ATTEMPTS = 5
"""Reads and writes tried to claim this node's key when a killed process of its id left one."""


class KvLeases:
    """Which node works on which conversation, in a KV bucket whose keys last while their
    node beats.

    ``held`` are the conversations this node holds (as far as it knows: a lease found
    lost is dropped from it). Call ``recheck`` often (every half node TTL): it does
    nothing unless this node's beat lapsed. ``replicas``: of both buckets (None: the
    bus's, ``replicas_for``).
    """

    def __init__(
        self,
        bus: Bus,
        node_id: str,
        *,
        node_ttl_s: float = 2.0,
        replicas: int | None = None,
    ) -> None:
        self.bus = bus
        self.replicas = replicas
        self.node_id = node_id
        self.node_ttl_s = node_ttl_s
        self.bucket = bus.subjects.leases_bucket
        self._kv: KvBucket | None = None
        self._nodes: KvBucket | None = None
        self._beat_revision: int | None = None
        self._beating: asyncio.Task[None] | None = None
        self._beats_ok_since: float | None = None
        """Since when (monotonic) this node's beats go through without a failure: None
        while they fail (the nodes bucket unreachable, or without a leader while NATS
        fails over)."""
        self._last_beat = 0.0
        """When (monotonic) a beat last went through."""
        self.lapsed = False
        """This node's key went away since the last ``recheck``: other nodes may have
        counted it dead and taken its leases."""
        self.taken_over = 0
        """Leases taken from nodes found dead (their beat gone)."""
        self._revisions: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        """One operation at a time per conversation (a release racing a renewal)."""
        self.last_pass_s = 0.0
        """Seconds the last ``recheck`` that renewed leases took."""
        self._writer = secrets.token_hex(8)
        """This process's mark on its writes (a restart under the same node id has another)."""

    def _lock(self, cid: str) -> asyncio.Lock:
        return self._locks.setdefault(cid, asyncio.Lock())

    @property
    def held(self) -> set[str]:
        """The conversations whose lease this node holds (a copy)."""
        return set(self._revisions)

    def _bucket(self) -> KvBucket:
        if self._kv is None:
            raise NodeNotStarted("the lease bucket (KvLeases.start())")
        return self._kv

    def _value(self) -> bytes:
        return pack({"node": self.node_id, "writer": self._writer, "ts": time.time()})

    async def start(self) -> None:
        """Create or bind both buckets (a lease bucket with a TTL loses it) and beat."""
        self._kv = await KvBucket.open(
            self.bus, name=self.bucket, ttl_s=None, history=1, replicas=self.replicas
        )
        if self._kv.ttl_s:
            await self._kv.drop_ttl()
        self._kv.on_healed.append(lambda: self._lapse("the lease bucket was made again"))
        self._nodes = await KvBucket.open(
            self.bus,
            name=self.bus.subjects.nodes_bucket,
            ttl_s=self.node_ttl_s,
            history=1,
            replicas=self.replicas,
        )
        self.node_ttl_s = self._nodes.ttl_s or self.node_ttl_s
        await self._beat()
        self._beating = asyncio.create_task(self._beat_forever(), name="leases:beat")

    async def stop(self) -> None:
        """Stop the beat and remove this node's key (its leases are released apart)."""
        beating = self._beating
        while beating is not None and not beating.done():
            # cancelled again until it ends: on Python 3.11 a ``wait_for`` whose beat
            # finished at the moment it was cancelled swallows the cancellation
            beating.cancel()
            await asyncio.wait({beating}, timeout=self.node_ttl_s / 4)
        if beating is not None and not beating.cancelled() and beating.exception() is not None:
            log.warning("the beat of %s had ended: %s", self.node_id, beating.exception())
        self._beating = None
        if self._nodes is not None and self._beat_revision is not None:
            try:
                await self._nodes.delete(self.bus.subjects.kv_key(self.node_id))
            except BusError as exc:
                log.info("node key of %s not removed: %s", self.node_id, exc)
            self._beat_revision = None

    async def _beat(self) -> None:
        nodes = self._nodes
        assert nodes is not None
        key = self.bus.subjects.kv_key(self.node_id)
        gone = False
        if self._beat_revision is not None:
            try:
                self._beat_revision = await nodes.update(
                    key, self._value(), last=self._beat_revision
                )
                self._beat_went_through()
                return
            except WrongRevision:  # aged out (a stall longer than the TTL) or rewritten
                entry = await nodes.leader_get(key)
                raw = unpack(entry.value or b"\xc0") if entry is not None else None
                if (
                    entry is not None
                    and isinstance(raw, dict)
                    and raw.get("writer") == self._writer
                ):
                    # a beat given up on went through after all: the key never went away
                    self._beat_revision = int(entry.revision or 0)
                    self._beat_went_through()
                    return
                gone = True
        self._beat_revision = await self._claim_key(nodes, key)
        if gone:  # noted once the key is back: the leases can be checked then, not before
            self._lapse("its key was gone")
        self._beat_went_through()

    async def _claim_key(self, nodes: KvBucket, key: str) -> int:
        """This node's key written afresh. A key left by this node id's last process (killed)
        is taken over at its revision; one that ages out or changes meanwhile is tried again."""
        for _ in range(CLAIM_ATTEMPTS - 1):
            try:
                return await nodes.create(key, self._value())
            except KeyExists:
                entry = await nodes.get(key)
            if entry is None:
                continue  # it aged out between the two reads: create it
            try:
                return await nodes.update(key, self._value(), last=int(entry.revision or 0))
            except WrongRevision:
                continue  # it changed (or aged out) between the two: read it again
        return await nodes.create(key, self._value())

    def _beat_went_through(self) -> None:
        now = time.monotonic()
        if self._last_beat and now - self._last_beat >= self.node_ttl_s:
            self._lapse(f"no beat went through for {now - self._last_beat:.1f}s")
        self._last_beat = now
        if self._beats_ok_since is None:
            self._beats_ok_since = now
        self.bus.conditions.succeeded(BEAT)

    def _lapse(self, why: str) -> None:
        if not self.lapsed and self._revisions:
            log.warning("node %s may have lost its leases (%s): checking them", self.node_id, why)
        self.lapsed = True

    async def _beat_forever(self) -> None:
        """A beat every quarter node TTL. One not answered within an eighth of it makes the
        connection ping its server: a server that does not answer as long (a frozen one)
        is left for another, and the beat goes through that one, well within the node TTL
        (else the other nodes would count this one dead and take its leases). A beat still
        unanswered after another quarter TTL (sent to a stream leader that is gone, while
        one is elected) is given up and tried again an eighth of the TTL later, so that
        this node beats again as soon as the other nodes can (a beat given up on that went
        through after all is recognised as this process's own write). Failures while
        JetStream is out are logged once per outage (``actline.bus.conditions``)."""
        ttl = self.node_ttl_s
        pause = ttl / 4
        self.bus.conditions.watch(f"KV_{self.bus.subjects.nodes_bucket}")  # asked about too
        while True:
            await asyncio.sleep(pause)
            pause = ttl / 4
            beat = asyncio.ensure_future(self._beat())
            try:
                done, _ = await asyncio.wait({beat}, timeout=ttl / 8)
                if not done and await self.bus.reconnect_if_stalled(ttl / 8):
                    beat.cancel()  # sent to the stalled server: it never answers
                    await asyncio.gather(beat, return_exceptions=True)
                    beat = asyncio.ensure_future(self._beat())
                await asyncio.wait_for(beat, ttl / 4)
            except (BusError, TimeoutError) as exc:
                pause = ttl / 8  # tried again soon: the other nodes judge by this key
                self._beats_ok_since = None
                if not self.bus.conditions.failed(BEAT, exc):
                    log.warning("node beat of %s failed: %s", self.node_id, exc)
            finally:
                beat.cancel()

    async def alive(self, node: str) -> bool:
        """Whether ``node`` beats (its key in the nodes bucket is there).

        A missing key proves a node dead only once this node's own beats have gone
        through for a whole node TTL: while NATS fails over (a stream leader elected
        anew, ~5 s) every node's beats fail and their keys age out together, and a
        living node beats again within a quarter TTL of the bucket coming back. It is
        confirmed by the bucket's leader (a direct get may be answered by a replica that
        lags), twice, a beat apart: a node whose beat came late (it was moving off a
        server that stopped answering) has written its key again by then."""
        if self._nodes is None:
            return True
        key = self.bus.subjects.kv_key(node)
        if await self._nodes.get(key) is not None:
            return True
        for attempt in range(2):
            since = self._beats_ok_since
            if since is None or time.monotonic() - since < self.node_ttl_s:
                return True
            if await self._nodes.leader_get(key) is not None:
                return True
            if attempt == 0:
                await asyncio.sleep(self.node_ttl_s / 4)
        return False

    async def _written_here(self, cid: str) -> int | None:
        """The revision of ``cid``'s lease when this process wrote it last, else None."""
        entry = await self._bucket().get(self.bus.subjects.kv_key(cid))
        raw = unpack(entry.value or b"\xc0") if entry is not None else None
        if isinstance(raw, dict) and raw.get("writer") == self._writer and entry is not None:
            return int(entry.revision or 0)
        return None

    async def _entry(self, cid: str) -> tuple[str, int] | None:
        """(owner, KV revision) of the live lease, or None."""
        entry = await self._bucket().get(self.bus.subjects.kv_key(cid))
        if entry is None:
            return None
        raw = unpack(entry.value or b"\xc0")
        owner = str(raw.get("node", "")) if isinstance(raw, dict) else ""
        return owner, int(entry.revision or 0)

    async def acquire(self, cid: str) -> bool:
        """Take the lease: True when this node holds it now, False when another node does.

        A lease this node already holds is renewed (False when it lapsed meanwhile:
        see ``renew``). A live key naming this node (a restart under the same node
        id) is taken over.
        """
        return await self.claim(cid) is None

    async def claim(self, cid: str) -> str | None:
        """``acquire``, saying who holds the lease when this node does not: None when this
        node holds it now, else the live node that does (empty when none could be named:
        this node's own lease lapsed, or the key kept changing). A lease held while this
        node's beats go through is not written again (no KV request)."""
        async with self._lock(cid):
            if cid in self._revisions:
                if not self.lapsed and self._beats_ok_since is not None:
                    return None  # held while this node beats: no other node may take it
                return None if await self._renew(cid) else ""
            return await self._acquire(cid)

    async def _acquire(self, cid: str) -> str | None:
        kv = self._bucket()
        key = self.bus.subjects.kv_key(cid)
        for _ in range(3):
            try:
                self._revisions[cid] = await kv.create(key, self._value())
                return None
            except KeyExists:
                current = await self._entry(cid)
            if current is None:
                continue  # expired or released between create and get
            owner, revision = current
            if owner != self.node_id and await self.alive(owner):
                return owner
            try:
                self._revisions[cid] = await kv.update(key, self._value(), last=revision)
            except WrongRevision:
                continue
            if owner != self.node_id:
                self.taken_over += 1
                log.warning("lease of %s taken over from %s: its node is gone", cid, owner)
            return None
        return ""

    async def owner(self, cid: str) -> str | None:
        """The node holding the lease on ``cid``, or None when nobody does."""
        current = await self._entry(cid)
        return None if current is None else current[0] or None

    async def renew(self, cid: str) -> bool:
        """Extend our lease; False when it lapsed (taken by another node or not).

        A lapsed lease is dropped from ``held``: the caller's in-memory state of the
        conversation may be stale, so it stops working on it (``acquire`` again and
        reload from the durable copy if it still wants it). Connection errors
        propagate and leave the lease held.
        """
        async with self._lock(cid):
            return await self._renew(cid)

    async def _renew(self, cid: str) -> bool:
        revision = self._revisions.get(cid)
        if revision is None:
            return False
        try:
            self._revisions[cid] = await self._bucket().update(
                self.bus.subjects.kv_key(cid), self._value(), last=revision
            )
        except WrongRevision:
            mine = await self._written_here(cid)
            if mine is not None:  # our own write whose answer was lost (a timeout while it
                self._revisions[cid] = mine  # went through): the lease is still ours
                return True
            self._revisions.pop(cid, None)
            log.info("lease on %s lost by %s", cid, self.node_id)
            return False
        return True

    async def release(self, cid: str) -> None:
        """Give the lease up (a delete with ``last=``, so a lease taken since is untouched)."""
        async with self._lock(cid):
            revision = self._revisions.pop(cid, None)
            if revision is not None:
                try:
                    await self._bucket().delete(self.bus.subjects.kv_key(cid), last=revision)
                except WrongRevision as exc:  # no longer ours
                    log.info("lease on %s was not ours any more at release: %s", cid, exc)
            self._locks.pop(cid, None)

    async def recheck(self) -> list[str]:
        """The conversations lost since this node's beat lapsed; ``[]`` at once when it did
        not (no KV traffic). After a lapse every held lease is renewed,
        ``RENEW_CONCURRENCY`` at a time (no burst that starves the node's other
        requests); one whose revision moved is lost and dropped from ``held``.

        A renewal that fails on the connection is logged, kept, and tried at the next
        call (the lapse stays marked).
        """
        if not self.lapsed:
            return []
        self.lapsed = False
        cids = sorted(self._revisions)
        lost: list[str] = []
        room = asyncio.Semaphore(RENEW_CONCURRENCY)
        started = time.monotonic()

        async def one(cid: str) -> None:
            async with room:
                if cid not in self._revisions:
                    return  # released since the list was taken: not lost
                try:
                    async with self._lock(cid):
                        if cid not in self._revisions:
                            return  # released since the list was taken: not lost
                        if not await self._renew(cid):
                            lost.append(cid)
                except (BusError, TimeoutError) as exc:
                    self.lapsed = True
                    if not self.bus.conditions.failed("lease check", exc):  # else said once
                        log.warning("lease check of %s failed: %s", cid, exc)

        async with asyncio.TaskGroup() as group:
            for cid in cids:
                group.create_task(one(cid))
        self.last_pass_s = time.monotonic() - started
        log.info("checked %d leases in %.1fs: %d lost", len(cids), self.last_pass_s, len(lost))
        return sorted(lost)
