"""The cluster benchmark's scenarios: a throughput measurement (fresh NATS and node actors,
a warm-up, the timed batch, what bounds it) and the takeover of a killed node actor."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

from actline.actors.configuration.settings import NodeSettings
from actline.messages import ReActResult
from bench.cluster.nodes import (
    LATENCY_S,
    MODELS,
    NODE_TTL_S,
    SAMPLE_S,
    ServerFactory,
    batch,
    completed,
    machine_busy_s,
    proc_cpu_s,
    quiet,
    requests,
    server_pids,
    start_nodes,
    stop_nodes,
    usages,
)

ACK_WAIT_S = 15.0
"""Ack wait of the throughput runs (no turn is redelivered while a node is busy)."""
TAKEOVER_ACK_WAIT_S = 2.0
WARMUP_TRIES = 5
"""Warm-up batches at most, until every node actor has taken a turn."""


def throughput(
    ray: Any,
    servers: ServerFactory,
    tmp: Path,
    *,
    model: str,
    nodes: int,
    per_node: int,
    warmup: int,
    mode: str = "cluster",
    turns: int = 1,
    sync: bool = False,
    quiet_wait_s: float = 0.0,
) -> dict[str, Any]:
    """One measurement: fresh NATS and node actors (``mode`` cluster, or single with one
    node), a warm-up batch, the timed batch of ``per_node`` conversations of ``turns``
    turns per node actor."""
    tag = f"{model}{mode[0]}{nodes}-{time.monotonic_ns()}"
    with servers(tmp / f"nats-{tag}") as server:
        actors = start_nodes(
            ray,
            server,
            tmp / f"home-{tag}",
            nodes,
            MODELS[model],
            ACK_WAIT_S,
            sync,
            cluster=mode == "cluster",
        )
        try:
            warm_s, warm, tries = 0.0, list[ReActResult](), 0
            while tries < WARMUP_TRIES:  # until every node actor took some of it
                tries += 1
                warm_turns = requests(tmp, warmup * nodes, f"w{tries}{tag}-", turns)
                took, got = asyncio.run(batch(server, warm_turns))
                warm_s, warm = warm_s + took, warm + got
                if all(u.get("taken", 0) > 0 for u in asyncio.run(usages(actors))):
                    break
            waited, busy = quiet(quiet_wait_s)
            before = asyncio.run(usages(actors))
            pids = server_pids(server)
            inflight: list[int] = []

            async def sample() -> None:
                while True:
                    await asyncio.sleep(SAMPLE_S)
                    inflight.append(sum(u.get("active", 0) for u in await usages(actors)))

            nats0 = sum(proc_cpu_s(p) for p in pids)
            driver0, machine0 = time.process_time(), machine_busy_s()
            seconds, results = asyncio.run(
                batch(server, requests(tmp, per_node * nodes, f"m{tag}-", turns), sample)
            )
            driver = time.process_time() - driver0
            machine = machine_busy_s() - machine0
            nats = sum(proc_cpu_s(p) for p in pids) - nats0
            after = asyncio.run(usages(actors))
        finally:
            stop_nodes(ray, actors)
    done = len(results)
    pairs = list(zip(before, after, strict=True))

    def grew(key: str) -> int:
        return sum(int(b.get(key, 0)) - int(a.get(key, 0)) for a, b in pairs)

    node_cpu = sum(b["cpu_s"] - a["cpu_s"] for a, b in pairs)
    ms = 1e3 / done
    row: dict[str, Any] = {
        "model": model,
        "mode": mode,
        "nodes": nodes,
        "config": config_label(mode, nodes),
        "turns_per_conversation": turns,
        "turns": done,
        "completed": completed(results),
        "warmup_turns": len(warm),
        "warmup_completed": completed(warm),
        "warmup_taken": [u.get("taken", 0) for u in before],
        "warmup_s": warm_s,
        "warmup_batches": tries,
        "quiet_waited_s": waited,
        "busy_cores_before": busy,
        "seconds": seconds,
        "turns_per_s": done / seconds,
        "per_node_turns_per_s": done / seconds / nodes,
        "taken": [b["taken"] - a["taken"] for a, b in pairs],
        "calls_per_turn": grew("calls") / done,
        "deferred": grew("deferred"),
        "ordered": grew("ordered"),
        "handed_off": grew("handed_off"),
        "node_cpu_ms_per_turn": node_cpu * ms,
        "nats_cpu_ms_per_turn": nats * ms,
        "driver_cpu_ms_per_turn": driver * ms,
        "node_cores": node_cpu / seconds,
        "others_cores": max(0.0, machine - node_cpu - nats - driver) / seconds,
        "inflight_mean": statistics.fmean(inflight) if inflight else 0.0,
        "inflight_max": max(inflight, default=0),
    }
    row["total_cpu_ms_per_turn"] = sum(
        row[k] for k in ("node_cpu_ms_per_turn", "nats_cpu_ms_per_turn", "driver_cpu_ms_per_turn")
    )
    return row | bounds(row)


def config_label(mode: str, nodes: int) -> str:
    """``cluster x2``, ``single x1``: a measured configuration."""
    return f"{mode} x{nodes}"


def bounds(row: dict[str, Any]) -> dict[str, Any]:
    """What caps a measurement on an idle machine: the nodes' concurrency (io model), one
    core per node, and the machine's cores for everything ours; the lowest is ``ceiling``.
    ``left_ceiling``: the same with only the cores the rest of the machine left us."""
    settings = NodeSettings()
    nodes = row["nodes"]
    per_node_cpu = row["node_cpu_ms_per_turn"] / 1e3
    caps: dict[str, float] = {"core_per_node": nodes / per_node_cpu if per_node_cpu else 0.0}
    latency = MODELS[row["model"]]
    if latency and row["calls_per_turn"]:
        slots = min(settings.max_active_turns, settings.streamers)
        caps["concurrency"] = nodes * slots / (row["calls_per_turn"] * latency)
    total = row["total_cpu_ms_per_turn"] / 1e3
    cores = os.cpu_count() or 1
    if total:
        caps["machine"] = cores / total
    bound = min(caps, key=lambda k: caps[k])
    left = max(cores - row["others_cores"], 0.0) / total if total else 0.0
    left = min(left, caps[bound])
    return {
        "bounds": caps,
        "bound": bound,
        "ceiling": caps[bound],
        "fraction": row["turns_per_s"] / caps[bound] if caps[bound] else 0.0,
        "left_ceiling": left,
        "left_fraction": row["turns_per_s"] / left if left else 0.0,
    }


def takeover(
    ray: Any, servers: ServerFactory, tmp: Path, *, conversations: int, warmup: int
) -> dict[str, Any]:
    """Two node actors (io model, node TTL 2 s); one is killed while it runs turns."""
    with servers(tmp / "nats-kill") as server:
        actors = start_nodes(
            ray, server, tmp / "home-kill", 2, LATENCY_S, TAKEOVER_ACK_WAIT_S, sync=False
        )
        try:
            asyncio.run(batch(server, requests(tmp, warmup * 2, "wk")))
            victim: dict[str, Any] = {}
            measured = requests(tmp, conversations, "k")
            ids = {r.turn_id for r in measured}

            async def kill() -> None:
                while True:  # until the victim runs a few turns of this batch (a warm-up
                    # turn whose ack is still on its way is running too: not counted)
                    usage = (await usages(actors[:1]))[0]
                    running = [t for t in usage.get("running", ()) if t in ids]
                    if len(running) >= 3:
                        break
                    await asyncio.sleep(0.005)
                ray.kill(actors[0], no_restart=True)
                victim.update(killed_at=time.time(), running=running)

            seconds, results = asyncio.run(batch(server, measured, kill))
            finished = time.time()
        finally:
            stop_nodes(ray, actors[1:])
    running = set(victim.get("running", ()))
    killed_at = float(victim.get("killed_at", finished))
    theirs = [r for r in results if r.turn_id in running]
    last = max((r.ts.timestamp() for r in theirs), default=finished)
    return {
        "turns": len(results),
        "completed": completed(results),
        "seconds": seconds,
        "node_ttl_s": NODE_TTL_S,
        "victim_turns": len(running),
        "victim_completed": completed(theirs),
        "resume_s": last - killed_at,
        "batch_end_after_kill_s": finished - killed_at,
    }
