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
(``TurnRecord.problems``), both with target 0, and the turns that took longer than
``TURN_TARGET_S`` (120 s; target 0). A scenario that raised (a hang past the 600 s guard,
a crash) counts as one turn ``hung`` or ``crashed``: a problem.

Needs ``.venv/bin/llama-server`` and the model (``sh scripts/llama-server.sh``; ``make
interop`` runs it first), so ``python -m bench`` does not run this one. ``--records FILE``
reports the turns the interop tests ran instead (``make interop``: the tests append them
to that file, ``tests.interop.records.RECORDS_ENV``), without running any.

The time to the first token is the server's own: the seconds llama-server took to read each
prompt (its log), beside the first streamed piece a client saw (none when the model writes
no channel).

    python -m bench.interop [--apis messages,openai] [--scenarios ask,stream]
        [--turn-timeout 600] [--records FILE] [--out bench/results/interop.json]
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

from actline.bus import RequestTimeout
from actline.llm import register_models
from bench.harness import finish, judge, new_table, parser, platform_info, summary, verdict
from tests.interop import scenarios as suite
from tests.interop.endpoints import APIS, Api, LlamaServer, LlamaServerFailed
from tests.interop.records import (
    STATUSES,
    TURN_TARGET_S,
    TurnRecord,
    load,
    server_timings,
    unclassified,
)
from tests.interop.scenarios import SCENARIOS, TURN_TIMEOUT_S

BOUND_S = TURN_TARGET_S
"""What a turn should take; ``turns_over_bound`` counts those that took more."""


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
    how = "hung" if isinstance(exc, TimeoutError | RequestTimeout) else "crashed"
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


def figures(records: Sequence[TurnRecord], bound: float) -> dict[str, Any]:
    """The figures of one API's turns (``bound``: the seconds a turn may take in the suite)."""
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
        "turns_over_bound": sum(1 for r in records if r.seconds and r.seconds > bound),
        "unclassified_errors": len(wrong),
        "problems": [p for r in records for p in r.problems()],
        "handed_off": f"{sum(bool(r.handed_off) for r in handoffs)}/{len(handoffs)}",
        "followups_joined": f"{sum(bool(r.followup_joined) for r in followups)}/{len(followups)}",
        "errors": sorted({r.error for r in records if r.error}),
    }


def run(apis: Sequence[Api], names: Sequence[str], console: Console) -> dict[str, Any]:
    started = time.perf_counter()
    records: dict[str, list[TurnRecord]] = {}
    with tempfile.TemporaryDirectory(prefix="interop-") as tmp:
        root = Path(tmp)
        with LlamaServer(root / "llama-server.log") as llama:
            facts = {**llama.facts(), "version": version(llama.binary)}
            for api in apis:
                for name in names:
                    began = time.perf_counter()
                    found = run_scenario(llama, api, name, root)
                    records.setdefault(api, []).extend(found)
                    statuses = ", ".join(r.status for r in found)
                    took = time.perf_counter() - began
                    console.print(f"{api:8} {name:12} {took:6.1f} s  {statuses}")
                    if not llama.alive():
                        raise LlamaServerFailed("died during the run", llama.tail())
            facts["timings"] = server_timings(llama.tail(10**8))
    return report(facts, list(names), records, time.perf_counter() - started)


def report(
    server: dict[str, Any], names: list[str], records: dict[str, list[TurnRecord]], seconds: float
) -> dict[str, Any]:
    """The result of a run: the server, its own timings, the figures per API, every turn."""
    timings = server.pop("timings", {"prompt_s": [], "tokens_per_s": []})
    server["prompt_read"] = summary(timings["prompt_s"], unit="s", high=True)
    speeds = sorted(timings["tokens_per_s"])
    server["tokens_per_s"] = {
        "n": len(speeds),
        "p50": statistics.median(speeds) if speeds else None,
        "min": speeds[0] if speeds else None,
        "max": speeds[-1] if speeds else None,
    }
    return {
        "benchmark": "interop",
        "server": server,
        "scenarios": list(names),
        "turn_timeout_s": suite.TURN_TIMEOUT_S,
        "apis": {api: figures(found, BOUND_S) for api, found in records.items()},
        "turns": [{"api": api, **r.as_json()} for api, found in records.items() for r in found],
        "seconds": seconds,
        **platform_info(),
    }


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per API: no unclassified error, no turn that broke the runtime's contract."""
    out = []
    for api, row in result["apis"].items():
        out.append({"figure": f"{api}: unclassified errors", "value": row["unclassified_errors"]})
        out.append({"figure": f"{api}: turns with problems", "value": len(row["problems"])})
        out.append({"figure": f"{api}: turns over {BOUND_S:g} s", "value": row["turns_over_bound"]})
    for target in out:
        target["maximum"] = 0
    return judge(out)


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s" if value >= 10 else f"{value:.2f} s"


def table(result: dict[str, Any]) -> Table:
    server = result["server"]
    read, speed = server["prompt_read"]["p50_s"], server["tokens_per_s"]["p50"]
    caption = (
        f"{server.get('version', 'llama-server')} · {server['binary']} "
        f"({server['binary_bytes'] or 0:,} bytes) · model {Path(server['model']).name} "
        f"({server['model_bytes'] or 0:,} bytes) · context {server['context']} · "
        f"{server['threads']} threads · server time to first token (prompt read) p50 "
        f"{_s(read)} · writing p50 {'-' if speed is None else f'{speed:.1f} tok/s'}"
    )
    out = new_table(
        "actline against llama-server (SmolLM2-135M-Instruct), per model API",
        (
            "API", "turns", "completed", "best effort", "failed", "hung", "parsed calls",
            "repairs/turn", "repairs max", "in a row max", "first token p50",
            "per call p50", f"over {BOUND_S:g} s", "handed off", "followups", "unclassified",
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
            str(row["turns_over_bound"]),
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
    cli.add_argument(
        "--turn-timeout",
        type=float,
        default=TURN_TIMEOUT_S,
        help=f"seconds a turn may take before it counts as hung (default {TURN_TIMEOUT_S:g})",
    )
    cli.add_argument(
        "--records",
        type=Path,
        default=None,
        help="report the turns the interop tests appended to this file; run none",
    )
    args = cli.parse_args(argv)
    suite.TURN_TIMEOUT_S = args.turn_timeout
    console = Console()
    if args.records is not None:
        if not args.records.is_file():
            console.print(f"[red]no records at {args.records}: run the interop tests first[/]")
            return 2
        server, turns = load(args.records)
        if not server or not turns:
            console.print(f"[red]{args.records} holds no server facts or no turns[/]")
            return 2
        server["version"] = version(Path(server["binary"]))
        names = sorted({r.scenario for found in turns.values() for r in found})
        publish(console, args.out, report(server, names, turns, 0.0))
        return 0  # the report of a test run: the tests passed or failed it already
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
    return publish(console, args.out, result)


def publish(console: Console, out: Path, result: dict[str, Any]) -> int:
    """Judge the targets, print the table and what went wrong, write the JSON."""
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
    if result["seconds"]:
        console.print(f"{result['seconds']:.0f} s in all")
    met = all(t["met"] for t in result["targets"])
    return finish(console, out, result, met)


if __name__ == "__main__":
    raise SystemExit(main())
