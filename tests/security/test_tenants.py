"""Tenants are NATS accounts: names have one canonical form, look-alikes are refused, and
nothing of one tenant is reachable with another's credentials, not even an admin's.

The attacks: tenant names that differ only in ``-``, ``_``, ``.`` or case; a name nested
in another (``al`` and ``al.eu``); a node creating a consumer on another tenant's stream
under its own stream's name; and, over random pairs of names, the most powerful
credential of one tenant (admin: every subject, the whole JetStream API of its account)
looking for the other's subjects, streams and buckets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nats.aio.msg import Msg

from actline.bus import Authority, Bus, EmbeddedNats, TenantRefused, WorkQueue
from actline.messages import SubjectError, Subjects, encode
from actline.messages.subjects import canonical_tenant
from tests.security.attempts import DENIED, LEDGER, server_answer, settled, who
from tests.security.roles import Connect, forged_result, open_turn_stream, turn


@pytest.mark.parametrize("name", ["acme_eu", "acme.eu", "ACME_EU", "Acme-EU", "al.eu", "a--b"])
def test_a_tenant_name_has_one_form_and_others_are_refused_naming_it(name: str) -> None:
    with pytest.raises(SubjectError, match="tenant") as refused:
        Subjects(name)
    assert repr(canonical_tenant(name)) in str(refused.value)


def test_a_name_that_differs_from_a_tenant_only_by_its_dashes_is_refused(tmp_path: Path) -> None:
    authority = Authority.open(tmp_path / "auth")
    authority.issue("node", prefix="acme-eu")
    with pytest.raises(TenantRefused, match=r"'acmeeu'.*'acme-eu'"):
        authority.issue("node", prefix="acmeeu")
    assert authority.tenants() == ["acme-eu"]


async def test_a_node_cannot_make_a_consumer_on_another_tenants_stream(
    connect: Connect, other_tenant: Subjects
) -> None:
    """The consumer-create pattern once let a stream's name stand in the consumer's place:
    ``CONSUMER.CREATE.<their results>.<our turns>.>`` matched ``CONSUMER.*.*.<our turns>.>``."""
    node = await connect("node")
    admin = await connect("admin")
    their_node = await connect("node", prefix=other_tenant.prefix)
    theirs = await WorkQueue.open(
        their_node,
        name=other_tenant.results_stream,
        subject=other_tenant.results_all,
        consumer="readers",
        ack_wait_s=30.0,
        max_msg_size=their_node.max_payload,
    )
    await theirs.close()
    ours = node.subjects.turn_stream
    wanted = other_tenant.results_all
    target = f"$JS.API.CONSUMER.CREATE.{other_tenant.results_stream}.{ours}.{wanted}"
    config = {"name": ours, "filter_subject": wanted}
    body = json.dumps({"stream_name": other_tenant.results_stream, "config": config})
    await node.nc.publish(target, body.encode(), reply=node.nc.new_inbox())
    refused = await server_answer(node, "publish", target)
    # even the tenant's admin, whom no pattern stops, finds no such stream in its account
    answer = await admin.nc.request(target, body.encode(), timeout=5)
    found = json.loads(answer.data)
    LEDGER.record(who(node), "make a consumer on another tenant's results", target,
                  local=DENIED, server=str(refused))  # fmt: skip
    assert "permissions violation" in refused.lower()
    assert found.get("error", {}).get("code") == 404, found


async def test_a_prefix_cannot_nest_in_another(connect: Connect) -> None:
    with pytest.raises(SubjectError):
        Subjects(f"{(await connect('node')).subjects.prefix}.eu")


_NAMES = st.from_regex(r"\A[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,4}){0,2}\Z").filter(
    lambda n: not n.startswith("sys")
)


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pair=st.tuples(_NAMES, _NAMES).filter(lambda p: p[0] != p[1]))
async def test_no_subject_stream_or_bucket_of_one_tenant_is_reachable_from_another(
    pair: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    mine, theirs = pair
    authority = Authority.open(tmp_path_factory.mktemp("tenants"))
    authority.issue("admin", prefix=mine)
    if mine.replace("-", "") == theirs.replace("-", ""):
        with pytest.raises(TenantRefused):
            authority.issue("admin", prefix=theirs)
        return
    async with EmbeddedNats(authority=authority) as server:
        buses = []
        for tenant, role in ((mine, "admin"), (theirs, "node")):
            creds = server.creds_path(role, prefix=tenant)
            buses.append(await Bus.connect(server.url, subject_names=Subjects(tenant), creds=creds))
        spy, victim = buses
        try:
            await _assert_unreachable(spy, victim)
        finally:
            for bus in buses:
                await bus.close()


async def _assert_unreachable(spy: Bus, victim: Bus) -> None:
    their = victim.subjects
    seen: list[Msg] = []

    async def collect(msg: Msg) -> None:
        seen.append(msg)

    await spy.nc.subscribe(">", cb=collect)  # every subject the spy's account carries
    await spy.flush()
    queue = await open_turn_stream(victim)
    await queue.close()
    await victim.nc.publish(their.turn_submit, encode(turn()))
    await victim.nc.publish(their.result("t1"), encode(forged_result()))
    await settled(victim, spy)
    assert [m.subject for m in seen] == [], "the other tenant's traffic reached this one"
    for name in (their.turn_stream, f"KV_{their.heads_bucket}"):
        answer = await spy.nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=5)
        assert json.loads(answer.data).get("error", {}).get("code") == 404, answer.data
    names = await spy.nc.request("$JS.API.STREAM.NAMES", b"{}", timeout=5)
    assert their.turn_stream not in names.data.decode()
