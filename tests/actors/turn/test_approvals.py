"""Approvals in real turns: a node over the real nats-server, LMDB in a temp dir,
a scripted model (ReplayModel) and a tool that records every call it gets.

Granted: the tool runs after the approval and the model's next round sees its result.
Denied: the tool never runs and the model sees the denial notice (who, why). Pending across
a restart: the node stops while the turn waits; a new node on the same store resumes the
turn still waiting, the tool has not run; the approval makes it run once. Refusals: an
unknown approval id, a turn that is not waiting, a turn no node runs, an agent without the
right to approve (refused by the server), and an approver agent that may.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client, TurnHandle
from actline.actors.node.node import Node
from actline.actors.pools.tool_executor import ToolRegistry
from actline.bus import Authority, Bus, EmbeddedNats, PermissionDenied
from actline.bus.auth import write_secret
from actline.llm import ReplayModel
from actline.messages import Ack, ApprovalDecision, ErrorReply, ReActProgress, new_id
from actline.timeline.blocks import NOTICE, TOOL_RESULT
from actline.tools.registry import ToolContext
from tests.actors.harness import Scripted, say, start_node
from tests.waiting import until

DEPLOY = "ops.deploy"
PARAMS = {"target": "staging", "version": "1.4.2"}


class Deploys:
    """A tool that records its calls (the proof that a denied call never ran)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, params: dict[str, Any], ctx: ToolContext) -> str:
        self.calls.append(dict(params))
        return f"deployed {params['version']} to {params['target']}"


@pytest.fixture
def deploys() -> Deploys:
    return Deploys()


@pytest.fixture
def registry(deploys: Deploys) -> ToolRegistry:
    tools = ToolRegistry()
    tools.register(DEPLOY, deploys, description="Deploy a version", needs_approval=True)
    return tools


def script(cid: str, *outputs: str) -> Scripted:
    return Scripted({cid: list(outputs)})


DECIDE = say("deploy it", calls=[(DEPLOY, PARAMS), ("react.read", {"paths": ["ks:roadmap.md"]})])
ANSWER = say(answer="Done.")


async def approval_card(handle: TurnHandle, count: int = 1) -> ReActProgress:
    """The ``count``-th approval card of the turn (a resumed turn shows it again)."""

    def cards() -> list[ReActProgress]:
        return [c for c in handle.cards if c.phase == "waiting" and c.data.get("approvals")]

    await until(lambda: len(cards()) >= count, 30)
    return cards()[count - 1]


def seen_by_model(model: ReplayModel, call: int) -> str:
    """Everything the model was given in its ``call``-th request (1-based)."""
    return json.dumps(model.requests[call - 1].model_dump(mode="json"), ensure_ascii=False)


def blocks_of(node: Node, cid: str, kind: str) -> list[Any]:
    return [b for b in node.conversations[cid].tl.blocks if b.type == kind]


async def test_an_approved_call_runs_and_the_model_sees_its_result(
    bus: Bus, client: Client, tmp_path: Path, registry: ToolRegistry, deploys: Deploys
) -> None:
    model = script("c-granted", DECIDE, ANSWER)
    node = await start_node(bus, tmp_path / "home", model, registry=registry)
    try:
        handle = await client.submit("ship 1.4.2 to staging", conversation_id="c-granted")
        card = await approval_card(handle)
        [pending] = card.data["approvals"]
        assert (pending["tool"], pending["params"]) == (DEPLOY, PARAMS)
        assert DEPLOY in card.detail and "staging" in card.detail
        assert deploys.calls == []  # nothing runs before the approval

        wrong = await client.decide(handle.turn_id, True, approval_id="ap-unknown", by="alice")
        assert isinstance(wrong, ErrorReply) and wrong.code == "unknown_approval", wrong
        verdict = await client.decide(
            handle.turn_id, True, approval_id=pending["approval_id"], by="alice", reason="ok"
        )
        assert isinstance(verdict, Ack), verdict
        result = await handle.wait(30)
        late = await client.decide(handle.turn_id, True, by="alice", timeout=1.0)
    finally:
        await node.stop()
    assert result.status == "completed", result.error
    assert deploys.calls == [PARAMS]
    assert "deployed 1.4.2 to staging" in seen_by_model(model.models["c-granted"], 2)
    assert isinstance(late, ErrorReply) and late.code in ("no_node", "not_waiting"), late


