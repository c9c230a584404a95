"""The nats-server itself enforces the roles of bus/roles.py: what an outside agent may and may
not do.

Every forbidden attempt is made with the raw nats-py client of a connection holding that
role's credentials, so that actline's own check (``PermissionDenied``, shown too) cannot
be what stops it; the server must report a permissions violation AND the effect must
not happen (see ``attempts`` for how a negative is proved without sleeping). Positive
controls show the same connections doing what their role is for.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from actline.bus import WorkQueue
from actline.messages import Message, Subjects, encode
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
    who,
)
from tests.security.roles import AGENT, OTHER, TID, Connect, approval, done, task, turn, witness
from tests.waiting import until


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
        lambda s: s.approval("agent", AGENT, TID),
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


async def test_a_named_client_and_an_approver_agent_may_send_approvals(connect: Connect) -> None:
    """Approvals go to the nodes from a client or an agent issued with --approver, each on
    its own approval subject."""
    node = await connect("node")
    client = await connect("client", name="alice", approver=True)
    approver = await connect("agent", name=AGENT, approver=True)
    s = node.subjects
    for sender, role, name in ((client, "client", "alice"), (approver, "agent", AGENT)):
        target = s.approval(role, name, TID)
        watcher = await Watcher.on(node, [target], marker=s.deadletter)
        local = await local_answer(sender.publish(target, approval()))
        await until(lambda w=watcher, t=target: w.delivered(t) == 1, 5.0)
        LEDGER.record(who(sender), "approve a pending tool call", target, local=local,
                      server="delivered")  # fmt: skip
        assert local == ALLOWED
        await sender.flush()
        assert sender.violations == []


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
