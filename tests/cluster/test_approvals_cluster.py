"""Approvals in cluster mode: every node hears ``al.approve.>``; only the
node that runs the turn answers, so the approval is applied whichever node took the turn,
and an approval for a turn no node runs gets no answer (``no_node``)."""

from __future__ import annotations

from pathlib import Path

from actline.actors import Node
from actline.actors.client.client import Client
from actline.bus import Bus, EmbeddedNats
from actline.messages import Ack, ErrorReply, new_id

from .harness import start


async def test_the_node_running_the_turn_answers_an_approval_and_the_others_stay_silent(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    nodes: list[Node] = [
        await start(fresh_nats.url, tmp_path, "a"),
        await start(fresh_nats.url, tmp_path, "b"),
    ]
    client_bus = await Bus.connect(fresh_nats.url)
    client = Client(client_bus)
    try:
        gated = {"approve_tools": ["react.search_knowledge"]}
        handle = await client.submit(
            "How do the pricing tiers differ?", conversation_id="c-ap", config=gated
        )
        await handle.wait_for("waiting", detail="approval", timeout=30)
        [runner] = [n for n in nodes if "c-ap" in n.conversations]
        verdict = await client.decide(handle.turn_id, True, by="alice")
        result = await handle.wait(30)
        nobody = await client.decide(f"t-{new_id()}", True, by="alice", timeout=1.0)
    finally:
        await client.close()
        await client_bus.close()
        for node in nodes:
            await node.stop()
            await node.bus.close()
    assert isinstance(verdict, Ack) and "approved by client alice" in verdict.detail, verdict
    assert runner.node_id in ("a", "b")
    assert result.status == "completed", result.error
    assert isinstance(nobody, ErrorReply) and nobody.code == "no_node", nobody
