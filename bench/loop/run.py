"""The loop benchmark's run: every part on one embedded nats-server, its targets, and its
command line (the package's docstring says what it measures)."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress

from actline.bus import EmbeddedNats
from actline.tools import KnowledgeSpace
from bench.harness import (
    add_counts,
    add_sizes,
    checked,
    finish,
    parser,
    platform_info,
    settle,
)
from bench.loop.compare import baseline_table, compare, not_comparable
from bench.loop.memory import memory
from bench.loop.model import CONTEXT_TOKENS, KB, InstantModel, LoopCheckFailed, query, tail_summary
from bench.loop.report import table
from bench.loop.rounds import COMMIT_BLOCK, check_floor_targets, check_targets, per_round
from bench.loop.throughput import auth_cost, throughput

SIZES = (100, 5_000)
ROUNDS = 10
TURNS = 12
FLOOR_BLOCK = 200
"""Floor samples taken after every interleaved batch of turns."""
CONVERSATIONS = 50
TOTAL_TURNS = 1_000
WAITING = 200
QUICK: dict[str, Any] = {
    "sizes": [100, 1_000],
    "rounds": 4,
    "turns": 2,
    "conversations": 8,
    "total_turns": 16,
    "waiting": 20,
    "floor_block": 50,
    "commit_block": 10,
}
DEFAULTS: dict[str, Any] = {
    "sizes": list(SIZES),
    "rounds": ROUNDS,
    "turns": TURNS,
    "conversations": CONVERSATIONS,
    "total_turns": TOTAL_TURNS,
    "waiting": WAITING,
    "floor_block": FLOOR_BLOCK,
    "commit_block": COMMIT_BLOCK,
}


def tool_cost(knowledge: KnowledgeSpace, rounds: int, samples: int = 200) -> dict[str, Any]:
    """The in-process cost of the tool the instant model calls (part of every round)."""
    queries = [query(r) for r in range(1, rounds)]
    times = []
    for i in range(samples):
        t0 = time.perf_counter()
        knowledge.search(queries[i % len(queries)], 1)
        times.append(time.perf_counter() - t0)
    return {"tool": "react.search_knowledge", "top_k": 1, "search": tail_summary(times)}


async def run_async(
    sizes: Sequence[int],
    rounds: int,
    turns: int,
    conversations: int,
    total_turns: int,
    waiting: int,
    *,
    floor_block: int = FLOOR_BLOCK,
    commit_block: int = COMMIT_BLOCK,
    nosync: bool = True,
) -> dict[str, Any]:
    """Every part on one embedded nats-server (see the module docstring)."""
    started = time.perf_counter()
    sizes = sorted(set(sizes))
    rounds = max(2, rounds)
    modes = (True, False) if nosync else (True,)
    knowledge = KnowledgeSpace(KB, embedder=None)
    with tempfile.TemporaryDirectory(prefix="actline-bench-loop-") as tmp:
        root = Path(tmp)
        async with EmbeddedNats() as server, EmbeddedNats(insecure=True) as open_server:
            floor, rows = await per_round(
                server.url,
                root,
                knowledge,
                sizes,
                modes,
                rounds=rounds,
                turns=turns,
                floor_block=floor_block,
                commit_block=commit_block,
            )
            with Progress(transient=True) as progress:
                progress.add_task("throughput, then memory", total=None)
                tput = [
                    await throughput(server.url, root, knowledge, conversations, total_turns, sync)
                    for sync in modes
                ]
                mem = await memory(server.url, waiting)
                auth = await auth_cost(
                    server.url, open_server.url, root, knowledge, conversations, total_turns
                )
    targets = check_targets(rows)
    floor_targets = check_floor_targets(rows)
    return {
        "benchmark": "loop.round_overhead",
        "model": InstantModel.name,
        "rounds": rounds,
        "turns": turns,
        "context_tokens": CONTEXT_TOKENS,
        "tool": tool_cost(knowledge, rounds),
        "floor": floor,
        "cases": rows,
        "throughput": tput,
        "auth": auth,
        "memory": mem,
        "targets": targets,
        "targets_met": all(t["met"] for t in targets),
        "floor_targets": floor_targets,
        "floor_targets_met": all(t["met"] for t in floor_targets),
        "commit_block": commit_block,
        "seconds": time.perf_counter() - started,
        **platform_info(),
    }


def run(**kwargs: Any) -> dict[str, Any]:
    """``run_async`` in a fresh event loop."""
    return asyncio.run(run_async(**kwargs))


def main(argv: list[str] | None = None) -> int:
    cli = parser("loop", sys.modules[__package__].__doc__, quick="small counts (the smoke test)")
    add_sizes(cli, "prefilled blocks")
    add_counts(
        cli,
        rounds="rounds per measured turn",
        turns="measured turns per case",
        conversations="throughput: at once",
        total_turns="throughput: turns in all",
        waiting="memory: waiting turns",
        floor_block="floor samples per batch",
        commit_block="durable floor: commits per case per batch",
    )
    cli.add_argument("--no-nosync", action="store_true", help="skip the storage_sync=False runs")
    cli.add_argument(
        "--baseline", type=Path, default=None, help="an earlier run's JSON to report beside"
    )
    args = cli.parse_args(argv)
    options = settle(args, DEFAULTS, QUICK)
    console = Console()
    baseline = None
    if args.baseline is not None:
        try:
            baseline = json.loads(args.baseline.read_text())
        except (OSError, ValueError) as exc:
            console.print(f"[red]cannot read the baseline {args.baseline}:[/] {exc}")
            return 2
        if not isinstance(baseline, dict):
            kind = type(baseline).__name__
            console.print(
                f"[red]the baseline {args.baseline} holds a JSON {kind}, not a bench.loop "
                "result (an object):[/] pass a file this benchmark wrote with --out"
            )
            return 2
    result = checked(console, lambda: run(**options, nosync=not args.no_nosync), LoopCheckFailed)
    if result is None:
        return 1
    result["quick"] = args.quick
    console.print(table(result))
    met = result["targets_met"] and result["floor_targets_met"]
    if baseline is not None:
        result["baseline"] = compare(result, baseline, str(args.baseline))
        console.print(baseline_table(result["baseline"]))
        if result["baseline"]["comparable"]:
            met = met and all(t["met"] for t in result["baseline"]["targets"])
        else:
            console.print(not_comparable(result["baseline"]))
    console.print(
        f"{result['seconds']:.1f} s in all; every turn completed with its rounds, every waiting "
        "turn was cancelled"
    )
    return finish(console, args.out, result, met)
