"""``actline eval CASES.jsonl``: run eval cases against a model and profile, score them.

Each case runs in a fresh conversation on an in-process node behind an embedded
nats-server (as ``actline ask`` without ``NATS_URL``), with the store in a temporary folder
unless ``--home`` names one. The answer and usage come from each turn's result; the tool
calls and whether each failed come from the stored timeline (the ``react.tool.call`` blocks
and the status of their ``react.tool.result``), which holds every call even when the
stream dropped a card. Scoring is ``actline.eval_cases``.

Exit codes: 0, or 1 when ``--min-score`` is given and the aggregate score is below it; a
failing case is always shown as FAIL in the table and ``"passed": false`` in ``--json``.
A case file that cannot be used is one line naming the line and field, exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from actline.bus import RequestTimeout
from actline.config import Config, ConfigError
from actline.eval_cases import (
    Aggregate,
    CaseRun,
    CaseScore,
    EvalCase,
    ToolCall,
    aggregate,
    load_cases,
    score_case,
)
from actline.messages import Usage
from actline.runtime import Runtime
from actline.timeline import Block
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT

from .turns import load_config

__all__ = [
    "EvalReport",
    "eval_report",
    "evaluate",
    "print_report",
    "run_case",
    "run_cases",
    "run_eval",
    "tool_calls",
]

DEFAULT_TURN_TIMEOUT_S = 120.0
WIDE = 160
EvalReport = dict[str, Any]


def tool_calls(blocks: Sequence[Block], turn_ids: Sequence[str]) -> list[ToolCall]:
    """The tool calls of the given turns, in timeline order, each marked failed when its
    result block says ``status: error`` (a call without a result counts as failed)."""
    index = {turn_id: i for i, turn_id in enumerate(turn_ids)}
    statuses: dict[str, str] = {}
    for block in blocks:
        if block.type == TOOL_RESULT and block.path.endswith(".result"):
            data = block.data if isinstance(block.data, dict) else {}
            statuses[block.path.removesuffix(".result")] = str(data.get("status", "ok"))
    calls: list[ToolCall] = []
    for block in blocks:
        if block.type != TOOL_CALL or block.turn_id not in index:
            continue
        data = block.data if isinstance(block.data, dict) else {}
        status = statuses.get(block.path.removesuffix(".call"), "error")
        calls.append(ToolCall(str(data.get("tool", "?")), status != "error", index[block.turn_id]))
    return calls


async def run_case(
    rt: Runtime, case: EvalCase, *, profile: str | None = None, timeout: float
) -> CaseRun:
    """Run a case's turns in one new conversation and observe what happened."""
    cid: str | None = None
    statuses: list[str] = []
    answers: list[str] = []
    turn_ids: list[str] = []
    errors: list[str] = []
    usage = Usage()
    chosen = case.profile or profile
    for turn in case.turns:
        config = {**({"profile": chosen} if chosen else {}), **turn.config}
        handle = await rt.submit(turn.text, cid, config=config)
        cid = handle.conversation_id
        turn_ids.append(handle.turn_id)
        try:
            result = await handle.wait(timeout)
        except RequestTimeout:
            statuses.append("timeout")
            answers.append("")
            errors.append(f"turn {handle.turn_id}: no result within {timeout:g} s")
            break
        statuses.append(result.status)
        answers.append(result.answer)
        usage = usage + result.usage
        if result.error:
            errors.append(f"turn {handle.turn_id}: {result.error}")
        if result.status != "completed":
            break
    assert rt.store is not None and cid is not None
    blocks = [Block.from_dict(d) for d in rt.store.iter_blocks(cid)]
    return CaseRun(
        statuses=tuple(statuses),
        answers=tuple(answers),
        tool_calls=tuple(tool_calls(blocks, turn_ids)),
        usage=usage,
        conversation_id=cid,
        turn_ids=tuple(turn_ids),
        errors=tuple(errors),
    )


