"""Interop: actline turns against llama.cpp's llama-server serving SmolLM2-135M-Instruct.

Every scenario of the interop suite (``tests.interop.scenarios``: ``actline ask`` in a child
process, a three-turn conversation, a followup joining a running turn, work handed to an
outside agent, ``Runtime.stream``) runs through each model API (``messages``: the Anthropic
Messages API through the ``anthropic`` client; ``openai``: Chat Completions through the
``openai`` client) against one ``llama-server`` on loopback, one scenario at a time, the
turn settings left at their defaults.

Per API: turns completed, best effort (protocol_failed, budget_exhausted) and failed; the
share of model calls whose reply kept to the decision protocol (calls without a
``protocol_violation.*`` notice over calls); repair rounds per turn (mean, max, and the
longest run in a row); the time to the first streamed piece after the submit and the time
per model call; errors the runtime did not classify and turns that broke its contract
(``TurnRecord.problems``), both with target 0. A scenario that raised (a hang past the
120 s a turn may take, a crash) counts as one turn ``hung`` or ``crashed``: a problem.

Needs ``.venv/bin/llama-server`` and the model (``sh scripts/llama-server.sh``; ``make
interop`` runs it first), so ``python -m bench`` does not run this one.

    python -m bench.interop [--apis messages,openai] [--scenarios ask,stream]
        [--out bench/results/interop.json]
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from actline.llm import register_models
from bench.harness import finish, judge, new_table, parser, platform_info, summary, verdict
from tests.interop.endpoints import APIS, Api, LlamaServer, LlamaServerFailed
from tests.interop.records import STATUSES, TurnRecord, unclassified
from tests.interop.scenarios import SCENARIOS


def version(binary: Path) -> str:
    """What ``llama-server --version`` says (its build line)."""
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "version" in line]
    return lines[0].strip() if lines else "unknown"


def failed_run(scenario: str, exc: BaseException) -> TurnRecord:
    """A scenario that raised: one turn whose status says how (``hung``, ``crashed``)."""
    how = "hung" if isinstance(exc, TimeoutError) else "crashed"
    error = f"{type(exc).__name__}: {exc}"[:1000]
    return TurnRecord(scenario, 0, how, "", error, 0, 0, ())


def run_scenario(llama: LlamaServer, api: Api, name: str, root: Path) -> list[TurnRecord]:
    endpoint = llama.endpoint(api)
    home = root / f"{api}-{name}"
    try:
        return asyncio.run(SCENARIOS[name](endpoint, home))
    except Exception as exc:  # a hang or a crash is a figure of the run, not its end
        return [failed_run(name, exc)]
    finally:
        register_models(())


def figures(records: Sequence[TurnRecord]) -> dict[str, Any]:
    """The figures of one API's turns."""
    calls = sum(r.rounds for r in records)
    repairs = [r.repair_rounds for r in records]
    per_call = [r.seconds / r.rounds for r in records if r.seconds and r.rounds]
    first = [r.first_token_s for r in records if r.first_token_s is not None]
    wrong = [e for r in records if (e := unclassified(r.status, r.error)) is not None]
    handoffs = [r for r in records if r.handed_off is not None]
    followups = [r for r in records if r.followup_joined is not None]
    return {
        "turns": len(records),
        "completed": sum(r.status == "completed" for r in records),
        "best_effort": sum(r.best_effort for r in records),
        "failed": sum(r.status == "failed" for r in records),
        "hung_or_crashed": sum(r.status not in STATUSES for r in records),
        "model_calls": calls,
        "parsed_calls": sum(r.parsed_calls for r in records),
        "parsed_share": sum(r.parsed_calls for r in records) / calls if calls else None,
        "repair_rounds_mean": statistics.fmean(repairs) if repairs else None,
        "repair_rounds_max": max(repairs, default=0),
        "repair_run_max": max((max(r.repair_runs, default=0) for r in records), default=0),
        "first_token": summary(first, unit="s", high=True),
        "per_model_call": summary(per_call, unit="s", high=True),
        "turn_seconds": summary([r.seconds for r in records if r.seconds], unit="s", high=True),
        "unclassified_errors": len(wrong),
        "problems": [p for r in records for p in r.problems()],
        "handed_off": f"{sum(bool(r.handed_off) for r in handoffs)}/{len(handoffs)}",
        "followups_joined": f"{sum(bool(r.followup_joined) for r in followups)}/{len(followups)}",
        "errors": sorted({r.error for r in records if r.error}),
    }


