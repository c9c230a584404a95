"""The round path on a real node (scripted model, real nats-server, real LMDB): how many
exchanges a round has with its ConversationActor, how many group-commit writes a turn
makes, and that a round's reply is acted on only once the round is stored.

``ConversationActor.receive`` is wrapped to record the mailbox exchanges of the running
turn (``Render``, ``RunTools``, ``Commit``, ``EndTurn``); nothing of the node is replaced.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.conversation.actor import ConversationActor
from actline.actors.node.node import Node
from actline.actors.turn.mailbox import Commit, EndTurn, Render, RunTools
from actline.bus import Bus, Envelope
from actline.messages import Ack, AgentTask, Message, ReActProgress
from actline.storage import Store
from actline.timeline.blocks import TOOL_RESULT
from tests.actors.harness import Scripted, say, start_node

TIMEOUT = 30.0
DOC = "ks:pricing/tiers.md"
REVIEWER = "reviewer"
EXCHANGES = (Render, RunTools, Commit, EndTurn)
THREE_TOOL_ROUNDS = [
    say("Searching.", calls=[("react.search_knowledge", {"query": "pricing tiers"})]),
    say("Reading.", calls=[("react.read", {"paths": [DOC]})]),
    say("Searching again.", calls=[("react.search_knowledge", {"query": "enterprise plan"})]),
    say("Answering.", answer="The Team plan is the middle tier [[S:1]]."),
]


@dataclass
class Exchange:
    turn_id: str
    kind: str
    round: int | None


@dataclass
class Exchanges:
    """What the conversations of this test were sent, in the order they took it."""

    seen: list[Exchange] = field(default_factory=list)

    def of(self, turn_id: str) -> list[Exchange]:
        return [e for e in self.seen if e.turn_id == turn_id]

    def kinds(self, turn_id: str) -> list[str]:
        return [e.kind for e in self.of(turn_id)]

    def per_round(self, turn_id: str) -> Counter[int]:
        """Exchanges of each model round: a ``Commit`` counts in the round it follows,
        ``EndTurn`` in the last round."""
        counts: Counter[int] = Counter()
        current = 0
        for e in self.of(turn_id):
            if e.round is not None:
                current = e.round
            counts[current] += 1
        return counts


@pytest.fixture
def exchanges(monkeypatch: pytest.MonkeyPatch) -> Exchanges:
    record = Exchanges()
    original = ConversationActor.receive

    async def receive(self: ConversationActor, message: object) -> object:
        if isinstance(message, EXCHANGES):
            round_ = message.round if isinstance(message, Render | RunTools) else None
            record.seen.append(Exchange(message.turn_id, type(message).__name__, round_))
        return await original(self, message)

    monkeypatch.setattr(ConversationActor, "receive", receive)
    return record


@dataclass
class Running:
    node: Node
    client: Client
    model: Scripted

    @property
    def store(self) -> Store:
        assert self.node.services is not None
        return self.node.services.store

    @property
    def writes(self) -> int:
        """Write functions the node's group commit committed so far."""
        assert self.node.services is not None
        return self.node.services.commits.writes


@pytest.fixture
async def running(bus: Bus, tmp_path: Path, exchanges: Exchanges) -> AsyncIterator[Running]:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        yield Running(node, client, model)
    finally:
        await client.close()
        await node.stop()


async def test_a_tool_round_is_render_and_run_tools_and_the_turn_ends_once(
    running: Running, exchanges: Exchanges
) -> None:
    running.model.script("c1", THREE_TOOL_ROUNDS)
    before = running.writes
    handle = await running.client.submit("What plans are there?", conversation_id="c1")
    result = await handle.wait(TIMEOUT)
    after = running.writes
    assert result.status == "completed", result.error
    assert result.rounds == 4

    tid = handle.turn_id
    assert exchanges.kinds(tid) == [
        "Render", "RunTools",
        "Render", "RunTools",
        "Render", "RunTools",
        "Render", "EndTurn",
    ]  # fmt: skip
    per_round = exchanges.per_round(tid)
    assert max(per_round.values()) <= 3
    assert per_round == Counter({1: 2, 2: 2, 3: 2, 4: 2})  # round 4: Render, then EndTurn
    assert [e.round for e in exchanges.of(tid) if e.kind == "Render"] == [1, 2, 3, 4]
    assert exchanges.kinds(tid).count("EndTurn") == 1
    assert "Commit" not in exchanges.kinds(tid)  # the turn never waited
    # one group-commit write per model round (its Render), one for the result and one
    # for the turn's workspace ordinal
    assert after - before == result.rounds + 2


