"""Parked turns in cluster mode (``actline.actors.services.parking``): two in-process
cluster-mode nodes of one slot each on a real nats-server. Three turns wait on the outside agent
``reviewer``; a new turn still completes; the parked messages come back (a short park
delay) and are parked again by their owner or deferred by the other node (the lease);
each turn completes once after its DONE, with the agent's summary in its answer."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actline.actors import Node
from actline.actors.client.client import Client, TurnHandle
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus, EmbeddedNats
from actline.messages import Ack
from tests.waiting import until

from .harness import start

QUESTION = "Check the retention settings and ask reviewer to review them"
TIMEOUT = 30.0


def parked(nodes: list[Node]) -> int:
    return sum(len(n.queue.parked) for n in nodes)


async def test_parked_turns_on_two_cluster_nodes_leave_room_and_complete_after_their_done(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    nodes = [
        await start(fresh_nats.url, tmp_path, name, max_active_turns=1, park_s=0.3)
        for name in ("a", "b")
    ]
    client_bus = await Bus.connect(fresh_nats.url)
    client = Client(client_bus)
    try:
        handles: list[TurnHandle] = []
        for i in range(3):
            handle = await client.submit(QUESTION, conversation_id=f"c-park-{i}")
            await handle.wait_for("waiting", detail="reviewer", timeout=TIMEOUT)
            handles.append(handle)
        await until(lambda: parked(nodes) == 3 and all(n.queue.active == 0 for n in nodes), 30)
        plain = await client.submit("What are the retention settings?", conversation_id="c-new")
        assert (await plain.wait(TIMEOUT)).status == "completed"
        # the parked messages came back and were parked again (or deferred by the lease)
        await until(lambda: sum(n.queue.parked.reparked for n in nodes) >= 3, 30)
        for node in nodes:  # each waiting conversation keeps its lease on its owner
            assert isinstance(node.ownership, ClusterOwnership)
            owned = {c for c, conv in node.conversations.items() if conv.running_turn}
            assert owned <= node.ownership.leases.held

        for i, handle in enumerate(handles):
            reply = await client.send_done("reviewer", f"fine {i}", turn_id=handle.turn_id)
            assert isinstance(reply, Ack) and reply.detail == "applied", reply
        results = await asyncio.gather(*(h.wait(TIMEOUT) for h in handles))
        # a turn's result goes out before its queue message is acked: wait for the acks
        await until(lambda: sum(n.queue.settled for n in nodes) >= 4, TIMEOUT)
    finally:
        await client.close()
        await client_bus.close()
        for node in nodes:
            await node.stop()
            await node.bus.close()
    for i, result in enumerate(results):
        assert result.status == "completed", result.error
        assert f"reviewer reviewed this: fine {i}" in result.answer, result.answer
    assert client.counters["results_duplicate"] == 0
    assert sum(n.queue.settled for n in nodes) == 4  # each turn settled once
