"""A turn pulled by a node that does not hold its conversation goes to the node that does
(``turn.handoff`` on ``<prefix>.node.<id>.turns``), without a trip back through the queue;
a handoff that cannot be honoured is refused with its reason, and the turn still runs.

Two in-process cluster-mode nodes on a real nats-server, the extractive model. Compared with
the same conversations on one single-mode node: same answers, same order, each turn once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actline.actors import Node
from actline.actors.client.client import Client
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus, EmbeddedCluster, EmbeddedNats
from actline.messages import (
    ErrorReply,
    ReActResult,
    Subjects,
    TurnHandoff,
    TurnRequest,
    new_id,
)

from .harness import start

pytestmark = pytest.mark.timeout(180)

QUESTIONS = ("How do backups work?", "What are the quotas?", "How do the pricing tiers differ?")
CONVERSATIONS = 7
"""Odd: the shared consumer hands requests to the two nodes' pulls in turn, and with an even
number of conversations run in step every later turn would reach its holder by chance."""


async def _serve(url: str, nodes: list[Node], subjects: Subjects) -> dict[str, list[ReActResult]]:
    """Every conversation's three turns, one after another, conversations at once."""
    bus = await Bus.connect(url, subject_names=subjects)
    client = Client(bus)

    async def conversation(c: int) -> list[ReActResult]:
        out: list[ReActResult] = []
        for t in range(3):
            handle = await client.submit(
                QUESTIONS[(c + t) % 3], conversation_id=f"c{c}", turn_id=f"c{c}-t{t}"
            )
            out.append(await handle.wait(60))
        return out

    try:
        results = await asyncio.gather(*(conversation(c) for c in range(CONVERSATIONS)))
    finally:
        await client.close()
        await bus.close()
    return {f"c{c}": got for c, got in enumerate(results)}


def _answers(results: dict[str, list[ReActResult]]) -> dict[str, list[tuple[str, str, str]]]:
    return {cid: [(r.turn_id, r.status, r.answer) for r in got] for cid, got in results.items()}


async def test_turns_pulled_by_the_other_node_are_handed_to_the_node_holding_the_conversation(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    reference_subjects = Subjects(f"ho{new_id().lower()}")
    single = await start(
        nats_server.url, tmp_path / "single", "s", subject_names=reference_subjects, cluster=False
    )
    try:
        reference = await _serve(nats_server.url, [single], reference_subjects)
    finally:
        await single.stop()
        await single.bus.close()

    subjects = Subjects(f"ho{new_id().lower()}")
    a = await start(nats_server.url, tmp_path, "a", subject_names=subjects)
    b = await start(nats_server.url, tmp_path, "b", subject_names=subjects)
    try:
        results = await _serve(nats_server.url, [a, b], subjects)
        queues = (a.queue, b.queue)
        assert _answers(results) == _answers(reference)  # same answers, same order, once
        assert all(r.status == "completed" for got in results.values() for r in got)
        # each later turn pulled by the node without the conversation went to its holder
        counts = [(q.taken, q.deferred, q.ordered, q.handed_off, q.received) for q in queues]
        assert sum(q.handed_off for q in queues) > 0, counts
        assert a.queue.handed_off == b.queue.received and b.queue.handed_off == a.queue.received
        assert sum(q.taken for q in queues) == 3 * CONVERSATIONS
        for node in (a, b):
            assert isinstance(node.ownership, ClusterOwnership)
            assert node.ownership.leases.taken_over == 0
    finally:
        for node in (a, b):
            await node.stop()
            await node.bus.close()


async def test_on_three_replicated_servers_the_holder_takes_the_turns_passed_to_it(
    nats_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    subjects = Subjects(f"ho{new_id().lower()}")
    a = await start(nats_cluster.url, tmp_path, "a", subject_names=subjects)
    b = await start(nats_cluster.url, tmp_path, "b", subject_names=subjects)
    try:
        results = await _serve(nats_cluster.url, [a, b], subjects)
        assert all(r.status == "completed" for got in results.values() for r in got)
        assert [[r.turn_id for r in got] for got in results.values()] == [
            [f"c{c}-t{t}" for t in range(3)] for c in range(CONVERSATIONS)
        ]
        assert sum(q.handed_off for q in (a.queue, b.queue)) > 0
        assert a.queue.handed_off == b.queue.received and b.queue.handed_off == a.queue.received
        assert a.queue.taken + b.queue.taken == 3 * CONVERSATIONS
    finally:
        for node in (a, b):
            await node.stop()
            await node.bus.close()


async def test_a_handoff_that_cannot_be_honoured_is_refused_and_the_turn_still_runs(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    subjects = Subjects(f"ho{new_id().lower()}")
    a = await start(nats_server.url, tmp_path, "a", subject_names=subjects)
    b = await start(nats_server.url, tmp_path, "b", subject_names=subjects)
    bus = await Bus.connect(nats_server.url, subject_names=subjects)
    client = Client(bus)
    try:
        first = await client.submit("How do backups work?", conversation_id="held")
        assert (await first.wait(60)).status == "completed"
        holder, other = (a, b) if "held" in a.conversations else (b, a)
        request = TurnRequest(conversation_id="held", turn_id="t-passed", text="And quotas?")
        ack = f"$JS.ACK.{subjects.turn_stream}.{subjects.turn_consumer}.1.1.1.0.0"

        def handoff(ack_subject: str) -> TurnHandoff:
            return TurnHandoff(request=request, ack_subject=ack_subject, from_node="x")

        # not an ack subject, or a delivery of another stream: refused before anything
        for wrong in ("al.result.t-1", "$JS.ACK.AL_TASKS.agent_x.1.5.5.0.0"):
            refused = await bus.request(
                subjects.node_turns(holder.node_id), handoff(wrong), raise_remote=False
            )
            assert isinstance(refused, ErrorReply) and refused.code == "bad_handoff"
        # the node that does not hold the conversation takes nothing (the sender hands back)
        refused = await bus.request(
            subjects.node_turns(other.node_id), handoff(ack), raise_remote=False
        )
        assert isinstance(refused, ErrorReply) and refused.code == "not_taken"
        assert "held" not in other.conversations and other.queue.received == 0
        # a message of another kind on the subject is answered with what was expected
        wrong_kind = await bus.request(
            subjects.node_turns(holder.node_id), request, raise_remote=False
        )
        assert isinstance(wrong_kind, ErrorReply) and wrong_kind.code == "unexpected_message"
        # a real second turn completes wherever it was pulled
        second = await client.submit("What are the quotas?", conversation_id="held")
        assert (await second.wait(60)).status == "completed"
        assert "held" in holder.conversations
    finally:
        await client.close()
        await bus.close()
        for node in (a, b):
            await node.stop()
            await node.bus.close()
