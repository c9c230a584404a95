"""``python -m bench cluster``: scale-out with 1 and 2 node actors, CPU per turn, takeover.

Real parts: a local Ray (``ray.init(num_cpus=2)``), a nats-server per measurement (from a
server factory: ``embedded`` today; a scenario takes the factory, so a cluster of servers
drops in), node actors in cluster mode (leases and the durable copy in JetStream), the
batch submitted by ``actline.actors.cluster.ray_job.run_requests`` (the Ray job's own client). Each
conversation has one turn (the offline model answers in 5 model calls).

Two model kinds: ``io``, the offline model behind a fixed 50 ms latency per call
(``actline.actors.cluster.ray_job.FixedLatency``: a node spends most of a turn waiting), and
``cpu``, the offline model alone (a node is busy for all of it).

Throughput. Every measurement starts a fresh nats-server and fresh node actors (same
state for 1 and 2 nodes), runs a warm-up batch (``--warmup`` conversations per node; every
node actor must have taken some of it: Ray worker start, imports, the knowledge index, the
streams and buckets are all paid before timing), then the timed batch of ``--per-node``
conversations per node actor. The configurations are interleaved (for each round: io 1,
io 2, cpu 1, cpu 2), ``--rounds`` times, and the medians are reported: on a machine
shared with others, load lands on one measurement, not on one configuration. Reported per
measurement: turns/s, per node, the node actors' process CPU per turn (read by an actor
method, ``time.process_time``), nats-server's and this driver's CPU per turn (``/proc``),
the CPU the rest of the machine used meanwhile (``/proc/stat`` minus ours: Ray's daemons
and other users), model calls per turn and turns in flight (sampled every 0.25 s).

Bounds of the io model on one node actor: its concurrency, ``min(max_active_turns,
streamers) / (calls per turn x 50 ms)`` turns/s, and one core, ``1 / node CPU per turn``;
the achieved fraction is against the lower. Two node actors on this 2-core machine also
share the cores with nats-server, the driver and Ray: ``cores / total CPU per turn``.

Adding a scenario (e.g. a nats-server killed in a cluster of three): a function
``(ray, servers, tmp, **sizes) -> dict`` built from ``start_nodes``, ``batch``, ``usages``
and ``stop_nodes`` like ``takeover``, called from ``main`` with its own factory
(``servers`` returns a context manager whose value has ``url`` and ``creds_path``;
``server_pids`` reads ``pids`` of a cluster for the CPU figures).

Takeover: 2 node actors (node TTL and ack wait 2 s, the defaults), io model; one is killed
(``ray.kill``) while it runs turns; reported: kill to the last result of the turns it was
running (from the results' node timestamps), against the node TTL + 2 s.

Targets (issue 22): io, 1 node actor >= 0.7x of its lower bound; io, 2 vs 1 >= 1.6x
(median of the per-round ratios); takeover within node TTL + 2 s. The exit status is 1
when a turn did not complete or a target is missed.

    python -m bench.cluster [--quick] [--rounds 3] [--per-node 300] [--warmup 40]
        [--models io,cpu] [--takeover 60] [--out bench/results/cluster.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.table import Table

from actline.actors.cluster.ray_job import NodeActor, load_requests, run_requests
from actline.actors.configuration.settings import NodeSettings
from actline.bus import Bus, EmbeddedNats
from actline.messages import ReActResult, TurnRequest

from .common import RESULTS

ROOT = Path(__file__).resolve().parents[1]
KB = ROOT / "examples" / "kb"
QUESTIONS = ("How do the pricing tiers differ?", "What are the quotas?", "How do backups work?")
LATENCY_S = 0.05
MODELS = {"io": LATENCY_S, "cpu": 0.0}
"""Model kind -> fixed latency per model call."""
NODE_CPUS = 0.5
"""Ray's ``num_cpus`` of a node actor: a scheduling label, not a limit on its CPU use."""
ACK_WAIT_S = 15.0
"""Ack wait of the throughput runs (no turn is redelivered while a node is busy)."""
TAKEOVER_ACK_WAIT_S = 2.0
NODE_TTL_S = 2.0
"""A node whose beat stops this long is dead (``ACTLINE_NODE_TTL``, the default)."""
TARGET_IO_FRACTION = 0.7
TARGET_IO_RATIO = 1.6
TARGET_TAKEOVER_SLACK_S = 2.0
SAMPLE_S = 0.25
WARMUP_TRIES = 5
"""Warm-up batches at most, until every node actor has taken a turn."""
QUIET_CORES = 0.3
"""Before timing, wait (up to ``--quiet-wait``) until the machine is busy under this."""
SHORT = {"core_per_node": "core", "concurrency": "conc", "machine": "cores"}
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Servers(Protocol):
    """What a scenario needs of the NATS it runs on (``EmbeddedNats``, or a cluster)."""

    @property
    def url(self) -> str: ...

    def creds_path(self, role: str, *, name: str = "", prefix: str = "al") -> Path: ...


