"""Which node works on which conversation: leases in a JetStream KV bucket (DESIGN.md §6).

One key per conversation in the bucket ``Subjects.leases_bucket`` whose bucket-level
TTL is the lease TTL, history 1. ``acquire`` is a create; ``renew`` is an update with
``last=<our revision>``, which also restarts the key's age; ``release`` deletes with
``last=``. A dead owner's key ages out on its own. Observed with nats-server 2.15.1
here: a key goes 0.25-0.26 s after its TTL (ttl 0.5/1.5/3/6 s gave 0.76/1.76/3.26/6.26
s); no marker is left, so a plain create succeeds afterwards. A lease that lapsed is
lost even when nobody took it yet: ``renew`` then returns False, because another node
may have owned and written the conversation in between.

Dead owners are found fast: every node keeps a key alive in the nodes bucket
(``Subjects.nodes_bucket``, TTL ``node_ttl_s``, a beat every quarter of it). A lease
whose owner's key is gone is taken over at once (an update with ``last=`` its
revision), so a killed node's conversations move within ``node_ttl_s`` (2 s), not the
lease TTL. A node that was only stalled finds its lease's revision changed at its
next renewal and drops the conversation (the lapsed path above).

Cancellation: every method is one or two KV requests; cancelling one propagates.
"""

from __future__ import annotations

import asyncio
import logging
import time

from bus import Bus, BusError, KeyExists, KvBucket, WrongRevision
from storage.store import pack, unpack

from .errors import NodeNotStarted

log = logging.getLogger(__name__)

RENEW_CONCURRENCY = 64
"""Lease renewals in flight at once during ``renew_all``."""


class KvLeases:
    """Which node works on which conversation, in a KV bucket with a bucket-level TTL.

    ``held`` are the conversations this node holds (as far as it knows: a lease
    whose renewal fails is dropped from it). Renew every held lease well within
    ``ttl_s`` (``renew_all`` every ttl/3); the server removes a key about 0.25 s
    after its TTL. ``replicas``: of both buckets (None: the bus's, ``replicas_for``).
    """

    def __init__(
        self,
        bus: Bus,
        node_id: str,
        *,
        ttl_s: float = 15.0,
        node_ttl_s: float = 2.0,
        replicas: int | None = None,
    ) -> None:
        self.bus = bus
        self.replicas = replicas
        self.node_id = node_id
        self.ttl_s = ttl_s
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
        self.taken_over = 0
        """Leases taken from nodes found dead (their beat gone)."""
        self._revisions: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        """One operation at a time per conversation (a release racing a renewal)."""
        self.last_pass_s = 0.0
        """Seconds the last ``renew_all`` took."""

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
        return pack({"node": self.node_id, "ts": time.time()})

    async def start(self) -> None:
        """Create or bind the bucket; an existing bucket's TTL wins over ``ttl_s``."""
        self._kv = await KvBucket.open(
            self.bus, name=self.bucket, ttl_s=self.ttl_s, history=1, replicas=self.replicas
        )
        ttl = self._kv.ttl_s
        if ttl and abs(ttl - self.ttl_s) > 1e-3:
            log.warning("lease bucket %s has ttl %.3fs, not %.3fs", self.bucket, ttl, self.ttl_s)
            self.ttl_s = ttl
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
        if self._beating is not None:
            self._beating.cancel()
            await asyncio.gather(self._beating, return_exceptions=True)
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
        if self._beat_revision is not None:
            try:
                self._beat_revision = await nodes.update(
                    key, self._value(), last=self._beat_revision
                )
                self._beat_went_through()
                return
            except WrongRevision:
                pass  # aged out (a stall longer than the TTL) or rewritten: take it again
        try:
            self._beat_revision = await nodes.create(key, self._value())
        except KeyExists:
            entry = await nodes.get(key)
            last = int(entry.revision or 0) if entry is not None else 0
            self._beat_revision = await nodes.update(key, self._value(), last=last)
        self._beat_went_through()

    def _beat_went_through(self) -> None:
        if self._beats_ok_since is None:
            self._beats_ok_since = time.monotonic()

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.node_ttl_s / 4)
            try:
                await self._beat()
            except (BusError, TimeoutError) as exc:
                self._beats_ok_since = None
                log.warning("node beat of %s failed: %s", self.node_id, exc)

    async def alive(self, node: str) -> bool:
        """Whether ``node`` beats (its key in the nodes bucket is there).

        A missing key proves a node dead only once this node's own beats have gone
        through for a whole node TTL: while NATS fails over (a stream leader elected
        anew, ~5 s) every node's beats fail and their keys age out together, and a
        living node beats again within a quarter TTL of the bucket coming back."""
        if self._nodes is None:
            return True
        if await self._nodes.get(self.bus.subjects.kv_key(node)) is not None:
            return True
        since = self._beats_ok_since
        return since is None or time.monotonic() - since < self.node_ttl_s

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
        async with self._lock(cid):
            if cid in self._revisions:
                return await self._renew(cid)
            return await self._acquire(cid)

    async def _acquire(self, cid: str) -> bool:
        kv = self._bucket()
        key = self.bus.subjects.kv_key(cid)
        for _ in range(3):
            try:
                self._revisions[cid] = await kv.create(key, self._value())
                return True
            except KeyExists:
                current = await self._entry(cid)
            if current is None:
                continue  # expired or released between create and get
            owner, revision = current
            if owner != self.node_id and await self.alive(owner):
                return False
            try:
                self._revisions[cid] = await kv.update(key, self._value(), last=revision)
            except WrongRevision:
                continue
            if owner != self.node_id:
                self.taken_over += 1
                log.warning("lease of %s taken over from %s: its node is gone", cid, owner)
            return True
        return False

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

    async def renew_all(self) -> list[str]:
        """Renew every held lease, ``RENEW_CONCURRENCY`` at a time (thousands of held
        leases, e.g. of parked turns, make no burst that starves the node's other
        requests); returns the conversations lost.

        A renewal that fails on the connection is logged and kept (it is retried on
        the next call and lapses only if the outage outlasts the TTL). A pass that takes
        longer than a third of the TTL is logged: leases may lapse at that size.
        """
        cids = sorted(self._revisions)
        lost: list[str] = []
        room = asyncio.Semaphore(RENEW_CONCURRENCY)
        started = time.monotonic()

        async def one(cid: str) -> None:
            async with room:
                try:
                    if not await self.renew(cid):
                        lost.append(cid)
                except (BusError, TimeoutError) as exc:
                    log.warning("lease renewal of %s failed: %s", cid, exc)

        async with asyncio.TaskGroup() as group:
            for cid in cids:
                group.create_task(one(cid))
        self.last_pass_s = time.monotonic() - started
        if self.last_pass_s > self.ttl_s / 3:
            log.warning(
                "renewing %d leases took %.1fs, over a third of the lease TTL (%gs): raise "
                "ACTLINE_LEASE_TTL or spread the conversations over more nodes",
                len(cids),
                self.last_pass_s,
                self.ttl_s,
            )
        return sorted(lost)
