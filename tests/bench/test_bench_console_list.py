"""The console-list benchmark runs end to end on small stores (no timing is asserted: the
target is the benchmark's verdict, not this test's)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.console_list import GROWTH_SHARE, TARGET_OPEN_RATIO, TARGET_RATIO, main


def test_the_console_list_benchmark_times_outlines_and_opens_against_whole_reads_and_writes_json(
    tmp_path: Path,
) -> None:
    out = tmp_path / "console_list.json"
    status = main(["--sizes", "60,240", "--conversations", "3", "--repeat", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert status == (0 if result["target_met"] else 1)
    assert [r["blocks"] for r in result["rows"]] == [60, 240]
    for row in result["rows"]:
        assert row["list_p50_ms"] > 0 and row["whole_p50_ms"] > 0 and row["turns"] > 0
        assert row["ratio"] == row["list_p50_ms"] / row["whole_p50_ms"]
        assert row["open_p50_ms"] > 0 and row["scan_p50_ms"] > 0
        assert row["open_ratio"] == row["open_p50_ms"] / row["scan_p50_ms"]
    assert result["size_growth"] == 4.0
    assert (result["target_ratio"], result["growth_share"]) == (TARGET_RATIO, GROWTH_SHARE)
    assert result["target_open_ratio"] == TARGET_OPEN_RATIO
