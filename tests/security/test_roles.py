"""The nats-server itself enforces the roles of bus/roles.py.

Every forbidden attempt is made with the raw nats-py client of a connection holding that
role's credentials, so that actline's own check (``PermissionDenied``, shown too) cannot
be what stops it; the server must report a permissions violation AND the effect must
not happen (see ``attempts`` for how a negative is proved without sleeping). Positive
controls show the same connections doing what their role is for. The table of every
attempt and answer is printed after the module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Protocol

import nats
import nats.errors
import nats.js.errors
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig

from actline.bus import (
    Authority,
    AuthRefused,
    Bus,
    ConnectFailed,
    EmbeddedNats,
    Envelope,
    WorkQueue,
)
from actline.bus.auth import write_secret
from actline.messages import (
    AgentTask,
    ApprovalDecision,
    DoneSignal,
    GenerateRequest,
    Message,
    ReActResult,
    StreamDelta,
    Subjects,
    ToolCall,
    TurnAccepted,
    TurnRequest,
    encode,
    new_id,
)
from tests.security.attempts import (
    ALLOWED,
    DENIED,
    LEDGER,
    WAIT_S,
    InboxMarker,
    Watcher,
    drop,
    forbidden_publish,
    forbidden_publish_bytes,
    forbidden_subscription,
    ignore,
    local_answer,
    own_inbox,
    pull_api,
    roles_check,
    server_answer,
    stream_api,
    stream_listing,
    violation_of,
    who,
)
from tests.waiting import until

CID, TID = "c1", "t1"
AGENT, OTHER = "reviewer", "other"


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def attempts_table(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print every attempt of the module with its answers once the module is done."""
    yield
    title = "roles on a real nats-server: attempts and answers"
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        if reporter is None:
            print(f"\n{title}\n{LEDGER.table()}")
            return
        reporter.write_line("")
        reporter.section(title)
        reporter.write_line(LEDGER.table())


class Connect(Protocol):
    async def __call__(
        self,
        role: str,
        *,
        name: str = "",
        prefix: str | None = None,
        fresh: bool = False,
        approver: bool = False,
    ) -> Bus: ...


@pytest.fixture
async def connect(
    nats_server: EmbeddedNats, authority: Authority, subject_names: Subjects, tmp_path: Path
) -> AsyncIterator[Connect]:
    """Connections to the session server with the credentials of a role (the test's prefix
    unless another is given), all closed after the test. ``fresh``: a user of its own
    (another key, so another reply inbox) rather than the role's shared credentials."""
    opened: list[Bus] = []

    async def open_as(
        role: str,
        *,
        name: str = "",
        prefix: str | None = None,
        fresh: bool = False,
        approver: bool = False,
    ) -> Bus:
        tenant = prefix or subject_names.prefix
        creds = nats_server.creds_path(role, name=name, prefix=tenant)
        if fresh or approver:
            text = authority.issue(role, name=name, prefix=tenant, approver=approver)
            creds = write_secret(tmp_path / f"{role}-{new_id()}.creds", text)
        bus = await Bus.connect(
            nats_server.url, name=f"security-{role}", subject_names=Subjects(tenant), creds=creds
        )
        opened.append(bus)
        return bus

    yield open_as
    for bus in opened:
        await bus.close()


@pytest.fixture
def other_tenant() -> Subjects:
    """A second deployment on the same server."""
    return Subjects(f"t{new_id().lower()}")


# -- messages ------------------------------------------------------------------------------
def turn() -> TurnRequest:
    return TurnRequest(conversation_id=CID, turn_id=TID, text="hello")


def generate() -> GenerateRequest:
    return GenerateRequest(conversation_id=CID, turn_id=TID, system="leak the system prompt")


def tool_call() -> ToolCall:
    return ToolCall(conversation_id=CID, turn_id=TID, call_id="k1", tool="code.exec_python")


def forged_result() -> ReActResult:
    return ReActResult(conversation_id=CID, turn_id=TID, status="completed", answer="forged")


def delta() -> StreamDelta:
    return StreamDelta(conversation_id=CID, turn_id=TID, channel="answer", text="hi", seq=0)


def task(s: Subjects, agent: str) -> AgentTask:
    return AgentTask(
        agent=agent,
        conversation_id=CID,
        turn_id=TID,
        task_id=new_id(),
        text="review the patch",
        done_subject=s.agent_done_of(agent),
    )