async def test_a_denied_call_never_runs_and_the_model_sees_the_denial(
    bus: Bus, client: Client, tmp_path: Path, registry: ToolRegistry, deploys: Deploys
) -> None:
    model = script("c-denied", DECIDE, ANSWER)
    node = await start_node(bus, tmp_path / "home", model, registry=registry)
    try:
        handle = await client.submit("ship 1.4.2 to staging", conversation_id="c-denied")
        await approval_card(handle)
        verdict = await client.decide(handle.turn_id, False, by="bob", reason="freeze week")
        assert isinstance(verdict, Ack), verdict
        result = await handle.wait(30)
        notices = [b.text for b in blocks_of(node, "c-denied", NOTICE)]
        results = {
            b.meta["tool"]: b.data
            for b in blocks_of(node, "c-denied", TOOL_RESULT)
            if "tool" in (b.meta or {})
        }
    finally:
        await node.stop()
    assert result.status == "completed", result.error
    assert deploys.calls == []
    # this client's connection is the node's own: ``by`` names the local approver
    denial = f"{DEPLOY} was not run: the approval was denied by client bob (freeze week)"
    assert any(denial in text for text in notices), notices
    assert results[DEPLOY]["code"] == "approval_denied", results
    assert results["react.read"]["status"] == "ok", results  # the ungated call ran
    assert denial in seen_by_model(model.models["c-denied"], 2)  # the model saw the notice


async def test_a_pending_approval_survives_a_node_restart_and_runs_once(
    bus: Bus, client: Client, tmp_path: Path, registry: ToolRegistry, deploys: Deploys
) -> None:
    home = tmp_path / "home"
    first = await start_node(bus, home, script("c-restart", DECIDE), registry=registry)
    handle = await client.submit("ship 1.4.2 to staging", conversation_id="c-restart")
    before = await approval_card(handle)
    await first.stop()  # the turn is handed back to the queue, still waiting

    model = script("c-restart", ANSWER)  # the decision is stored: no model call again
    second = await start_node(bus, home, model, registry=registry)
    try:
        after = await approval_card(handle, 2)
        assert after.data["approvals"] == before.data["approvals"]
        assert deploys.calls == []
        assert model.models["c-restart"].calls == 0
        verdict = await client.decide(handle.turn_id, True, by="alice")
        assert isinstance(verdict, Ack), verdict
        result = await handle.wait(30)
    finally:
        await second.stop()
    assert result.status == "completed", result.error
    assert deploys.calls == [PARAMS]
    assert "deployed 1.4.2 to staging" in seen_by_model(model.models["c-restart"], 1)


async def test_node_patterns_gate_calls_a_turn_config_adds_more_and_cannot_lift_them(
    bus: Bus, client: Client, tmp_path: Path, deploys: Deploys
) -> None:
    tools = ToolRegistry()
    tools.register(DEPLOY, deploys)  # no flag: the node's ACTLINE_APPROVE_TOOLS gates it
    model = script("c-patterns", DECIDE, ANSWER)
    node = await start_node(bus, tmp_path / "home", model, registry=tools, approve_tools="ops.*")
    try:
        handle = await client.submit(
            "ship it", conversation_id="c-patterns", config={"approve_tools": ["react.read"]}
        )
        card = await approval_card(handle)
        gated = sorted(a["tool"] for a in card.data["approvals"])
        assert gated == [DEPLOY, "react.read"]
        assert deploys.calls == []
        refused = await client.submit(
            "ship it", conversation_id="c-bad", config={"approve_tools": "code.*; rm -rf"}
        )
        bad = await refused.wait(30)
        await client.decide(handle.turn_id, False, by="alice")
        await handle.wait(30)
    finally:
        await node.stop()
    assert deploys.calls == []
    assert bad.status == "failed" and "config.approve_tools" in (bad.error or ""), bad.error


async def test_approvals_for_an_unknown_or_finished_turn_say_no_node_runs_it(
    bus: Bus, client: Client, tmp_path: Path, registry: ToolRegistry
) -> None:
    model = script("c-nowait", say(answer="No tools needed."))
    node = await start_node(bus, tmp_path / "home", model, registry=registry)
    try:
        unknown = await client.decide(f"t-{new_id()}", True, by="alice", timeout=1.0)
        handle = await client.submit("hello", conversation_id="c-nowait")
        await handle.wait(30)
        done = await client.decide(handle.turn_id, True, by="alice", timeout=1.0)
    finally:
        await node.stop()
    nobody = await client.decide(handle.turn_id, True, by="alice", timeout=1.0)
    for reply in (unknown, done, nobody):  # only a node running the turn answers
        assert isinstance(reply, ErrorReply) and reply.code == "no_node", reply
        assert "no node runs turn" in reply.message


Reviewer = Callable[..., Awaitable[Bus]]
"""Opens a connection of agent ``reviewer`` (``approver=``, ``approves=`` as issued)."""


