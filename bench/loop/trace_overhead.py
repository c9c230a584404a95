"""The cost of tracing on a round: round p50 with the JSONL trace sink on and off, same run.

One node of ``bench.loop`` (instant model, prefilled conversation, synced commits), turns
of ``--rounds`` rounds alternating between tracing on (the JSONL sink under the home, as
by default) and off (no sink: what ``ACTLINE_TRACE=0`` gives), so both see the same
machine load. Prints the two p50s and the overhead in percent (target: at most 10 %).

    python -m bench.trace_overhead [--blocks 2000] [--turns 40] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from actline.actors.tracing import sinks as trace_sinks
from actline.bus import EmbeddedNats
from actline.tools import KnowledgeSpace
from bench.common import RESULTS, write_result
from bench.loop import KB, open_case, run_turn

TARGET_PCT = 10.0
"""The most a round may slow down with tracing on."""


async def measure(blocks: int, turns: int, rounds: int) -> dict[str, float]:
    knowledge = KnowledgeSpace(KB)
    samples: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="actline-bench-trace-") as tmp:
        async with EmbeddedNats() as server:
            case = await open_case(
                server.url, Path(tmp), blocks, True, knowledge, rounds=rounds, conversations=1
            )
            try:
                assert case.node.services is not None
                tracer = case.node.services.tracer
                sink = trace_sinks.JsonlSink(Path(tmp) / "traces")
                [cid] = case.stored
                await run_turn(case.client, case.model, cid, f"{cid}-warm", 2)
                for n in range(turns):
                    on = n % 2 == 0
                    tracer.sinks = [sink] if on else []
                    _, elapsed, _ = await run_turn(
                        case.client, case.model, cid, f"{cid}-{n}", rounds
                    )
                    samples[on].append(elapsed / rounds * 1000.0)
                await tracer.drain()
                spans = len(trace_sinks.read(Path(tmp)))
            finally:
                await case.close()
    p50_on, p50_off = statistics.median(samples[True]), statistics.median(samples[False])
    return {
        "on_p50_ms": p50_on,
        "off_p50_ms": p50_off,
        "overhead_pct": (p50_on / p50_off - 1) * 100,
        "records": spans,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.trace_overhead",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("--blocks", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=RESULTS / "trace_overhead.json")
    args = parser.parse_args(argv)
    console = Console()
    figures = asyncio.run(measure(args.blocks, args.turns, args.rounds))
    table = Table(title=f"tracing on a round ({args.blocks:,}-block conversation)")
    for name in ("round p50 on", "round p50 off", "overhead", "JSONL records"):
        table.add_column(name, justify="right")
    table.add_row(
        f"{figures['on_p50_ms']:.2f} ms",
        f"{figures['off_p50_ms']:.2f} ms",
        f"{figures['overhead_pct']:+.1f} %",
        f"{figures['records']:.0f}",
    )
    console.print(table)
    target = figures["overhead_pct"] <= TARGET_PCT
    result = {
        "benchmark": "trace_overhead",
        "machine": platform.platform(),
        "blocks": args.blocks,
        "turns": args.turns,
        "rounds": args.rounds,
        **figures,
        "target_pct": TARGET_PCT,
        "target_met": target,
    }
    write_result(console, args.out, result)
    return 0 if target else 1


if __name__ == "__main__":
    raise SystemExit(main())
