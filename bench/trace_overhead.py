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
import statistics
import tempfile
from pathlib import Path

from actors import trace_sinks
from bench.loop import KB, open_case, run_turn
from bus import EmbeddedNats
from tools import KnowledgeSpace


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--blocks", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.blocks, args.turns, args.rounds))
    print(
        f"round p50: tracing on {figures['on_p50_ms']:.2f} ms, off {figures['off_p50_ms']:.2f} ms, "
        f"overhead {figures['overhead_pct']:+.1f} % ({figures['records']:.0f} JSONL records)"
    )


if __name__ == "__main__":
    main()