@pytest.fixture
async def reviewer(
    nats_server: EmbeddedNats, authority: Authority, bus: Bus, tmp_path: Path
) -> AsyncIterator[Reviewer]:
    """Connections of agent ``reviewer`` with credentials issued as asked, closed after
    the test."""
    opened: list[Bus] = []

    async def connect(*, approver: bool, approves: tuple[str, ...] = ()) -> Bus:
        text = authority.issue(
            "agent", name="reviewer", prefix=bus.subjects.prefix, approver=approver,
            approves=approves,
        )  # fmt: skip
        creds = write_secret(tmp_path / f"reviewer-{len(opened)}.creds", text)
        opened.append(await Bus.connect(nats_server.url, subject_names=bus.subjects, creds=creds))
        return opened[-1]

    yield connect
    for connection in opened:
        await connection.close()


async def test_only_an_agent_with_the_right_to_approve_may_approve(
    bus: Bus,
    client: Client,
    reviewer: Reviewer,
    tmp_path: Path,
    registry: ToolRegistry,
    deploys: Deploys,
) -> None:
    model = script("c-agent", DECIDE, ANSWER)
    node = await start_node(bus, tmp_path / "home", model, registry=registry)
    plain = await reviewer(approver=False)
    approver = await reviewer(approver=True)
    try:
        handle = await client.submit("ship it", conversation_id="c-agent")
        await approval_card(handle)
        with pytest.raises(PermissionDenied):
            await Client(plain).decide(handle.turn_id, True, by="agent reviewer")
        assert deploys.calls == []
        verdict = await Client(approver).decide(handle.turn_id, True, by="agent reviewer")
        assert isinstance(verdict, Ack), verdict
        result = await handle.wait(30)
    finally:
        await node.stop()
    assert result.status == "completed", result.error
    assert deploys.calls == [PARAMS]


async def test_the_approver_is_the_credential_not_the_name_it_writes(
    bus: Bus,
    client: Client,
    reviewer: Reviewer,
    tmp_path: Path,
    registry: ToolRegistry,
    deploys: Deploys,
) -> None:
    model = script("c-forged", DECIDE, ANSWER)
    node = await start_node(bus, tmp_path / "home", model, registry=registry)
    approver = await reviewer(approver=True)
    try:
        handle = await client.submit("ship it", conversation_id="c-forged")
        [pending] = (await approval_card(handle)).data["approvals"]
        forged = ApprovalDecision(
            turn_id=handle.turn_id,
            approval_id=pending["approval_id"],
            approved=True,
            by="alice-the-CISO",
        )
        subject = bus.subjects.approval("agent", "reviewer", handle.turn_id)
        verdict = await approver.request(subject, forged, timeout=10)
        result = await handle.wait(30)
        notices = [b.text for b in blocks_of(node, "c-forged", NOTICE)]
    finally:
        await node.stop()
    assert isinstance(verdict, Ack), verdict
    assert "approved by agent reviewer" in verdict.detail, verdict
    assert not any("alice-the-CISO" in text for text in notices), notices
    assert result.status == "completed" and deploys.calls == [PARAMS]


async def test_an_approver_of_some_tools_decides_those_only(
    bus: Bus,
    client: Client,
    reviewer: Reviewer,
    tmp_path: Path,
    registry: ToolRegistry,
    deploys: Deploys,
) -> None:
    model = script("c-scoped", DECIDE, ANSWER)
    node = await start_node(bus, tmp_path / "home", model, registry=registry)
    others = await reviewer(approver=True, approves=("shell.*",))
    ops = await reviewer(approver=True, approves=("ops.*",))
    try:
        handle = await client.submit("ship it", conversation_id="c-scoped")
        await approval_card(handle)
        with pytest.raises(PermissionDenied):  # every pending call: not for a scoped approver
            await Client(ops).decide(handle.turn_id, True)
        with pytest.raises(PermissionDenied):  # a tool outside its patterns
            await Client(others).decide(handle.turn_id, True, tool=DEPLOY)
        wrong = await Client(others).decide(handle.turn_id, True, tool="shell.run")
        assert deploys.calls == []
        verdict = await Client(ops).decide(handle.turn_id, True, tool=DEPLOY)
        result = await handle.wait(30)
    finally:
        await node.stop()
    assert isinstance(wrong, ErrorReply) and wrong.code == "not_approver_of_tool", wrong
    assert isinstance(verdict, Ack) and "approved by agent reviewer" in verdict.detail, verdict
    assert result.status == "completed" and deploys.calls == [PARAMS]
