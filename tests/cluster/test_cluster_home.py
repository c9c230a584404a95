"""``actline timeline`` and ``actline trace`` over a Ray job's home: one node home per node
actor (``<home>/<node id>``), written here by two in-process cluster nodes that serve turns
one after the other, the second taking over a conversation of the first."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from actline.actors.client.client import Client
from actline.bus import Bus, EmbeddedNats
from actline.cli.main import main as actline

from .harness import start

A, B = "ray-t-node-0", "ray-t-node-1"


async def serve(url: str, home: Path, node_id: str, turns: list[tuple[str, str]]) -> None:
    """Start ``node_id`` alone, run ``turns`` (conversation, turn id) on it, stop it."""
    node = await start(url, home, node_id)
    bus = await Bus.connect(url)
    client = Client(bus)
    try:
        for cid, tid in turns:
            handle = await client.submit("What are the quotas?", conversation_id=cid, turn_id=tid)
            result = await handle.wait(60)
            assert result.status == "completed", result.error
    finally:
        await client.close()
        await bus.close()
        await node.stop()
        await node.bus.close()


@pytest.mark.timeout(180)
def test_timeline_and_trace_look_into_the_node_homes_of_a_cluster_home(
    fresh_nats: EmbeddedNats, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "cluster"
    asyncio.run(serve(fresh_nats.url, home, A, [("c1", "c1-t1"), ("c2", "c2-t1")]))
    asyncio.run(serve(fresh_nats.url, home, B, [("c1", "c1-t2"), ("c3", "c3-t1")]))
    capsys.readouterr()

    assert actline(["timeline", "--list", "--json", "--home", str(home)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((r["conversation_id"], r["node"]) for r in rows) == [
        ("c1", A),
        ("c1", B),
        ("c2", A),
        ("c3", B),
    ]
    revisions = {(r["conversation_id"], r["node"]): r["revision"] for r in rows}
    assert revisions["c1", B] > revisions["c1", A]  # B went on from A's copy
    assert actline(["timeline", "--list", "--home", str(home)]) == 0
    table = capsys.readouterr().out
    assert "node" in table and A in table and B in table
    # c1-t1 is in both stores (B rebuilt c1 from the copy): the day's turns count it once
    assert re.search(r"\d{4}-\d\d-\d\d\D+4\D", table.split("cost by day")[1]), table

    assert actline(["timeline", "c1", "--home", str(home)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "c1-t1.user.prompt" in shown and "c1-t2.user.prompt" in shown  # both turns
    assert f"on node {B}" in shown and f"older revisions on {A}" in shown
    assert actline(["timeline", "c9", "--home", str(home)]) == 2
    assert "does not exist in" in capsys.readouterr().err

    for turn, node in (("c1-t1", A), ("c2-t1", A), ("c1-t2", B), ("c3-t1", B)):
        assert actline(["trace", turn, "--json", "--home", str(home)]) == 0
        found = json.loads(capsys.readouterr().out)
        assert found["session"]["turn_id"] == turn
        assert found["spans"] and {s["node"] for s in found["spans"]} == {node}
    assert actline(["trace", "c3-t1", "--home", str(home)]) == 0
    assert "turn c3-t1" in capsys.readouterr().out
