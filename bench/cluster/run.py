"""The cluster benchmark's command line and run (the package's docstring says what it
measures)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.cluster.faults import quorum_loss, server_freeze
from bench.cluster.nodes import LATENCY_S, MODELS, SERVERS, ServerFactory, local_ray
from bench.cluster.report import summarise, table, targets
from bench.cluster.scenarios import takeover, throughput
from bench.harness import add_counts, finish, parser, settle

CONFIGS = {"single": ("single", 1), "1": ("cluster", 1), "2": ("cluster", 2)}
"""``--configs``: single mode with one node actor, cluster mode with one and with two."""
DEFAULTS: dict[str, Any] = {
    "rounds": 3,
    "per_node": 100,
    "warmup": 40,
    "takeover": 60,
    "quiet_wait": 20.0,
    "faults": "quorum,freeze",
    "models": "io,cpu",
}
QUICK: dict[str, Any] = {
    "rounds": 1,
    "per_node": 12,
    "warmup": 4,
    "takeover": 16,
    "quiet_wait": 0.0,
    "faults": "",
    "models": "io",
}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    cli = parser(
        "cluster", sys.modules[__package__].__doc__, quick="tiny batches, one round (tests)"
    )
    add_counts(
        cli,
        rounds="interleaved rounds of every configuration (3)",
        per_node="timed conversations per node (100)",
        warmup="warm-up conversations per node (40)",
        takeover="conversations of the takeover, 0 skips it (60)",
    )
    cli.add_argument("--models", default=None, help="io, cpu or both (both; io with --quick)")
    cli.add_argument(
        "--servers",
        choices=sorted(SERVERS),
        default="cluster",
        help="cluster: three replicated nats-servers (default); server: one",
    )
    cli.add_argument("--turns", type=int, default=3, help="turns per conversation (3)")
    cli.add_argument(
        "--faults",
        default=None,
        help="quorum, freeze: two of three servers away 20 s, one frozen 15 s (both; none "
        "with --quick); needs --servers cluster",
    )
    cli.add_argument(
        "--configs", default="single,1,2", help="single, 1, 2: single mode, cluster x1, x2"
    )
    cli.add_argument("--sync", action="store_true", help="storage_sync on (fsync commits)")
    cli.add_argument(
        "--quiet-wait", type=float, default=None, help="seconds to wait for a quiet machine (20)"
    )
    args = cli.parse_args(list(argv) if argv is not None else None)
    for key, value in settle(args, DEFAULTS, QUICK).items():
        setattr(args, key, value)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        cli.error(f"--models: {', '.join(unknown) or 'none'}; choose from io, cpu")
    args.models = models
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    wrong = [c for c in configs if c not in CONFIGS]
    if wrong or not configs:
        cli.error(f"--configs: {', '.join(wrong) or 'none'}; choose from single, 1, 2")
    args.configs = [CONFIGS[c] for c in configs]
    faults = [f.strip() for f in (args.faults or "").split(",") if f.strip()]
    if set(faults) - {"quorum", "freeze"}:
        cli.error(f"--faults: {args.faults}; choose from quorum, freeze")
    if faults and args.servers != "cluster":
        cli.error("--faults needs --servers cluster (three replicated nats-servers)")
    args.faults = faults
    if args.turns < 1:
        cli.error(f"--turns: {args.turns}; at least 1")
    return args


def main(argv: Sequence[str] | None = None, servers: ServerFactory | None = None) -> int:
    args = _parse(argv)
    servers = servers or SERVERS[args.servers]
    console = Console(width=None if sys.stdout.isatty() else 132)
    runs: list[dict[str, Any]] = []
    kill = None
    with local_ray() as ray, tempfile.TemporaryDirectory(prefix="actline-bench-cluster-") as tmp:
        for round_ in range(args.rounds):
            for model in args.models:
                for mode, nodes in args.configs:
                    size = {
                        "per_node": args.per_node,
                        "warmup": args.warmup,
                        "turns": args.turns,
                        "sync": args.sync,
                        "quiet_wait_s": args.quiet_wait,
                    }
                    row = throughput(
                        ray, servers, Path(tmp), model=model, nodes=nodes, mode=mode, **size
                    )
                    runs.append(row | {"round": round_})
                    console.print(
                        f"round {round_ + 1} {model} {row['config']}: "
                        f"{row['turns_per_s']:.1f} turns/s, "
                        f"node CPU {row['node_cpu_ms_per_turn']:.1f} ms/turn, "
                        f"nats CPU {row['nats_cpu_ms_per_turn']:.1f} ms/turn, "
                        f"deferred {row['deferred']}, handed off {row['handed_off']}, "
                        f"others {row['others_cores']:.2f} cores"
                    )
        if args.takeover:
            kill = takeover(ray, servers, Path(tmp), conversations=args.takeover, warmup=4)
        faults: dict[str, Any] = {}
        if "quorum" in args.faults:
            faults["quorum_loss"] = quorum_loss(
                ray, servers, Path(tmp), conversations=40, outage_s=20.0
            )
            console.print(f"quorum loss: {faults['quorum_loss']}")
        if "freeze" in args.faults:
            faults["server_freeze"] = server_freeze(
                ray, servers, Path(tmp), conversations=40, freeze_s=15.0
            )
            console.print(f"server freeze: {faults['server_freeze']}")
    summary = summarise(runs, args.models)
    result: dict[str, Any] = {
        "benchmark": "cluster",
        "servers": args.servers,
        "turns_per_conversation": args.turns,
        "latency_s": LATENCY_S,
        "rounds": args.rounds,
        "per_node": args.per_node,
        "warmup_per_node": args.warmup,
        "storage_sync": args.sync,
        "cpus": os.cpu_count(),
        "summary": summary,
        "takeover": kill,
        "faults": faults,
        "runs": runs,
    }
    result["targets"] = targets(summary, kill, faults)
    console.print(table(result))
    lost = [
        r
        for r in runs
        if (r["completed"], r["warmup_completed"]) != (r["turns"], r["warmup_turns"])
    ]
    if kill is not None and kill["completed"] != kill["turns"]:
        lost.append(kill)
    lost.extend(f for f in faults.values() if f["completed"] != f["turns"])
    missed = [name for name, t in result["targets"].items() if not t["met"]]
    if lost:
        console.print(f"[red]{len(lost)} run(s) with turns not completed[/red]")
    if missed:
        console.print(f"targets missed: {', '.join(missed)}")
    return finish(console, args.out, result, not lost and not missed)
