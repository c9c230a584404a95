"""``python -m bench cluster``: turns per second with 1 and 2 node actors, and takeover time.

Real parts: a local Ray (``ray.init(num_cpus=2)``), an embedded nats-server per run, node
actors in cluster mode (leases and the durable copy in JetStream), the offline model behind
a fixed 50 ms latency per call. 100 conversations of one turn each are submitted at once;
the figure is turns per second over the batch, for 1 node actor (the baseline) and 2. The
takeover run kills one of 2 node actors (``ray.kill``) while its turns are in flight and
measures the time from the kill until every turn has completed (lease TTL and redelivery
2 s). This machine has 2 cores: both node actors, the driver and nats-server share them.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from actors.ray_job import load_requests, node_actor_class, run_requests
from bus import Bus, EmbeddedNats

from .common import RESULTS, write_result

KB = Path(__file__).resolve().parents[1] / "examples" / "kb"
QUESTIONS = ("How do the pricing tiers differ?", "What are the quotas?", "How do backups work?")
LATENCY_S = 0.05


def _turns(path: Path, conversations: int, prefix: str) -> Path:
    with path.open("w") as handle:
        for c in range(conversations):
            row = {"conversation_id": f"{prefix}{c}", "turn_id": f"{prefix}{c}-t1"}
            row["text"] = QUESTIONS[c % len(QUESTIONS)]
            handle.write(json.dumps(row) + "\n")
    return path


def _actors(ray: Any, server: EmbeddedNats, home: Path, count: int, ttl: float) -> list[Any]:
    cls = node_actor_class(0.5)
    actors = [
        cls.remote(
            server.url,
            {
                "home": home / f"n{i}",
                "node_id": f"n{i}",
                "knowledge_dir": KB,
                "followup_grace_s": 0.0,
                "lease_ttl_s": ttl,
                "ack_wait_s": ttl,
                "storage_sync": False,
            },
            model_latency=LATENCY_S,
            creds=server.creds_path("node").read_text(),
        )
        for i in range(count)
    ]
    ray.get([a.start.remote() for a in actors])
    return actors


async def _batch(url: str, requests: list[Any], on_start: Any = None) -> tuple[float, list[Any]]:
    bus = await Bus.connect(url)
    try:
        started = time.perf_counter()
        job = asyncio.create_task(
            run_requests(bus, requests, timeout_s=120, console=Console(quiet=True))
        )
        if on_start is not None:
            await on_start()
        results = await job
        return time.perf_counter() - started, results
    finally:
        await bus.close()


def throughput(ray: Any, nodes: int, conversations: int, tmp: Path) -> dict[str, Any]:
    with EmbeddedNats(store_dir=tmp / f"nats{nodes}") as server:
        actors = _actors(ray, server, tmp / f"home{nodes}", nodes, 15.0)
        requests = load_requests(_turns(tmp / f"t{nodes}.jsonl", conversations, f"n{nodes}c"))
        seconds, results = asyncio.run(_batch(server.url, requests))
        for actor in actors:
            ray.get(actor.stop.remote())
            ray.kill(actor)
    done = sum(r.status == "completed" for r in results)
    return {"nodes": nodes, "turns": len(results), "completed": done, "seconds": seconds,
            "turns_per_s": len(results) / seconds}  # fmt: skip


def takeover(ray: Any, conversations: int, tmp: Path) -> dict[str, Any]:
    with EmbeddedNats(store_dir=tmp / "nats-kill") as server:
        actors = _actors(ray, server, tmp / "home-kill", 2, 2.0)
        requests = load_requests(_turns(tmp / "kill.jsonl", conversations, "k"))
        killed_at: list[float] = []

        async def taken() -> int:
            stats = await asyncio.wrap_future(actors[0].stats.remote().future())
            return int(stats["turns_taken"])

        async def kill() -> None:
            for _ in range(2000):  # a few seconds at most: the batch is being submitted
                if await taken() >= 3:
                    break
                await asyncio.sleep(0.01)
            ray.kill(actors[0], no_restart=True)
            killed_at.append(time.perf_counter())

        seconds, results = asyncio.run(_batch(server.url, requests, kill))
        finished = time.perf_counter()
        ray.get(actors[1].stop.remote())
        ray.kill(actors[1])
    done = sum(r.status == "completed" for r in results)
    return {"turns": len(results), "completed": done, "seconds": seconds,
            "resume_s": finished - killed_at[0]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    console = Console()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="actline-bench-cluster-") as tmp:
            one = throughput(ray, 1, 100, Path(tmp))
            two = throughput(ray, 2, 100, Path(tmp))
            kill = takeover(ray, 20, Path(tmp))
    finally:
        ray.shutdown()
    result = {"benchmark": "cluster", "latency_s": LATENCY_S, "one": one, "two": two,
              "ratio": two["turns_per_s"] / one["turns_per_s"], "takeover": kill,
              "cpus": os.cpu_count()}  # fmt: skip
    table = Table(title="cluster: 100 conversations, model 50 ms per call")
    for column in ("run", "turns", "completed", "seconds", "turns/s"):
        table.add_column(column, justify="right")
    for name, row in (("1 node actor", one), ("2 node actors", two)):
        table.add_row(name, str(row["turns"]), str(row["completed"]), f"{row['seconds']:.1f}",
                      f"{row['turns_per_s']:.1f}")  # fmt: skip
    table.add_row("kill 1 of 2", str(kill["turns"]), str(kill["completed"]),
                  f"{kill['seconds']:.1f}", f"resume {kill['resume_s']:.1f} s")  # fmt: skip
    table.caption = f"2 vs 1: {result['ratio']:.2f}x on {os.cpu_count()} cores (shared)"
    console.print(table)
    write_result(console, RESULTS / "cluster.json", result)
    ok = one["completed"] == one["turns"] and two["completed"] == two["turns"]
    return 0 if ok and kill["completed"] == kill["turns"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
