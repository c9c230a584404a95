"""Per-conversation quotas inside real turns: a node over a real nats-server, LMDB in a temp dir,
code.exec_python in its sandbox. A tool run past a quota is an error the model sees; the turn
ends, the conversation's next turn runs, another conversation on the node is unaffected, and
nothing stored before is lost."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.storage import NotStored, Store
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.tools import KnowledgeSpace
from actline.tools.registry import ToolContext, ToolOutput, ToolRegistry
from tests.actors.harness import KB, Scripted, run_turn, say, settings

KIB = 1024


async def big(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
    """Returns ``size`` characters."""
    return ToolOutput(content="x" * int(params["size"]))


async def start(bus: Bus, home: Path, model: Scripted, **changes: Any) -> Node:
    registry = ToolRegistry()
    registry.register("test.big", big, schema={"type": "object"})
    node = Node(
        bus, settings(home, **changes), model=model, registry=registry, knowledge=KnowledgeSpace(KB)
    )
    await node.start()
    return node


def outcomes(node: Node, cid: str) -> list[tuple[str, dict[str, Any]]]:
    """(tool, result data) of every tool call of a conversation, in order."""
    tl = node.conversations[cid].tl
    calls = {b.call_id: b.data["tool"] for b in tl.blocks if b.type == TOOL_CALL and b.data}
    return [
        (calls[b.call_id], b.data)
        for b in tl.blocks
        if b.type == TOOL_RESULT and b.call_id in calls and b.path.startswith("tc:") and b.data
    ]


def raw_blocks(store: Store, cid: str) -> dict[int, bytes]:
    def fn(txn: Any) -> dict[int, bytes]:
        cursor = txn.cursor(db=store.db["blocks"])
        prefix = f"{cid}/".encode()
        out: dict[int, bytes] = {}
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not bytes(key).startswith(prefix):
                    break
                out[int(bytes(key)[len(prefix) :])] = bytes(value)
        return out

    return store.read(fn)


def note(path: str, text: str) -> tuple[str, dict[str, str]]:
    return ("react.write", {"path": path, "channel": "canvas", "content": text, "kind": "file"})


BIG_RUN = """
import pathlib
pathlib.Path("files/data").mkdir(parents=True, exist_ok=True)
pathlib.Path("files/data/big.bin").write_bytes(b"x" * (200 * 1024))
pathlib.Path("files/data/small.txt").write_text("small")
print("wrote")
"""
FITTING_RUN = """
import pathlib
pathlib.Path("files/data").mkdir(parents=True, exist_ok=True)
pathlib.Path("files/data/mid.bin").write_bytes(b"y" * (32 * 1024))
"""


async def test_an_exec_run_past_the_workspace_quota_is_an_error_and_the_conversations_go_on(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "c1": [
                say("Notes first.", calls=[note("files/notes/a.md", "# kept")]),
                say("Running.", calls=[("code.exec_python", {"code": BIG_RUN})]),
                say("Done.", answer="The run was too large."),
                say("More notes.", calls=[note("files/notes/b.md", "# next")]),
                say("Done.", answer="Noted."),
            ],
            "c2": [
                say("Running.", calls=[("code.exec_python", {"code": FITTING_RUN})]),
                say("Done.", answer="Stored."),
            ],
        }
    )
    node = await start(bus, tmp_path / "home", model, quota_workspace_bytes=64 * KIB)
    try:
        first = await run_turn(client, "write a lot", "c1")
        assert first.result.result().status == "completed"
        (_, wrote), (_, ran) = outcomes(node, "c1")
        store = node.store
        before = raw_blocks(store, "c1")
        usage = store.usage("c1")
        # the next turn of c1 and a turn of c2 at the same time, on the same node
        second, other = await asyncio.gather(
            run_turn(client, "and a second note", "c1"), run_turn(client, "write some", "c2")
        )
        assert second.result.result().status == "completed"
        assert other.result.result().status == "completed"
        after = raw_blocks(store, "c1")
        (_, wrote_next) = outcomes(node, "c1")[-1]
        (_, ran_c2) = outcomes(node, "c2")[0]
        ws1, ws2 = node.conversations["c1"].workspace, node.conversations["c2"].workspace
        tid, tid2 = first.turn_id, second.turn_id
        assert ws1.read(f"fi:{tid2}.files/notes/a.md") == b"# kept"
        assert ws1.read(f"fi:{tid2}.files/notes/b.md") == b"# next"
        with pytest.raises(NotStored):
            ws1.read(f"fi:{tid}.files/data/small.txt")  # the whole run was refused
        mid = ws2.read(f"fi:{other.turn_id}.files/data/mid.bin")
        usage2 = store.usage("c2")
    finally:
        await node.stop()
    assert wrote["status"] == "ok"
    assert ran["status"] == "error", ran
    data = ran["data"]
    assert data["code"] == "quota_exceeded" and data["quota"] == "quota_workspace_bytes"
    assert (data["usage"], data["limit"]) == (len(b"# kept"), 64 * KIB)
    assert data["needed"] >= 200 * KIB and data["files"] == []
    assert "quota_workspace_bytes" in ran["error"] and "wrote" in ran["content"]
    assert usage.workspace_bytes == len(b"# kept")
    assert all(after[seq] == raw for seq, raw in before.items())  # nothing stored was lost
    assert len(after) > len(before)
    assert wrote_next["status"] == "ok"
    assert ran_c2["status"] == "ok", ran_c2
    assert mid == b"y" * (32 * KIB)
    assert usage2.workspace_bytes == 32 * KIB


async def test_a_tool_result_past_the_block_quota_is_replaced_and_the_turn_ends_cleanly(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    limit = 100_000
    model = Scripted(
        {
            "c1": [
                say(
                    "Two results.",
                    calls=[("test.big", {"size": 300_000}), ("test.big", {"size": 1000})],
                ),
                say("Done.", answer="One result was too large."),
                say("A small one.", calls=[("test.big", {"size": 2000})]),
                say("Done.", answer="Small is fine."),
            ],
            "c2": [
                say("A larger one.", calls=[("test.big", {"size": 60_000})]),
                say("Done.", answer="Fits here."),
            ],
        }
    )
    node = await start(bus, tmp_path / "home", model, quota_block_bytes=limit)
    try:
        first = await run_turn(client, "fetch big things", "c1")
        before = raw_blocks(node.store, "c1")
        second = await run_turn(client, "now a small one", "c1")
        other = await run_turn(client, "a larger one elsewhere", "c2")
        after = raw_blocks(node.store, "c1")
        results = outcomes(node, "c1")
        results_c2 = outcomes(node, "c2")
        used = node.store.usage("c1").block_bytes
    finally:
        await node.stop()
    for handle in (first, second, other):
        assert handle.result.result().status == "completed"
    (_, too_big), (_, small), (_, later) = results
    assert too_big["status"] == "error" and too_big["code"] == "quota_exceeded"
    assert too_big["quota"] == "quota_block_bytes" and too_big["limit"] == limit
    assert too_big["needed"] > limit and "test.big" in too_big["error"]
    assert small["status"] == "ok" and len(small["content"]) == 1000
    assert later["status"] == "ok" and len(later["content"]) == 2000
    assert results_c2[0][1]["status"] == "ok" and len(results_c2[0][1]["content"]) == 60_000
    assert used < limit
    assert all(after[seq] == raw for seq, raw in before.items())