async def test_a_turn_that_waits_on_an_agent_commits_once_when_it_enters_waiting(
    running: Running, exchanges: Exchanges, bus: Bus
) -> None:
    tasks: asyncio.Queue[AgentTask] = asyncio.Queue()

    async def on_task(msg: Message, env: Envelope) -> None:
        if isinstance(msg, AgentTask):
            await tasks.put(msg)

    await bus.subscribe(bus.subjects.agent_inbox(REVIEWER), on_task)
    running.model.script(
        "c1",
        [
            say("Asking.", calls=[("agent.send", {"name": REVIEWER, "text": "review it"})]),
            say("Reviewed.", answer="The plan is reviewed."),
        ],
    )
    before = running.writes
    handle = await running.client.submit("Get it reviewed.", conversation_id="c1")
    task = await asyncio.wait_for(tasks.get(), TIMEOUT)
    await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    tid = handle.turn_id
    assert exchanges.kinds(tid) == ["Render", "Commit"]
    assert running.writes - before == 3  # the workspace ordinal, round 1, Waiting
    # the checkpoint stored on the way into Waiting names the awaited task
    record = running.store.turn_record("c1", tid)
    assert record is not None and record["status"] == "running" and record["round"] == 1
    assert [t[0] for t in record["tasks"]] == [task.task_id]
    assert record["tasks"][0][4] is True  # awaited

    reply = await running.client.send_done(
        REVIEWER, "looks fine", turn_id=tid, task_id=task.task_id, timeout=TIMEOUT
    )
    assert isinstance(reply, Ack) and reply.detail == "applied", reply
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", result.error
    assert result.rounds == 2
    kinds = exchanges.kinds(tid)
    assert kinds == ["Render", "Commit", "Render", "EndTurn"]
    assert kinds.count("Commit") == 1 and kinds.count("EndTurn") == 1
    assert max(exchanges.per_round(tid).values()) <= 3
    # a write per round, one for Waiting, one for the result, the workspace ordinal
    assert running.writes - before == result.rounds + 3


async def test_a_rounds_reply_is_acted_on_only_after_the_round_is_stored(
    running: Running, bus: Bus
) -> None:
    """When the tool_call card of round r reaches a client, the checkpoint committed with
    round r's render (round r-1 done, its tool results with it) is already in LMDB."""
    seen: list[tuple[int, dict[str, Any] | None, int]] = []
    three = asyncio.Event()
    store = running.store

    async def on_event(msg: Message, env: Envelope) -> None:
        if isinstance(msg, ReActProgress) and msg.phase == "tool_call":
            record = store.turn_record("c1", msg.turn_id)
            results = sum(1 for b in list(store.iter_blocks("c1")) if b["type"] == TOOL_RESULT)
            seen.append((msg.round, record, results))
            if len(seen) == 3:
                three.set()

    await bus.subscribe(bus.subjects.stream("c1"), on_event)
    running.model.script("c1", THREE_TOOL_ROUNDS)
    handle = await running.client.submit("What plans are there?", conversation_id="c1")
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", result.error
    await asyncio.wait_for(three.wait(), TIMEOUT)
    assert [r for r, _, _ in seen] == [1, 2, 3]
    for round_, record, results in seen:
        assert record is not None, f"round {round_}: no checkpoint stored yet"
        assert record["status"] in ("running", "completed")
        if record["status"] == "running":
            assert record["round"] >= round_ - 1, (round_, record)
        assert results >= round_ - 1, (round_, results)


async def test_a_reply_waits_for_its_rounds_commit_when_the_disk_is_slow(
    running: Running, bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow disk (the group commit held back): the model of round 1 answers, its thinking
    reaches the client, but no tool runs and no tool_call card goes out until the round's
    commit is durable; then the turn goes on and completes."""
    from actline.storage.committer import Committer

    gate = asyncio.Event()
    flush = Committer._flush

    def held(self: Committer) -> None:
        if gate.is_set() or self.writes == before:  # the turn's workspace ordinal goes through
            flush(self)
            return
        self._scheduled = False
        asyncio.get_running_loop().create_task(_after(gate, self))

    async def _after(event: asyncio.Event, committer: Committer) -> None:
        await event.wait()
        committer._scheduled = True
        flush(committer)

    cards: list[str] = []
    thinking = asyncio.Event()

    async def on_event(msg: Message, env: Envelope) -> None:
        if isinstance(msg, ReActProgress):
            cards.append(msg.phase)
        elif getattr(msg, "channel", "") == "thinking":
            thinking.set()

    await bus.subscribe(bus.subjects.stream("c1"), on_event)
    running.model.script("c1", THREE_TOOL_ROUNDS)
    before = running.writes
    monkeypatch.setattr(Committer, "_flush", held)
    handle = await running.client.submit("What plans are there?", conversation_id="c1")
    await asyncio.wait_for(thinking.wait(), TIMEOUT)  # round 1's model has answered
    await bus.flush()
    assert "tool_call" not in cards and "tool_result" not in cards
    gate.set()
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", result.error
    assert cards.count("tool_call") == 3
