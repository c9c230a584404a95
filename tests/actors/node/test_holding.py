"""Claims and releases of a conversation kept apart (``actline.actors.node.holding``), and the
node's idle eviction on a real nats-server and LMDB: an idle conversation leaves memory and its
next turn sees it whole from the store; one whose turn waits on an agent stays."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actline.actors.client.client import Client
from actline.actors.errors import ConversationHeld
from actline.actors.node.holding import Holds
from actline.bus import Bus, NotConnected
from tests.actors.harness import Scripted, say, start_node
from tests.waiting import until

IDLE_S = 0.05
"""Idle time before eviction here (the node's eviction loop looks once a second)."""


async def test_a_claim_waits_while_its_conversation_is_let_go() -> None:
    holds = Holds()
    order: list[str] = []

    async def claim() -> None:
        async with holds.claiming("c1"):
            order.append("claimed")

    assert holds.may_release("c1")
    async with holds.releasing("c1"):
        task = asyncio.create_task(claim())
        await until(lambda: holds.waiting("c1") == 1)
        assert holds.may_release("c2")  # another conversation is not held up
        order.append("released")
    await task
    assert order == ["released", "claimed"]
    assert holds.waiting("c1") == 0 and holds.may_release("c1")


async def test_a_conversation_being_claimed_is_not_let_go() -> None:
    holds = Holds()
    async with holds.claiming("c1"):
        async with holds.claiming("c1"):  # claims do not wait for each other
            assert not holds.may_release("c1")
        assert not holds.may_release("c1")
        with pytest.raises(ConversationHeld, match="c1 is being claimed or let go"):
            async with holds.releasing("c1"):
                pass
    assert holds.may_release("c1")


async def test_an_idle_conversation_leaves_memory_and_its_next_turn_sees_it_whole(
    bus: Bus, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("first", answer="alpha-7"), say("second", answer="beta-9")]})
    node = await start_node(bus, tmp_path / "home", model, idle_evict_s=IDLE_S)
    client = Client(bus)
    try:
        first = await client.ask("the first question", conversation_id="c1", timeout=30)
        await until(lambda: "c1" not in node.conversations, timeout=30)
        second = await client.ask("the second question", conversation_id="c1", timeout=30)
    finally:
        await client.close()
        await node.stop()
    assert (first.answer, second.answer) == ("alpha-7", "beta-9")
    seen = model.models["c1"].requests[-1]  # the second turn's request, after the reload
    texts = " ".join(str(part.get("text", "")) for part in seen.blocks)
    assert "the first question" in texts and "alpha-7" in texts


async def test_a_conversation_waiting_on_an_agent_stays_while_an_idle_one_goes(
    bus: Bus, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "c1": [say("asking", calls=[("agent.send", {"name": "reviewer", "text": "look"})])],
            "c2": [say("done", answer="two")],
        }
    )
    node = await start_node(bus, tmp_path / "home", model, idle_evict_s=IDLE_S)
    client = Client(bus)
    try:
        waiting = await client.submit("get it reviewed", conversation_id="c1")
        await waiting.wait_for("waiting", timeout=30)
        assert (await client.ask("quick one", conversation_id="c2", timeout=30)).answer == "two"
        await until(lambda: "c2" not in node.conversations, timeout=30)  # the loop ran since
        assert "c1" in node.conversations  # its turn waits: it stays
        await client.cancel(waiting.turn_id, "test over")
        assert (await waiting.wait(30)).status == "cancelled"
    finally:
        await client.close()
        await node.stop()


async def test_a_release_that_nats_refuses_is_logged_and_eviction_goes_on(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    model = Scripted({"c1": [say("one", answer="one")], "c2": [say("two", answer="two")]})
    node = await start_node(bus, tmp_path / "home", model, idle_evict_s=IDLE_S)
    client = Client(bus)
    release = node.ownership.release
    tried: list[str] = []

    async def refused(cid: str) -> None:
        tried.append(cid)
        if cid == "c1":
            raise NotConnected("the server went away")
        await release(cid)

    monkeypatch.setattr(node.ownership, "release", refused)
    try:
        for cid in ("c1", "c2"):
            assert (await client.ask("a question", conversation_id=cid, timeout=30)).answer
        # a conversation leaves the mapping before its release is tried: wait for both
        await until(
            lambda: not ({"c1", "c2"} & set(node.conversations)) and len(tried) == 2, timeout=30
        )
    finally:
        await client.close()
        await node.stop()
    assert sorted(tried) == ["c1", "c2"]
    assert "conversation c1 left memory but its lease stays" in caplog.text
