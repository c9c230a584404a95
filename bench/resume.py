"""``python -m bench resume`` / ``make soak``: SIGKILLed node processes against the same batch
run without kills.

Real parts: an embedded nats-server, ``python -m actline.cli.node`` processes with the default
settings (the offline extractive model with a small per-chunk delay, ``examples/kb``), one
node restarted on its home after each kill (single mode) or two or three cluster-mode nodes
each restarted under its id (cluster mode), turns submitted by
``actline.actors.client.client.Client``. The driver is ``tests/actors/killloop.py``; a mode runs
batch after batch (a fresh subject prefix and fresh homes each) until it has made the kills asked
for.

The reference is the batch on one node without kills; cluster mode is also run without
kills against it. Reported per mode: kills survived (and how many landed while turns ran),
turns compared, mismatches (turns answered otherwise: lost, another status, answer,
stored record or stored notices, answered twice differently; plus conversations whose
stored turns are out of submission order or interleaved: must be 0), lost turns (must be
0), duplicate results,
and the times from a kill to the next ``turn.accepted`` of a turn that ran on the killed
process (resume), to its result, and from the restarted node's ready line to that result;
node process start times apart (Python imports, 2 shared cores). Exit status 1 when
anything was lost or mismatched; the homes, node logs and each run's ``trace.json`` (the
client's view) are then kept and their folder printed.

``python -m bench.resume --soak``: 60 kills per mode over 40 conversations of 4 turns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from actline.bus import EmbeddedNats
from bench.harness import add_counts, finish, new_table, parser, result_path, summary
from tests.actors.killloop import (
    ConversationPlan,
    KillPlan,
    Mode,
    NodeOptions,
    RunRecord,
    plan_batch,
    run_batch,
)
from tests.actors.killreport import Report, order_problems

MAX_BATCHES = 12
"""Batches per mode at most, should the batches end before the kills are made."""


def _parse(argv: list[str]) -> argparse.Namespace:
    cli = parser("resume", __doc__, results=None)
    cli.add_argument("--soak", action="store_true", help="60 kills, 40 x 4 turns per mode")
    cli.add_argument("--mode", choices=("single", "cluster", "both"), default="both")
    add_counts(
        cli,
        kills="kills per mode (default 12)",
        conversations="default 12",
        turns="turns each (default 3)",
    )
    cli.add_argument("--nodes", type=int, default=3, help="cluster mode's node processes")
    cli.add_argument("--seed", type=int, default=18)
    cli.add_argument("--model-delay", type=float, default=0.01, help="seconds per chunk")
    args = cli.parse_args(argv)
    soak = bool(args.soak)
    args.kills = args.kills if args.kills is not None else (60 if soak else 12)
    args.conversations = args.conversations or (40 if soak else 12)
    args.turns = args.turns or (4 if soak else 3)
    args.out = result_path(args.out, "resume_soak.json" if soak else "resume.json")
    return args


async def _reference(
    url: str, tmp: Path, args: argparse.Namespace, console: Console
) -> tuple[list[ConversationPlan], NodeOptions, RunRecord]:
    """The batch on one node without kills: the answers and order every run must match."""
    plans = plan_batch(args.conversations, args.turns)
    options = NodeOptions(model_delay_s=args.model_delay)
    reference = await run_batch(url, tmp / "reference", plans, options=options)
    missing = [tid for tid, t in reference.traces.items() if not t.results]
    wrong = order_problems(reference)
    if missing or wrong:
        raise SystemExit(f"the run without kills is itself wrong: {missing[:5]} {wrong[:5]}")
    console.print(f"reference (one node, no kills): {reference.wall_s:.1f} s")
    return plans, options, reference


async def _mode(
    url: str,
    tmp: Path,
    mode: Mode,
    args: argparse.Namespace,
    reference: tuple[list[ConversationPlan], NodeOptions, RunRecord],
    console: Console,
) -> dict[str, Any]:
    plans, options, ref = reference
    nodes = args.nodes if mode == "cluster" else 1
    calm: Report | None = None
    if mode == "cluster":  # the mode itself, without kills, against the reference
        run = await run_batch(
            url, tmp / f"{mode}-calm", plans, mode=mode, nodes=nodes, options=options
        )
        calm = Report.of(ref, run)
        console.print(f"{mode} without kills: {calm.mismatch_count} mismatches")
    reports: list[Report] = []
    made = 0
    for batch in range(MAX_BATCHES):
        if made >= args.kills:
            break
        kills = KillPlan(kills=args.kills - made, seed=args.seed + batch)
        run = await run_batch(
            url,
            tmp / f"{mode}-kill{batch}",
            plans,
            mode=mode,
            nodes=nodes,
            kills=kills,
            options=options,
        )
        report = Report.of(ref, run)
        reports.append(report)
        made += report.kills
        console.print(
            f"{mode}: batch {batch + 1}: {report.kills} kills, {report.mismatch_count} "
            f"mismatches, {len(report.lost)} lost, {run.wall_s:.1f} s"
        )
        if report.kills == 0:
            break
    return _merge(mode, nodes, reports, ref.wall_s, calm)


def _stats(samples: list[float]) -> dict[str, Any]:
    """Count, p50 and maximum in seconds (None without samples)."""
    return summary(samples, unit="s", points=(50,), low=False, high=True, mean=False)


def _merge(
    mode: Mode, nodes: int, reports: list[Report], reference_s: float, calm: Report | None
) -> dict[str, Any]:
    def joined(name: str) -> list[float]:
        return [x for r in reports for x in getattr(r, name)]

    def total(name: str) -> int:
        return sum(len(getattr(r, name)) for r in reports)

    return {
        "mode": mode,
        "nodes": nodes,
        "batches": len(reports),
        "kills": sum(r.kills for r in reports),
        "kills_mid_turn": sum(r.kills_mid_turn for r in reports),
        "turns_compared": sum(r.turns for r in reports),
        "conversations_compared": sum(r.conversations for r in reports),
        "mismatches": sum(r.mismatch_count for r in reports),
        "mismatched_turns": total("mismatched_turns"),
        "conversations_out_of_order": total("conversations_out_of_order"),
        "lost": total("lost"),
        "duplicates": sum(r.duplicates for r in reports),
        "answered_twice_differently": total("answered_twice_differently"),
        "kill_to_resume": _stats(joined("kill_to_resume_s")),
        "quiet_kill_to_resume": _stats(joined("quiet_kill_to_resume_s")),
        "kill_to_result": _stats(joined("kill_to_result_s")),
        "quiet_kill_to_result": _stats(joined("quiet_kill_to_result_s")),
        "restart_to_result": _stats(joined("restart_to_result_s")),
        "node_start": _stats(joined("node_start_s")),
        "without_kills": calm.summary() if calm is not None else None,
        "reference_wall_s": reference_s,
        "wall_s": sum(r.wall_s for r in reports),
        "drained": all(r.drained for r in reports),
        "examples": [str(m) for r in reports for m in r.mismatches][:20],
        "logs": [r.workdir for r in reports],
    }


def _s(stats: dict[str, Any]) -> str:
    if not stats["n"]:
        return "-"
    return f"{stats['p50_s']:.2f} / {stats['max_s']:.2f} (n {stats['n']})"


def _calm(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "0 (the reference)"
    return f"{summary['mismatches']} ({summary['conversations_out_of_order']} out of order)"


def _table(rows: list[dict[str, Any]], args: argparse.Namespace) -> Table:
    table = new_table(
        f"resume: {args.conversations} conversations x {args.turns} turns, SIGKILLs vs no kills",
        ["", *(f"{row['mode']} ({row['nodes']} node{'s' * (row['nodes'] > 1)})" for row in rows)],
        left=("",),
    )
    lines: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("kills survived (mid-turn)", lambda r: f"{r['kills']} ({r['kills_mid_turn']})"),
        ("turns compared", lambda r: str(r["turns_compared"])),
        ("mismatches (must be 0)", lambda r: str(r["mismatches"])),
        ("  turns answered otherwise", lambda r: str(r["mismatched_turns"])),
        (
            "  conversations out of order",
            lambda r: f"{r['conversations_out_of_order']} of {r['conversations_compared']}",
        ),
        ("lost (must be 0)", lambda r: str(r["lost"])),
        ("duplicate results", lambda r: str(r["duplicates"])),
        ("answered twice differently", lambda r: str(r["answered_twice_differently"])),
        ("mismatches without kills", lambda r: _calm(r["without_kills"])),
        ("kill to resume p50 / max s", lambda r: _s(r["kill_to_resume"])),
        ("  no other kill before it", lambda r: _s(r["quiet_kill_to_resume"])),
        ("kill to result p50 / max s", lambda r: _s(r["kill_to_result"])),
        ("  no other kill before it", lambda r: _s(r["quiet_kill_to_result"])),
        ("restart to result p50 / max s", lambda r: _s(r["restart_to_result"])),
        ("node start p50 / max s", lambda r: _s(r["node_start"])),
        (
            "wall s (no kills: reference)",
            lambda r: f"{r['wall_s']:.0f} ({r['reference_wall_s']:.0f})",
        ),
    ]
    for label, cell in lines:
        table.add_row(label, *(cell(r) for r in rows))
    table.caption = f"{os.cpu_count()} cores (shared); times are p50 / max (samples)"
    return table


async def _run(args: argparse.Namespace, tmp: Path, console: Console) -> list[dict[str, Any]]:
    modes: list[Mode] = ["single", "cluster"] if args.mode == "both" else [args.mode]
    rows = []
    with EmbeddedNats(store_dir=tmp / "nats") as server:
        reference = await _reference(server.url, tmp, args, console)
        for mode in modes:
            rows.append(await _mode(server.url, tmp, mode, args, reference, console))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parse(list(argv or []))
    console = Console()
    began = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="actline-bench-resume-"))
    rows = asyncio.run(_run(args, tmp, console))
    ok = all(r["mismatches"] == 0 and r["lost"] == 0 for r in rows)
    if ok:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        console.print(f"node logs and homes kept in {tmp}")
    console.print(_table(rows, args))
    for row in rows:
        for example in row["examples"][:5]:
            console.print(f"  {row['mode']}: {example}", highlight=False)
    result = {
        "benchmark": "resume",
        "conversations": args.conversations,
        "turns": args.turns,
        "model_delay_s": args.model_delay,
        "seed": args.seed,
        "seconds": time.perf_counter() - began,
        "cpus": os.cpu_count(),
        "modes": rows,
    }
    return finish(console, args.out, result, ok)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
