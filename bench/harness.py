"""Helpers every benchmark shares: percentiles, timing summaries, the word corpus, output."""

from __future__ import annotations

import functools
import importlib
import json
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

RESULTS = Path(__file__).parent / "results"
COMPARE_HINT = "pip install 'actline[compare]'"
"""How to install the libraries a benchmark compares actline with (not in the test install)."""

WORDS = (
    "the a of to in for with by from as that this which when after before service request "
    "reply cache token prompt timeline block render round result query source file config "
    "deploy version update change value field record index error retry latency budget plan "
    "step check build test read write search fetch parse returns keeps sends shows finds "
    "quickly only always never again first last every other same new old user model tool"
).split()
TOOLS = ("web_search", "react.read", "exec_python", "fetch_url", "list_files")


class SanityCheckFailed(Exception):
    """A benchmark's own correctness check failed at a size: its numbers mean nothing."""

    def __init__(self, blocks: int, what: str) -> None:
        super().__init__(blocks, what)
        self.blocks = blocks
        self.what = what

    def __str__(self) -> str:
        return f"at {self.blocks:,} blocks: {self.what}"


def percentile(samples: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``samples`` (0 <= q <= 1)."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(samples: Sequence[float]) -> dict[str, Any]:
    """Count, p50, p90, min and mean of timings in seconds, reported in milliseconds."""
    return {
        "n": len(samples),
        "p50_ms": percentile(samples, 0.50) * 1e3,
        "p90_ms": percentile(samples, 0.90) * 1e3,
        "min_ms": min(samples) * 1e3,
        "mean_ms": statistics.fmean(samples) * 1e3,
    }


@functools.cache
def corpus(seed: int) -> str:
    """About 400 KB of word salad that synthetic block texts are sliced from."""
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choices(WORDS, k=rng.randint(4, 16))) for _ in range(6_000))


def write_result(console: Console, out: Path, result: dict[str, Any]) -> None:
    """Write a benchmark's JSON result and say where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {out}")


def compare_module(benchmark: str, name: str) -> Any:
    """A comparison-only library, or an exit that names ``benchmark`` and how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise SystemExit(f"{benchmark}: {name} is missing: {COMPARE_HINT}") from exc
