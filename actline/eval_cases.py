"""Eval cases and their scores: the pure half of ``actline eval`` (no I/O but reading a file).

A case file is JSON Lines, one case per line (blank lines are skipped)::

    {"id": "retention-default",
     "turns": ["What is the default retention?", {"text": "And before 3.2?", "config": {}}],
     "expect_facts": ["72 hours"], "forbid": ["48 hours"],
     "expect_tools": ["react.search_knowledge", "react.read"],
     "profile": "fast", "tags": ["retention"]}

``turns`` are the user's messages of one fresh conversation, in order: a string, or an object
with ``text`` and an optional ``config`` (the turn's config table, as ``actline ask`` sends).
``expect_facts`` must all appear in the answer of the **last** turn, ``forbid`` (obsolete or
wrong values) must not; matching ignores case, runs of white space and markdown emphasis
(`` ` `` and ``*``). ``expect_tools`` are tool names the case's trajectory (every turn) should
use. A case needs at least one of the three lists. ``profile`` overrides the run's profile.

Scores, as the original harness (``smart/eval.ts``) computes them:

- ``recall`` = expected facts found / expected (1.0 with none);
- ``obsolete_drop`` = forbidden phrases absent / forbidden (1.0 with none);
- ``tool_precision`` = calls of an expected tool / all tool calls (1.0 when there were no
  calls and none were expected; 0.0 when calls were expected and none were made);
- ``trajectory`` = (expected tools used / expected + tool_precision) / 2 (the first ratio is
  1.0 with none expected);
- ``recovery`` = failed tool calls (result status ``error``) in turns that still completed /
  failed tool calls (1.0 with none); the aggregate pools the calls of all cases;
- ``over_tooling`` = max(0, successful calls - max(#expected tools, 1)) / successful calls
  (3 decimals; 0.0 with none), the eval definition, not the watchdog's;
- ``passed`` (success) = recall >= 0.8 and obsolete_drop >= 0.8;
- ``score`` = 0.45 task_success + 0.20 trajectory + 0.15 tool_precision + 0.10 recovery
  + 0.10 cost_score, with ``cost_score = 1 / (1 + tokens / 10000)``.

``tokens`` are a case's raw tokens: every prompt token (uncached, cache read, cache write)
plus output tokens, summed over its turns. The aggregate's ``cost_score`` uses the **mean**
tokens per case (so it does not fall as cases are added); a case's own score uses its own.
``cost`` is reported apart, in base-price input tokens as in ``bench/cache.py``: uncached +
1.25 x 5-minute writes + 2 x 1-hour writes + 0.1 x reads + ``OUTPUT_WEIGHT`` x output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from actline.messages import Usage

from .errors import CaseFileError

__all__ = [
    "OUTPUT_WEIGHT",
    "SUCCESS_THRESHOLD",
    "WEIGHTS",
    "Aggregate",
    "CaseRun",
    "CaseScore",
    "EvalCase",
    "EvalTurn",
    "ToolCall",
    "aggregate",
    "contains",
    "load_cases",
    "parse_cases",
    "score_case",
    "usage_cost",
    "usage_tokens",
]

SUCCESS_THRESHOLD = 0.8
WEIGHTS = {
    "task_success": 0.45,
    "trajectory": 0.20,
    "tool_precision": 0.15,
    "recovery": 0.10,
    "cost_score": 0.10,
}
COST_SCALE = 10_000
OUTPUT_WEIGHT = 5.0
"""An output token costs this many base-price input tokens (Claude: $15 vs $3 per MTok)."""
KEYS = {
    "id",
    "turns",
    "expect_facts",
    "forbid",
    "expect_tools",
    "expect_sources",
    "profile",
    "tags",
}
_EMPHASIS = re.compile(r"[`*]")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class EvalTurn:
    text: str
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EvalCase:
    id: str
    turns: tuple[EvalTurn, ...]
    expect_facts: tuple[str, ...] = ()
    forbid: tuple[str, ...] = ()
    expect_tools: tuple[str, ...] = ()
    profile: str | None = None
    tags: tuple[str, ...] = ()
    line: int = 0
    expect_sources: tuple[str, ...] = ()
    """Documents (paths under the knowledge folder) that hold the answer: a citation of
    any of them is a right one. Empty: the case does not say."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a case: its tool, whether it succeeded, the turn (0-based) it was in."""

    tool: str
    ok: bool = True
    turn: int = 0


