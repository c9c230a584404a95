"""A KV bucket deleted under a running cluster-mode node is made again, with a warning, and
the node serves on: the lease bucket (its leases are checked again, none is kept on a stale
key), the durable heads (a conversation whose head is gone is copied whole again) and the
node beats. Compared with the answers of the same conversations before the deletion."""

from __future__ import annotations

import logging
from pathlib import Path

import nats.js.errors
import pytest

from actline.actors.client.client import Client
from actline.bus import Bus, EmbeddedNats
from actline.bus.jetstream import healer
from actline.messages import Subjects
from tests.cluster.harness import start
from tests.waiting import until

QUESTION = "What are the limits?"


@pytest.mark.parametrize("which", ["leases_bucket", "heads_bucket", "nodes_bucket"])
async def test_a_deleted_bucket_is_made_again_and_the_node_serves_on(
    fresh_nats: EmbeddedNats,
    subject_names: Subjects,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    which: str,
) -> None:
    monkeypatch.setattr(healer, "HEAL_CONFIRM_S", 0.5)  # 10 s: a failover's "not found"
    monkeypatch.setattr(healer, "HEAL_CHECK_S", 0.1)
    caplog.set_level(logging.WARNING)
    node = await start(fresh_nats.url, tmp_path, "n1", subject_names=subject_names)
    bus = await Bus.connect(fresh_nats.url, subject_names=subject_names)
    client = Client(bus)
    try:
        before = await client.ask(QUESTION, conversation_id="c1", timeout=60)
        assert before.status == "completed"
        name = getattr(subject_names, which)
        await bus.nc.jetstream().delete_key_value(name)
        # c1 (held, with a head) and c2 (new) are served again
        again = await client.ask(QUESTION, conversation_id="c1", timeout=60)
        fresh = await client.ask(QUESTION, conversation_id="c2", timeout=60)
        assert again.status == fresh.status == "completed", (again.error, fresh.error)
        assert again.answer == fresh.answer == before.answer
        # the bucket is back (the node's beat makes the nodes bucket again on its own)
        await until(lambda: _exists(bus, name), timeout=30)
        assert f"KV bucket {name} is gone (deleted?): making it again" in caplog.text
        # the durable copy holds every block the node stored: of c2 (begun after the
        # deletion) and, unless the heads were deleted, of c1 (with its heads gone, c1 is
        # copied whole again when a node next loads it)
        durable = node.ownership.durable  # type: ignore[attr-defined]
        for cid in ("c2",) if which == "heads_bucket" else ("c1", "c2"):

            async def whole(cid: str = cid) -> bool:
                copy = await durable.read(cid)
                stored = len(list(node.store.iter_blocks(cid)))
                return copy is not None and len(copy.blocks) == stored

            await until(whole, timeout=30)
        # leases work on the bucket made again: a later turn of c1 runs under n1's lease
        # (a lease found gone when the node checked its leases was let go, and taken anew)
        later = await client.ask(QUESTION, conversation_id="c1", timeout=60)
        assert later.status == "completed"
        assert await node.ownership.leases.owner("c1") == "n1"  # type: ignore[attr-defined]
    finally:
        await client.close()
        await bus.close()
        await node.stop()
        await node.bus.close()


async def _exists(bus: Bus, name: str) -> bool:
    try:
        await bus.nc.jetstream().key_value(name)
    except nats.js.errors.BucketNotFoundError:
        return False
    return True
