"""``actline eval``: scores of known runs (exact figures), case files refused by line and field,
and real runs of cases through the offline model, one built to fail and reported as FAIL."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from actline.cli.evaluate import run_cases, tool_calls
from actline.cli.main import main
from actline.config import Config
from actline.errors import CaseFileError, ConfigError
from actline.eval_cases import (
    CaseRun,
    EvalCase,
    EvalTurn,
    ToolCall,
    aggregate,
    contains,
    load_cases,
    parse_cases,
    score_case,
)
from actline.messages import Usage
from actline.timeline import Block
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "examples" / "kb"
SEARCH, READ = "react.search_knowledge", "react.read"

# -- scoring with known answers -------------------------------------------------------------------
MIXED = EvalCase(
    id="mixed",
    turns=(EvalTurn("What is the default retention, and who keeps a year?"),),
    expect_facts=("72 hours", "Enterprise"),
    forbid=("48 hours",),
    expect_tools=(SEARCH, READ),
)
MIXED_RUN = CaseRun(
    statuses=("completed",),
    answers=("The default is **72   Hours** (`storage.retention`).",),
    tool_calls=(
        ToolCall("react.plan"),
        ToolCall(SEARCH),
        ToolCall(READ, ok=False),
        ToolCall(READ),
    ),
    usage=Usage(input_tokens=8000, output_tokens=1000, cache_read_tokens=1000),
)
CLEAN = EvalCase(id="clean", turns=(EvalTurn("Max message size?"),), expect_facts=("1 MiB",))
CLEAN_RUN = CaseRun(
    statuses=("completed",), answers=("It is `1 MiB`.",), usage=Usage(input_tokens=30_000)
)


def test_a_case_with_a_missing_fact_and_a_recovered_failed_call_scores_exactly() -> None:
    s = score_case(MIXED, MIXED_RUN)
    assert (s.recall, s.obsolete_drop, s.passed) == (0.5, 1.0, False)
    assert s.missing_facts == ["Enterprise"] and s.forbidden_found == []
    assert s.tools_used == ["react.plan", SEARCH, READ]
    assert (s.tool_hit, s.tool_precision, s.trajectory) == (1.0, 0.75, 0.875)
    assert (s.failed_calls, s.recovered_calls, s.recovery) == (1, 1, 1.0)
    assert s.over_tooling == 0.333  # 3 successful calls, 2 expected tools
    assert (s.tokens, s.cost, s.cost_score) == (10_000, 13_100.0, 0.5)
    assert s.score == pytest.approx(0.20 * 0.875 + 0.15 * 0.75 + 0.10 * 1.0 + 0.10 * 0.5)


def test_a_passing_case_without_expected_tools_and_the_aggregate_score_exactly() -> None:
    s = score_case(CLEAN, CLEAN_RUN)
    assert s.passed and (s.tool_precision, s.trajectory, s.over_tooling) == (1.0, 1.0, 0.0)
    assert s.cost_score == 0.25 and s.score == pytest.approx(0.925)
    total = aggregate([score_case(MIXED, MIXED_RUN), s])
    assert (total.cases, total.passed, total.failed, total.task_success) == (2, 1, 1, 0.5)
    assert (total.trajectory, total.tool_precision, total.recovery) == (0.9375, 0.875, 1.0)
    assert (total.tokens_total, total.tokens_mean) == (40_000, 20_000.0)
    assert total.cost_score == pytest.approx(1 / 3)
    expected = 0.45 * 0.5 + 0.20 * 0.9375 + 0.15 * 0.875 + 0.10 * 1.0 + 0.10 / 3
    assert total.score == pytest.approx(expected)
    assert total.recall == 0.75 and total.over_tooling == pytest.approx(0.167)


def test_a_failed_call_in_a_turn_that_did_not_complete_is_not_recovered() -> None:
    run = CaseRun(
        statuses=("completed", "failed"),
        answers=("", ""),
        tool_calls=(ToolCall(SEARCH, ok=False, turn=0), ToolCall(READ, ok=False, turn=1)),
    )
    s = score_case(MIXED, run)
    assert (s.failed_calls, s.recovered_calls, s.recovery, s.over_tooling) == (2, 1, 0.5, 0.0)
    assert s.recall == 0.0 and not s.passed
    # expected tools and no call at all: no precision, no trajectory
    idle = score_case(MIXED, CaseRun(statuses=("completed",), answers=("72 hours Enterprise",)))
    assert idle.passed and (idle.tool_precision, idle.trajectory) == (0.0, 0.0)


def test_a_forbidden_obsolete_value_in_the_answer_fails_the_case() -> None:
    run = CaseRun(statuses=("completed",), answers=("72 hours on Enterprise; was 48 HOURS",))
    s = score_case(MIXED, run)
    assert (s.recall, s.obsolete_drop, s.passed) == (1.0, 0.0, False)
    assert s.forbidden_found == ["48 hours"]


def test_matching_ignores_case_space_and_markdown_emphasis_only() -> None:
    assert contains('Set `storage.retention = "72h"`', 'STORAGE.retention  = "72h"')
    assert contains("**Ed25519**\nsigning", "ed25519 signing")
    assert not contains("7 days", "72 hours")


def test_tool_calls_come_from_the_stored_call_and_result_blocks() -> None:
    def block(kind: str, turn: str, path: str, data: object) -> Block:
        return Block.new(kind, turn, 1.0, path=path, data=data)

    blocks = [
        block(TOOL_CALL, "t-1", "tc:t-1.c1-1.call", {"tool": SEARCH, "params": {}}),
        block(TOOL_RESULT, "t-1", "tc:t-1.c1-1.result", {"status": "ok"}),
        block(TOOL_CALL, "t-1", "tc:t-1.c2-1.call", {"tool": READ, "params": {}}),
        block(TOOL_RESULT, "t-1", "tc:t-1.c2-1.result", {"status": "error", "error": "x"}),
        block(TOOL_RESULT, "t-1", "ks:a.md", None),
        block(TOOL_CALL, "t-2", "tc:t-2.c1-1.call", {"tool": READ, "params": {}}),
        block(TOOL_CALL, "t-0", "tc:t-0.c1-1.call", {"tool": "other", "params": {}}),
    ]
    assert tool_calls(blocks, ["t-1", "t-2"]) == [
        ToolCall(SEARCH, True, 0),
        ToolCall(READ, False, 0),
        ToolCall(READ, False, 1),  # no result stored: not a success
    ]


# -- the case file --------------------------------------------------------------------------------
GOOD = '{"id": "a", "turns": ["q"], "expect_facts": ["x"]}'


@pytest.mark.parametrize(
    ("line", "field", "problem"),
    [
        ("{not json", "", "not JSON"),
        ("[1, 2]", "", "a case is a JSON object"),
        ('{"turns": ["q"], "expect_facts": ["x"]}', "id", "required"),
        ('{"id": "b", "turns": [], "expect_facts": ["x"]}', "turns", "non-empty list"),
        ('{"id": "b", "turns": ["q"]}', "expect_facts", "checks nothing"),
        ('{"id": "b", "turns": ["q"], "expect_facts": "x"}', "expect_facts", "list of"),
        ('{"id": "b", "turns": ["q"], "forbid": [""]}', "forbid", "non-empty strings"),
        ('{"id": "b", "turns": [{"txt": "q"}], "forbid": ["y"]}', "turns[0].txt", "unknown"),
        (
            '{"id": "b", "turns": ["q", {"text": "r", "config": 3}], "forbid": ["y"]}',
            "turns[1].config",
            "must be an object",
        ),
        ('{"id": "b", "turns": ["q"], "forbid": ["y"], "expect": ["z"]}', "expect", "unknown"),
        ('{"id": "b", "turns": ["q"], "forbid": ["y"], "profile": 3}', "profile", "profile"),
        (GOOD, "id", "also the id on line 1"),
    ],
)
def test_a_malformed_case_is_refused_naming_its_line_and_field(
    tmp_path: Path, line: str, field: str, problem: str
) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text(f"{GOOD}\n\n{line}\n")
    with pytest.raises(CaseFileError) as caught:
        load_cases(path)
    error = caught.value
    assert (error.line, error.field) == (3, field) and problem in error.problem
    assert str(error).startswith(f"{path}:3: ")
    assert isinstance(error, ConfigError)
    assert str(pickle.loads(pickle.dumps(error))) == str(error)


def test_an_empty_or_missing_case_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match="holds no cases"):
        parse_cases("\n\n", "empty.jsonl")
    with pytest.raises(CaseFileError, match="cannot be read"):
        load_cases(tmp_path / "nope.jsonl")


def test_the_shipped_case_file_is_valid_and_draws_on_the_knowledge_folder() -> None:
    cases = load_cases(ROOT / "examples" / "eval" / "kb.jsonl")
    assert len(cases) >= 30
    assert any(len(c.turns) > 1 for c in cases) and any(c.forbid for c in cases)
    corpus = " ".join(p.read_text() for p in KB.rglob("*.md"))
    for case in cases:
        for fact in case.expect_facts:
            assert contains(corpus, fact), (case.id, fact)


# -- real runs through the offline model ----------------------------------------------------------
CASES = [
    '{"id": "size", "turns": ["What is the maximum message size?"], "expect_facts": ["1 MiB"],'
    ' "expect_tools": ["react.search_knowledge", "react.read"]}',
    '{"id": "built-to-fail", "turns": ["What is the default retention period for messages?"],'
    ' "expect_facts": ["a phrase no document holds"], "forbid": ["72 hours"],'
    ' "expect_tools": ["react.search_knowledge"]}',
]


async def test_cases_run_on_the_offline_model_and_the_failing_one_fails(tmp_path: Path) -> None:
    config = Config.load(None, env={}, model="extractive", knowledge_dir=KB)
    scores = await run_cases(config, parse_cases("\n".join(CASES)), home=tmp_path / "home")
    good, bad = scores
    assert good.passed and good.recall == 1.0 and good.statuses == ["completed"]
    assert {SEARCH, READ} <= set(good.tools_used) and good.tool_hit == 1.0
    assert good.tokens > 0 and good.conversation_id != bad.conversation_id
    assert not bad.passed and (bad.recall, bad.obsolete_drop) == (0.0, 0.0)
    assert bad.forbidden_found == ["72 hours"]


def test_the_eval_command_reports_a_failing_case_as_fail_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(CASES) + "\n")
    out = tmp_path / "report.json"
    args = ["eval", str(cases), "--model", "extractive", "--docs", str(KB)]
    args += ["--home", str(tmp_path / "home"), "--json", str(out), "--only", "built-to-fail"]
    assert main([*args, "--min-score", "0.9"]) == 1
    printed = capsys.readouterr().out
    assert "built-to-fail" in printed and "FAIL" in printed and "0/1 passed" in printed
    report = json.loads(out.read_text())
    assert report["model"] == "extractive" and report["aggregate"]["failed"] == 1
    assert [(c["id"], c["passed"]) for c in report["cases"]] == [("built-to-fail", False)]
    # a malformed file: one line naming line and field, exit code 2
    cases.write_text(CASES[0] + '\n{"id": "x", "turns": "q", "forbid": ["y"]}\n')
    assert main(["eval", str(cases)]) == 2
    assert f"{cases}:2: turns: required" in capsys.readouterr().err