@dataclass(frozen=True, slots=True)
class CaseRun:
    """What running a case observed: per turn status, the answers, the tool calls, usage."""

    statuses: tuple[str, ...]
    answers: tuple[str, ...]
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    conversation_id: str = ""
    turn_ids: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def answer(self) -> str:
        return self.answers[-1] if self.answers else ""


@dataclass(frozen=True, slots=True)
class CaseScore:
    id: str
    passed: bool
    recall: float
    obsolete_drop: float
    tool_hit: float
    tool_precision: float
    trajectory: float
    recovery: float
    over_tooling: float
    tokens: int
    cost: float
    cost_score: float
    score: float
    missing_facts: list[str]
    forbidden_found: list[str]
    tools_used: list[str]
    failed_calls: int
    recovered_calls: int
    statuses: list[str]
    errors: list[str]
    conversation_id: str
    tags: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Aggregate:
    cases: int
    passed: int
    failed: int
    task_success: float
    recall: float
    obsolete_drop: float
    trajectory: float
    tool_precision: float
    recovery: float
    over_tooling: float
    tokens_total: int
    tokens_mean: float
    cost_total: float
    cost_score: float
    score: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the case file ---------------------------------------------------------------------------------
def load_cases(path: Path) -> list[EvalCase]:
    """The cases of a JSONL file; ``CaseFileError`` naming the line and field otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseFileError(str(path), 0, "", f"cannot be read ({exc})") from None
    return parse_cases(text, str(path))


def parse_cases(text: str, source: str = "<cases>") -> list[EvalCase]:
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CaseFileError(source, number, "", f"not JSON ({exc.msg})") from None
        case = _case(value, source, number)
        if case.id in seen:
            raise CaseFileError(
                source, number, "id", f"{case.id!r} is also the id on line {seen[case.id]}"
            )
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise CaseFileError(source, 0, "", "holds no cases (one JSON object per line)")
    return cases


def _case(value: Any, source: str, line: int) -> EvalCase:
    def fail(name: str, problem: str) -> CaseFileError:
        return CaseFileError(source, line, name, problem)

    if not isinstance(value, dict):
        raise fail("", f"a case is a JSON object, got {type(value).__name__}")
    unknown = sorted(set(value) - KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key; a case takes {', '.join(sorted(KEYS))}")
    case_id = value.get("id")
    if not isinstance(case_id, str) or not case_id.strip():
        raise fail("id", "required: a non-empty string")
    turns = value.get("turns")
    if not isinstance(turns, list) or not turns:
        raise fail("turns", "required: a non-empty list of user messages")
    lists = {name: _strings(value, name, fail) for name in ("expect_facts", "forbid")}
    tools = _strings(value, "expect_tools", fail)
    if not (lists["expect_facts"] or lists["forbid"] or tools):
        raise fail("expect_facts", "the case checks nothing: give expect_facts, forbid or tools")
    profile = value.get("profile")
    if profile is not None and (not isinstance(profile, str) or not profile):
        raise fail("profile", f"must be a profile name, got {profile!r}")
    return EvalCase(
        id=case_id,
        turns=tuple(_turn(t, i, fail) for i, t in enumerate(turns)),
        expect_facts=lists["expect_facts"],
        forbid=lists["forbid"],
        expect_tools=tools,
        profile=profile,
        tags=_strings(value, "tags", fail),
        line=line,
        expect_sources=_strings(value, "expect_sources", fail),
    )


def _strings(value: dict[str, Any], name: str, fail: Any) -> tuple[str, ...]:
    items = value.get(name, [])
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise fail(name, f"must be a list of non-empty strings, got {items!r}")
    return tuple(items)


def _turn(raw: Any, index: int, fail: Any) -> EvalTurn:
    name = f"turns[{index}]"
    if isinstance(raw, str):
        if not raw.strip():
            raise fail(name, "an empty message")
        return EvalTurn(raw)
    if not isinstance(raw, dict):
        raise fail(name, f"a string or an object with text, got {type(raw).__name__}")
    extra = sorted(set(raw) - {"text", "config"})
    if extra:
        raise fail(f"{name}.{extra[0]}", "unknown key; a turn takes text and config")
    text, config = raw.get("text"), raw.get("config", {})
    if not isinstance(text, str) or not text.strip():
        raise fail(f"{name}.text", "required: the user's message")
    if not isinstance(config, dict):
        raise fail(f"{name}.config", f"must be an object (a turn config table), got {config!r}")
    return EvalTurn(text, dict(config))


# -- scoring ---------------------------------------------------------------------------------------
def _normal(text: str) -> str:
    return _SPACE.sub(" ", _EMPHASIS.sub("", text)).strip().casefold()


def contains(answer: str, phrase: str) -> bool:
    """Whether ``phrase`` is in ``answer``, ignoring case, white space runs, `` ` `` and ``*``."""
    return _normal(phrase) in _normal(answer)


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 1.0


def _cost_score(tokens: float) -> float:
    return 1.0 / (1.0 + tokens / COST_SCALE)


def _weighted(*parts: float) -> float:
    """The weighted score of (task success, trajectory, tool precision, recovery, cost score)."""
    return sum(w * p for w, p in zip(WEIGHTS.values(), parts, strict=True))


def usage_tokens(usage: Usage) -> int:
    return usage.total_input_tokens + usage.output_tokens


def usage_cost(usage: Usage) -> float:
    return (
        usage.input_tokens
        + 1.25 * usage.cache_write_5m_tokens
        + 2.0 * usage.cache_write_1h_tokens
        + 0.1 * usage.cache_read_tokens
        + OUTPUT_WEIGHT * usage.output_tokens
    )


def score_case(case: EvalCase, run: CaseRun) -> CaseScore:
    """Score one case's run (the scores of the module docstring)."""
    missing = [f for f in case.expect_facts if not contains(run.answer, f)]
    found = [f for f in case.forbid if contains(run.answer, f)]
    recall = _ratio(len(case.expect_facts) - len(missing), len(case.expect_facts))
    drop = _ratio(len(case.forbid) - len(found), len(case.forbid))
    calls = run.tool_calls
    used = list(dict.fromkeys(c.tool for c in calls))
    expected = set(case.expect_tools)
    hit = _ratio(len(expected & set(used)), len(expected))
    if calls:
        precision = sum(c.tool in expected for c in calls) / len(calls)
    else:
        precision = 0.0 if expected else 1.0
    trajectory = (hit + precision) / 2
    failed = [c for c in calls if not c.ok]
    recovered = sum(
        c.turn < len(run.statuses) and run.statuses[c.turn] == "completed" for c in failed
    )
    ok = len(calls) - len(failed)
    over = round(max(0, ok - max(len(expected), 1)) / ok, 3) if ok else 0.0
    passed = recall >= SUCCESS_THRESHOLD and drop >= SUCCESS_THRESHOLD
    tokens = usage_tokens(run.usage)
    cost_score = _cost_score(tokens)
    recovery = _ratio(recovered, len(failed))
    return CaseScore(
        id=case.id,
        passed=passed,
        recall=recall,
        obsolete_drop=drop,
        tool_hit=hit,
        tool_precision=precision,
        trajectory=trajectory,
        recovery=recovery,
        over_tooling=over,
        tokens=tokens,
        cost=usage_cost(run.usage),
        cost_score=cost_score,
        score=_weighted(float(passed), trajectory, precision, recovery, cost_score),
        missing_facts=missing,
        forbidden_found=found,
        tools_used=used,
        failed_calls=len(failed),
        recovered_calls=recovered,
        statuses=list(run.statuses),
        errors=list(run.errors),
        conversation_id=run.conversation_id,
        tags=list(case.tags),
    )


def aggregate(scores: Sequence[CaseScore]) -> Aggregate:
    """The run's figures: means over cases, pooled recovery, cost score of the mean tokens."""
    if not scores:
        raise ValueError("aggregate of no case scores")
    n = len(scores)

    def mean(name: str) -> float:
        return sum(float(getattr(s, name)) for s in scores) / n

    passed = sum(s.passed for s in scores)
    tokens = sum(s.tokens for s in scores)
    task_success = passed / n
    recovery = _ratio(sum(s.recovered_calls for s in scores), sum(s.failed_calls for s in scores))
    cost_score = _cost_score(tokens / n)
    trajectory, precision = mean("trajectory"), mean("tool_precision")
    return Aggregate(
        cases=n,
        passed=passed,
        failed=n - passed,
        task_success=task_success,
        recall=mean("recall"),
        obsolete_drop=mean("obsolete_drop"),
        trajectory=trajectory,
        tool_precision=precision,
        recovery=recovery,
        over_tooling=round(mean("over_tooling"), 3),
        tokens_total=tokens,
        tokens_mean=tokens / n,
        cost_total=sum(s.cost for s in scores),
        cost_score=cost_score,
        score=_weighted(task_success, trajectory, precision, recovery, cost_score),
    )
