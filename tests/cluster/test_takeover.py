"""Two in-process nodes in cluster mode on a real nats-server: a node whose lease lapsed loses
the check-and-set on the conversation's head, hands its turn back, and the other node resumes
it from the durable copy without losing or duplicating a block."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actline.actors import Node
from actline.actors.client.client import Client
from actline.actors.ownership.durable import JetStreamCopy
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus, EmbeddedNats

from .harness import start


async def test_a_lost_check_and_set_hands_the_turn_to_the_new_owner(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    a = await start(fresh_nats.url, tmp_path, "a")
    client_bus = await Bus.connect(fresh_nats.url)
    client = Client(client_bus)
    b: Node | None = None
    try:
        handle = await client.submit(
            "Check the retention settings and ask reviewer to review them", conversation_id="c1"
        )
        waiting = await handle.wait_for("waiting", timeout=30)
        task_id = waiting.detail.split("task ")[-1].rstrip(")")
        assert "c1" in a.conversations
        # a's lease lapses while it waits (a stalled node); b takes the conversation and writes
        assert isinstance(a.ownership, ClusterOwnership)
        await a.ownership.leases._bucket().delete("c1")
        b = await start(fresh_nats.url, tmp_path, "b")
        assert isinstance(b.ownership, ClusterOwnership)
        assert await b.ownership.leases.acquire("c1")
        head = await b.ownership.durable.head("c1")
        assert head is not None
        header, revision = head
        await b.ownership.durable.publish_round("c1", [], [], header, expect=revision)
        # the DONE reaches a, whose next persist loses the check-and-set: the turn goes back
        first = await client.send_done(
            "reviewer", "looks right", task_id=task_id, turn_id=handle.turn_id
        )
        assert first.kind in ("ack", "error.reply")
        for _ in range(200):
            if "c1" not in a.conversations and "c1" in b.conversations:
                break
            await asyncio.sleep(0.05)
        assert "c1" not in a.conversations  # a dropped it
        await handle.wait_for("waiting", timeout=30)  # resumed on b, waiting again
        joined = await client.followup("c1", handle.turn_id, "also mention the backups")
        assert joined.kind == "ack"  # both nodes hear it; b, which runs the turn, answers
        feedback = await client.feedback("c1", handle.turn_id, 1, "useful")
        assert feedback.kind == "ack"
        again = await client.send_done("reviewer", "looks right", turn_id=handle.turn_id)
        assert again.kind == "ack"
        result = await handle.wait(30)
        assert result.status == "completed" and "looks right" in result.answer
        rebuilt = await b.ownership.durable.rebuild("c1")
        assert rebuilt is not None
        _, blocks = rebuilt
        ids = [blk["id"] for blk in blocks]
        assert len(ids) == len(set(ids))  # nothing duplicated
        assert [blk["seq"] for blk in blocks] == list(range(len(blocks)))  # nothing lost
        prompts = [blk for blk in blocks if blk["type"] == "user.prompt"]
        assert len(prompts) == 1
        local = list(b.store.iter_blocks("c1"))
        assert [blk["id"] for blk in local] == ids  # b's LMDB equals the durable copy
    finally:
        await client.close()
        await client_bus.close()
        if b is not None:
            await b.stop()
            await b.bus.close()
        await a.stop()
        await a.bus.close()


async def test_a_node_that_takes_back_the_turn_it_lost_keeps_the_lease(
    fresh_nats: EmbeddedNats, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node loses the check-and-set on a conversation it still leases (another writer
    moved the head) and hands its turn back; the turn comes back to the same node. The node
    let the conversation go before it requeued the turn, so the lease it takes again stays
    and the turn completes with the answer it gave before."""
    node = await start(fresh_nats.url, tmp_path, "n1")
    client_bus = await Bus.connect(fresh_nats.url)
    client = Client(client_bus)
    try:
        question = "What are the limits?"
        first = await client.ask(question, conversation_id="c1", timeout=60)
        assert first.status == "completed"
        ownership = node.ownership
        assert isinstance(ownership, ClusterOwnership)
        other = JetStreamCopy(client_bus, writer="n2")  # a writer whose lease had lapsed
        await other.start()
        head = await other.head("c1")
        assert head is not None
        header, revision = head
        await other.publish_round("c1", [], [], header, expect=revision)
        held_at_requeue: list[bool] = []
        requeue = node.queue.requeue

        async def spy(turn_id: str) -> None:
            held_at_requeue.append("c1" in ownership.leases.held)
            await requeue(turn_id)

        monkeypatch.setattr(node.queue, "requeue", spy)
        again = await client.ask(question, conversation_id="c1", timeout=60)
        assert again.status == "completed" and again.answer == first.answer
        assert held_at_requeue == [False]  # let go before the turn went back
        assert await ownership.leases.owner("c1") == "n1"
        assert "c1" in node.conversations
    finally:
        await client.close()
        await client_bus.close()
        await node.stop()
        await node.bus.close()
