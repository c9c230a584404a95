"""The local NATS cluster (``bus.EmbeddedCluster``) and what actline makes on it: three
servers with routes and a JetStream meta leader, every server's URL to connect with, a
connection that fails over to another server, and streams, work queues and buckets with a
replica count that follows the cluster (``ACTLINE_JS_REPLICAS``)."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
from nats.js.api import StreamConfig

from actline.actors import NodeSettings
from actline.actors.errors import SettingsError
from actline.bus import (
    Bus,
    BusError,
    ConnectFailed,
    EmbeddedCluster,
    EmbeddedNats,
    EventLog,
    JetStreamUnavailable,
    KvBucket,
    ReplicasUnavailable,
    cluster_size,
    replicas_for,
)
from actline.messages import Ack, Subjects, new_id
from tests.cluster.harness import start
from tests.waiting import until


def _prefix() -> Subjects:
    return Subjects(f"t{new_id().lower()}")


async def _replicas(bus: Bus, stream: str) -> int:
    info = await bus.nc.jetstream().stream_info(stream)
    return int(info.config.num_replicas or 1)


async def test_three_servers_route_to_each_other_under_one_meta_leader(
    nats_cluster: EmbeddedCluster,
) -> None:
    assert nats_cluster.problems() == []
    leader = nats_cluster.meta_leader()
    assert leader in (0, 1, 2)
    meta = (nats_cluster.jsz(leader) or {})["meta_cluster"]
    assert meta["cluster_size"] == 3 and meta["leader"] == f"n{leader}"
    assert len(nats_cluster.urls) == 3 and nats_cluster.url == ",".join(nats_cluster.urls)
    creds = nats_cluster.creds_path("node", prefix="al")
    bus = await Bus.connect(nats_cluster.url, creds=creds)
    try:
        assert bus.server in nats_cluster.urls
        assert cluster_size(bus) == 3
        assert replicas_for(bus, None) == 3
    finally:
        await bus.close()


async def test_every_stream_and_bucket_of_a_node_has_three_replicas_on_the_cluster(
    nats_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    names = _prefix()
    node = await start(nats_cluster.url, tmp_path, "r3", subject_names=names)
    try:
        streams = [
            info
            async for info in _streams(node.bus)
            if names.prefix.upper() in info.name.upper() or names.prefix in info.name
        ]
        made = {info.name: int(info.num_replicas or 1) for info in streams}
        # the turn queue, the DONE queue, results, agent tasks, leases, node beats,
        # presence, the durable copy's blocks and heads
        assert len(made) >= 8, made
        assert set(made.values()) == {3}, made
    finally:
        await node.stop()
        await node.bus.close()


async def _streams(bus: Bus):  # type: ignore[no-untyped-def]
    infos: list[Any] = []

    async def listed() -> bool:
        """The account's JetStream answers on this server: right after a cluster starts,
        the server a connection lands on may not have the account's limits yet (503)."""
        try:
            infos[:] = await bus.nc.jetstream().streams_info()
        except nats.js.errors.ServiceUnavailableError:
            return False
        return True

    await until(listed, timeout=30)
    for info in infos:
        yield info.config


async def test_one_server_gets_one_replica(nats_server: EmbeddedNats) -> None:
    bus = await Bus.connect(nats_server.url, subject_names=_prefix())
    try:
        assert cluster_size(bus) == 1 and replicas_for(bus, None) == 1
        prefix = bus.subjects.prefix
        name = f"{prefix.upper()}_ONE"
        await EventLog.open(bus, name=name, subjects=f"{prefix}.one.>", max_msg_size=1024)
        assert await _replicas(bus, name) == 1
        with pytest.raises(ReplicasUnavailable) as refused:
            replicas_for(bus, 3)
        assert "ACTLINE_JS_REPLICAS=3" in str(refused.value) and "1 server:" in str(refused.value)
    finally:
        await bus.close()


