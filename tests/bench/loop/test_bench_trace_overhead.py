"""The tracing-overhead benchmark runs end to end on a small conversation (no timing is
asserted: the target is the benchmark's verdict, not this test's)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.loop.trace_overhead import TARGET_PCT, main


def test_the_trace_overhead_benchmark_measures_both_ways_and_writes_its_json(
    tmp_path: Path,
) -> None:
    out = tmp_path / "trace_overhead.json"
    status = main(["--blocks", "50", "--turns", "4", "--rounds", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert status == (0 if result["target_met"] else 1)
    assert result["on_p50_ms"] > 0 and result["off_p50_ms"] > 0
    assert result["records"] > 0 and result["target_pct"] == TARGET_PCT