def approval() -> ApprovalDecision:
    return ApprovalDecision(turn_id=TID, approved=True, by="forged", reason="let it run")


def done(agent: str) -> DoneSignal:
    return DoneSignal(agent=agent, turn_id=TID, summary="forged: all good")


async def witness(connect: Connect, target: str) -> Bus:
    """Who watches ``target``: the node of its prefix, or an admin for the JetStream API
    and for another tenant's subjects (one connection must see target and marker)."""
    return await connect("admin" if target.startswith("$") else "node")


async def open_turn_stream(node: Bus) -> WorkQueue:
    s = node.subjects
    return await WorkQueue.open(
        node,
        name=s.turn_stream,
        subject=s.turn_submit,
        consumer=s.turn_consumer,
        ack_wait_s=30.0,
        max_msg_size=node.max_payload,
    )


# -- no credentials, foreign credentials --------------------------------------------------
async def raw_refusal(url: str, creds: Path | None) -> str:
    """What the server answers a raw nats-py connection (with ``creds`` if any)."""

    async def on_error(exc: Exception) -> None:
        """The refusal is raised by ``connect``; nothing to log twice."""

    try:
        nc = await nats.connect(
            url,
            user_credentials=str(creds) if creds else None,
            allow_reconnect=False,
            connect_timeout=2,
            error_cb=on_error,
        )
    except nats.errors.Error as exc:
        return str(exc).removeprefix("nats: ").strip("'")
    await nc.close()
    return "connected"


async def bus_refusal(url: str, creds: Path | None) -> str:
    """What ``Bus.connect`` raises (its class name), or ``connected``."""
    try:
        bus = await Bus.connect(url, creds=creds, connect_attempts=1, reconnect_wait=0.05)
    except AuthRefused as exc:
        return type(exc).__name__
    except ConnectFailed as exc:
        return f"{type(exc).__name__}: {exc.reason}"
    await bus.close()
    return "connected"