async def run_cases(
    config: Config,
    cases: Sequence[EvalCase],
    *,
    profile: str | None = None,
    timeout: float = DEFAULT_TURN_TIMEOUT_S,
    home: Path | None = None,
    on_case: Callable[[CaseScore], None] | None = None,
) -> list[CaseScore]:
    """Score every case on one in-process node and embedded nats-server (``config``'s model,
    knowledge folder and profile); the store under ``home``, else a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="actline-eval-") as scratch:
        local = config.with_node(home=home or Path(scratch))
        local = replace(local, nats_url=None, nats_creds=None)
        scores: list[CaseScore] = []
        async with Runtime(local, node=True) as rt:
            for case in cases:
                run = await run_case(rt, case, profile=profile, timeout=timeout)
                scores.append(score_case(case, run))
                if on_case is not None:
                    on_case(scores[-1])
        return scores


def eval_report(
    scores: Sequence[CaseScore], *, model: str, profile: str, cases_file: str
) -> EvalReport:
    """The JSON report: the run's settings, each case's figures and the aggregate."""
    return {
        "cases_file": cases_file,
        "model": model,
        "profile": profile,
        "aggregate": aggregate(scores).to_dict(),
        "cases": [s.to_dict() for s in scores],
    }


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def print_report(console: Console, scores: Sequence[CaseScore], total: Aggregate) -> None:
    """The table of cases (PASS/FAIL with what is missing) and the aggregate line."""
    if not console.is_terminal and console.width < WIDE:  # a pipe or a file: do not fold
        console = Console(file=console.file, width=WIDE, highlight=False, emoji=False)
    table = Table(title="eval cases", header_style="bold")
    for name, justify in (
        ("case", "left"),
        ("result", "left"),
        ("recall", "right"),
        ("obsolete", "right"),
        ("trajectory", "right"),
        ("tools", "left"),
        ("tokens", "right"),
        ("score", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=name == "case")  # type: ignore[arg-type]
    for s in scores:
        verdict = Text("PASS", "green") if s.passed else Text("FAIL", "bold red")
        if s.missing_facts or s.forbidden_found:
            details = [f"missing {m!r}" for m in s.missing_facts]
            details += [f"has {f!r}" for f in s.forbidden_found]
            verdict.append("\n" + "; ".join(details), "dim")
        tools = " ".join(t.removeprefix("react.") for t in s.tools_used)
        if s.failed_calls:
            tools += f" ({s.failed_calls} failed, {s.recovered_calls} recovered)"
        table.add_row(
            s.id,
            verdict,
            _pct(s.recall),
            _pct(s.obsolete_drop),
            f"{s.trajectory:.2f}",
            tools,
            f"{s.tokens:,}",
            f"{s.score:.3f}",
        )
    console.print(table)
    console.print(
        Text(
            f"{total.passed}/{total.cases} passed · score {total.score:.3f} · "
            f"task success {_pct(total.task_success)} · recall {_pct(total.recall)} · "
            f"obsolete drop {_pct(total.obsolete_drop)} · trajectory {total.trajectory:.2f} · "
            f"tool precision {total.tool_precision:.2f} · recovery {_pct(total.recovery)} · "
            f"over-tooling {total.over_tooling:.3f} · tokens {total.tokens_mean:,.0f} per case "
            f"(cost score {total.cost_score:.3f}) · cost {total.cost_total:,.0f} base-price "
            "input tokens",
            "bold",
        ),
        soft_wrap=True,
    )


async def evaluate(
    console: Console,
    config: Config,
    cases: Sequence[EvalCase],
    *,
    profile: str | None,
    timeout: float,
    home: Path | None,
    cases_file: str,
) -> EvalReport:
    """Run the cases with a progress bar, print the table and the aggregate, return the report."""
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("eval", total=len(cases))

        def advance(score: CaseScore) -> None:
            mark = "PASS" if score.passed else "FAIL"
            progress.update(task, advance=1, description=f"{score.id} {mark}")

        scores = await run_cases(
            config, cases, profile=profile, timeout=timeout, home=home, on_case=advance
        )
    print_report(console, scores, aggregate(scores))
    chosen = profile or config.node.profile
    return eval_report(scores, model=config.node.model, profile=chosen, cases_file=cases_file)


async def run_eval(args: argparse.Namespace, console: Console) -> int:
    """``actline eval``: 1 when the score is below ``--min-score``, else 0."""
    cases = load_cases(Path(args.cases))
    if args.only:
        wanted = [w for w in args.only.split(",") if w]
        known = {c.id for c in cases}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ConfigError(f"--only names unknown case(s): {', '.join(unknown)}")
        cases = [c for c in cases if c.id in wanted]
    config = load_config(argparse.Namespace(**{**vars(args), "home": None, "nats": None}))
    report = await evaluate(
        console,
        config,
        cases,
        profile=args.profile,
        timeout=args.timeout,
        home=args.home,
        cases_file=str(args.cases),
    )
    if args.json is not None:
        text = json.dumps(report, indent=2) + "\n"
        await asyncio.to_thread(Path(args.json).write_text, text)
        console.print(Text(f"wrote {args.json}", "dim"))
    score = report["aggregate"]["score"]
    if args.min_score is not None and score < args.min_score:
        console.print(Text(f"score {score:.3f} is below --min-score {args.min_score:g}", "red"))
        return 1
    return 0
