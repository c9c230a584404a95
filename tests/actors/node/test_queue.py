"""The durable turn queue: in progress while a turn runs, shared by nodes, one taker per turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actline.actors.client.client import Client, NoTurnQueue
from actline.bus import Bus, EmbeddedNats
from actline.messages import Attachment, Subjects
from actline.storage import Store, Workspace
from actline.timeline.blocks import USER_ATTACHMENT_META
from tests.actors.harness import Scripted, run_turn, say, start_node


async def test_a_turn_longer_than_ack_wait_stays_with_the_node_that_took_it(
    bus: Bus, nats_server: EmbeddedNats, subject_names: Subjects, tmp_path: Path
) -> None:
    slow = [say("slow " * 40, answer="done")]
    models = [Scripted({"c1": slow}, delay=0.05, chunk_chars=4), Scripted({"c1": slow})]
    store = Store(tmp_path / "home")
    other = await Bus.connect(nats_server.url, subject_names=subject_names)
    nodes = []
    try:
        for i, (b, model) in enumerate(((bus, models[0]), (other, models[1]))):
            nodes.append(
                await start_node(b, tmp_path / "home", model, store=store, ack_wait_s=0.5,
                                 node_id=f"n{i}")
            )  # fmt: skip
        client = Client(bus)
        handle = await client.submit("take your time", conversation_id="c1")
        result = await handle.wait(30)  # the model alone takes several ack_waits
        await asyncio.sleep(1.0)  # room for a (wrong) redelivery to show up
        await client.close()
    finally:
        for node in nodes:
            await node.stop()
        await other.close()
        store.close()
    assert result.status == "completed"
    accepted = [e for e in handle.events if e.kind == "turn.accepted"]
    assert len(accepted) == 1
    assert models[0].models["c1"].calls + models[1].models["c1"].calls == 1


async def test_turns_wait_in_the_queue_until_a_node_starts(bus: Bus, tmp_path: Path) -> None:
    client = Client(bus)
    try:
        try:
            await client.submit("nobody is here", conversation_id="c0")
        except NoTurnQueue as exc:
            assert "start a node" in str(exc)
        else:
            raise AssertionError("a submit with no queue must say so")
        model = Scripted({"c1": [say("a", answer="First.")], "c2": [say("b", answer="Second.")]})
        node = await start_node(bus, tmp_path / "home", model)
        await node.stop()  # the queue now exists; no node serves it
        first = await client.submit("one", conversation_id="c1")
        second = await client.submit("two", conversation_id="c2")
        node = await start_node(bus, tmp_path / "home", model)
        try:
            results = [await first.wait(20), await second.wait(20)]
        finally:
            await node.stop()
    finally:
        await client.close()
    assert [r.answer for r in results] == ["First.", "Second."]


async def test_attachments_are_contributed_with_the_prompt(bus: Bus, tmp_path: Path) -> None:
    model = Scripted({"c1": [say("a", answer="Read it.")]})
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        await run_turn(
            client,
            "summarise the notes",
            "c1",
            attachments=[Attachment(name="notes.txt", mime="text/plain", data=b"ship on friday")],
        )
        tl = node.conversations["c1"].tl
        meta = [b for b in tl.blocks if b.type == USER_ATTACHMENT_META]
        stored = Workspace(node.store, "c1").read(meta[0].path)
    finally:
        await client.close()
        await node.stop()
    assert len(meta) == 1 and meta[0].path.endswith("user.attachments/notes.txt")
    assert "ship on friday" in meta[0].text and stored == b"ship on friday"
    seen = model.models["c1"].requests[0].blocks
    assert any("ship on friday" in (b.get("text") or "") for b in seen)
