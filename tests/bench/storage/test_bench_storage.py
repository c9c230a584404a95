"""The storage benchmark runs end to end on tiny conversations (no timing is asserted)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from actline.timeline.blocks import (
    COMPLETION,
    REACT_NOTES,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_PROMPT,
)
from bench.storage import (
    TEXT_MAX,
    TEXT_MIN,
    TURN_BLOCKS,
    build,
    main,
    naive_samples,
    prepare,
    rollback,
    run,
)

SUMMARY_KEYS = {"n", "p50_ms", "p90_ms", "min_ms", "mean_ms"}


def test_the_synthetic_conversation_is_deterministic_and_multi_turn() -> None:
    first, conv = build(1000)
    second, _ = build(1000)
    assert len(first) == 1000
    assert [b.to_dict() for b in first] == [b.to_dict() for b in second]
    assert [b.id for b in sorted(first, key=lambda b: b.seq)] == [f"b{k}" for k in range(1, 1001)]
    kinds = Counter(b.type for b in first)
    for kind in (TURN_HEADER, USER_PROMPT, TOOL_CALL, TOOL_RESULT, REACT_NOTES, COMPLETION):
        assert kinds[kind] > 0, kind
    assert kinds[TURN_HEADER] > 10
    sizes = [len(b.text) for b in first if b.text]
    assert TEXT_MIN <= min(sizes) and max(sizes) <= TEXT_MAX
    assert len(first.sources) == 50
    turn = conv.turn()
    assert len(turn) == TURN_BLOCKS
    assert turn[0].type == TURN_HEADER and turn[-1].type == COMPLETION
    assert {b.turn_id for b in turn} == {turn[0].turn_id} != {first.blocks[-1].turn_id}


def test_a_rolled_back_turn_leaves_the_prefilled_store(tmp_path: Path) -> None:
    case = prepare(60, tmp_path)
    try:
        store = case.opened
        before = store.header("c-bench")
        store.append_turn("c-bench", case.turn, case.snapshot)
        assert (store.header("c-bench") or {})["stored_seq"] == 60 + TURN_BLOCKS
        rollback(case)
        assert store.header("c-bench") == before
        assert len(list(store.iter_blocks("c-bench"))) == 60
        store.persist(case.tl)
        assert (store.header("c-bench") or {})["stored_seq"] == 60 + TURN_BLOCKS
        rollback(case)
        assert len(store.load("c-bench").timeline) == 60
    finally:
        case.close()


def test_storage_benchmark_measures_every_size(tmp_path: Path) -> None:
    out = tmp_path / "storage.json"
    status = main(["--sizes", "100,1000", "--samples", "4", "--load-runs", "2", "--out", str(out)])
    assert status in (0, 1)  # 1 only when a target is missed, which tiny sizes may do
    result = json.loads(out.read_text())
    assert result["benchmark"] == "storage.persist_turn"
    assert result["turn_blocks"] == TURN_BLOCKS
    assert result["samples"] == 4
    assert result["sync"] is True
    assert [row["blocks"] for row in result["sizes"]] == [100, 1000]
    for row in result["sizes"]:
        for kind in ("lmdb", "lmdb_fixed", "persist", "nosync"):
            summary = row[kind]
            assert set(summary) == SUMMARY_KEYS
            assert summary["n"] == 4
            assert 0 < summary["min_ms"] <= summary["p50_ms"] <= summary["p90_ms"]
            assert row[f"{kind}_flatness"] > 0
        assert row["naive"]["n"] == row["naive_planned"] == naive_samples(row["blocks"], 4)
        assert row["naive_skipped"] is None
        assert row["naive_bytes"] > row["header_bytes"] > 0
        assert row["ratio_naive_to_lmdb"] > 0
        assert row["ratio_naive_to_persist"] > 0
        assert row["turns"] > 0
        assert row["store_bytes"] > 0
    assert result["sizes"][0]["lmdb_flatness"] == 1.0
    load = result["load"]
    assert load["blocks"] == load["loaded_blocks"] == 1000
    assert load["matches_stored"] is True
    assert load["load"]["n"] == load["iter_blocks"]["n"] == 2
    assert [(t["blocks"], t["figure"]) for t in result["targets"]] == [
        (1000, "lmdb_flatness"),
        (1000, "ratio_naive_to_lmdb"),
    ]
    for target in result["targets"]:
        assert isinstance(target["met"], bool)
        assert target["value"] > 0
    assert result["targets_met"] == all(t["met"] for t in result["targets"])
    assert result["python"]


def test_naive_rewrites_over_budget_are_skipped_with_a_reason() -> None:
    result = run(sizes=(40,), samples=2, nosync=False, naive_budget=0.0, load_runs=1)
    (row,) = result["sizes"]
    assert row["naive"] is None
    assert "budget" in row["naive_skipped"]
    assert row["ratio_naive_to_lmdb"] is None
    assert row["nosync"] is None and row["nosync_flatness"] is None
    assert row["lmdb"]["n"] == row["persist"]["n"] == 2
    ratio = result["targets"][1]
    assert ratio["value"] is None and ratio["met"] is False
    assert result["load"]["blocks"] == 40
