"""A node process killed mid-turn: another node process on the same home resumes the turn."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections import Counter
from pathlib import Path

from actline.actors.client.client import Client
from actline.bus import Bus, EmbeddedNats
from actline.storage import Store
from actline.timeline.blocks import TOOL_CALL, TURN_HEADER, USER_PROMPT
from tests.actors.harness import KB
from tests.creds import creds_env

ROOT = Path(__file__).resolve().parents[3]


async def start_node_process(
    nats: EmbeddedNats, prefix: str, home: Path, node_id: str
) -> asyncio.subprocess.Process:
    env = {**os.environ, "ACTLINE_SUBJECT_PREFIX": prefix, "PYTHONPATH": str(ROOT)}
    env |= creds_env(nats.url, "node", prefix=prefix)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "actline.cli.node",
        "--nats",
        nats.url,
        "--home",
        str(home),
        "--docs",
        str(KB),
        "--node-id",
        node_id,
        "--model-delay",
        "0.02",
        "--ack-wait",
        "1",
        "--grace",
        "0",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert b"ready" in line, line
    return proc


def stored_blocks(home: Path, cid: str) -> list[dict[str, object]]:
    with Store(home) as store:
        return list(store.iter_blocks(cid))


async def test_a_killed_node_s_turn_is_resumed_by_another_without_duplicates(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    prefix = bus.subjects.prefix
    first = await start_node_process(nats_server, prefix, home, "node-a")
    second = None
    client = Client(bus)
    try:
        handle = await client.submit(
            "How do the pricing tiers differ, and what are the quotas?", conversation_id="c1"
        )
        await handle.wait_for("tool_result", timeout=30)
        await handle.wait_for("thinking", detail="round 3", timeout=30)
        assert handle.accepted is not None and handle.accepted.node == "node-a"
        first.send_signal(signal.SIGKILL)
        await first.wait()
        before = stored_blocks(home, "c1")
        assert before, "round blocks are persisted as each round completes"
        second = await start_node_process(nats_server, prefix, home, "node-b")
        result = await handle.wait(60)
    finally:
        await client.close()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    proc.kill()
    assert result.status == "completed", result.error
    assert "[S:" not in result.answer and result.sources_used
    accepted = [e.node for e in handle.events if e.kind == "turn.accepted"]
    assert accepted[0] == "node-a" and accepted[-1] == "node-b"
    resumed = [c for c in handle.cards if c.detail.startswith("resumed after round")]
    assert len(resumed) == 1
    after = stored_blocks(home, "c1")
    # nothing persisted before the kill was lost or rewritten, nothing was added twice
    assert [b["id"] for b in after[: len(before)]] == [b["id"] for b in before]
    assert [b["seq"] for b in after] == list(range(len(after)))
    same = Counter(
        (str(b.get("path")), str(b.get("text")), repr(b.get("data"))) for b in after
    )  # a plan snapshot path holds each version of the plan: equal content is a duplicate
    assert [key for key, n in same.items() if n > 1] == []
    calls = Counter(str(b["path"]) for b in after if b["type"] == TOOL_CALL)
    assert set(calls.values()) == {1}
    types = Counter(str(b["type"]) for b in after)
    assert types[USER_PROMPT] == 1 and types[TURN_HEADER] == 1
    assert types[TOOL_CALL] >= 2
    with Store(home) as store:
        assert store.turn_record("c1", handle.turn_id)["status"] == "completed"
