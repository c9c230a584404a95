"""The nats-server enforces the pool roles of bus/roles.py: what ``pool-models`` and
``pool-tools`` may and may not do.

Each pool role may join its own queue group and nothing else: a model pool serves
``llm.generate`` in the group ``streamers`` (hears ``llm.cancel``) and streams deltas; a
tool pool serves ``tools.exec`` in the group ``tools`` and asks a node for a workspace.
Every forbidden attempt is made with the raw nats-py client of a connection holding the
role's credentials (see ``attempts``: the server reports the violation AND nothing
arrives). A plain subscription to the pool's own subject, or one in another queue group,
passes the typed Bus's check (it knows no groups) and is refused by the server. Positive
controls run the real ``StreamerActor`` and ``ToolExecutorActor`` on pool credentials.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from actline.actors.configuration.models import NodeModels
from actline.actors.pools.streamer import StreamerActor
from actline.actors.pools.tool_executor import ToolExecutorActor
from actline.bus import Envelope
from actline.bus.roles import STREAMERS_QUEUE, TOOLS_QUEUE, permissions
from actline.llm import ExtractiveModel
from actline.messages import (
    Ack,
    CancelReAct,
    GenerateResult,
    Message,
    StreamDelta,
    Subjects,
    ToolCall,
    ToolResult,
    encode,
)
from actline.tools.registry import ToolContext, ToolOutput, ToolRegistry
from tests.security.attempts import (
    ALLOWED,
    DENIED,
    LEDGER,
    Watcher,
    forbidden_publish,
    forbidden_publish_bytes,
    forbidden_subscription,
    own_inbox,
    stream_api,
    who,
)
from tests.security.roles import (
    AGENT,
    CID,
    TID,
    Connect,
    delta,
    forged_result,
    generate,
    task,
    tool_call,
    turn,
    witness,
)

POOLS = ("pool-models", "pool-tools")
SKIP = CancelReAct(turn_id=TID)


def workspace_of(s: Subjects, node: str) -> str:
    """Where a node answers for its conversations' workspaces."""
    return f"{s.prefix}.node.{node}.workspace"


async def watched(connect: Connect, target: str) -> Watcher:
    """A watcher of ``target`` whose marker is in its own reply inbox: the one subject
    beside their replies a pool may publish to that the watcher reads."""
    bus = await witness(connect, target)
    return await Watcher.on(bus, [target], marker=own_inbox(bus))


def test_the_queue_groups_are_the_actors_own() -> None:
    assert StreamerActor.QUEUE == STREAMERS_QUEUE
    assert ToolExecutorActor.QUEUE == TOOLS_QUEUE


@pytest.mark.parametrize("role", POOLS)
def test_pool_roles_reach_nothing_of_jetstream_turns_results_or_agents(role: str) -> None:
    granted = permissions(role, prefix="al")
    for subject in (
        "al.turn.submit",
        "al.result.t1",
        "al.agent.reviewer.inbox",
        "al.agent.reviewer.done",
        "al.conv.c1.followup",
        "$JS.API.INFO",
        "$JS.API.STREAM.INFO.AL_TURNS",
        "$KV.AL_LEASES.c1",
    ):
        assert not granted.may_publish(subject), subject
    for subject in ("al.turn.submit", "al.result.>", "al.>", "_INBOX.>", "al.stream.>"):
        assert not granted.may_subscribe(subject), subject