ServerFactory = Callable[[Path], AbstractContextManager[Servers]]
"""Makes the NATS of one measurement, given a folder of its own."""


def embedded(store: Path) -> AbstractContextManager[Servers]:
    """One embedded nats-server (authenticated) storing under ``store``."""
    return EmbeddedNats(store_dir=store)


def server_pids(server: Servers) -> list[int]:
    """The nats-server process ids behind ``server`` (``pids`` of a cluster, else ``pid``)."""
    pids = getattr(server, "pids", None)
    if pids is not None:
        return [int(p) for p in (pids() if callable(pids) else pids) if p]
    pid = getattr(server, "pid", None)
    return [int(pid)] if pid else []


class BenchNode(NodeActor):
    """A node actor that also reports its process's CPU time and its counters."""

    async def usage(self) -> dict[str, Any]:
        node = self.node
        out: dict[str, Any] = {"cpu_s": time.process_time(), "pid": os.getpid()}
        if node is not None:
            streamer = node.streamer
            out |= {
                "taken": node.turns_taken,
                "settled": node.turns_settled,
                "active": node.queue.active,
                "running": node.queue.running(),
                "calls": streamer.calls if streamer is not None else 0,
                "deferred": node.queue.deferred,
                "ordered": node.queue.ordered,
            }
        return out


# --- CPU accounting --------------------------------------------------------------------------


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_busy_s() -> float:
    """CPU seconds every core of this machine spent busy since boot (``/proc/stat``)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK


def quiet(wait_s: float, below: float = QUIET_CORES) -> tuple[float, float]:
    """Wait up to ``wait_s`` for the machine to be quiet (busy under ``below`` cores over
    half a second); returns the seconds waited and the busy cores last seen."""
    started = time.monotonic()
    while True:
        busy0 = machine_busy_s()
        time.sleep(0.5)
        busy = (machine_busy_s() - busy0) / 0.5
        waited = time.monotonic() - started
        if busy < below or waited >= wait_s:
            return waited, busy


# --- node actors and batches -----------------------------------------------------------------


def requests(tmp: Path, conversations: int, prefix: str) -> list[TurnRequest]:
    """``conversations`` one-turn conversations, through the job's own file format."""
    path = tmp / f"{prefix}.jsonl"
    with path.open("w") as handle:
        for c in range(conversations):
            row = {"conversation_id": f"{prefix}{c}", "turn_id": f"{prefix}{c}-t1"}
            row["text"] = QUESTIONS[c % len(QUESTIONS)]
            handle.write(json.dumps(row) + "\n")
    return load_requests(path)


