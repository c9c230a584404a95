"""The loop benchmark beside an earlier run's JSON (``--baseline``).

Round p50 per size and mode, turns/s and CPU per turn per throughput run. The baseline's
targets (sync throughput: CPU per turn at most half, turns/s at least twice) are judged only
when both runs saw a machine of the same speed (NATS floor p50s within ``MACHINE_DRIFT``).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench.harness import judge, ms, times, verdict


def cell_ms(value: float | None) -> str:
    return ms(value, unit=True)


def cell_x(value: float | None) -> str:
    return times(value, missing="")


def mode_label(sync: bool) -> str:
    return "sync" if sync else "no sync"


TARGET_CPU_RATIO = 0.5
"""CPU per turn at most this fraction of the baseline's."""
TARGET_TPUT_RATIO = 2.0
"""Turns per second at least this multiple of the baseline's."""
MACHINE_DRIFT = 1.25
"""A baseline whose NATS floor p50 is more than this factor away from this run's was taken
on a machine of another speed: its ratios are shown, its targets not judged."""


def _ratio(today: float | None, before: float | None) -> float | None:
    return None if today is None or not before else today / before


def _get(row: dict[str, Any] | None, *keys: str) -> Any:
    """``row[k1][k2]...``, or None where a key is missing (an older JSON)."""
    value: Any = row
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def compare(result: dict[str, Any], baseline: dict[str, Any], path: str) -> dict[str, Any]:
    """This run beside an earlier run's JSON: round p50 per case, throughput and CPU per turn.

    Cases match on size and sync mode; throughput runs on sync mode and conversations (else
    sync mode alone, noted in ``baseline_conversations``). Targets on the sync throughput:
    CPU per turn at most ``TARGET_CPU_RATIO`` of the baseline's, turns/s at least
    ``TARGET_TPUT_RATIO`` times. They are judged only when both runs saw a machine of the
    same speed (``comparable``: their NATS floor p50s within ``MACHINE_DRIFT`` of each
    other); otherwise each target's ``met`` is None and ``speed`` says why.
    """
    floor, baseline_floor = _get(result, "floor", "p50_ms"), _get(baseline, "floor", "p50_ms")
    speed = _ratio(floor, baseline_floor)
    comparable = speed is not None and 1 / MACHINE_DRIFT <= speed <= MACHINE_DRIFT
    rounds = []
    for row in result["cases"]:
        old = next(
            (
                b
                for b in baseline.get("cases", [])
                if b.get("blocks") == row["blocks"] and b.get("sync") == row["sync"]
            ),
            None,
        )
        if old is None:
            continue
        today, before = row["round"]["p50_ms"], _get(old, "round", "p50_ms")
        rounds.append(
            {
                "blocks": row["blocks"],
                "sync": row["sync"],
                "round_p50_ms": today,
                "baseline_round_p50_ms": before,
                "ratio": _ratio(today, before),
                "ratio_durable_p50": row.get("ratio_durable_p50"),
                "baseline_ratio_durable_p50": old.get("ratio_durable_p50"),
            }
        )
    tput = []
    targets: list[dict[str, Any]] = []
    olds = baseline.get("throughput", [])
    for run in result["throughput"]:
        same_mode = [b for b in olds if b.get("sync") == run["sync"]]
        old = next(
            (b for b in same_mode if b.get("conversations") == run["conversations"]),
            same_mode[0] if same_mode else None,
        )
        if old is None:
            continue
        figures = {
            "sync": run["sync"],
            "conversations": run["conversations"],
            "baseline_conversations": old.get("conversations"),
        }
        for key in ("turns_per_s", "cpu_ms_per_turn"):
            figures[key] = run[key]
            figures[f"baseline_{key}"] = old.get(key)
            figures[f"{key}_ratio"] = _ratio(run[key], old.get(key))
        tput.append(figures)
        if not run["sync"]:
            continue
        for key, bound, limit in (
            ("cpu_ms_per_turn", "maximum", TARGET_CPU_RATIO),
            ("turns_per_s", "minimum", TARGET_TPUT_RATIO),
        ):
            value = figures[f"{key}_ratio"]
            if value is not None:
                targets.append(
                    {
                        "conversations": run["conversations"],
                        "figure": f"{key}_ratio",
                        bound: limit,
                        "value": value,
                    }
                )
    if comparable:
        targets = judge(targets)
    else:
        for target in targets:
            target["met"] = None
    return {
        "path": path,
        "floor_p50_ms": floor,
        "baseline_floor_p50_ms": baseline_floor,
        "speed": speed,
        "comparable": comparable,
        "rounds": rounds,
        "throughput": tput,
        "targets": targets,
    }


def not_comparable(comparison: dict[str, Any]) -> str:
    """Why the baseline's targets were not judged, and what to run instead."""
    before, now = comparison["baseline_floor_p50_ms"], comparison["floor_p50_ms"]
    how = (
        "records no NATS floor"
        if comparison["speed"] is None
        else f"measured a NATS floor p50 of {before:.3f} ms against {now:.3f} ms in this run"
    )
    return (
        f"[yellow]the baseline {comparison['path']} {how}: it was taken on a machine of "
        f"another speed (more than {MACHINE_DRIFT:g}x apart), so its ratios are shown but its "
        "targets are not judged.[/] For figures of both trees in one run: python -m "
        "bench loop_split --against DIR (DIR: the other tree, e.g. from git archive)"
    )


def baseline_table(comparison: dict[str, Any]) -> Table:
    """This run beside the baseline's JSON (``compare``)."""
    out = Table(
        title=f"this run vs baseline {comparison['path']}",
        caption=(
            f"targets on the sync throughput: CPU/turn ≤{TARGET_CPU_RATIO:g}x the baseline's, "
            f"turns/s ≥{TARGET_TPUT_RATIO:g}x"
        ),
    )
    for column in ("measure", "this run", "baseline", "ratio", "verdict"):
        out.add_column(column, justify="left" if column in ("measure", "verdict") else "right")
    for row in comparison["rounds"]:
        before = row["baseline_round_p50_ms"]
        out.add_row(
            f"round p50, {row['blocks']:,} blocks, {mode_label(row['sync'])}",
            cell_ms(row["round_p50_ms"]),
            "" if before is None else cell_ms(before),
            cell_x(row["ratio"]),
            "",
        )
    targets = {(t["conversations"], t["figure"]): t for t in comparison["targets"]}
    for run in comparison["throughput"]:
        where = f"{run['conversations']} conversations, {mode_label(run['sync'])}"
        if run["baseline_conversations"] != run["conversations"]:
            where += f" (baseline: {run['baseline_conversations']})"
        for key, label, fmt in (
            ("turns_per_s", "turns/s", "{:.0f}"),
            ("cpu_ms_per_turn", "CPU ms/turn", "{:.2f}"),
        ):
            before = run[f"baseline_{key}"]
            target = targets.get((run["conversations"], f"{key}_ratio")) if run["sync"] else None
            out.add_row(
                f"{label}, {where}",
                fmt.format(run[key]),
                "" if before is None else fmt.format(before),
                cell_x(run[f"{key}_ratio"]),
                "" if target is None else verdict(target["met"]),
            )
    return out