# -- what a pool may not subscribe to --------------------------------------------------------------
NOT_SERVED: list[tuple[str, str, Callable[[Subjects], str], str, Callable[[], Message], str]] = [
    (
        "pool-models",
        "llm_generate_plain",
        lambda s: s.llm_generate,
        "",
        generate,
        "read every model call outside its queue group",
    ),
    (
        "pool-models",
        "llm_generate_other_group",
        lambda s: s.llm_generate,
        "spies",
        generate,
        "serve model calls in another queue group",
    ),
    ("pool-models", "tools_exec", lambda s: s.tools_exec, "tools", tool_call, "serve tool calls"),
    ("pool-models", "stream", lambda s: s.stream(CID), "", delta, "read a conversation's stream"),
    ("pool-models", "result", lambda s: s.result(TID), "", forged_result, "read turn results"),
    ("pool-models", "turn_submit", lambda s: s.turn_submit, "", turn, "read submitted turns"),
    (
        "pool-tools",
        "tools_exec_plain",
        lambda s: s.tools_exec,
        "",
        tool_call,
        "read every tool call outside its queue group",
    ),
    (
        "pool-tools",
        "tools_exec_local",
        lambda s: s.tools_exec_local("node-1"),
        "",
        tool_call,
        "serve a node's own workspace tools",
    ),
    (
        "pool-tools",
        "llm_generate",
        lambda s: s.llm_generate,
        "streamers",
        generate,
        "serve model calls",
    ),
    ("pool-tools", "stream", lambda s: s.stream(CID), "", delta, "read a conversation's stream"),
    ("pool-tools", "turn_submit", lambda s: s.turn_submit, "", turn, "read submitted turns"),
]


@pytest.mark.parametrize(
    ("role", "subject", "queue", "payload", "what"),
    [pytest.param(r, sub, q, p, w, id=f"{r}-{name}") for r, name, sub, q, p, w in NOT_SERVED],
)
async def test_a_pool_subscribes_to_nothing_but_its_queue_group(
    connect: Connect,
    role: str,
    subject: Callable[[Subjects], str],
    queue: str,
    payload: Callable[[], Message],
    what: str,
) -> None:
    node, pool = await connect("node"), await connect(role)
    target = subject(node.subjects)
    own = {"pool-models": node.subjects.llm_generate, "pool-tools": node.subjects.tools_exec}
    local, server, reached = await forbidden_subscription(
        pool,
        target,
        sender=node,
        sent_on=target,
        payloads=[encode(payload()) for _ in range(3)],
        queue=queue,
        what=what,
    )
    # The typed Bus's check knows no queue groups: its own subject passes there.
    assert local == (ALLOWED if target == own[role] else DENIED)
    assert "permissions violation for subscription" in server.lower()
    assert reached == 0


# -- what a pool may not publish -------------------------------------------------------------------
NOT_PUBLISHED: list[tuple[str, str, Callable[[Subjects], str], Callable[[Subjects], Message]]] = [
    ("pool-models", "turn_submit", lambda s: s.turn_submit, lambda s: turn()),
    ("pool-models", "turn_result", lambda s: s.result(TID), lambda s: forged_result()),
    ("pool-models", "agent_inbox", lambda s: s.agent_inbox(AGENT), lambda s: task(s, AGENT)),
    ("pool-models", "llm_generate", lambda s: s.llm_generate, lambda s: generate()),
    ("pool-models", "tools_exec", lambda s: s.tools_exec, lambda s: tool_call()),
    (
        "pool-models",
        "node_workspace",
        lambda s: workspace_of(s, "node-1"),
        lambda s: tool_call(),
    ),
    ("pool-tools", "stream_delta", lambda s: s.stream(CID), lambda s: delta()),
    ("pool-tools", "turn_submit", lambda s: s.turn_submit, lambda s: turn()),
    ("pool-tools", "turn_result", lambda s: s.result(TID), lambda s: forged_result()),
    ("pool-tools", "llm_generate", lambda s: s.llm_generate, lambda s: generate()),
    ("pool-tools", "llm_cancel", lambda s: s.llm_cancel, lambda s: CancelReAct(turn_id=TID)),
    ("pool-tools", "tools_exec", lambda s: s.tools_exec, lambda s: tool_call()),
    (
        "pool-tools",
        "turn_control",
        lambda s: s.turn_control(TID),
        lambda s: CancelReAct(turn_id=TID),
    ),
]


@pytest.mark.parametrize(
    ("role", "subject", "message"),
    [pytest.param(r, sub, msg, id=f"{r}-{name}") for r, name, sub, msg in NOT_PUBLISHED],
)
async def test_a_pool_publishes_nothing_but_its_replies(
    connect: Connect,
    role: str,
    subject: Callable[[Subjects], str],
    message: Callable[[Subjects], Message],
) -> None:
    pool = await connect(role)
    s = pool.subjects
    target = subject(s)
    watcher = await watched(connect, target)
    local, server, reached = await forbidden_publish(
        pool, watcher, target, message(s), what=f"publish {message(s).kind}"
    )
    assert local == DENIED
    assert "permissions violation for publish" in server.lower()
    assert reached == 0


