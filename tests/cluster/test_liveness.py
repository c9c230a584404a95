"""Dead owners are found by their beat: a killed node's conversations move within the node
TTL, a live node's never do, and a node that was only stalled loses its lease cleanly."""

from __future__ import annotations

import pytest

from actline.actors.ownership import leases as leases_module
from actline.actors.ownership.leases import KvLeases
from actline.bus import Bus, EmbeddedNats, KvBucket, KvEntry
from tests.waiting import until


async def leases(url: str, node: str) -> tuple[Bus, KvLeases]:
    bus = await Bus.connect(url)
    lease = KvLeases(bus, node, node_ttl_s=1.0)
    await lease.start()
    return bus, lease


async def test_a_dead_node_s_lease_is_taken_over_and_a_live_one_s_is_not(
    fresh_nats: EmbeddedNats,
) -> None:
    bus_a, a = await leases(fresh_nats.url, "a")
    bus_b, b = await leases(fresh_nats.url, "b")
    try:
        assert await a.acquire("c1")
        # b asks again and again while a beats ten times (2.5 node TTLs): its lease holds
        assert a._beat_revision is not None
        beats = a._beat_revision + 10

        async def a_beat_on() -> bool:
            assert not await b.acquire("c1")
            return a._beat_revision is not None and a._beat_revision >= beats

        await until(a_beat_on, 10)
        assert b.taken_over == 0
        # a dies as a SIGKILL leaves it: no release, no goodbye, its beat just stops
        assert a._beating is not None
        a._beating.cancel()
        await bus_a.close()
        await until(lambda: b.acquire("c1"), 10)  # the dead node's lease is taken over
        assert b.taken_over == 1
        assert await b.owner("c1") == "b"
    finally:
        await b.stop()
        await bus_b.close()


async def test_a_stalled_node_finds_the_leases_taken_meanwhile_when_it_beats_again(
    fresh_nats: EmbeddedNats,
) -> None:
    bus_a, a = await leases(fresh_nats.url, "a")
    bus_b, b = await leases(fresh_nats.url, "b")
    try:
        assert await a.acquire("c1") and await a.acquire("c2")
        assert await a.recheck() == []  # nothing lapsed: no check at all
        assert a._beating is not None
        a._beating.cancel()  # a stalls: its beat stops but its connection stays
        await until(lambda: b.acquire("c1"), 10)
        assert b.taken_over == 1
        await a._beat()  # a wakes up: its key was gone, its leases may be lost
        assert a.lapsed
        assert await a.recheck() == ["c1"]  # the revision moved: a drops the conversation
        assert a.held == {"c2"} and not a.lapsed
        assert await b.renew("c1") and await a.owner("c2") == "a"
    finally:
        for lease, bus in ((a, bus_a), (b, bus_b)):
            await lease.stop()
            await bus.close()


async def test_a_node_whose_own_beats_just_came_back_does_not_count_another_dead(
    fresh_nats: EmbeddedNats,
) -> None:
    """While NATS fails over every node's beats fail and their keys age out together: a
    missing key proves its node dead only once the judge's own beats have gone through
    for a whole node TTL (the owner, alive, would have beaten again by then)."""
    bus_a, a = await leases(fresh_nats.url, "a")
    bus_b, b = await leases(fresh_nats.url, "b")
    try:
        assert await a.acquire("c1")
        assert a._beating is not None and a._nodes is not None
        a._beating.cancel()  # a's beat stops, as in a failover ...
        await a._nodes.delete(bus_a.subjects.kv_key("a"))  # ... and its key aged out
        b._beats_ok_since = None  # b's beats failed too, and come back with its next one
        await until(lambda: b._beats_ok_since is not None, 5)
        assert not await b.acquire("c1") and b.taken_over == 0  # too soon to judge a
        await until(lambda: b.acquire("c1"), 5)  # a node TTL of b's beats: a is dead
        assert b.taken_over == 1
    finally:
        await bus_a.close()
        await bus_b.close()