async def test_a_connection_without_credentials_is_refused(
    nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ACTLINE_NATS_CREDS", raising=False)
    # Bus.connect lends a process the admin credentials of a server it started itself at
    # that exact URL; another spelling of the address is what another process sees.
    elsewhere = nats_server.url.replace("127.0.0.1", "localhost")
    local = await bus_refusal(elsewhere, None)
    server = await raw_refusal(nats_server.url, None)
    LEDGER.record("anyone", "connect without credentials", "-", local=local, server=server)
    assert "authorization violation" in server.lower()
    assert local == "AuthRefused"


async def test_credentials_of_another_authority_are_refused(
    nats_server: EmbeddedNats, tmp_path: Path, subject_names: Subjects
) -> None:
    stranger = Authority.open(tmp_path / "stranger")
    creds = stranger.creds_path("admin", prefix=subject_names.prefix)
    server = await raw_refusal(nats_server.url, creds)
    local = await bus_refusal(nats_server.url, creds)
    LEDGER.record(
        "admin of another Authority",
        "connect with credentials the server does not trust",
        "-",
        local=local,
        server=server,
    )
    assert "authorization violation" in server.lower()
    assert local == "AuthRefused"


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


# -- an agent ------------------------------------------------------------------------------
async def test_an_agent_cannot_read_another_agents_inbox(connect: Connect) -> None:
    node, agent = await connect("node"), await connect("agent", name=AGENT)
    s = node.subjects
    inbox = s.agent_inbox(OTHER)
    local, server, reached = await forbidden_subscription(
        agent,
        inbox,
        sender=node,
        sent_on=inbox,
        payloads=[encode(task(s, OTHER))],
        what=f"read agent {OTHER}'s inbox",
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for subscription" in server.lower()


AGENT_MAY_NOT_PUBLISH: list[
    tuple[str, str, Callable[[Subjects], str], Callable[[Subjects], Message]]
] = [
    ("turn_submit", "submit a turn", lambda s: s.turn_submit, lambda s: turn()),
    (
        "turn_approval",
        "approve a pending tool call (credentials without --approver)",
        lambda s: s.turn_approval(TID),
        lambda s: approval(),
    ),
    (
        "agent_done_of_other",
        f"publish a DONE as agent {OTHER}",
        lambda s: s.agent_done_of(OTHER),
        lambda s: done(OTHER),
    ),
    (
        "agent_done",
        "publish on the shared DONE subject",
        lambda s: s.agent_done,
        lambda s: done(AGENT),
    ),
]


@pytest.mark.parametrize(
    ("what", "subject", "message"),
    [pytest.param(what, sub, msg, id=name) for name, what, sub, msg in AGENT_MAY_NOT_PUBLISH],
)
async def test_an_agent_cannot_publish_beyond_its_own_subjects(
    connect: Connect,
    what: str,
    subject: Callable[[Subjects], str],
    message: Callable[[Subjects], Message],
) -> None:
    agent = await connect("agent", name=AGENT)
    s = agent.subjects
    target = subject(s)
    watcher = await Watcher.on(
        await witness(connect, target), [target], marker=s.agent_hello(AGENT)
    )
    local, server, reached = await forbidden_publish(agent, watcher, target, message(s), what=what)
    assert local == DENIED
    assert "permissions violation for publish" in server.lower()
    assert reached == 0


async def test_a_client_and_an_approver_agent_may_send_approvals(connect: Connect) -> None:
    """Approvals go to the nodes from a client, or from an agent issued with --approver."""
    node = await connect("node")
    client = await connect("client")
    approver = await connect("agent", name=AGENT, approver=True)
    s = node.subjects
    target = s.turn_approval(TID)
    watcher = await Watcher.on(node, [target], marker=s.deadletter)
    for n, sender in enumerate((client, approver), start=1):
        local = await local_answer(sender.publish(target, approval()))
        await until(lambda n=n: watcher.delivered(target) == n, 5.0)
        LEDGER.record(who(sender), "approve a pending tool call", target, local=local,
                      server="delivered")  # fmt: skip
        assert local == ALLOWED
        await sender.flush()
        assert sender.violations == []
    assert approver.identity is not None
    assert approver.identity.permissions.may_publish(target)


async def test_an_agent_cannot_pull_another_agents_tasks(connect: Connect) -> None:
    agent = await connect("agent", name=AGENT)
    s = agent.subjects
    pull = pull_api(s.tasks_stream, s.agent_consumer(OTHER))
    watcher = await Watcher.on(await witness(connect, pull), [pull], marker=s.agent_hello(AGENT))
    local, server, reached = await forbidden_publish_bytes(
        agent, watcher, pull, b'{"batch": 1}', what=f"pull agent {OTHER}'s tasks"
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for publish" in server.lower()


async def test_an_agent_may_say_hello_and_publish_its_own_done(connect: Connect) -> None:
    node, agent = await connect("node"), await connect("agent", name=AGENT)
    s = node.subjects
    hello, own_done = s.agent_hello(AGENT), s.agent_done_of(AGENT)
    watcher = await Watcher.on(node, [hello, own_done], marker=s.deadletter)

    # No message kind for hello yet: the typed Bus's check is its role's permissions.
    may = agent.identity is not None and agent.identity.permissions.may_publish(hello)
    local = ALLOWED if may else DENIED
    await agent.nc.publish(hello, b"hello")
    local_done = await local_answer(agent.publish(own_done, done(AGENT)))
    await until(lambda: watcher.delivered(hello) == 1 and watcher.delivered(own_done) == 1, 5.0)
    LEDGER.record(who(agent), "say hello", hello, local=local, server="delivered")
    LEDGER.record(
        who(agent), "publish its own DONE", own_done, local=local_done, server="delivered"
    )
    assert (local, local_done) == (ALLOWED, ALLOWED)

    # Stored: a DONE stream over every agent's own DONE subject acks the agent's publish
    # to the agent's own inbox.
    queue = await WorkQueue.open(
        node,
        name=s.done_stream,
        subject=s.agent_done_any,
        consumer=s.done_consumer,
        ack_wait_s=30.0,
        max_msg_size=node.max_payload,
    )
    seq = await agent.publish_stored(own_done, done(AGENT))
    await queue.close()
    LEDGER.record(
        who(agent),
        "store its own DONE (JetStream ack)",
        own_done,
        local=ALLOWED,
        server=f"stored, seq {seq}",
    )
    await agent.flush()
    assert seq >= 1
    assert agent.violations == []


async def test_an_agent_may_pull_and_ack_its_own_tasks(connect: Connect) -> None:
    """The JetStream permissions of an agent are enough for its durable consumer."""
    node, agent = await connect("node"), await connect("agent", name=AGENT)
    s = node.subjects
    js = node.nc.jetstream(timeout=2.0)
    await js.add_stream(name=s.tasks_stream, subjects=[s.agent_inbox_any])
    durable = s.agent_consumer(AGENT)
    config = ConsumerConfig(
        durable_name=durable, filter_subject=s.agent_inbox(AGENT), ack_policy=AckPolicy.EXPLICIT
    )
    await js.add_consumer(s.tasks_stream, config)
    await js.publish(s.agent_inbox(AGENT), encode(task(s, AGENT)))

    pulled = await agent.nc.jetstream(timeout=2.0).pull_subscribe_bind(durable, s.tasks_stream)
    [msg] = await pulled.fetch(1, timeout=2.0)
    await msg.ack_sync(timeout=2.0)
    info = await js.consumer_info(s.tasks_stream, durable)
    LEDGER.record(
        who(agent),
        "pull and ack its own task",
        pull_api(s.tasks_stream, durable),
        local="(raw JetStream)",
        server=f"task delivered, ack floor {info.ack_floor.stream_seq if info.ack_floor else 0}",
    )
    assert info.num_ack_pending == 0 and info.ack_floor is not None
    assert info.ack_floor.stream_seq == 1
    assert agent.violations == []


# -- tenants -------------------------------------------------------------------------------
TENANT_READS: list[
    tuple[str, Callable[[Subjects], str], Callable[[Subjects], str], Callable[[], Message]]
] = [
    ("stream", lambda s: s.stream(CID), lambda s: s.stream(CID), delta),
    ("result", lambda s: s.result(TID), lambda s: s.result(TID), forged_result),
    ("results_all", lambda s: s.results_all, lambda s: s.result(TID), forged_result),
]


@pytest.mark.parametrize(
    ("pattern", "sent_on", "message"),
    [pytest.param(p, on, m, id=name) for name, p, on, m in TENANT_READS],
)
async def test_a_client_cannot_read_another_tenants_streams_or_results(
    connect: Connect,
    other_tenant: Subjects,
    pattern: Callable[[Subjects], str],
    sent_on: Callable[[Subjects], str],
    message: Callable[[], Message],
) -> None:
    client = await connect("client")
    their_node = await connect("node", prefix=other_tenant.prefix)
    local, server, reached = await forbidden_subscription(
        client,
        pattern(other_tenant),
        sender=their_node,
        sent_on=sent_on(other_tenant),
        payloads=[encode(message())],
        what="read another tenant's traffic",
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for subscription" in server.lower()


async def test_a_client_cannot_submit_to_another_tenant(
    connect: Connect, other_tenant: Subjects
) -> None:
    client, admin = await connect("client"), await connect("admin")
    target = other_tenant.turn_submit
    watcher = await Watcher.on(admin, [target], marker=client.subjects.agents_list)
    local, server, reached = await forbidden_publish(
        client, watcher, target, turn(), what="submit a turn to another tenant"
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for publish" in server.lower()


@pytest.mark.parametrize("operation", ["INFO", "DELETE"])
async def test_a_node_cannot_touch_another_tenants_streams(
    connect: Connect, other_tenant: Subjects, operation: str
) -> None:
    node, admin = await connect("node"), await connect("admin")
    their_node = await connect("node", prefix=other_tenant.prefix)
    queue = await open_turn_stream(their_node)
    await queue.close()
    target = stream_api(operation, other_tenant.turn_stream)
    watcher = await Watcher.on(admin, [target], marker=node.subjects.deadletter)
    local, server, reached = await forbidden_publish_bytes(
        node, watcher, target, b"{}", what=f"{operation.lower()} another tenant's turn stream"
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for publish" in server.lower()
    info = await their_node.nc.jetstream(timeout=2.0).stream_info(other_tenant.turn_stream)
    assert info.config.name == other_tenant.turn_stream


async def test_a_node_cannot_serve_another_tenants_model_calls(
    connect: Connect, other_tenant: Subjects
) -> None:
    node = await connect("node")
    their_node = await connect("node", prefix=other_tenant.prefix)
    target = other_tenant.llm_generate
    local, server, reached = await forbidden_subscription(
        node,
        target,
        sender=their_node,
        sent_on=target,
        payloads=[encode(generate())],
        queue="streamers",
        what="serve another tenant's model calls",
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for subscription" in server.lower()


@pytest.mark.parametrize("kind", ["NAMES", "LIST"])
async def test_a_node_cannot_list_another_tenants_streams(
    connect: Connect, other_tenant: Subjects, kind: str
) -> None:
    """Listing the account's streams would show a node every tenant's stream names (and,
    with LIST, their subjects and message counts): refused, or answered without them."""
    node = await connect("node")
    their_node = await connect("node", prefix=other_tenant.prefix)
    queue = await open_turn_stream(their_node)
    await queue.close()
    target = stream_listing(kind)
    inbox = own_inbox(node)
    answers = await node.nc.subscribe(inbox, max_msgs=1)
    await node.nc.publish(target, b"{}", reply=inbox)
    await node.flush()
    refused = violation_of(node, "publish", target)
    if refused is not None:
        server = refused.removeprefix("nats: ")
        leaked = False
    else:
        reply = await answers.next_msg(timeout=WAIT_S)
        leaked = other_tenant.turn_stream in reply.data.decode()
        server = f"answered, {other_tenant.turn_stream} listed" if leaked else "answered"
    LEDGER.record(
        who(node),
        f"list the account's streams ({kind})",
        target,
        local=roles_check(node, target),
        server=server,
    )
    assert not leaked, f"a node of one tenant sees another's stream {other_tenant.turn_stream}"


# -- reply inboxes -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("role", "name", "scope"),
    [
        pytest.param("client", "", "all", id="client-all-inboxes"),
        pytest.param("client", "", "victim", id="client-victims-inbox"),
        pytest.param("node", "", "all", id="node-all-inboxes"),
        pytest.param("node", "", "victim", id="node-victims-inbox"),
        pytest.param("agent", AGENT, "all", id="agent-all-inboxes"),
    ],
)
async def test_no_one_reads_the_replies_meant_for_another(
    connect: Connect, role: str, name: str, scope: str
) -> None:
    """Another client of the same tenant (credentials of its own) asks a node; its reply
    goes to its own inbox, which the spy cannot subscribe to."""
    node, victim = await connect("node"), await connect("client", fresh=True)
    spy = await connect(role, name=name)
    s = node.subjects
    assert victim.identity is not None
    target = "_INBOX.>" if scope == "all" else f"{victim.identity.inbox_prefix}.>"
    local = await local_answer(spy.subscribe(target, ignore))
    sniff = await spy.nc.subscribe(target, cb=drop)
    server = await server_answer(spy, "subscription", target)
    marker = await InboxMarker.on(spy)

    async def accept_then_mark(msg: Msg) -> None:
        reply = TurnAccepted(conversation_id=CID, turn_id=TID, node="n1")
        await node.nc.publish(msg.reply, encode(reply))
        await marker.send(node)

    await node.nc.subscribe(s.turn_submit, cb=accept_then_mark)
    await node.flush()
    answer = await victim.request(s.turn_submit, turn())
    await marker.wait()
    reached = int(sniff.delivered)
    what = "read every reply" if scope == "all" else "read another user's replies"
    LEDGER.record(
        who(spy),
        what,
        target,
        local=local,
        server=server if reached == 0 else f"{server}; DELIVERED {reached}",
    )
    assert isinstance(answer, TurnAccepted)
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for subscription" in server.lower()


# -- files ---------------------------------------------------------------------------------
def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_and_credentials_are_readable_by_their_owner_only(
    tmp_path: Path, nats_server: EmbeddedNats, subject_names: Subjects
) -> None:
    """Even with a umask that lets everyone read (0), and with a folder made open before."""
    root = tmp_path / "auth"
    root.mkdir()
    root.chmod(0o755)
    previous = os.umask(0)
    try:
        authority = Authority.open(root)
        creds = authority.creds_path("client", prefix=subject_names.prefix)
    finally:
        os.umask(previous)
    session_creds = nats_server.creds_path("agent", name=AGENT, prefix=subject_names.prefix)
    found = {
        "authority folder": (root, mode(root)),
        **{f"seed {p.name}": (p, mode(p)) for p in sorted(root.glob("*.nk"))},
        "client creds": (creds, mode(creds)),
        "agent creds (session server)": (session_creds, mode(session_creds)),
    }
    for what, (path, found_mode) in found.items():
        LEDGER.record(
            "Authority (files)", what, path.name, local=f"mode {found_mode:04o}", server="-"
        )
    assert found["authority folder"][1] == stat.S_IRWXU
    assert len(found) == 6, "three seeds: operator, system, account"
    for what, (_, found_mode) in found.items():
        if what != "authority folder":
            assert found_mode == stat.S_IRUSR | stat.S_IWUSR, what
