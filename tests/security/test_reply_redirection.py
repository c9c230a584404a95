"""No sender can aim the node at a subject: a reply goes to a reply inbox or nowhere.

The node answers requests and DONE signals with its own permissions, which cover its
durable heads, the results, every conversation's stream and every agent's inbox. The
reply subject of a request and the ``Actline-Reply`` header of a DONE are written by the
sender, so each attack here is an agent or a client with real credentials naming one of
those subjects as where the node should answer. The watcher (an admin connection) counts
what reaches the target; the node's refusal counters say the message was handled. A
positive control shows the same sender getting its answer on its own inbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from actline.actors.client.agent import REPLY_HEADER
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.messages import (
    Ack,
    AgentsList,
    ErrorReply,
    SubjectError,
    Subjects,
    decode,
    encode,
    new_id,
    subjects,
)
from tests.actors.harness import Scripted, start_node
from tests.security.roles import AGENT, OTHER, Connect, done
from tests.waiting import until

WAIT_S = 20.0
TARGETS: list[tuple[str, Callable[[Subjects], str]]] = [
    ("durable head", lambda s: f"$KV.{s.heads_bucket}.{s.kv_key('c-victim')}"),
    ("agent presence", lambda s: f"$KV.{s.agents_bucket}.{OTHER}"),
    ("turn result", lambda s: s.result("t-victim")),
    ("conversation stream", lambda s: s.stream("c-victim")),
    ("another agent's inbox", lambda s: s.agent_inbox(OTHER)),
]


@pytest.fixture
async def node(bus: Bus, tmp_path: Path) -> AsyncIterator[Node]:
    started = await start_node(bus, tmp_path / "home", Scripted())
    try:
        yield started
    finally:
        await started.stop()


async def _watch(connect: Connect, subject: str) -> list[bytes]:
    admin = await connect("admin")
    seen: list[bytes] = []

    async def collect(msg: object) -> None:
        seen.append(msg.data)  # type: ignore[attr-defined]

    await admin.nc.subscribe(subject, cb=collect)
    await admin.flush()
    return seen


@pytest.mark.parametrize(("target",), [pytest.param(t, id=n) for n, t in TARGETS])
async def test_a_done_whose_reply_header_names_a_subject_gets_no_verdict_there(
    node: Node, connect: Connect, target: Callable[[Subjects], str]
) -> None:
    agent = await connect("agent", name=AGENT)
    aimed = target(agent.subjects)
    seen = await _watch(connect, aimed)
    signal = done(AGENT).model_copy(update={"signal_id": new_id()})
    # the agent's own DONE subject, its own credentials: only the header is the attack
    await agent.nc.publish(
        agent.subjects.agent_done_of(AGENT), encode(signal), headers={REPLY_HEADER: aimed}
    )
    await agent.flush()
    await until(lambda: node.dones.refused_replies >= 1, WAIT_S)
    await node.bus.flush()
    assert seen == [], f"the node published on {aimed}"


async def test_a_done_with_its_own_inbox_still_gets_its_verdict(
    node: Node, connect: Connect
) -> None:
    agent = await connect("agent", name=AGENT)
    inbox = agent.nc.new_inbox()
    verdicts: list[bytes] = []

    async def collect(msg: object) -> None:
        verdicts.append(msg.data)  # type: ignore[attr-defined]

    await agent.nc.subscribe(inbox, cb=collect)
    signal = done(AGENT).model_copy(update={"signal_id": new_id()})
    await agent.nc.publish(
        agent.subjects.agent_done_of(AGENT), encode(signal), headers={REPLY_HEADER: inbox}
    )
    await until(lambda: bool(verdicts), WAIT_S)
    verdict = decode(verdicts[0])
    assert isinstance(verdict, Ack | ErrorReply), verdict
    assert node.dones.refused_replies == 0


@pytest.mark.parametrize(("target",), [pytest.param(t, id=n) for n, t in TARGETS])
async def test_a_request_whose_reply_subject_names_a_subject_gets_no_answer_there(
    node: Node, connect: Connect, target: Callable[[Subjects], str]
) -> None:
    client = await connect("client")
    aimed = target(client.subjects)
    seen = await _watch(connect, aimed)
    before = node.bus.counters["reply_refused"]
    # a request the node answers (the agent list), its reply subject chosen by the client
    await client.nc.publish(client.subjects.agents_list, encode(AgentsList()), reply=aimed)
    await client.flush()
    await until(lambda: node.bus.counters["reply_refused"] > before, WAIT_S)
    await node.bus.flush()
    assert seen == [], f"the node answered on {aimed}"


async def test_a_request_from_its_own_inbox_is_answered(node: Node, connect: Connect) -> None:
    client = await connect("client")
    answer = await client.request(client.subjects.agents_list, AgentsList(), timeout=WAIT_S)
    assert not isinstance(answer, ErrorReply), answer


@pytest.mark.parametrize(
    "subject",
    ["_INBOX", "_INBOX.", "_INBOX.*.y", "_INBOX.>", "_INBOX.a..b", "al.result.t1", "$KV.B.k"],
)
def test_only_a_reply_inbox_is_one(subject: str) -> None:
    with pytest.raises(SubjectError, match="reply inbox"):
        subjects.reply_inbox(subject)
    assert subjects.reply_inbox("_INBOX.UABC.xyz.1") == "_INBOX.UABC.xyz.1"
    assert subjects.reply_inbox("_INBOX.h0mTfg0Msq7nfC") == "_INBOX.h0mTfg0Msq7nfC"  # nats-py
