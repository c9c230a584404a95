"""Cluster-mode nodes started at the same moment on a replicated NATS cluster: does each start?

Every attempt starts ``N`` cluster-mode nodes at once (``--nodes``, each count in turn) on a
local cluster of three nats-servers (``EmbeddedCluster``, every stream and bucket at 3
replicas) under a subject prefix of its own, so that the nodes make every stream, bucket and
consumer together, then asks one turn through a client. An attempt succeeds when every node
started and the turn completed; a node that failed to start is counted with its error.

The nodes run in this process (``--mode inproc``: ``tests/cluster/harness.py``), as node
processes (``--mode procs``: ``python -m actline.cli.node``, ``tests/actors/nodeprocs.py``),
or both. One cluster serves every attempt (a fresh prefix found the crash as often as a
fresh cluster: 6 attempts of 8 with two nodes, against 4 of 9); ``--fresh-cluster`` starts a
cluster per attempt instead. The start time is from the first start call to the last node
serving: it includes a node's retries while the cluster cannot answer (up to 30 s).

    python -m bench.cluster.start_together [--attempts 10] [--nodes 2,3] [--mode inproc,procs]
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from actline.actors import Client, Node
from actline.bus import Bus, BusError, EmbeddedCluster
from actline.messages import Subjects, new_id
from bench.harness import (
    add_counts,
    finish,
    int_list,
    new_table,
    parser,
    platform_info,
    settle,
)
from tests.actors.nodeprocs import NodeOptions, NodeProcess
from tests.cluster.harness import start

ATTEMPTS = 10
NODES = (2, 3)
MODES = ("inproc",)
QUESTION = "What are the quotas?"
TURN_TIMEOUT_S = 60.0
"""Upper bound for the turn asked after the nodes started (not a timing target)."""


@dataclass(slots=True)
class Attempt:
    """One attempt: how many of ``nodes`` started, why the others did not, and the turn."""

    nodes: int
    mode: str
    started: int = 0
    errors: list[str] = field(default_factory=list)
    start_s: float = 0.0
    """From the first start call to the last node serving (or failing)."""
    turn: str = "not asked"
    """The turn's status once every node started: ``completed``, else what went wrong."""

    @property
    def ok(self) -> bool:
        return self.started == self.nodes and self.turn == "completed"


async def _inproc(url: str, names: Subjects, home: Path, count: int, got: Attempt) -> list[Node]:
    outcomes = await asyncio.gather(
        *(start(url, home, f"n{i}", subject_names=names) for i in range(count)),
        return_exceptions=True,
    )
    nodes = [n for n in outcomes if isinstance(n, Node)]
    got.errors += [f"{type(e).__name__}: {e}" for e in outcomes if isinstance(e, BaseException)]
    got.started = len(nodes)
    return nodes


async def _procs(
    url: str, names: Subjects, home: Path, count: int, got: Attempt
) -> list[NodeProcess]:
    procs = [
        NodeProcess(url, names.prefix, home / f"p{i}", home / "logs", NodeOptions(), cluster=True)
        for i in range(count)
    ]
    outcomes = await asyncio.gather(*(p.start() for p in procs), return_exceptions=True)
    for i, (proc, outcome) in enumerate(zip(procs, outcomes, strict=True)):
        if isinstance(outcome, BaseException):
            log = home / "logs" / f"p{i}-0.log"
            got.errors.append(_last_line(log) or f"{type(outcome).__name__}: {outcome}")
        elif proc.alive:
            got.started += 1
    return procs


def _last_line(log: Path) -> str | None:
    """The last line of a node's log: a node that crashed ends it with its error."""
    lines = log.read_text(errors="replace").split("\n") if log.exists() else []
    return next((line.strip() for line in reversed(lines) if line.strip()), None)


@contextlib.asynccontextmanager
async def _client(url: str, names: Subjects) -> AsyncIterator[Client]:
    bus = await Bus.connect(url, subject_names=names)
    client = Client(bus)
    try:
        yield client
    finally:
        await client.close()
        await bus.close()


async def attempt(url: str, home: Path, count: int, mode: str = "inproc") -> Attempt:
    """Start ``count`` cluster-mode nodes at once under a fresh prefix on the cluster at
    ``url`` (``mode``: ``inproc`` or ``procs``), ask one turn when all started, stop them."""
    names = Subjects(f"st{new_id().lower()}")
    got = Attempt(count, mode)
    began = time.monotonic()
    nodes: list[Node] = []
    procs: list[NodeProcess] = []
    try:
        if mode == "inproc":
            nodes = await _inproc(url, names, home, count, got)
        else:
            procs = await _procs(url, names, home, count, got)
        got.start_s = time.monotonic() - began
        if got.started == count:
            async with _client(url, names) as client:
                try:
                    result = await client.ask(
                        QUESTION, conversation_id="c1", timeout=TURN_TIMEOUT_S
                    )
                    ok = result.status == "completed"
                    got.turn = result.status if ok else f"{result.status}: {result.error}"
                except (BusError, TimeoutError) as exc:
                    got.turn = f"{type(exc).__name__}: {exc}"
    finally:
        for node in nodes:
            await node.stop()
            await node.bus.close()
        await asyncio.gather(*(p.stop() for p in procs))
    return got


