"""The long run's figures: flatness, the targets of each profile, and the two tables."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from actline.actors.configuration.profiles import BUILTINS
from bench.harness import judge, new_table, times, verdict

TODAY = {"fast": 1.86e6, "balanced": 2.19e6, "deep": 4.71e6, "research": 5.78e6}
"""Cost in base-price input tokens of each profile's policy run with the watchdog at the
default sizes, as measured before the cost-driven context policy (2026-11-24)."""
TODAY_LIMIT = {"fast": 0.8}
"""The cost each profile must get under, as a share of ``TODAY`` (``TODAY_DEFAULT_LIMIT``
unless listed)."""
TODAY_DEFAULT_LIMIT = 0.7
TODAY_SIZES = {"turns": 20, "rounds_per_turn": 10, "result_tokens": 2500}
"""The scenario ``TODAY`` was measured on; at other sizes that target is not judged."""
CACHE_READ_MIN_PCT = 85.0
FLOOR_LIMIT = 1.3
FLATNESS_LIMIT = 1.2


def flatness(turn_costs: Sequence[float]) -> float | None:
    """Mean cost of the last third of the turns over the mean of the middle third (turns
    41-60 over 21-40 of 60): 1.0 when a turn costs as much late as midway. None for fewer
    than three turns."""
    third = len(turn_costs) // 3
    if third == 0:
        return None
    middle = statistics.fmean(turn_costs[third : 2 * third])
    last = statistics.fmean(turn_costs[-third:])
    return last / middle if middle else None


def _target(
    value: float | None,
    unit: str,
    *,
    maximum: float | None = None,
    minimum: float | None = None,
    strict: bool = False,
    judged: bool = True,
) -> dict[str, Any]:
    target: dict[str, Any] = {"value": value, "unit": unit}
    if maximum is not None:
        target["maximum"] = maximum
        target["strict"] = strict
    else:
        target["minimum"] = minimum
    judge([target], strict=strict)
    if not judged:
        target["met"] = None
    return target


def _find(runs: list[dict[str, Any]], profile: str, variant: str) -> dict[str, Any] | None:
    found = [r for r in runs if r["profile"] == profile and r["run"] == variant]
    return found[0] if found else None


def targets(result: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per profile, each target of its policy run with the watchdog: its value, its bound
    and ``met`` (None when not judged: no baseline run, no long run, or ``TODAY`` at other
    sizes)."""
    default_sizes = all(result[k] == v for k, v in TODAY_SIZES.items())
    out: dict[str, dict[str, dict[str, Any]]] = {}
    policies = [r for r in result["runs"] if r["run"] == "policy" and r["watchdog"]]
    for policy in policies:
        profile = policy["profile"]
        cost = policy["cost_base_tokens"]
        baseline = _find(result["runs"], profile, "baseline")
        long = _find(result["long_runs"], profile, "policy")
        vs_baseline = cost / baseline["cost_base_tokens"] if baseline else None
        today = TODAY_LIMIT.get(profile, TODAY_DEFAULT_LIMIT)
        out[profile] = {
            "cost_vs_today": _target(
                cost / TODAY[profile], "x", maximum=today, judged=default_sizes
            ),
            "cache_read_pct": _target(policy["cache_read_pct"], "%", minimum=CACHE_READ_MIN_PCT),
            "cost_vs_floor": _target(policy["cost_vs_floor"], "x", maximum=FLOOR_LIMIT),
            "peak_context_tokens": _target(
                policy["peak_context_tokens"],
                "tokens",
                maximum=BUILTINS[profile].context_tokens,
            ),
            "recall_pct": _target(policy["recall_pct"], "%", minimum=100.0),
            "cost_vs_baseline": _target(
                vs_baseline, "x", maximum=1.0, strict=True, judged=baseline is not None
            ),
            "flatness": _target(
                None if long is None else long["flatness"],
                "x",
                maximum=FLATNESS_LIMIT,
                judged=long is not None and long["flatness"] is not None,
            ),
        }
    return out


TARGET_NAMES = {
    "cost_vs_today": "cost vs today",
    "cache_read_pct": "cache read",
    "cost_vs_floor": "cost vs floor",
    "peak_context_tokens": "peak context",
    "recall_pct": "facts recalled",
    "cost_vs_baseline": "cost vs baseline",
    "flatness": "flatness (long run)",
}


def _show(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return times(value)
    if unit == "%":
        return f"{value:.1f} %"
    return f"{value:,.0f}"


def targets_table(result: dict[str, Any]) -> Table:
    """The targets of each profile's policy run with the watchdog: value, bound, verdict."""
    out = new_table(
        "targets (policy, watchdog on)",
        ("profile", "target", "value", "bound", "verdict"),
        left=("profile", "target"),
        caption=f"flatness: the last third of {result['long_turns']} turns over the middle"
        if result["long_turns"]
        else None,
    )
    for profile, named in result["targets"].items():
        for key, target in named.items():
            unit = target["unit"]
            if "maximum" in target:
                sign = "<" if target["strict"] else "<="
                bound = f"{sign} {_show(target['maximum'], unit)}"
            else:
                bound = f">= {_show(target['minimum'], unit)}"
            out.add_row(
                profile,
                TARGET_NAMES[key],
                _show(target["value"], unit),
                bound,
                verdict(target["met"]),
            )
    return out


def table(result: dict[str, Any]) -> Table:
    """Every run: the policy with and without the watchdog, the baseline, the long run."""
    out = new_table(
        f"{result['turns']} turns of {result['rounds_per_turn']} rounds in one conversation, "
        f"tool results of {result['result_tokens']:,} words",
        (
            "profile",
            "run",
            "watchdog",
            "turns",
            "peak context",
            "compactions (watchdog)",
            "first compaction",
            "input tokens",
            "cache read",
            "cost",
            "floor",
            "cost vs floor",
            "cost vs none",
            "facts recalled",
            "s",
        ),
        left=("profile", "run"),
    )
    rows = [(r, r["run"]) for r in result["runs"]]
    rows += [(r, "long run") for r in result["long_runs"]]
    order = list(dict.fromkeys(r["profile"] for r, _ in rows))
    for r, label in sorted(rows, key=lambda pair: order.index(pair[0]["profile"])):
        first = r["first_compaction_turn"]
        out.add_row(
            r["profile"],
            label,
            "on" if r["watchdog"] else "off",
            str(r["turns"]),
            f"{r['peak_context_tokens']:,}",
            f"{r['compactions']} ({r['watchdog_compactions']})",
            "-" if first is None else str(first),
            f"{r['input_tokens_total'] / 1e6:.2f} M",
            f"{r['cache_read_pct']:.1f} %",
            f"{r['cost_base_tokens'] / 1e6:.2f} M",
            f"{r['floor_base_tokens'] / 1e6:.2f} M",
            times(r["cost_vs_floor"]),
            times(r["cost_vs_no_cache"], 3),
            f"{r['facts_recalled']}/{r['facts_planted']}",
            f"{r['seconds']:.0f}",
        )
    return out
