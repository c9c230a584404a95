"""Conversations across nodes on a real nats-server: the KV leases that say which node holds
a conversation."""

from __future__ import annotations

from actline.actors.ownership.leases import KvLeases
from actline.bus import Bus, KvBucket
from tests.actors.ownership.copies import CID
from tests.waiting import until


async def leases(bus: Bus, node: str) -> KvLeases:
    held = KvLeases(bus, node)
    await held.start()
    return held


# --- leases ---------------------------------------------------------------------------------


async def test_one_node_holds_a_conversation_until_it_releases_it(bus: Bus, other_bus: Bus) -> None:
    a, b = await leases(bus, "node-a"), await leases(other_bus, "node-b")
    assert a.bucket == bus.subjects.leases_bucket
    assert await a.acquire(CID)
    assert await a.acquire(CID)  # already ours: renewed
    assert not await b.acquire(CID)
    assert await b.owner(CID) == "node-a"
    assert await a.renew(CID)
    assert a.held == {CID} and b.held == set()
    await a.release(CID)
    assert a.held == set() and await b.owner(CID) is None
    assert await b.acquire(CID)  # over the delete marker A left
    assert await a.owner(CID) == "node-b"
    assert not await a.renew(CID)
    await a.release(CID)  # not ours: a no-op that leaves B's lease alone
    assert await b.owner(CID) == "node-b"


async def test_a_lease_lasts_while_its_node_beats_with_no_renewal(bus: Bus, other_bus: Bus) -> None:
    """No KV traffic keeps a lease: it holds for as long as its node beats (here several
    node TTLs), however many conversations the node holds."""
    a, b = await leases(bus, "node-a"), await leases(other_bus, "node-b")
    assert await a.acquire(CID)
    revision = a._revisions[CID]
    assert a._beat_revision is not None
    beats = a._beat_revision + 3 * 4  # three node TTLs of beats

    async def a_beat_on() -> bool:
        assert not await b.acquire(CID)
        return a._beat_revision is not None and a._beat_revision >= beats

    await until(a_beat_on, 20)
    assert await a.recheck() == [] and not a.lapsed
    entry = await a._entry(CID)
    assert entry == ("node-a", revision)  # never rewritten meanwhile
    assert a.held == {CID} and await b.owner(CID) == "node-a"


async def test_a_renewal_whose_answer_was_lost_keeps_the_lease(bus: Bus, other_bus: Bus) -> None:
    """An update that went through while its caller timed out moved the revision: the next
    renewal finds this process's own write and keeps the lease (nobody took it)."""
    a, b = await leases(bus, "node-a"), await leases(other_bus, "node-b")
    assert await a.acquire(CID)
    key = bus.subjects.kv_key(CID)
    await a._bucket().update(key, a._value(), last=a._revisions[CID])  # answer "lost"
    assert await a.renew(CID) and a.held == {CID}
    assert not await b.acquire(CID)


async def test_a_restarted_node_takes_its_own_live_lease_back(bus: Bus) -> None:
    before = await leases(bus, "node-a")
    assert await before.acquire(CID)
    after = await leases(bus, "node-a")  # same node id, new process
    assert await after.acquire(CID)
    assert not await before.renew(CID)
    assert await after.renew(CID)


async def test_a_lease_bucket_made_with_a_ttl_by_an_older_version_loses_it(bus: Bus) -> None:
    older = await KvBucket.open(bus, name=bus.subjects.leases_bucket, ttl_s=4.0)
    assert older.ttl_s == 4.0
    a = await leases(bus, "node-a")
    assert a._kv is not None and a._kv.ttl_s is None
    assert await a._kv.status_ttl() is None  # the server's config, not only ours
    assert await a.acquire(CID)