@pytest.mark.parametrize("role", POOLS)
@pytest.mark.parametrize("operation", ["INFO", "PURGE"])
async def test_a_pool_has_no_jetstream(connect: Connect, role: str, operation: str) -> None:
    pool = await connect(role)
    s = pool.subjects
    target = stream_api(operation, s.turn_stream)
    watcher = await watched(connect, target)
    local, server, reached = await forbidden_publish_bytes(
        pool, watcher, target, b"{}", what=f"{operation.lower()} the turn stream"
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for publish" in server.lower()


# -- what each pool is for -------------------------------------------------------------------------
async def test_a_model_pool_serves_calls_streams_deltas_and_hears_cancels(
    connect: Connect,
) -> None:
    node, pool, client = (
        await connect("node"),
        await connect("pool-models"),
        await connect("client"),
    )
    s = node.subjects
    streamer = StreamerActor(pool, NodeModels(ExtractiveModel()), concurrency=2, max_waiting=2)
    await streamer.start()
    deltas: asyncio.Queue[StreamDelta] = asyncio.Queue()
    cancels: asyncio.Queue[CancelReAct] = asyncio.Queue()

    async def keep(msg: Message, env: Envelope) -> None:
        if isinstance(msg, StreamDelta):
            deltas.put_nowait(msg)

    async def heard(msg: Message, env: Envelope) -> None:
        if isinstance(msg, CancelReAct):
            cancels.put_nowait(msg)

    await client.subscribe(s.stream(CID), keep)
    await pool.subscribe(s.llm_cancel, heard)
    try:
        reply = await node.request(s.llm_generate, generate(), timeout=10.0)
        assert isinstance(reply, GenerateResult), reply
        assert reply.error_code == "", reply.error
        async with asyncio.timeout(5.0):
            first = await deltas.get()
        assert first.conversation_id == CID
        await node.publish(s.llm_cancel, CancelReAct(turn_id=TID))
        async with asyncio.timeout(5.0):
            assert (await cancels.get()).turn_id == TID
    finally:
        await streamer.stop()
    await pool.flush()
    assert pool.violations == []
    for what, subject in (
        ("serve llm.generate in its queue group, reply", f"{s.llm_generate} ({STREAMERS_QUEUE})"),
        ("publish stream.delta", s.stream(CID)),
        ("hear react.cancel", s.llm_cancel),
    ):
        LEDGER.record(who(pool), what, subject, local=ALLOWED, server="delivered")


async def test_a_tool_pool_serves_calls_and_asks_a_node_for_a_workspace(connect: Connect) -> None:
    node, pool = await connect("node"), await connect("pool-tools")
    s = node.subjects
    workspace = workspace_of(s, "node-1")

    async def answer(msg: Message, env: Envelope) -> Message:
        return Ack(detail=f"workspace of {getattr(msg, 'conversation_id', '')}")

    await node.subscribe(workspace, answer)
    registry = ToolRegistry()

    async def look(params: dict[str, object], ctx: ToolContext) -> ToolOutput:
        reply = await pool.request(workspace, tool_call(), timeout=5.0)
        return ToolOutput(content=json.dumps({"reply": reply.kind}))

    registry.register("ws.look", look, schema={"type": "object"})
    executor = ToolExecutorActor(pool, registry, concurrency=2, max_waiting=2)
    await executor.start()
    try:
        call = ToolCall(conversation_id=CID, turn_id=TID, call_id="k1", tool="ws.look")
        reply = await node.request(s.tools_exec, call, timeout=10.0)
    finally:
        await executor.stop()
    assert isinstance(reply, ToolResult), reply
    assert reply.ok, reply.error
    assert json.loads(reply.content) == {"reply": "ack"}
    await pool.flush()
    assert pool.violations == []
    for what, subject in (
        ("serve tools.exec in its queue group, reply", f"{s.tools_exec} ({TOOLS_QUEUE})"),
        ("ask a node for a workspace", workspace),
    ):
        LEDGER.record(who(pool), what, subject, local=ALLOWED, server="delivered")
