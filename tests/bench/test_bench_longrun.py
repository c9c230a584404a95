"""The long-run benchmark runs end to end on a tiny scenario, and its floor and per-turn
costs add up (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actline.actors.configuration import profiles
from actline.llm.cache_sim import block_tokens
from actline.llm.fake_anthropic.server import RequestRecord
from actline.messages import Usage
from bench.longrun import (
    REREAD_EVERY,
    ScriptedAgent,
    fact,
    flatness,
    floor_tokens,
    main,
    page_text,
    profile_table,
    run_floor,
    turn_costs,
)

MARK = {"type": "ephemeral"}
SYSTEM = "You decide. <channel:decision> carries the decision. " * 8
A = "the first turn's prompt and notes " * 10
B = "a tool result that arrived later " * 12
T1 = "announce: iteration 1/5"
T2 = "announce: iteration 2/5"


def text(value: str, mark: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": value}
    if mark:
        block["cache_control"] = MARK
    return block


def tokens(value: str) -> int:
    return block_tokens(text(value))


def body(*content: dict[str, Any], system: str = SYSTEM) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "system": [text(system, mark=True)],
        "messages": [{"role": "user", "content": list(content)}],
    }


def record(request: dict[str, Any], usage: Usage) -> RequestRecord:
    return RequestRecord("req", "POST", "/v1/messages", {}, request, 200, usage=usage)


FIRST = body(text(A, mark=True), text(T1))
SECOND = body(text(A), text(T1), text(B, mark=True), text(T2))  # the mark moved on to B


def test_pages_carry_their_planted_fact_and_the_agent_rereads_every_fourth_round() -> None:
    code, value = fact(3)
    assert f"PLANTED|code={code}|value={value}" in page_text(5, 200, {5: 3})
    assert "PLANTED" not in page_text(6, 200, {5: 3})
    assert REREAD_EVERY == 4 and ScriptedAgent(10).rounds_per_turn == 10


def test_a_block_is_written_once_then_read_and_the_tail_after_the_last_mark_is_uncached() -> None:
    s, a, b, t1, t2 = (tokens(v) for v in (SYSTEM, A, B, T1, T2))
    first = 1.25 * (s + a) + 1.0 * t1
    # T1 entered uncached in the first request's tail; kept before the mark, it is a read.
    second = 0.1 * (s + a + t1) + 1.25 * b + 1.0 * t2
    assert floor_tokens([FIRST, SECOND]) == pytest.approx(first + second)


def test_a_string_content_is_the_text_block_it_stands_for() -> None:
    as_string = {**SECOND, "messages": [{"role": "user", "content": A}]}
    as_string["messages"].append({"role": "user", "content": [text(B, mark=True)]})
    s, a, b = (tokens(v) for v in (SYSTEM, A, B))
    expected = 1.25 * (s + a) + tokens(T1) + 0.1 * (s + a) + 1.25 * b
    assert floor_tokens([FIRST, as_string]) == pytest.approx(expected)


def test_a_prefix_below_the_cacheable_minimum_costs_its_tokens_once() -> None:
    total = sum(tokens(v) for v in (SYSTEM, A, T1))
    assert floor_tokens([FIRST], min_cache_tokens=10**6) == pytest.approx(total)


def test_summary_requests_count_at_their_actual_cost_and_turns_split_the_requests() -> None:
    summary = body(text(A), system="Summarise the conversation as JSON.")
    usage = Usage(input_tokens=100, cache_read_tokens=1000, cache_write_5m_tokens=40)
    requests = [
        record(FIRST, Usage(cache_write_5m_tokens=200, input_tokens=5)),
        record(summary, usage),
        record(SECOND, Usage(cache_read_tokens=200, cache_write_1h_tokens=50, input_tokens=5)),
    ]
    assert run_floor(requests) == pytest.approx(floor_tokens([FIRST, SECOND]) + 250)
    assert turn_costs(requests, [(0, 2), (2, 3)]) == pytest.approx([255 + 250, 20 + 100 + 5])


def test_flatness_is_the_last_third_of_the_turns_over_the_middle_third() -> None:
    assert flatness([9.0] * 20 + [1.0] * 20 + [1.2] * 20) == pytest.approx(1.2)
    assert flatness([1.0, 2.0]) is None


def test_the_baseline_turns_the_smart_layer_off() -> None:
    table = profile_table("deep", "baseline", False)
    assert table["retention"] is table["ttl_pruning"] is table["watchdog"] is False
    assert ("context_policy" in table) == ("context_policy" in profiles.KEYS)
    assert profile_table("deep", "policy", True) == {"extends": "deep", "watchdog": True}


def test_a_tiny_long_run_reports_policy_baseline_floor_and_turn_costs(tmp_path: Path) -> None:
    out = tmp_path / "longrun.json"
    assert main(["--quick", "--profiles", "fast", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {(r["run"], r["watchdog"]): r for r in result["runs"]}
    assert set(rows) == {("policy", True), ("policy", False), ("baseline", False)}
    [long] = result["long_runs"]
    assert long["turns"] == 4 and long["watchdog"] and long["flatness"] > 0
    for row in [*rows.values(), long]:
        turns = row["turns"]
        assert row["rounds"] == 5 * turns and row["model_calls"] >= 5 * turns
        assert row["facts_recalled"] == row["facts_planted"] == turns  # all still in view
        assert 0 < row["cache_read_pct"] < 100 and row["peak_context_tokens"] > 0
        assert len(row["turn_costs"]) == turns
        assert sum(row["turn_costs"]) == pytest.approx(row["cost_base_tokens"])
        assert row["cost_vs_floor"] == pytest.approx(
            row["cost_base_tokens"] / row["floor_base_tokens"]
        )
        if row["run"] == "policy":
            assert 0 < row["floor_base_tokens"] <= row["cost_base_tokens"]
    targets = result["targets"]["fast"]
    assert set(targets) == {
        "cost_vs_today",
        "cache_read_pct",
        "cost_vs_floor",
        "peak_context_tokens",
        "recall_pct",
        "cost_vs_baseline",
        "flatness",
    }
    assert targets["cost_vs_today"]["met"] is None  # measured at other sizes
    assert targets["recall_pct"]["met"] is True
    assert all(t["met"] in (True, False) for k, t in targets.items() if k != "cost_vs_today")