def run(apis: Sequence[Api], scenarios: Sequence[str], console: Console) -> dict[str, Any]:
    started = time.perf_counter()
    records: dict[str, list[TurnRecord]] = {}
    with tempfile.TemporaryDirectory(prefix="interop-") as tmp:
        root = Path(tmp)
        with LlamaServer(root / "llama-server.log") as llama:
            facts = {**llama.facts(), "version": version(llama.binary)}
            for api in apis:
                for name in scenarios:
                    began = time.perf_counter()
                    found = run_scenario(llama, api, name, root)
                    records.setdefault(api, []).extend(found)
                    statuses = ", ".join(r.status for r in found)
                    took = time.perf_counter() - began
                    console.print(f"{api:8} {name:12} {took:6.1f} s  {statuses}")
                    if not llama.alive():
                        raise LlamaServerFailed("died during the run", llama.tail())
    return {
        "benchmark": "interop",
        "server": facts,
        "scenarios": list(scenarios),
        "apis": {api: figures(found) for api, found in records.items()},
        "turns": [{"api": api, **r.as_json()} for api, found in records.items() for r in found],
        "seconds": time.perf_counter() - started,
        **platform_info(),
    }


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per API: no unclassified error, no turn that broke the runtime's contract."""
    out = []
    for api, row in result["apis"].items():
        out.append({"figure": f"{api}: unclassified errors", "value": row["unclassified_errors"]})
        out.append({"figure": f"{api}: turns with problems", "value": len(row["problems"])})
    for target in out:
        target["maximum"] = 0
    return judge(out)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s" if value >= 10 else f"{value:.2f} s"


def table(result: dict[str, Any]) -> Table:
    server = result["server"]
    caption = (
        f"{server['version']} · {server['binary']} ({server['binary_bytes'] or 0:,} bytes) · "
        f"model {Path(server['model']).name} ({server['model_bytes'] or 0:,} bytes) · "
        f"context {server['context']} · {server['threads']} threads"
    )
    out = new_table(
        "actline against llama-server (SmolLM2-135M-Instruct), per model API",
        (
            "API", "turns", "completed", "best effort", "failed", "hung", "parsed calls",
            "repairs/turn", "repairs max", "in a row max", "first token p50",
            "per call p50", "handed off", "followups", "unclassified",
        ),
        left=("API",),
        caption=caption,
    )  # fmt: skip
    for api, row in result["apis"].items():
        share = row["parsed_share"]
        out.add_row(
            api,
            str(row["turns"]),
            str(row["completed"]),
            str(row["best_effort"]),
            str(row["failed"]),
            str(row["hung_or_crashed"]),
            "-" if share is None else f"{share:.0%} of {row['model_calls']}",
            "-" if row["repair_rounds_mean"] is None else f"{row['repair_rounds_mean']:.2f}",
            str(row["repair_rounds_max"]),
            str(row["repair_run_max"]),
            _s(row["first_token"]["p50_s"]),
            _s(row["per_model_call"]["p50_s"]),
            row["handed_off"],
            row["followups_joined"],
            str(row["unclassified_errors"]),
        )
    return out


def main(argv: list[str] | None = None) -> int:
    cli = parser("interop", __doc__)
    cli.add_argument("--apis", default=",".join(APIS), help="comma-separated: messages, openai")
    cli.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS)
    )
    args = cli.parse_args(argv)
    console = Console()
    apis = [a.strip() for a in args.apis.split(",") if a.strip()]
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = [a for a in apis if a not in APIS] + [s for s in scenarios if s not in SCENARIOS]
    if unknown or not apis or not scenarios:
        console.print(f"[red]unknown or no API/scenario:[/] {', '.join(unknown) or '-'}")
        return 2
    missing = LlamaServer.missing()
    if missing is not None:
        console.print(f"[red]{missing}[/]")
        return 2
    try:
        result = run([a for a in APIS if a in apis], scenarios, console)
    except LlamaServerFailed as exc:
        console.print(f"[red]{exc}[/]")
        return 1
    result["targets"] = targets(result)
    console.print(table(result))
    for api, row in result["apis"].items():
        for problem in row["problems"]:
            console.print(f"[red]{api}:[/] {problem}")
        for error in row["errors"]:
            console.print(f"[dim]{api} error:[/] {error[:300]}")
    for target in result["targets"]:
        console.print(
            f"{target['figure']} = {target['value']} (target 0): {verdict(target['met'])}"
        )
    console.print(f"{result['seconds']:.0f} s in all")
    met = all(t["met"] for t in result["targets"])
    return finish(console, args.out, result, met)


if __name__ == "__main__":
    raise SystemExit(main())