async def measure(
    attempts: int, counts: Sequence[int], modes: Sequence[str], fresh_cluster: bool
) -> list[Attempt]:
    """Every attempt of every mode and node count, in that order."""
    done: list[Attempt] = []
    with tempfile.TemporaryDirectory(prefix="actline-start-together-") as tmp:
        root = Path(tmp)
        shared = None if fresh_cluster else EmbeddedCluster(3, root=root / "nats").start()
        try:
            for mode in modes:
                for count in counts:
                    for i in range(attempts):
                        home = root / f"{mode}-{count}-{i}"
                        if shared is not None:
                            done.append(await attempt(shared.url, home, count, mode))
                            continue
                        with EmbeddedCluster(3, root=home / "nats") as cluster:
                            done.append(await attempt(cluster.url, home, count, mode))
        finally:
            if shared is not None:
                shared.stop()
    return done


def rows(done: Sequence[Attempt]) -> list[dict[str, Any]]:
    """One row per mode and node count: attempts, nodes that failed to start, turns."""
    out: list[dict[str, Any]] = []
    for key in dict.fromkeys((a.mode, a.nodes) for a in done):
        mine = [a for a in done if (a.mode, a.nodes) == key]
        times = sorted(a.start_s for a in mine)
        out.append(
            {
                "mode": key[0],
                "nodes": key[1],
                "attempts": len(mine),
                "ok": sum(a.ok for a in mine),
                "attempts_with_a_crash": sum(a.started < a.nodes for a in mine),
                "nodes_crashed": sum(a.nodes - a.started for a in mine),
                "turns_completed": sum(a.turn == "completed" for a in mine),
                "start_s_median": round(times[len(times) // 2], 2),
                "start_s_max": round(times[-1], 2),
                "errors": sorted({e for a in mine for e in a.errors}),
            }
        )
    return out


def table(summary: Sequence[dict[str, Any]]) -> Table:
    shown = new_table(
        "nodes started together on a 3-server NATS cluster (3 replicas)",
        ["mode", "nodes", "attempts", "ok", "attempts with a crash", "start median", "max"],
        left=["mode"],
    )
    for row in summary:
        shown.add_row(
            row["mode"],
            str(row["nodes"]),
            str(row["attempts"]),
            str(row["ok"]),
            str(row["attempts_with_a_crash"]),
            f"{row['start_s_median']:.1f} s",
            f"{row['start_s_max']:.1f} s",
        )
    return shown


def main(argv: Sequence[str] | None = None) -> int:
    cli = parser("start_together", __doc__, results="start-together.json", quick="2 attempts")
    add_counts(cli, attempts=f"attempts per node count and mode (default {ATTEMPTS})")
    cli.add_argument("--nodes", type=int_list, default=list(NODES), help="node counts")
    cli.add_argument(
        "--mode",
        type=lambda text: [m for m in text.split(",") if m],
        default=list(MODES),
        help="inproc, procs or both (comma-separated)",
    )
    cli.add_argument("--fresh-cluster", action="store_true", help="a new cluster per attempt")
    args = cli.parse_args(argv)
    options = settle(args, {"attempts": ATTEMPTS}, {"attempts": 2})
    unknown = set(args.mode) - {"inproc", "procs"}
    if unknown:
        cli.error(f"unknown mode(s) {', '.join(sorted(unknown))}: inproc, procs")
    logging.getLogger("actline").setLevel(logging.CRITICAL)  # a node's retries are expected
    console = Console()
    done = asyncio.run(measure(options["attempts"], args.nodes, args.mode, args.fresh_cluster))
    summary = rows(done)
    console.print(table(summary))
    for row in summary:
        for error in row["errors"]:
            console.print(f"{row['mode']} {row['nodes']} nodes: {error}")
    result = {
        "benchmark": "start_together",
        **platform_info(),
        "fresh_cluster": args.fresh_cluster,
        "rows": summary,
        "attempts": [asdict(a) for a in done],
    }
    return finish(console, args.out, result, all(a.ok for a in done))


if __name__ == "__main__":
    raise SystemExit(main())
