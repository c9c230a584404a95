"""Who may manage stored conversations (``conv.manage`` on ``<prefix>.conv.manage``): a
client asks, only a node serves, and no other role reaches it. Enforced by the nats-server
itself: each forbidden attempt is made with the raw client too and nothing gets through."""

from __future__ import annotations

from pathlib import Path

import pytest

from actline.actors import NodeSettings
from actline.actors.node.holding import Holds
from actline.actors.node.manage import QUEUE, Management
from actline.bus import Bus, Subscription
from actline.bus.roles import permissions
from actline.messages import (
    ConversationManage,
    ConversationManaged,
    ErrorReply,
    Subjects,
    encode,
)
from actline.storage import Store
from tests.security.attempts import (
    ALLOWED,
    DENIED,
    LEDGER,
    Watcher,
    forbidden_publish,
    forbidden_subscription,
    who,
)
from tests.security.roles import AGENT, Connect, witness

LISTING = ConversationManage(op="list")


def test_the_client_role_asks_and_only_the_node_role_serves() -> None:
    s = Subjects("al")
    client, node = permissions("client", prefix="al"), permissions("node", prefix="al")
    assert client.may_publish(s.conv_manage) and not client.may_subscribe(s.conv_manage)
    assert node.may_subscribe(s.conv_manage)
    for role, name in (("agent", AGENT), ("pool-models", ""), ("pool-tools", "")):
        granted = permissions(role, name=name, prefix="al")
        assert not granted.may_publish(s.conv_manage), role
        assert not granted.may_subscribe(s.conv_manage), role


async def serve(node: Bus, home: Path) -> tuple[Subscription, Store]:
    store = Store(home, sync=False)

    async def release(cid: str) -> None:
        return None

    management = Management(
        node,
        store,
        NodeSettings(home=home),
        actors={},
        loading={},
        holds=Holds(),
        release=release,
    )
    return await management.start(), store


async def test_a_client_may_ask_a_node_to_manage_conversations(
    connect: Connect, tmp_path: Path
) -> None:
    node, client = await connect("node"), await connect("client")
    sub, store = await serve(node, tmp_path)
    try:
        listed = await client.request(client.subjects.conv_manage, LISTING)
        missing = await client.request(
            client.subjects.conv_manage,
            ConversationManage(op="delete", conversation_id="c-none"),
            raise_remote=False,
        )
    finally:
        await sub.unsubscribe()
        store.close()
    assert isinstance(listed, ConversationManaged) and listed.conversations == []
    assert isinstance(missing, ErrorReply) and missing.code == "conversation_not_found"
    LEDGER.record(
        who(client),
        "manage stored conversations (request)",
        client.subjects.conv_manage,
        local=ALLOWED,
        server="delivered; conv.managed came back",
    )


async def test_a_client_cannot_serve_conversation_management(connect: Connect) -> None:
    """A client in the nodes' queue group would take delete and fork requests meant for a
    node (and answer them falsely): the server refuses the subscription."""
    node, client = await connect("node"), await connect("client")
    target = node.subjects.conv_manage
    local, server, reached = await forbidden_subscription(
        client,
        target,
        sender=node,
        sent_on=target,
        payloads=[encode(LISTING)],
        queue=QUEUE,
        what="serve conversation management",
    )
    assert local == DENIED
    assert "permissions violation for subscription" in server.lower()
    assert reached == 0


@pytest.mark.parametrize(("role", "name"), [("agent", AGENT), ("pool-tools", "")])
async def test_an_agent_or_a_pool_cannot_manage_conversations(
    connect: Connect, role: str, name: str
) -> None:
    intruder = await connect(role, name=name)
    s = intruder.subjects
    target = s.conv_manage
    marker = s.agent_hello(AGENT) if role == "agent" else s.deadletter  # theirs to publish
    watcher = await Watcher.on(await witness(connect, target), [target], marker=marker)
    local, server, reached = await forbidden_publish(
        intruder, watcher, target, ConversationManage(op="delete", conversation_id="c1"),
        what="delete a conversation",
    )  # fmt: skip
    assert local == DENIED
    assert "permissions violation for publish" in server.lower()
    assert reached == 0