def start_nodes(
    ray: Any,
    server: Servers,
    home: Path,
    count: int,
    latency: float,
    ack_wait: float,
    sync: bool,
) -> list[Any]:
    """``count`` node actors serving on ``server`` (their workers import this checkout)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    cls = ray.remote(num_cpus=NODE_CPUS, runtime_env={"env_vars": {"PYTHONPATH": path}})(BenchNode)
    creds = server.creds_path("node").read_text()
    actors = [
        cls.remote(
            server.url,
            {
                "home": home / f"n{i}",
                "node_id": f"n{i}",
                "knowledge_dir": KB,
                "followup_grace_s": 0.0,
                "node_ttl_s": NODE_TTL_S,
                "ack_wait_s": ack_wait,
                "storage_sync": sync,
            },
            model_latency=latency,
            creds=creds,
        )
        for i in range(count)
    ]
    ray.get([a.start.remote() for a in actors], timeout=180)
    return actors


def stop_nodes(ray: Any, actors: Sequence[Any]) -> None:
    for actor in actors:
        with contextlib.suppress(Exception):  # a killed one has nothing to stop
            ray.get(actor.stop.remote(), timeout=30)
        ray.kill(actor)


async def usages(actors: Sequence[Any]) -> list[dict[str, Any]]:
    calls = [asyncio.wrap_future(a.usage.remote().future()) for a in actors]
    return list(await asyncio.gather(*calls))


async def batch(
    server: Servers,
    turns: list[TurnRequest],
    during: Callable[[], Any] | None = None,
    timeout_s: float = 120.0,
) -> tuple[float, list[ReActResult]]:
    """Submit ``turns`` with ``run_requests`` (``during`` runs alongside); seconds, results."""
    bus = await Bus.connect(server.url, creds=server.creds_path("client"))
    try:
        started = time.perf_counter()
        job = asyncio.create_task(
            run_requests(bus, turns, timeout_s=timeout_s, console=Console(quiet=True))
        )
        side = asyncio.create_task(during()) if during is not None else None
        results = await job
        seconds = time.perf_counter() - started
        if side is not None:
            side.cancel()
            await asyncio.gather(side, return_exceptions=True)
        return seconds, results
    finally:
        await bus.close()


def completed(results: Sequence[ReActResult]) -> int:
    return sum(r.status == "completed" for r in results)


# --- scenarios -------------------------------------------------------------------------------


def throughput(
    ray: Any,
    servers: ServerFactory,
    tmp: Path,
    *,
    model: str,
    nodes: int,
    per_node: int,
    warmup: int,
    sync: bool = False,
    quiet_wait_s: float = 0.0,
) -> dict[str, Any]:
    """One measurement: fresh NATS and node actors, a warm-up batch, the timed batch."""
    tag = f"{model}{nodes}-{time.monotonic_ns()}"
    with servers(tmp / f"nats-{tag}") as server:
        actors = start_nodes(
            ray, server, tmp / f"home-{tag}", nodes, MODELS[model], ACK_WAIT_S, sync
        )
        try:
            warm_s, warm, tries = 0.0, list[ReActResult](), 0
            while tries < WARMUP_TRIES:  # until every node actor took some of it
                tries += 1
                warm_turns = requests(tmp, warmup * nodes, f"w{tries}{tag}-")
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
                batch(server, requests(tmp, per_node * nodes, f"m{tag}-"), sample)
            )
            driver = time.process_time() - driver0
            machine = machine_busy_s() - machine0
            nats = sum(proc_cpu_s(p) for p in pids) - nats0
            after = asyncio.run(usages(actors))
        finally:
            stop_nodes(ray, actors)
    turns = len(results)
    node_cpu = sum(b["cpu_s"] - a["cpu_s"] for a, b in zip(before, after, strict=True))
    calls = sum(b["calls"] - a["calls"] for a, b in zip(before, after, strict=True))
    ms = 1e3 / turns
    row: dict[str, Any] = {
        "model": model,
        "nodes": nodes,
        "turns": turns,
        "completed": completed(results),
        "warmup_turns": len(warm),
        "warmup_completed": completed(warm),
        "warmup_taken": [u.get("taken", 0) for u in before],
        "warmup_s": warm_s,
        "warmup_batches": tries,
        "quiet_waited_s": waited,
        "busy_cores_before": busy,
        "seconds": seconds,
        "turns_per_s": turns / seconds,
        "per_node_turns_per_s": turns / seconds / nodes,
        "taken": [b["taken"] - a["taken"] for a, b in zip(before, after, strict=True)],
        "calls_per_turn": calls / turns,
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

            async def kill() -> None:
                while True:  # until the victim runs a few turns (the batch is being submitted)
                    usage = (await usages(actors[:1]))[0]
                    if usage.get("active", 0) >= 3:
                        break
                    await asyncio.sleep(0.005)
                ray.kill(actors[0], no_restart=True)
                victim.update(killed_at=time.time(), running=usage["running"])

            seconds, results = asyncio.run(batch(server, requests(tmp, conversations, "k"), kill))
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


# --- the report ------------------------------------------------------------------------------


def _median(rows: Sequence[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def summarise(runs: Sequence[dict[str, Any]], models: Sequence[str]) -> dict[str, Any]:
    """Medians per model kind and node count, and the median of the per-round ratios."""
    out: dict[str, Any] = {}
    keys = ("turns_per_s", "per_node_turns_per_s", "node_cpu_ms_per_turn",
            "nats_cpu_ms_per_turn", "driver_cpu_ms_per_turn", "total_cpu_ms_per_turn",
            "others_cores", "node_cores", "inflight_mean", "calls_per_turn", "ceiling",
            "fraction", "left_ceiling", "left_fraction", "quiet_waited_s")  # fmt: skip
    for model in models:
        entry: dict[str, Any] = {}
        for nodes in (1, 2):
            rows = [r for r in runs if r["model"] == model and r["nodes"] == nodes]
            entry[str(nodes)] = {k: _median(rows, k) for k in keys} | {
                "bound": statistics.mode(r["bound"] for r in rows)
            }
        ratios = [
            two["turns_per_s"] / one["turns_per_s"]
            for one, two in zip(
                [r for r in runs if r["model"] == model and r["nodes"] == 1],
                [r for r in runs if r["model"] == model and r["nodes"] == 2],
                strict=True,
            )
        ]
        entry["ratios"] = ratios
        entry["ratio"] = statistics.median(ratios)
        out[model] = entry
    return out


def targets(summary: dict[str, Any], kill: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "io" in summary:
        one = summary["io"]["1"]
        met = one["fraction"] >= TARGET_IO_FRACTION
        out["io_one_fraction"] = {
            "value": one["fraction"],
            "target": TARGET_IO_FRACTION,
            "bound": one["bound"],
            "met": met,
            "of_cores_left": one["left_fraction"],
        }
        ratio = summary["io"]["ratio"]
        out["io_two_vs_one"] = {
            "value": ratio,
            "target": TARGET_IO_RATIO,
            "met": ratio >= TARGET_IO_RATIO,
        }
    if kill is not None:
        limit = kill["node_ttl_s"] + TARGET_TAKEOVER_SLACK_S
        out["takeover_s"] = {
            "value": kill["resume_s"],
            "target": limit,
            "met": kill["resume_s"] <= limit,
        }
    return out


def table(result: dict[str, Any]) -> Table:
    out = Table(
        title=f"cluster: one-turn conversations, {result['rounds']} round(s), medians",
        caption="ms: CPU per turn; others: cores the rest of the machine used meanwhile; "
        "bound: the lowest of one core per node, concurrency and the machine's cores; left: "
        "that bound with the cores the others left",
    )
    for column in ("model", "nodes", "turns/s", "/node", "node ms", "nats+drv ms", "others",
                   "in flight", "bound/s: got", "left/s: got", "2 vs 1"):  # fmt: skip
        out.add_column(column, justify="right")
    for model, entry in result["summary"].items():
        for nodes in ("1", "2"):
            row = entry[nodes]
            out.add_row(
                model,
                nodes,
                f"{row['turns_per_s']:.1f}",
                f"{row['per_node_turns_per_s']:.1f}",
                f"{row['node_cpu_ms_per_turn']:.1f}",
                f"{row['nats_cpu_ms_per_turn'] + row['driver_cpu_ms_per_turn']:.1f}",
                f"{row['others_cores']:.2f}",
                f"{row['inflight_mean']:.0f}",
                f"{SHORT[row['bound']]} {row['ceiling']:.0f}: {row['fraction']:.2f}",
                f"{row['left_ceiling']:.0f}: {row['left_fraction']:.2f}",
                f"{entry['ratio']:.2f}x" if nodes == "2" else "",
            )
    kill = result.get("takeover")
    if kill is not None:
        out.caption = (
            f"{out.caption}\nkill 1 of 2: {kill['victim_completed']}/{kill['victim_turns']} "
            "of its turns done "
            f"{kill['resume_s']:.1f} s after the kill (node TTL {kill['node_ttl_s']:g} s); "
            f"{kill['completed']}/{kill['turns']} in all; {result['cpus']} cores, shared"
        )
    return out


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny batches, one round (tests)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-node", type=int, default=300, help="timed conversations per node")
    parser.add_argument("--warmup", type=int, default=40, help="warm-up conversations per node")
    parser.add_argument("--models", default="io,cpu", help="io, cpu or both")
    parser.add_argument("--takeover", type=int, default=60, help="conversations (0: skip)")
    parser.add_argument("--sync", action="store_true", help="storage_sync on (fsync commits)")
    parser.add_argument(
        "--quiet-wait", type=float, default=20.0, help="seconds to wait for a quiet machine"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "cluster.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.per_node, args.warmup, args.takeover = 1, 12, 4, 16
        args.quiet_wait = 0.0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        parser.error(f"--models: {', '.join(unknown) or 'none'}; choose from io, cpu")
    args.models = models
    return args


@contextlib.contextmanager
def local_ray() -> Iterator[Any]:
    """The Ray of this process: the one already running, or a local one for the run."""
    import ray

    for key, value in (("RAY_USAGE_STATS_ENABLED", "0"), ("RAY_AUTH_MODE", "disabled"),
                       ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")):  # fmt: skip
        os.environ.setdefault(key, value)
    if ray.is_initialized():
        yield ray
        return
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None, servers: ServerFactory = embedded) -> int:
    args = _parse(argv)
    console = Console(width=None if sys.stdout.isatty() else 132)
    runs: list[dict[str, Any]] = []
    kill = None
    with local_ray() as ray, tempfile.TemporaryDirectory(prefix="actline-bench-cluster-") as tmp:
        for round_ in range(args.rounds):
            for model in args.models:
                for nodes in (1, 2):
                    size = {
                        "per_node": args.per_node,
                        "warmup": args.warmup,
                        "sync": args.sync,
                        "quiet_wait_s": args.quiet_wait,
                    }
                    row = throughput(ray, servers, Path(tmp), model=model, nodes=nodes, **size)
                    runs.append(row | {"round": round_})
                    console.print(
                        f"round {round_ + 1} {model} x{nodes}: {row['turns_per_s']:.1f} turns/s, "
                        f"node CPU {row['node_cpu_ms_per_turn']:.1f} ms/turn, "
                        f"others {row['others_cores']:.2f} cores"
                    )
        if args.takeover:
            kill = takeover(ray, servers, Path(tmp), conversations=args.takeover, warmup=4)
    summary = summarise(runs, args.models)
    result: dict[str, Any] = {
        "benchmark": "cluster",
        "latency_s": LATENCY_S,
        "rounds": args.rounds,
        "per_node": args.per_node,
        "warmup_per_node": args.warmup,
        "storage_sync": args.sync,
        "cpus": os.cpu_count(),
        "summary": summary,
        "takeover": kill,
        "runs": runs,
    }
    result["targets"] = targets(summary, kill)
    console.print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.out}")
    lost = [
        r
        for r in runs
        if (r["completed"], r["warmup_completed"]) != (r["turns"], r["warmup_turns"])
    ]
    if kill is not None and kill["completed"] != kill["turns"]:
        lost.append(kill)
    missed = [name for name, t in result["targets"].items() if not t["met"]]
    if lost:
        console.print(f"[red]{len(lost)} run(s) with turns not completed[/red]")
    if missed:
        console.print(f"targets missed: {', '.join(missed)}")
    return 1 if lost or missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
