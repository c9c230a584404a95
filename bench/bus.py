"""Typed request/reply (``Bus.request`` with actline messages) against raw nats-py.

Both run on the same embedded nats-server in the same process and event loop,
in alternating blocks so that machine noise hits both alike. The typed path
pays for pydantic validation and msgpack on both sides; the raw path sends a
byte string of the same size. Target: typed p50 within 1.3x of raw p50.

The typed path runs twice: on a server without authentication and on one with it (the
client connected with ``node`` credentials, whose permission list is the longest, and
the Bus checking each subject against it). ``auth / open`` is the cost of authentication.

    python -m bench.bus [--requests 5000] [--warmup 500] [--out bench/results/bus.json]
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from rich.console import Console
from rich.progress import Progress

from actline.bus import Bus, EmbeddedNats, Envelope
from actline.messages import Message, TurnAccepted, TurnRequest, encode
from bench.harness import (
    add_counts,
    finish,
    new_table,
    parser,
    platform_info,
    settle,
    summary,
    verdict,
)

TARGET_RATIO = 1.3
DEFAULTS = {"requests": 5000, "warmup": 500}


def _summary(samples: list[float]) -> dict[str, Any]:
    """Count, p50, p99 and mean in microseconds."""
    return summary(samples, unit="us", points=(50, 99), low=False)


async def run(requests: int, warmup: int, blocks: int = 10) -> dict[str, Any]:
    async with EmbeddedNats(insecure=True) as server, EmbeddedNats() as secured:
        bus = await Bus.connect(server.url, name="bench-typed")
        node = await Bus.connect(secured.url, name="bench-auth", creds=secured.creds_path("node"))
        raw = bus.nc
        request = TurnRequest(
            conversation_id="c-bench", turn_id="t-bench", text="How do I rotate the API key?"
        )
        reply = TurnAccepted(conversation_id="c-bench", turn_id="t-bench", node="node-bench")
        raw_request = b"x" * len(encode(request))
        raw_reply = b"y" * len(encode(reply))

        async def typed_handler(msg: Message, env: Envelope) -> Message:
            assert isinstance(msg, TurnRequest)
            return TurnAccepted(conversation_id=msg.conversation_id, turn_id=msg.turn_id, node="n")

        async def raw_handler(msg: Any) -> None:
            await msg.respond(raw_reply)

        await bus.subscribe("bench.typed", typed_handler)
        await node.subscribe("al.bench.typed", typed_handler)
        await raw.subscribe("bench.raw", cb=raw_handler)
        await bus.flush()
        await node.flush()

        async def typed_once() -> None:
            await bus.request("bench.typed", request, timeout=5)

        async def auth_once() -> None:
            await node.request("al.bench.typed", request, timeout=5)

        async def raw_once() -> None:
            await raw.request("bench.raw", raw_request, timeout=5)

        for _ in range(warmup):
            await typed_once()
            await raw_once()
            await auth_once()

        samples: dict[str, list[float]] = {"typed": [], "raw": [], "auth": []}
        per_block = max(1, requests // blocks)
        with Progress(transient=True) as progress:
            task = progress.add_task("request/reply", total=3 * per_block * blocks)
            for block in range(blocks):
                order = [("raw", raw_once), ("typed", typed_once), ("auth", auth_once)]
                if block % 2:
                    order.reverse()
                for name, call in order:
                    bucket = samples[name]
                    for _ in range(per_block):
                        t0 = time.perf_counter()
                        await call()
                        bucket.append(time.perf_counter() - t0)
                    progress.advance(task, per_block)
        await bus.close()
        await node.close()

    typed, raw_s = _summary(samples["typed"]), _summary(samples["raw"])
    auth = _summary(samples["auth"])
    return {
        "benchmark": "bus.request_reply",
        "payload_bytes": {"request": len(raw_request), "reply": len(raw_reply)},
        "typed": typed,
        "raw": raw_s,
        "ratio_p50": typed["p50_us"] / raw_s["p50_us"],
        "ratio_p99": typed["p99_us"] / raw_s["p99_us"],
        "auth": auth,
        "auth_ratio_p50": auth["p50_us"] / typed["p50_us"],
        "auth_ratio_p99": auth["p99_us"] / typed["p99_us"],
        "target_ratio_p50": TARGET_RATIO,
        **platform_info(),
    }


def main(argv: list[str] | None = None) -> int:
    cli = parser("bus", __doc__)
    add_counts(cli, requests="request/reply pairs per path (5000)", warmup="warm-up pairs (500)")
    args = cli.parse_args(argv)
    options = settle(args, DEFAULTS)
    result = asyncio.run(run(options["requests"], options["warmup"]))

    title = f"request/reply, {options['requests']} each after {options['warmup']} warm-up"
    table = new_table(title, ("path", "p50 µs", "p99 µs", "mean µs"), left=("path",))
    for name, label in (("raw", "raw"), ("typed", "typed"), ("auth", "typed, authenticated")):
        row = result[name]
        table.add_row(
            label, f"{row['p50_us']:.0f}", f"{row['p99_us']:.0f}", f"{row['mean_us']:.0f}"
        )
    met = result["ratio_p50"] <= TARGET_RATIO
    table.add_row(
        "typed / raw", f"{result['ratio_p50']:.2f}x", f"{result['ratio_p99']:.2f}x", verdict(met)
    )
    table.add_row(
        "authenticated / open",
        f"{result['auth_ratio_p50']:.2f}x",
        f"{result['auth_ratio_p99']:.2f}x",
        "",
    )
    console = Console()
    console.print(table)
    return finish(console, args.out, result, met)


if __name__ == "__main__":
    raise SystemExit(main())
