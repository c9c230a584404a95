"""The cluster benchmark's parts: the NATS a measurement runs on, node actors on a local Ray,
batches submitted as the Ray job does, and the CPU accounting (``/proc``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console

from actline.actors.cluster.ray_job import NodeActor, load_requests, run_requests
from actline.bus import Bus, EmbeddedCluster, EmbeddedNats
from actline.messages import ReActResult, TurnRequest

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "examples" / "kb"
QUESTIONS = ("How do the pricing tiers differ?", "What are the quotas?", "How do backups work?")
LATENCY_S = 0.05
MODELS = {"io": LATENCY_S, "cpu": 0.0}
"""Model kind -> fixed latency per model call."""
NODE_CPUS = 0.5
"""Ray's ``num_cpus`` of a node actor: a scheduling label, not a limit on its CPU use."""
NODE_TTL_S = 2.0
"""A node whose beat stops this long is dead (``ACTLINE_NODE_TTL``, the default)."""
SAMPLE_S = 0.25
QUIET_CORES = 0.3
"""Before timing, wait (up to ``--quiet-wait``) until the machine is busy under this."""
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


def replicated(store: Path) -> AbstractContextManager[Servers]:
    """Three nats-servers on loopback with routes between them (authenticated): every
    stream and bucket has three replicas, as in production."""
    return EmbeddedCluster(3, root=store)


SERVERS: dict[str, ServerFactory] = {"cluster": replicated, "server": embedded}
"""``--servers``: a replicated cluster of three, or one server."""


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
                "handed_off": node.queue.handed_off,
                "taken_over": getattr(getattr(node.ownership, "leases", None), "taken_over", 0),
            }
        return out


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


def requests(tmp: Path, conversations: int, prefix: str, turns: int = 1) -> list[TurnRequest]:
    """``conversations`` conversations of ``turns`` turns each, through the job's own file
    format (the job submits a conversation's turns one after another)."""
    path = tmp / f"{prefix}.jsonl"
    with path.open("w") as handle:
        for c in range(conversations):
            for t in range(turns):
                row = {"conversation_id": f"{prefix}{c}", "turn_id": f"{prefix}{c}-t{t + 1}"}
                row["text"] = QUESTIONS[(c + t) % len(QUESTIONS)]
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
    *,
    cluster: bool = True,
) -> list[Any]:
    """``count`` node actors serving on ``server`` (their workers import this checkout), in
    cluster mode or (``cluster=False``, one node) single mode."""
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
                "cluster": cluster,
            },
            model_latency=latency,
            creds=creds,
        )
        for i in range(count)
    ]
    if os.environ.get("XX_SERIAL_START"):
        for a in actors:
            ray.get(a.start.remote(), timeout=180)
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
