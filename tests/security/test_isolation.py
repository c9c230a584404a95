"""The nats-server itself enforces the roles of bus/roles.py: one tenant never reaches another's
streams, results or model calls, and no one reads the replies meant for another user.

Every forbidden attempt is made with the raw nats-py client of a connection holding that
role's credentials, so that actline's own check (``PermissionDenied``, shown too) cannot
be what stops it; the server must report a permissions violation AND the effect must
not happen (see ``attempts`` for how a negative is proved without sleeping). Positive
controls show the same connections doing what their role is for.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from nats.aio.msg import Msg

from actline.messages import Message, Subjects, TurnAccepted, encode
from tests.security.attempts import (
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
    roles_check,
    server_answer,
    stream_api,
    stream_listing,
    violation_of,
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
    open_turn_stream,
    turn,
)

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
    client = await connect("client")
    their_admin = await connect("admin", prefix=other_tenant.prefix)
    target = other_tenant.turn_submit
    watcher = await Watcher.on(their_admin, [target], marker=other_tenant.agents_list)
    local, server, reached = await forbidden_publish(
        client, watcher, target, turn(), what="submit a turn to another tenant"
    )
    assert (local, reached) == (DENIED, 0)
    assert "permissions violation for publish" in server.lower()


@pytest.mark.parametrize("operation", ["INFO", "DELETE"])
async def test_a_node_cannot_touch_another_tenants_streams(
    connect: Connect, other_tenant: Subjects, operation: str
) -> None:
    node = await connect("node")
    their_node = await connect("node", prefix=other_tenant.prefix)
    their_admin = await connect("admin", prefix=other_tenant.prefix)
    queue = await open_turn_stream(their_node)
    await queue.close()
    target = stream_api(operation, other_tenant.turn_stream)
    watcher = await Watcher.on(their_admin, [target], marker=other_tenant.deadletter)
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
