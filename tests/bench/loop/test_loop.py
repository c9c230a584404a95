"""The loop benchmark runs end to end in its quick mode (no timing is asserted)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from actline.messages import GenerateRequest
from actline.timeline.blocks import COMPLETION, TOOL_CALL, TOOL_RESULT, TURN_HEADER, USER_PROMPT
from bench.loop import QUICK, InstantModel, Plan, compare, main, not_comparable, prefill

SUMMARY_KEYS = {"n", "p50_ms", "p90_ms", "p99_ms", "max_ms", "min_ms", "mean_ms"}


def _decision(model: InstantModel, turn_id: str, round_: int) -> Any:
    request = GenerateRequest(conversation_id="c", turn_id=turn_id, round=round_)
    found = re.search(r"<channel:decision>(.*?)</channel:decision>", model.output(request))
    assert found is not None
    return json.loads(found.group(1))


def test_the_instant_model_searches_with_new_queries_then_completes() -> None:
    model = InstantModel()
    model.plans["t"] = Plan(rounds=4)
    model.plans["w"] = Plan(rounds=2, agent="nobody")
    decisions = [_decision(model, "t", r) for r in range(1, 5)]
    assert [d["action"] for d in decisions] == ["call_tools"] * 3 + ["complete"]
    calls = [d["calls"] for d in decisions[:3]]
    assert all(c[0]["tool"] == "react.search_knowledge" for c in calls)
    assert len({json.dumps(c) for c in calls}) == 3
    send = _decision(model, "w", 1)["calls"]
    assert send[0]["tool"] == "agent.send" and send[0]["params"]["name"] == "nobody"


def test_the_prefilled_conversation_is_whole_turns_of_the_runtime_block_types() -> None:
    tl = prefill(300, "c-x", end=1_800_000_000.0)
    again = prefill(300, "c-x", end=1_800_000_000.0)
    assert 300 <= len(tl) < 300 + 25
    assert [b.content for b in tl.blocks] == [b.content for b in again.blocks]
    assert {b.type for b in tl.blocks} >= {TURN_HEADER, USER_PROMPT, TOOL_CALL, TOOL_RESULT}
    assert tl.blocks[-1].type == COMPLETION
    assert max(b.ts for b in tl.blocks) <= 1_800_000_000.0


def test_loop_benchmark_quick_mode_reports_every_part(tmp_path: Path) -> None:
    out = tmp_path / "loop.json"
    status = main(["--quick", "--out", str(out)])
    assert status in (0, 1)  # 1 only when a target is missed
    result = json.loads(out.read_text())
    assert result["benchmark"] == "loop.round_overhead"
    assert result["quick"] is True
    assert result["rounds"] == QUICK["rounds"] and result["turns"] == QUICK["turns"]

    floor = result["floor"]
    assert set(floor) == SUMMARY_KEYS | {"payload_bytes"}
    assert floor["n"] == QUICK["turns"] * QUICK["floor_block"]
    assert 0 < floor["min_ms"] <= floor["p50_ms"] <= floor["p99_ms"]
    assert all(size > 0 for size in floor["payload_bytes"].values())
    assert result["tool"]["search"]["n"] > 0

    cases = result["cases"]
    assert [(c["blocks"], c["sync"]) for c in cases] == [
        (size, sync) for size in QUICK["sizes"] for sync in (True, False)
    ]
    for case in cases:
        assert case["conversations"] == case["turns"] == QUICK["turns"]
        assert case["blocks"] <= case["stored_blocks"] < case["blocks_before"]
        assert case["blocks_before"] < case["blocks_after"]
        for kind in ("round", "model_leg", "tools_leg"):
            summary = case[kind]
            assert set(summary) == SUMMARY_KEYS
            assert summary["n"] == QUICK["turns"] * (QUICK["rounds"] - 1)
            assert 0 < summary["min_ms"] <= summary["p50_ms"] <= summary["p99_ms"]
            assert summary["p99_ms"] <= summary["max_ms"]
        for kind in ("turn", "turn_per_round", "pickup"):
            assert case[kind]["n"] == QUICK["turns"] and case[kind]["min_ms"] > 0
        assert case["model_leg"]["p50_ms"] < case["round"]["p50_ms"] < case["turn"]["p50_ms"]
        assert case["ratio_p50"] > 0 and case["ratio_p99"] > 0
        # the node's own commits: one conversation at a time, so every one on the event loop
        own = case["store_commit"]
        assert own["transactions"] >= QUICK["turns"] * QUICK["rounds"]
        assert own["inline"] == own["transactions"] and own["mean_ms"] > 0
        assert own["per_turn"] == own["transactions"] / QUICK["turns"]
        less = case["round"]["p50_ms"] - own["mean_ms"]
        assert own["round_less_commit_p50_ms"] == less
        assert own["ratio_durable_less_commit"] == less / case["durable_floor"]["p50_ms"]
        assert own["vs_floor_commit"] == own["mean_ms"] / case["commit"]["mean_ms"]

    assert [t["sync"] for t in result["throughput"]] == [True, False]
    for tput in result["throughput"]:
        assert tput["turns"] == tput["turn"]["n"] == QUICK["total_turns"]
        assert tput["conversations"] == QUICK["conversations"]
        assert 2 * tput["turns"] <= tput["rounds"] <= 3 * tput["turns"]
        assert tput["turns_per_s"] > 0 and tput["seconds"] > 0 and tput["cpu_ms_per_turn"] > 0

    memory = result["memory"]
    assert memory["waiting"] == memory["cancelled"] == QUICK["waiting"]
    assert 0 < memory["rss_before_bytes"] and 0 < memory["rss_after_bytes"]
    assert isinstance(memory["per_conversation_bytes"], float)

    figures = [(t["blocks"], t["figure"]) for t in result["targets"]]
    sizes = QUICK["sizes"]
    assert figures == [(s, "ratio_p50") for s in sizes] + [(max(sizes), "round_p50_ms")]
    assert result["targets_met"] == all(t["met"] for t in result["targets"])


def _run(floor_ms: float, round_ms: float, turns_per_s: float, cpu_ms: float) -> dict[str, Any]:
    """The parts of a ``bench.loop`` result that ``compare`` reads."""
    return {
        "floor": {"p50_ms": floor_ms},
        "cases": [{"blocks": 100, "sync": True, "round": {"p50_ms": round_ms}}],
        "throughput": [
            {
                "sync": True,
                "conversations": 50,
                "turns_per_s": turns_per_s,
                "cpu_ms_per_turn": cpu_ms,
            }
        ],
    }


def test_a_baseline_is_judged_only_when_it_saw_a_machine_of_the_same_speed() -> None:
    before = _run(0.32, 3.0, 100.0, 10.0)
    same = compare(_run(0.35, 1.5, 210.0, 4.8), before, "base.json")
    assert same["comparable"] and same["speed"] == 0.35 / 0.32
    assert {t["figure"]: t["met"] for t in same["targets"]} == {
        "cpu_ms_per_turn_ratio": True,
        "turns_per_s_ratio": True,
    }
    slower = compare(_run(0.85, 5.4, 80.0, 12.0), before, "base.json")
    assert not slower["comparable"]
    assert [t["met"] for t in slower["targets"]] == [None, None]  # shown, not judged
    assert slower["rounds"][0]["ratio"] == 5.4 / 3.0  # the ratios are still reported
    text = not_comparable(slower)
    assert "0.320 ms against 0.850 ms" in text and "bench loop_split --against" in text
    unknown = compare(_run(0.35, 1.5, 210.0, 4.8), {**before, "floor": {}}, "old.json")
    assert not unknown["comparable"] and "records no NATS floor" in not_comparable(unknown)


def test_a_baseline_that_is_not_a_result_is_refused_before_anything_runs(
    tmp_path: Path, capsys: Any
) -> None:
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    out = tmp_path / "loop.json"
    assert main(["--quick", "--baseline", str(listed), "--out", str(out)]) == 2
    said = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "holds a JSON list, not a bench.loop result" in said
    assert not out.exists()
