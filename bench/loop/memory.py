"""Part 4 of the loop benchmark: the resident memory of a node per conversation waiting on
an outside agent's DONE.

The node runs in a child process (fresh, so that memory freed before is not reused unseen)
and reports its resident memory when asked; the turns, each in a new conversation, call
``agent.send`` to an agent nobody answers, and are cancelled at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import tempfile
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from actline.actors import Client, Node, TurnHandle
from actline.bus import Bus
from actline.messages import (
    Subjects,
)
from actline.tools import KnowledgeSpace
from bench.loop.model import (
    KB,
    NOBODY,
    QUESTION,
    TURN_TIMEOUT_S,
    InstantModel,
    LoopCheckFailed,
    Plan,
    node_settings,
    role,
    rss_bytes,
)


def memory_node(
    url: str, prefix: str, capacity: int, conn: Connection, creds: str | None = None
) -> None:
    """The child process of part 4: a node that reports its resident memory when asked."""
    try:
        asyncio.run(_memory_node(url, prefix, capacity, conn, creds))
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))


async def _memory_node(
    url: str, prefix: str, capacity: int, conn: Connection, creds: str | None
) -> None:
    with tempfile.TemporaryDirectory(prefix="actline-bench-loop-memory-") as tmp:
        bus = await Bus.connect(
            url, name="bench-loop-node-memory", subject_names=Subjects(prefix), creds=creds
        )
        settings = node_settings(
            Path(tmp), "n-memory", True, max_active_turns=capacity, wait_timeout_s=3600.0
        )
        model = InstantModel(Plan(2, NOBODY))
        node = Node(bus, settings, model=model, knowledge=KnowledgeSpace(KB, embedder=None))
        await node.start()
        try:
            conn.send(("ready", {}))
            while (command := await asyncio.to_thread(conn.recv)) != "stop":
                gc.collect()
                rss, source = rss_bytes()
                running = sum(1 for c in node.conversations.values() if c.running_turn)
                conn.send((command, {"rss": rss, "source": source, "running": running}))
        finally:
            await node.stop()
            await bus.close()


async def _ask(conn: Connection, command: str | None, timeout: float) -> dict[str, Any]:
    """Send ``command`` (if any) to the node process and wait for its answer to it."""
    if command is not None:
        conn.send(command)
    if not await asyncio.to_thread(conn.poll, timeout):
        raise LoopCheckFailed("memory", f"the node process did not answer {command} in {timeout} s")
    tag, value = conn.recv()
    if tag == "error" or (command is not None and tag != command):
        raise LoopCheckFailed("memory", f"the node process answered {tag}: {value}")
    answer: dict[str, Any] = value
    return answer


async def memory(url: str, count: int) -> dict[str, Any]:
    """Resident memory of a node process per conversation waiting on an outside agent's DONE."""
    warmup = max(2, count // 10)
    prefix = "bench-loop-memory"
    spawn = multiprocessing.get_context("spawn")
    ours, theirs = spawn.Pipe()
    child = spawn.Process(
        target=memory_node,
        args=(url, prefix, count + warmup + 8, theirs, role(url, "node", Subjects(prefix))),
        daemon=True,
    )
    child.start()
    bus = await Bus.connect(
        url,
        name="bench-loop-client-memory",
        subject_names=Subjects(prefix),
        creds=role(url, "client", Subjects(prefix)),
    )
    client = Client(bus)

    async def batch(tag: str, n: int) -> list[TurnHandle]:
        handles = []
        for i in range(n):
            cid = f"c-wait-{tag}-{i}"
            handles.append(await client.submit(QUESTION, conversation_id=cid, turn_id=f"{cid}-t"))
        await asyncio.gather(*(h.wait_for("waiting", timeout=TURN_TIMEOUT_S) for h in handles))
        return handles

    async def cancel(handles: list[TurnHandle]) -> list[str]:
        for handle in handles:
            await client.cancel(handle.turn_id, "benchmark over")
        results = await asyncio.gather(*(h.wait(TURN_TIMEOUT_S) for h in handles))
        return [r.status for r in results]

    try:
        await _ask(ours, None, 4 * TURN_TIMEOUT_S)
        warm = await cancel(await batch("warm", warmup))
        before = await _ask(ours, "before", TURN_TIMEOUT_S)
        handles = await batch("k", count)
        after = await _ask(ours, "after", TURN_TIMEOUT_S)
        statuses = await cancel(handles)
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        await client.close()
        await bus.close()
        await asyncio.to_thread(child.join, 30)
        if child.is_alive():
            child.terminate()
    if after["running"] != count:
        raise LoopCheckFailed("memory", f"{after['running']} turns running, expected {count}")
    if set(warm) != {"cancelled"} or set(statuses) != {"cancelled"}:
        ended = sorted(set(warm) | set(statuses))
        raise LoopCheckFailed("memory", f"the cancelled turns ended {ended}")
    return {
        "waiting": count,
        "warmup": warmup,
        "rss_before_bytes": before["rss"],
        "rss_after_bytes": after["rss"],
        "per_conversation_bytes": (after["rss"] - before["rss"]) / count,
        "rss_source": after["source"],
        "cancelled": len(statuses),
    }
