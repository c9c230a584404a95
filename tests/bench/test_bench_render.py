"""The render benchmark runs end to end on tiny timelines (no timing is asserted)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from actline.timeline.blocks import (
    COMPLETION,
    PLAN,
    REACT_NOTES,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_PROMPT,
)
from bench.render import build, main, run


def test_the_synthetic_timeline_is_deterministic_and_multi_turn() -> None:
    first, _ = build(1000)
    second, _ = build(1000)
    assert len(first) == 1000
    assert [b.to_dict() for b in first] == [b.to_dict() for b in second]
    kinds = Counter(b.type for b in first)
    for kind in (TURN_HEADER, USER_PROMPT, TOOL_CALL, TOOL_RESULT, REACT_NOTES, COMPLETION, PLAN):
        assert kinds[kind] > 0, kind
    assert kinds[TURN_HEADER] > 10
    for block in first:
        if block.type in (TOOL_CALL, TOOL_RESULT):
            assert block.call_id
            assert block.path.startswith(f"tc:{block.turn_id}.{block.call_id}.")
    sizes = {len(b.content) for b in first if b.type == TOOL_RESULT}
    assert min(sizes) < 1000 < 6000 < max(sizes)


def test_render_benchmark_measures_every_size(tmp_path: Path) -> None:
    out = tmp_path / "render.json"
    status = main(["--sizes", "50,200", "--rounds", "12", "--full-samples", "3", "--out", str(out)])
    assert status in (0, 1)  # 1 only when a target is missed, which tiny sizes may do
    result = json.loads(out.read_text())
    assert result["benchmark"] == "timeline.render_round"
    assert result["config"] == {"cache_ttl_seconds": 0, "max_tokens": 0}
    assert result["rounds"] == 12
    assert [row["blocks"] for row in result["sizes"]] == [50, 200]
    for row in result["sizes"]:
        assert row["blocks"] <= row["blocks_max"]
        assert row["incremental_matches_full"] is True
        assert row["full"]["n"] >= 3
        assert row["incremental"]["n"] == 12
        assert row["hide"]["n"] == row["batches"] == row["full"]["n"]
        for kind in ("full", "incremental", "hide"):
            summary = row[kind]
            assert 0 < summary["p50_ms"] <= summary["p90_ms"]
            assert summary["mean_ms"] > 0
        assert row["ratio_full_to_incremental"] > 0
        assert row["ratio_full_to_hide"] > 0
        assert row["parts"] == row["stable_parts"] + 2  # SOURCES POOL and ANNOUNCE
        assert row["stable_parts"] == row["blocks"]
        assert row["stable_tokens"] > 0
        assert 1 <= len(row["marks"]) <= 3
    assert [(t["blocks"], t["figure"]) for t in result["targets"]] == [
        (200, "ratio_full_to_incremental"),
        (200, "incremental_p50_ms"),
    ]
    for target in result["targets"]:
        assert isinstance(target["met"], bool)
        assert target["value"] > 0
    assert result["targets_met"] == all(t["met"] for t in result["targets"])
    assert result["python"]


def test_run_returns_the_same_rows_without_writing() -> None:
    result = run(sizes=(40,), rounds=3, fulls=1)
    (row,) = result["sizes"]
    assert row["blocks"] == 40
    assert row["incremental"]["n"] == 3
    assert row["full"]["n"] == row["hide"]["n"] == row["batches"] == 3