async def test_checking_many_leases_after_a_lapse_keeps_a_bounded_number_in_flight(
    fresh_nats: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After its beat lapsed a node holding many leases (parked turns) checks them a few at
    a time, not in one burst that starves its other requests; none was taken, none lost."""
    monkeypatch.setattr(leases_module, "RENEW_CONCURRENCY", 8)
    bus, lease = await leases(fresh_nats.url, "many")
    try:
        cids = [f"c{i}" for i in range(300)]
        for cid in cids:
            assert await lease.acquire(cid)
        before = dict(lease._revisions)
        in_flight, most = 0, 0
        renew = lease._renew

        async def counted(cid: str) -> bool:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            try:
                return await renew(cid)
            finally:
                in_flight -= 1

        monkeypatch.setattr(lease, "_renew", counted)
        assert lease._nodes is not None
        await lease._nodes.delete(bus.subjects.kv_key("many"))  # its key went away
        await lease._beat()
        assert lease.lapsed
        assert await lease.recheck() == []
        assert most == 8
        assert lease.held == set(cids)
        assert all(lease._revisions[c] > before[c] for c in cids)  # each one checked
        assert lease.last_pass_s > 0
    finally:
        await lease.stop()
        await bus.close()


async def test_a_lease_released_while_the_leases_are_checked_is_not_counted_lost(
    fresh_nats: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A conversation evicted (its lease released) during a check after a lapse is not
    reported lost: the node would log it as lapsed and drop it."""
    monkeypatch.setattr(leases_module, "RENEW_CONCURRENCY", 1)
    bus, lease = await leases(fresh_nats.url, "evicting")
    try:
        for cid in ("c0", "c1", "c2"):
            assert await lease.acquire(cid)
        renew = lease._renew

        async def evict_c2_meanwhile(cid: str) -> bool:
            if cid == "c0":
                await lease.release("c2")
            return await renew(cid)

        monkeypatch.setattr(lease, "_renew", evict_c2_meanwhile)
        assert lease._nodes is not None
        await lease._nodes.delete(bus.subjects.kv_key("evicting"))
        await lease._beat()
        assert lease.lapsed
        assert await lease.recheck() == []
        assert lease.held == {"c0", "c1"}
        assert await lease.owner("c2") is None
    finally:
        await lease.stop()
        await bus.close()


@pytest.mark.parametrize("meanwhile", ["aged_out", "rewritten"])
async def test_a_restarted_node_claims_the_key_its_killed_process_left_whatever_it_does_meanwhile(
    fresh_nats: EmbeddedNats, monkeypatch: pytest.MonkeyPatch, meanwhile: str
) -> None:
    """Node ``a`` restarts (same id) while the key of its killed process still stands: its
    first beat finds the key, reads it and writes over it at that revision. Between the read
    and the write the old key may age out, or change: the claim reads again and goes on,
    where it used to stop the node from starting (``WrongRevision``)."""
    bus_old, old = await leases(fresh_nats.url, "a")
    assert old._beating is not None and old._nodes is not None
    old._beating.cancel()  # killed: no goodbye, its key stays until the node TTL
    nodes, key = old._nodes, bus_old.subjects.kv_key("a")
    get = KvBucket.get
    struck: list[str] = []

    async def get_then_strike(self: KvBucket, name: str) -> KvEntry | None:
        entry = await get(self, name)
        if name == key and not struck:  # once, just after the read
            struck.append(meanwhile)
            if meanwhile == "aged_out":
                await nodes.delete(key)
            else:
                await nodes.put(key, b"another write")
        return entry

    monkeypatch.setattr(KvBucket, "get", get_then_strike)
    bus_new, new = await leases(fresh_nats.url, "a")
    try:
        assert struck == [meanwhile]
        entry = await get(nodes, key)
        assert entry is not None and entry.revision == new._beat_revision  # its own write
        assert await new.acquire("c1")
    finally:
        await new.stop()
        await bus_new.close()
        await bus_old.close()
