"""The cost of tracing on a round: round p50 with the JSONL trace sink on and off, same run.

One node of ``bench.loop`` (instant model, prefilled conversation, synced commits), turns
of ``--rounds`` rounds alternating between tracing on (the JSONL sink under the home, as
by default) and off (no sink: what ``ACTLINE_TRACE=0`` gives), so both see the same
machine load. Prints the two p50s and the overhead in percent (target: at most 10 %).

    python -m bench trace_overhead [--blocks 2000] [--turns 40] [--rounds 4]
    python -m bench.loop.trace_overhead [...]
"""

from __future__ import annotations

import asyncio
import platform
import tempfile
from pathlib import Path

from rich.console import Console

from actline.actors.tracing import sinks as trace_sinks
from actline.bus import EmbeddedNats
from actline.tools import KnowledgeSpace
from bench.harness import add_counts, finish, median_ms, new_table, parser, settle
from bench.loop.model import KB
from bench.loop.rounds import open_case, run_turn

TARGET_PCT = 10.0
"""The most a round may slow down with tracing on."""


async def measure(blocks: int, turns: int, rounds: int) -> dict[str, float]:
    knowledge = KnowledgeSpace(KB, embedder=None)
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
                    samples[on].append(elapsed / rounds)
                await tracer.drain()
                spans = len(trace_sinks.read(Path(tmp)))
            finally:
                await case.close()
    p50_on, p50_off = median_ms(samples[True]), median_ms(samples[False])
    return {
        "on_p50_ms": p50_on,
        "off_p50_ms": p50_off,
        "overhead_pct": (p50_on / p50_off - 1) * 100,
        "records": spans,
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("trace_overhead", __doc__)
    add_counts(
        cli,
        blocks="blocks of the prefilled conversation (2000)",
        turns="measured turns, alternating (40)",
        rounds="rounds per turn (4)",
    )
    args = cli.parse_args(argv)
    options = settle(args, {"blocks": 2000, "turns": 40, "rounds": 4})
    console = Console()
    figures = asyncio.run(measure(options["blocks"], options["turns"], options["rounds"]))
    table = new_table(
        f"tracing on a round ({options['blocks']:,}-block conversation)",
        ("round p50 on", "round p50 off", "overhead", "JSONL records"),
    )
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
        "blocks": options["blocks"],
        "turns": options["turns"],
        "rounds": options["rounds"],
        **figures,
        "target_pct": TARGET_PCT,
        "target_met": target,
    }
    return finish(console, args.out, result, target)


if __name__ == "__main__":
    raise SystemExit(main())