async def test_more_replicas_than_servers_is_refused_when_the_node_starts(
    nats_cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    names = _prefix()
    with pytest.raises(ReplicasUnavailable) as refused:
        await start(nats_cluster.url, tmp_path, "r5", subject_names=names, js_replicas=5)
    message = str(refused.value)
    assert "ACTLINE_JS_REPLICAS=5" in message and "has 3 servers" in message
    assert (refused.value.wanted, refused.value.servers) == (5, 3)
    # nothing was created under the node's prefix
    admin = await Bus.connect(nats_cluster.url)
    try:
        made = [c.name async for c in _streams(admin) if names.prefix.upper() in c.name.upper()]
        assert made == []
    finally:
        await admin.close()
    with pytest.raises(SettingsError, match="ACTLINE_JS_REPLICAS=7 must be a whole number"):
        NodeSettings.from_env({"ACTLINE_JS_REPLICAS": "7"})
    assert NodeSettings.from_env({"ACTLINE_JS_REPLICAS": "2"}).js_replicas == 2


async def test_an_explicit_count_and_a_stream_with_fewer_replicas_raised_to_it(
    nats_cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    bus = await Bus.connect(nats_cluster.url, subject_names=_prefix())
    try:
        prefix = bus.subjects.prefix
        queue = f"{prefix.upper()}_Q"  # (a work queue's consumer takes ~10 s to follow)
        # the tenant's account is new to the cluster: its first stream waits, as a node
        # does, while the meta layer cannot answer for it yet
        await first_stream(
            EventLog.open, bus, name=queue, subjects=f"{prefix}.q", max_msg_size=1024, replicas=1
        )
        await KvBucket.open(bus, name=f"{prefix}_kv", replicas=1)
        assert await _replicas(bus, queue) == 1
        assert await _replicas(bus, f"KV_{prefix}_kv") == 1
        bus.js_replicas = 2  # as a node does with ACTLINE_JS_REPLICAS=2
        with caplog.at_level(logging.INFO, logger="actline.bus.jetstream"):
            await EventLog.open(bus, name=queue, subjects=f"{prefix}.q", max_msg_size=1024)
            await KvBucket.open(bus, name=f"{prefix}_kv")
        assert await _replicas(bus, queue) == 2
        assert await _replicas(bus, f"KV_{prefix}_kv") == 2
        assert f"stream {queue} now has 2 replicas (it had 1)" in caplog.text
        bus.js_replicas = None  # follow the cluster: 3
        await EventLog.open(bus, name=queue, subjects=f"{prefix}.q", max_msg_size=1024)
        assert await _replicas(bus, queue) == 3
        # a stream with more replicas than asked keeps them
        await js_add(bus, StreamConfig(name=f"{prefix.upper()}_E", subjects=[f"{prefix}.e"]))
        await EventLog.open(
            bus, name=f"{prefix.upper()}_E", subjects=f"{prefix}.e", max_msg_size=1024, replicas=1
        )
        assert await _replicas(bus, f"{prefix.upper()}_E") == 3
    finally:
        await bus.close()


async def first_stream(open_it: Any, *args: Any, **kwargs: Any) -> None:
    """``open_it(*args, **kwargs)``, tried again while JetStream is unavailable (20 s)."""

    async def opened() -> bool:
        try:
            await open_it(*args, **kwargs)
        except JetStreamUnavailable:
            return False
        return True

    await until(opened, 20.0)


async def js_add(bus: Bus, config: StreamConfig) -> None:
    config.num_replicas = 3
    await bus.nc.jetstream().add_stream(config)


async def test_a_connection_fails_over_to_another_server_and_keeps_its_subscriptions(
    nats_cluster: EmbeddedCluster,
) -> None:
    names = _prefix()
    listener = await Bus.connect(nats_cluster.url, subject_names=names)
    talker = await Bus.connect(nats_cluster.url, subject_names=names)
    heard: list[bytes] = []

    async def on_raw(msg):  # type: ignore[no-untyped-def]
        heard.append(bytes(msg.data))

    try:
        await listener.nc.subscribe(f"{names.prefix}.ping", cb=on_raw)
        await listener.flush()
        first = listener.server
        nats_cluster.kill(nats_cluster.urls.index(first))
        await listener.wait_connected(10, reconnects=1)
        assert listener.server in nats_cluster.urls and listener.server != first

        async def delivered() -> bool:
            if talker.is_connected:
                await talker.nc.publish(f"{names.prefix}.ping", b"after")
            return b"after" in heard

        await until(delivered, 15)
        assert listener.counters["reconnects"] >= 1
    finally:
        await listener.close()
        await talker.close()


async def test_a_url_list_connects_past_a_dead_server_and_rejects_a_bad_entry(
    nats_cluster: EmbeddedCluster,
) -> None:
    nats_cluster.kill(0)
    bus = await Bus.connect(nats_cluster.url)  # the list starts with a dead server (maybe)
    try:
        assert bus.server in nats_cluster.urls[1:]
        assert cluster_size(bus) == 3  # the dead member still counts: its URL was given
    finally:
        await bus.close()
    with pytest.raises(ConnectFailed, match=re.escape("'nats://127.0.0.1' is not a server URL")):
        await Bus.connect(f"{nats_cluster.urls[1]},nats://127.0.0.1")
    with pytest.raises(ConnectFailed, match="'' is not a server URL"):
        await Bus.connect(f"{nats_cluster.urls[1]},")


async def test_a_bucket_opened_while_the_cluster_has_no_quorum_is_made_once_it_has(
    nats_cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """Two of three servers down: JetStream has no meta leader and its API does not answer.
    Opening a replicated bucket keeps trying (logged) instead of failing after one request's
    timeout, and succeeds once the servers are back."""
    bus = await Bus.connect(nats_cluster.urls[0], subject_names=_prefix())
    try:
        assert cluster_size(bus) == 3
        nats_cluster.kill(1)
        nats_cluster.kill(2)
        caplog.set_level(logging.WARNING, logger="actline.bus.jetstream")
        name = f"{bus.subjects.prefix.upper()}_LATE"
        opening = asyncio.create_task(KvBucket.open(bus, name=name, timeout=1.0))
        await until(lambda: "trying again" in caplog.text, timeout=30)
        assert not opening.done()
        nats_cluster.restart(1)
        nats_cluster.restart(2)
        bucket = await asyncio.wait_for(opening, 60)
        assert await bucket.create("k", b"v") > 0
        assert await _replicas(bus, f"KV_{name}") == 3
        assert f"open bucket {name}: no answer from the JetStream cluster" in caplog.text
    finally:
        await bus.close()


async def test_a_stored_publish_waits_out_a_failover_and_is_stored_once(
    nats_cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``failover_s`` and a msg id, a publish that finds no stream leader (two of
    three servers down) is tried again until the cluster is back, and stored once."""
    bus = await Bus.connect(nats_cluster.urls[0], subject_names=_prefix())
    try:
        prefix = bus.subjects.prefix
        name = f"{prefix.upper()}_FO"
        log = await EventLog.open(bus, name=name, subjects=f"{prefix}.fo.>", max_msg_size=4096)
        subject = f"{prefix}.fo.c1"
        note = Ack(detail="kept")
        nats_cluster.kill(1)
        nats_cluster.kill(2)
        caplog.set_level(logging.WARNING, logger="actline.bus")
        with pytest.raises(BusError):  # without failover_s: the error at once
            await bus.publish_stored(subject, note, timeout=1.0, msg_id="m1")
        publishing = asyncio.create_task(
            bus.publish_stored(subject, note, timeout=1.0, msg_id="m1", failover_s=60.0)
        )
        # the outage is said once (the connection's conditions), not once per try
        await until(lambda: "JetStream does not answer (publish to" in caplog.text, timeout=30)
        nats_cluster.restart(1)
        nats_cluster.restart(2)
        seq = await asyncio.wait_for(publishing, 60)
        again = await bus.publish_stored(subject, note, msg_id="m1", failover_s=60.0)
        assert again == seq  # the duplicate window: one message
        first = await log.next_after(subject, 0)
        assert first is not None and first[0] == seq
        assert await log.next_after(subject, seq + 1) is None
    finally:
        await bus.close()
