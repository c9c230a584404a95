"""Idle eviction in cluster mode against a turn that comes for the same conversation while
it is being let go: the turn waits for the release, then claims the conversation anew and
runs holding its lease. Real nats-server, JetStream leases and the node's own eviction loop;
the release is wrapped so that the turn arrives in the middle of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actline.actors.client.client import Client
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus, EmbeddedNats
from tests.waiting import until

from .harness import start

QUESTION = "What are the limits?"


async def test_a_turn_that_comes_while_its_conversation_is_let_go_runs_holding_the_lease(
    fresh_nats: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await start(fresh_nats.url, tmp_path, "n1", idle_evict_s=0.05)
    bus = await Bus.connect(fresh_nats.url)
    client = Client(bus)
    ownership = node.ownership
    assert isinstance(ownership, ClusterOwnership)
    claim, release, settled = ownership.claim, ownership.release, ownership.settled
    claimed = asyncio.Event()
    second: list[asyncio.Task[object]] = []
    at_settle: list[tuple[bool, str | None]] = []

    async def claim_spy(cid: str) -> bool:
        won = await claim(cid)
        claimed.set()
        return won

    def waiting(cid: str) -> bool:
        holds = getattr(node, "_holds", None)  # a node without them never waits
        return holds is not None and holds.waiting(cid) > 0

    async def release_spy(cid: str) -> None:
        if not second:  # the first eviction of c1: a turn for it arrives meanwhile
            second.append(asyncio.create_task(client.ask(QUESTION, conversation_id=cid)))
            # before: the turn renewed the lease this release then deleted; now it waits
            await until(lambda: claimed.is_set() or waiting(cid), timeout=30)
        await release(cid)

    requeued: list[str] = []
    requeue = node.queue.requeue

    async def requeue_spy(turn_id: str) -> None:
        requeued.append(turn_id)
        await requeue(turn_id)

    async def settled_spy(cid: str) -> None:
        await settled(cid)
        at_settle.append((cid in ownership.leases.held, await ownership.leases.owner(cid)))

    try:
        first = await client.ask(QUESTION, conversation_id="c1", timeout=60)
        assert first.status == "completed"
        claimed.clear()
        monkeypatch.setattr(ownership, "claim", claim_spy)
        monkeypatch.setattr(ownership, "release", release_spy)
        monkeypatch.setattr(ownership, "settled", settled_spy)
        monkeypatch.setattr(node.queue, "requeue", requeue_spy)
        await until(lambda: bool(second), timeout=30)  # the node's eviction loop let c1 go
        again = await asyncio.wait_for(second[0], 60)
        assert getattr(again, "status", None) == "completed"
        assert getattr(again, "answer", None) == first.answer
        assert at_settle == [(True, "n1")]  # the turn ended holding the lease
        assert requeued == []  # and ran once: it was never lost to a conflict on the head
    finally:
        await client.close()
        await bus.close()
        await node.stop()
        await node.bus.close()
