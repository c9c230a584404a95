"""Part 3 of the loop benchmark: turns per second and CPU per turn, open and authenticated.

``throughput``: ``conversations`` new conversations on one node each run turns of 2 or 3
rounds, one after another, until ``total`` turns are done. ``auth_cost``: the same (synced)
on an authenticated server and on an open one, run open, auth, auth, open.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from pathlib import Path
from typing import Any

from actline.actors import Client, Node
from actline.messages import (
    Subjects,
)
from actline.tools import KnowledgeSpace
from bench.loop.model import (
    InstantModel,
    LoopCheckFailed,
    node_and_client,
    node_settings,
    tail_summary,
)
from bench.loop.rounds import run_turn


async def throughput(
    url: str,
    root: Path,
    knowledge: KnowledgeSpace,
    conversations: int,
    total: int,
    sync: bool,
    tag: str = "",
) -> dict[str, Any]:
    """``conversations`` workers, each running turns of 2-3 rounds in its own conversation."""
    label = f"tput{tag}-{'sync' if sync else 'nosync'}"
    subjects = Subjects(f"bench-loop-{label}")
    node_bus, client_bus = await node_and_client(url, label, subjects)
    model = InstantModel()
    settings = node_settings(root / label, f"n-{label}", sync)
    node = Node(node_bus, settings, model=model, knowledge=knowledge)
    await node.start()
    client = Client(client_bus)
    latencies: list[float] = []
    rounds_done = 0
    counter = itertools.count()
    try:
        await run_turn(client, model, "c-tput-warm", "t-tput-warm", 2)

        async def worker(c: int) -> None:
            nonlocal rounds_done
            cid = f"c-tput-{c}"
            while (i := next(counter)) < total:
                rounds = 2 + i % 2
                _, elapsed, _ = await run_turn(client, model, cid, f"t-tput-{i}", rounds)
                latencies.append(elapsed)
                rounds_done += rounds

        t0, cpu0 = time.perf_counter(), time.process_time()
        async with asyncio.TaskGroup() as tg:
            for c in range(conversations):
                tg.create_task(worker(c))
        seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await client.close()
        await node.stop()
        await client_bus.close()
        await node_bus.close()
    if len(latencies) != total:
        raise LoopCheckFailed("throughput", f"{len(latencies)} of {total} turns completed")
    return {
        "sync": sync,
        "conversations": conversations,
        "turns": total,
        "rounds": rounds_done,
        "seconds": seconds,
        "turns_per_s": total / seconds,
        "rounds_per_s": rounds_done / seconds,
        "cpu_ms_per_turn": cpu / total * 1e3,
        "turn": tail_summary(latencies),
    }


async def auth_cost(
    secured: str,
    open_url: str,
    root: Path,
    knowledge: KnowledgeSpace,
    conversations: int,
    total: int,
) -> dict[str, Any]:
    """Throughput (sync) with authentication (node and client roles) and without, run
    open, authenticated, authenticated, open so that drift hits both alike."""
    runs: dict[str, list[dict[str, Any]]] = {"open": [], "auth": []}
    for i, mode in enumerate(("open", "auth", "auth", "open")):
        url = secured if mode == "auth" else open_url
        runs[mode].append(
            await throughput(url, root, knowledge, conversations, total, True, f"-{mode}{i}")
        )

    def mean(mode: str, key: str) -> float:
        return statistics.fmean(r[key] for r in runs[mode])

    return {
        "turns": total,
        "conversations": conversations,
        "open_turns_per_s": mean("open", "turns_per_s"),
        "auth_turns_per_s": mean("auth", "turns_per_s"),
        "open_cpu_ms_per_turn": mean("open", "cpu_ms_per_turn"),
        "auth_cpu_ms_per_turn": mean("auth", "cpu_ms_per_turn"),
        "turns_per_s_ratio": mean("auth", "turns_per_s") / mean("open", "turns_per_s"),
        "cpu_ratio": mean("auth", "cpu_ms_per_turn") / mean("open", "cpu_ms_per_turn"),
    }
