"""Parked turns in cluster mode (``actline.actors.services.parking``) on a real nats-server.

Two in-process cluster-mode nodes of one slot each: three turns wait on the outside agent
``reviewer``; a new turn still completes; the parked messages stay in progress on their
owner (over an ack wait, none comes back, so the other node never sees one); each turn
completes once after its DONE, with the agent's summary in its answer.

Two cluster-mode node processes: the turns parked on the first are resumed by the second
once the first is killed (its beats stop, so the messages come back after the ack wait,
and its lease lapses with its node key): nothing was naked before the kill, and the park
delay is the longest there is, longer than the test waits.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from actline.actors import Node
from actline.actors.client.client import Client, TurnHandle
from actline.actors.ownership.ownership import ClusterOwnership
from actline.actors.services.parking import PARK_MAX_S
from actline.bus import Bus, EmbeddedNats
from actline.messages import Ack, TurnAccepted
from tests.actors.node.queue_watch import naks
from tests.actors.nodeprocs import NodeOptions, NodeProcess
from tests.waiting import until

from .harness import start

QUESTION = "Check the retention settings and ask reviewer to review them"
TIMEOUT = 30.0


TIMEOUT_KILLED = 90.0
"""How long the killed node's turns may take to complete (far under the park delay)."""


def parked(nodes: list[Node]) -> int:
    return sum(len(n.queue.parked) for n in nodes)


async def test_parked_turns_on_two_cluster_nodes_leave_room_and_complete_after_their_done(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    nodes = [
        await start(fresh_nats.url, tmp_path, name, max_active_turns=1, ack_wait_s=2.0)
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
        beats = [n.queue.beats for n in nodes]
        await until(
            lambda: all(n.queue.beats >= b + 6 for n, b in zip(nodes, beats, strict=True)), 30
        )
        # over an ack wait: every parked message stayed in progress on its owner
        assert sum(len(n.queue.parked.kept()) for n in nodes) == 3
        assert sum(n.queue.parked.reparked + n.queue.parked.handed_back for n in nodes) == 0
        assert sum(n.turns_deferred for n in nodes) == 0  # no other node saw one
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


def accepted_by(handle: TurnHandle, node_id: str) -> bool:
    return any(isinstance(e, TurnAccepted) and e.node == node_id for e in handle.events)


async def test_turns_parked_on_a_killed_cluster_node_resume_on_the_other_and_take_their_done(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    env = (("ACTLINE_PARK", str(PARK_MAX_S)),)
    first, second = (
        NodeProcess(
            nats_server.url,
            bus.subjects.prefix,
            tmp_path / name,
            tmp_path / "logs",
            NodeOptions(0.0, env=env),
            node_id=name,
            cluster=True,
        )
        for name in ("n1", "n2")
    )
    client = Client(bus)
    try:
        async with naks(nats_server, bus) as naked:
            await first.start()
            handles = []
            for i in range(3):  # all on n1, the only node yet
                handle = await client.submit(QUESTION, conversation_id=f"c-parked-{i}")
                await handle.wait_for("waiting", detail="reviewer", timeout=TIMEOUT)
                handles.append(handle)
            await second.start()
            plain = await client.submit("What are the retention settings?", conversation_id="c-x")
            assert (await plain.wait(TIMEOUT)).status == "completed"
            before_kill = list(naked)
            await first.kill()

            for handle in handles:  # resumed on n2: n1's beats and node key are gone
                await until(lambda h=handle: accepted_by(h, "n2"), TIMEOUT_KILLED)
            for i, handle in enumerate(handles):
                reply = await client.send_done("reviewer", f"fine {i}", turn_id=handle.turn_id)
                assert isinstance(reply, Ack), reply
            results = [await h.wait(TIMEOUT) for h in handles]
    finally:
        await client.close()
        await asyncio.gather(first.stop(), second.stop())
    assert before_kill == []  # parked in progress on n1, none handed back with a delay
    for i, result in enumerate(results):
        assert result.status == "completed", result.error
        assert f"reviewer reviewed this: fine {i}" in result.answer, result.answer
    assert all(accepted_by(h, "n1") for h in handles)
