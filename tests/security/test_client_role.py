"""The nats-server itself enforces the roles of bus/roles.py: what a client may and may not do.

Every forbidden attempt is made with the raw nats-py client of a connection holding that
role's credentials, so that actline's own check (``PermissionDenied``, shown too) cannot
be what stops it; the server must report a permissions violation AND the effect must
not happen (see ``attempts`` for how a negative is proved without sleeping). Positive
controls show the same connections doing what their role is for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import nats.js.errors
import pytest
from nats.aio.msg import Msg

from actline.bus import Envelope
from actline.messages import Message, Subjects, TurnAccepted, TurnHandoff, TurnRequest, encode
from tests.security.attempts import (
    ALLOWED,
    DENIED,
    LEDGER,
    Watcher,
    forbidden_publish,
    forbidden_publish_bytes,
    forbidden_subscription,
    local_answer,
    pull_api,
    stream_api,
    who,
)
from tests.security.roles import (
    AGENT,
    CID,
    TID,
    Connect,
    delta,
    done,
    forged_result,
    generate,
    open_turn_stream,
    task,
    tool_call,
    turn,
    witness,
)
from tests.waiting import until

# -- a client ------------------------------------------------------------------------------
SERVED: list[tuple[str, Callable[[Subjects], str], str, Callable[[], Message]]] = [
    ("llm_generate", lambda s: s.llm_generate, "streamers", generate),
    ("tools_exec", lambda s: s.tools_exec, "tools", tool_call),
    ("tools_exec_local", lambda s: s.tools_exec_local("node-1"), "", tool_call),
]


@pytest.mark.parametrize(
    ("subject", "queue", "request_of"),
    [pytest.param(sub, q, req, id=name) for name, sub, q, req in SERVED],
)
async def test_a_client_cannot_serve_model_or_tool_calls(
    connect: Connect,
    subject: Callable[[Subjects], str],
    queue: str,
    request_of: Callable[[], Message],
) -> None:
    """A stranger in the streamers' (or tools') queue group would read every prompt and
    answer model calls: the server refuses the subscription and the real server of the
    group gets every call."""
    node, caller, client = await connect("node"), await connect("node"), await connect("client")
    target = subject(node.subjects)
    served: list[bytes] = []

    async def serve(msg: Msg) -> None:
        served.append(msg.data)

    await node.nc.subscribe(target, queue=queue, cb=serve)
    await node.flush()
    calls = [encode(request_of()) for _ in range(5)]
    local, server, reached = await forbidden_subscription(
        client,
        target,
        sender=caller,
        sent_on=target,
        payloads=calls,
        queue=queue,
        what="serve calls only nodes serve",
    )
    assert local == DENIED
    assert "permissions violation for subscription" in server.lower()
    assert reached == 0
    await until(lambda: len(served) == len(calls), timeout=5.0)


CLIENT_MAY_NOT_PUBLISH: list[
    tuple[str, str, Callable[[Subjects], str], Callable[[Subjects], Message]]
] = [
    ("llm_generate", "call the model directly", lambda s: s.llm_generate, lambda s: generate()),
    ("tools_exec", "run a tool directly", lambda s: s.tools_exec, lambda s: tool_call()),
    (
        "tools_exec_local",
        "run a tool in a node's workspace",
        lambda s: s.tools_exec_local("node-1"),
        lambda s: tool_call(),
    ),
    (
        "node_turns",
        "pass a turn to a node as if another node pulled it",
        lambda s: s.node_turns("node-1"),
        lambda s: TurnHandoff(
            request=TurnRequest(conversation_id="c-1", turn_id=TID, text="hi"),
            ack_subject=f"$JS.ACK.{s.turn_stream}.{s.turn_consumer}.1.1.1.0.0",
            from_node="node-2",
        ),
    ),
    ("turn_result", "forge a turn.result", lambda s: s.result(TID), lambda s: forged_result()),
    (
        "agent_inbox",
        "hand a task to an agent",
        lambda s: s.agent_inbox(AGENT),
        lambda s: task(s, AGENT),
    ),
    (
        "agent_done",
        "publish a DONE (shared subject)",
        lambda s: s.agent_done,
        lambda s: done(AGENT),
    ),
    (
        "agent_done_of",
        "publish a DONE as the agent",
        lambda s: s.agent_done_of(AGENT),
        lambda s: done(AGENT),
    ),
]


@pytest.mark.parametrize(
    ("what", "subject", "message"),
    [pytest.param(what, sub, msg, id=name) for name, what, sub, msg in CLIENT_MAY_NOT_PUBLISH],
)
async def test_a_client_cannot_publish_where_only_nodes_or_agents_do(
    connect: Connect,
    what: str,
    subject: Callable[[Subjects], str],
    message: Callable[[Subjects], Message],
) -> None:
    client = await connect("client")
    s = client.subjects
    target = subject(s)
    watcher = await Watcher.on(await witness(connect, target), [target], marker=s.agents_list)
    local, server, reached = await forbidden_publish(client, watcher, target, message(s), what=what)
    assert local == DENIED
    assert "permissions violation for publish" in server.lower()
    assert reached == 0


@pytest.mark.parametrize("operation", ["DELETE", "PURGE", "CREATE"])
async def test_a_client_cannot_manage_jetstream_streams(connect: Connect, operation: str) -> None:
    node, client = await connect("node"), await connect("client")
    s = node.subjects
    if operation != "CREATE":
        queue = await open_turn_stream(node)
        await node.publish_stored(s.turn_submit, turn())
        await queue.close()
    target = stream_api(operation, s.turn_stream)
    # CREATE: the client's own turn stream, say one that keeps nothing (max_msgs 0).
    body = {"name": s.turn_stream, "subjects": [s.turn_submit], "max_msgs": 0}
    data = json.dumps(body).encode() if operation == "CREATE" else b"{}"
    watcher = await Watcher.on(await witness(connect, target), [target], marker=s.agents_list)
    local, server, reached = await forbidden_publish_bytes(
        client, watcher, target, data, what=f"{operation.lower()} the turn stream"
    )
    assert local == DENIED
    assert "permissions violation for publish" in server.lower()
    assert reached == 0
    js = node.nc.jetstream(timeout=2.0)
    if operation == "CREATE":
        with pytest.raises(nats.js.errors.NotFoundError):
            await js.stream_info(s.turn_stream)
    else:
        info = await js.stream_info(s.turn_stream)
        assert info.state.messages == 1


async def test_a_client_cannot_read_an_agents_inbox_nor_pull_its_tasks(connect: Connect) -> None:
    node, client = await connect("node"), await connect("client")
    s = node.subjects
    inbox = s.agent_inbox(AGENT)
    local, server, reached = await forbidden_subscription(
        client,
        inbox,
        sender=node,
        sent_on=inbox,
        payloads=[encode(task(s, AGENT))],
        what="read an agent's inbox",
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for subscription" in server.lower()

    pull = pull_api(s.tasks_stream, s.agent_consumer(AGENT))
    watcher = await Watcher.on(await witness(connect, pull), [pull], marker=s.agents_list)
    local, server, reached = await forbidden_publish_bytes(
        client, watcher, pull, b'{"batch": 1}', what="pull an agent's tasks"
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for publish" in server.lower()


async def test_a_client_may_submit_turns_and_read_its_streams_and_results(
    connect: Connect,
) -> None:
    """The positive controls: the same credentials do what a client is for."""
    node, client = await connect("node"), await connect("client")
    s = node.subjects

    async def accept(msg: Message, env: Envelope) -> Message:
        assert isinstance(msg, TurnRequest)
        return TurnAccepted(conversation_id=msg.conversation_id, turn_id=msg.turn_id, node="n1")

    await node.subscribe(s.turn_submit, accept)
    reply = await client.request(s.turn_submit, turn())
    assert isinstance(reply, TurnAccepted)
    LEDGER.record(
        who(client),
        "submit a turn (request, reply to its inbox)",
        s.turn_submit,
        local=ALLOWED,
        server="delivered; TurnAccepted came back",
    )

    got: asyncio.Queue[tuple[str, Message]] = asyncio.Queue()

    async def keep(msg: Message, env: Envelope) -> None:
        got.put_nowait((env.subject, msg))

    for target, msg in ((s.stream(CID), delta()), (s.result(TID), forged_result())):
        local = await local_answer(client.subscribe(target, keep))
        await node.publish(target, msg)
        async with asyncio.timeout(5.0):
            subject, received = await got.get()
        assert (local, subject, received.kind) == (ALLOWED, target, msg.kind)
        LEDGER.record(
            who(client), f"read {msg.kind}", target, local=local, server=f"delivered {msg.kind}"
        )
    await client.flush()
    assert client.violations == []
