"""A git workspace stores attachments off the event loop: while one conversation's files are
being written (git runs a process per file), the node's other conversations go on.

Real parts: a real nats-server, node and git workspace. The one thing added is a gate in
``GitWorkspace``'s writes of files named ``slow.txt``: the write waits until the test opens
it, so the test can see what the node does meanwhile. Had the write run on the event loop,
the other conversation's turn could not finish while the gate is shut.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from actline.actors import Node
from actline.actors.client.client import Client, TurnHandle
from actline.bus import Bus
from actline.llm.protocol import Chunk
from actline.messages import Ack, Attachment, ErrorReply, GenerateRequest
from actline.timeline.blocks import USER_ATTACHMENT_META, USER_FOLLOWUP
from actline.tools.workspace.git import GitWorkspace
from tests.actors.harness import Scripted, run_turn, say, start_node
from tests.waiting import until

SLOW = "slow.txt"


@dataclass
class Gate:
    """Shuts the writes of ``slow.txt`` until ``open`` (``entered``: one is waiting)."""

    entered: threading.Event = field(default_factory=threading.Event)
    opened: threading.Event = field(default_factory=threading.Event)
    left: threading.Event = field(default_factory=threading.Event)

    def wait(self, rel: str) -> None:
        if rel.rsplit("/", 1)[-1] == SLOW:
            self.entered.set()
            self.opened.wait(60)
            self.left.set()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    gate = Gate()
    write, followup = GitWorkspace.write, GitWorkspace.write_followup_attachment

    def gated_write(
        self: GitWorkspace, turn_id: str, area: str, rel: str, *a: Any, **k: Any
    ) -> str:
        gate.wait(rel)
        return write(self, turn_id, area, rel, *a, **k)

    def gated_followup(
        self: GitWorkspace, turn_id: str, mid: str, name: str, *a: Any, **k: Any
    ) -> str:
        gate.wait(name)
        return followup(self, turn_id, mid, name, *a, **k)

    monkeypatch.setattr(GitWorkspace, "write", gated_write)
    monkeypatch.setattr(GitWorkspace, "write_followup_attachment", gated_followup)
    yield gate
    gate.opened.set()  # a failed test leaves no thread waiting


def slow_file(text: str) -> Attachment:
    return Attachment(name=SLOW, mime="text/plain", data=text.encode())


async def test_a_prompts_attachment_is_stored_while_other_conversations_go_on(
    bus: Bus, client: Client, tmp_path: Path, gate: Gate
) -> None:
    model = Scripted(
        {"c-slow": [say("Reading it.", answer="Read.")], "c-fast": [say("Quick.", answer="Hi.")]}
    )
    node = await start_node(bus, tmp_path / "home", model, workspace_mode="git")
    try:
        slow = await client.submit(
            "read my file", conversation_id="c-slow", attachments=[slow_file("the slow notes")]
        )
        await until(gate.entered.is_set)
        fast = await run_turn(client, "hello", "c-fast")
        still_writing = not gate.left.is_set()
        gate.opened.set()
        result = await slow.wait(30)
        tl = node.conversations["c-slow"].tl
        workspace = node.conversations["c-slow"].workspace
        [meta] = [b for b in tl.turn_blocks(slow.turn_id) if b.type == USER_ATTACHMENT_META]
        stored = workspace.read(meta.path)
    finally:
        await node.stop()
    assert fast.result.result().answer == "Hi."
    assert still_writing  # the other conversation finished while the file was being written
    assert result.status == "completed" and result.answer == "Read."
    assert meta.path == f"fi:{slow.turn_id}.user.attachments/{SLOW}"
    assert stored == b"the slow notes" and "the slow notes" in meta.text


class HeldFirstRound:
    """The scripted model, whose first round in ``c-slow`` waits until ``release``."""

    name = "held"

    def __init__(self, scripted: Scripted) -> None:
        self.scripted = scripted
        self.holding = False
        self.release = asyncio.Event()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        if request.conversation_id == "c-slow" and request.round == 1:
            self.holding = True
            await self.release.wait()
        async for chunk in self.scripted.stream(request):
            yield chunk


def held_model() -> HeldFirstRound:
    return HeldFirstRound(
        Scripted(
            {
                "c-slow": [say("first round", answer="Before."), say("saw it", answer="After.")],
                "c-fast": [say("Quick.", answer="Hi.")],
            }
        )
    )


@dataclass
class HeldFollowup:
    """A node (git workspace) whose c-slow turn holds its first round, and a followup with a
    file whose write waits at the gate (its reply comes once the gate opens)."""

    node: Node
    model: HeldFirstRound
    slow: TurnHandle
    joining: asyncio.Future[Ack | ErrorReply]


@contextlib.asynccontextmanager
async def followup_held(
    bus: Bus, client: Client, home: Path, gate: Gate
) -> AsyncIterator[HeldFollowup]:
    model = held_model()
    node = await start_node(bus, home, model, workspace_mode="git")
    try:
        slow = await client.submit("first question", conversation_id="c-slow")
        await until(lambda: model.holding)
        followup = client.followup(
            "c-slow", slow.turn_id, "and this file", attachments=[slow_file("late notes")]
        )
        joining = asyncio.ensure_future(followup)
        await until(gate.entered.is_set)
        yield HeldFollowup(node, model, slow, joining)
    finally:
        await node.stop()


async def test_a_followups_attachment_is_stored_while_other_conversations_go_on(
    bus: Bus, client: Client, tmp_path: Path, gate: Gate
) -> None:
    async with followup_held(bus, client, tmp_path / "home", gate) as held:
        node, model, slow, joining = held.node, held.model, held.slow, held.joining
        fast = await run_turn(client, "hello", "c-fast")
        still_writing = not gate.left.is_set()
        gate.opened.set()
        reply = await joining
        model.release.set()
        result = await slow.wait(30)
        tl = node.conversations["c-slow"].tl
        blocks = tl.turn_blocks(slow.turn_id)
        workspace = node.conversations["c-slow"].workspace
        [meta] = [b for b in blocks if b.type == USER_ATTACHMENT_META]
        stored = workspace.read(meta.path)
    assert fast.result.result().answer == "Hi."
    assert still_writing
    assert reply.kind == "ack"
    assert result.answer == "After." and result.rounds == 2  # the second round saw it
    folder = f"fi:{slow.turn_id}.external.followup.attachments/"
    assert meta.path.startswith(folder) and meta.path.endswith(f"/{SLOW}")
    assert stored == b"late notes" and "late notes" in meta.text


async def test_a_followup_whose_turn_answers_while_its_files_are_stored_is_refused_whole(
    bus: Bus, client: Client, tmp_path: Path, gate: Gate
) -> None:
    async with followup_held(bus, client, tmp_path / "home", gate) as held:
        node, model, slow, joining = held.node, held.model, held.slow, held.joining
        decision = node.conversations["c-slow"].current
        assert decision is not None
        model.release.set()  # the turn answers while the file is being written
        await until(lambda: not decision.running)
        gate.opened.set()
        reply = await joining
        result = await slow.wait(30)
        conv = node.conversations["c-slow"]
        blocks = conv.tl.turn_blocks(slow.turn_id)
        workspace = conv.workspace
        left = workspace.tree(slow.turn_id, "external.followup.attachments")
    assert isinstance(reply, ErrorReply) and reply.code == "turn_not_running"
    assert "answered while the files were stored" in reply.message
    assert "send the text as a new turn.request" in reply.message
    assert result.answer == "Before." and result.rounds == 1
    assert not [b for b in blocks if b.type in (USER_FOLLOWUP, USER_ATTACHMENT_META)]
    assert left == {}  # its file was deleted again: nothing names it
