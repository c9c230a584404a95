"""The cluster benchmark's report: medians per model kind and node count, the targets and
the table."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from rich.table import Table

from bench.harness import new_table

TARGET_IO_FRACTION = 0.7
TARGET_IO_RATIO = 1.6
TARGET_TAKEOVER_SLACK_S = 2.0
SHORT = {"core_per_node": "core", "concurrency": "conc", "machine": "cores"}


def _median(rows: Sequence[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def summarise(runs: Sequence[dict[str, Any]], models: Sequence[str]) -> dict[str, Any]:
    """Medians per model kind and node count, and the median of the per-round ratios."""
    out: dict[str, Any] = {}
    keys = ("turns_per_s", "per_node_turns_per_s", "node_cpu_ms_per_turn",
            "nats_cpu_ms_per_turn", "driver_cpu_ms_per_turn", "total_cpu_ms_per_turn",
            "others_cores", "node_cores", "inflight_mean", "calls_per_turn", "ceiling",
            "fraction", "left_ceiling", "left_fraction", "quiet_waited_s")  # fmt: skip
    for model in models:
        entry: dict[str, Any] = {}
        for nodes in (1, 2):
            rows = [r for r in runs if r["model"] == model and r["nodes"] == nodes]
            entry[str(nodes)] = {k: _median(rows, k) for k in keys} | {
                "bound": statistics.mode(r["bound"] for r in rows)
            }
        ratios = [
            two["turns_per_s"] / one["turns_per_s"]
            for one, two in zip(
                [r for r in runs if r["model"] == model and r["nodes"] == 1],
                [r for r in runs if r["model"] == model and r["nodes"] == 2],
                strict=True,
            )
        ]
        entry["ratios"] = ratios
        entry["ratio"] = statistics.median(ratios)
        out[model] = entry
    return out


def targets(summary: dict[str, Any], kill: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "io" in summary:
        one = summary["io"]["1"]
        met = one["fraction"] >= TARGET_IO_FRACTION
        out["io_one_fraction"] = {
            "value": one["fraction"],
            "target": TARGET_IO_FRACTION,
            "bound": one["bound"],
            "met": met,
            "of_cores_left": one["left_fraction"],
        }
        ratio = summary["io"]["ratio"]
        out["io_two_vs_one"] = {
            "value": ratio,
            "target": TARGET_IO_RATIO,
            "met": ratio >= TARGET_IO_RATIO,
        }
    if kill is not None:
        limit = kill["node_ttl_s"] + TARGET_TAKEOVER_SLACK_S
        out["takeover_s"] = {
            "value": kill["resume_s"],
            "target": limit,
            "met": kill["resume_s"] <= limit,
        }
    return out


def table(result: dict[str, Any]) -> Table:
    columns = ("model", "nodes", "turns/s", "/node", "node ms", "nats+drv ms", "others",
               "in flight", "bound/s: got", "left/s: got", "2 vs 1")  # fmt: skip
    out = new_table(
        f"cluster: one-turn conversations, {result['rounds']} round(s), medians",
        columns,
        caption="ms: CPU per turn; others: cores the rest of the machine used meanwhile; "
        "bound: the lowest of one core per node, concurrency and the machine's cores; left: "
        "that bound with the cores the others left",
    )
    for model, entry in result["summary"].items():
        for nodes in ("1", "2"):
            row = entry[nodes]
            out.add_row(
                model,
                nodes,
                f"{row['turns_per_s']:.1f}",
                f"{row['per_node_turns_per_s']:.1f}",
                f"{row['node_cpu_ms_per_turn']:.1f}",
                f"{row['nats_cpu_ms_per_turn'] + row['driver_cpu_ms_per_turn']:.1f}",
                f"{row['others_cores']:.2f}",
                f"{row['inflight_mean']:.0f}",
                f"{SHORT[row['bound']]} {row['ceiling']:.0f}: {row['fraction']:.2f}",
                f"{row['left_ceiling']:.0f}: {row['left_fraction']:.2f}",
                f"{entry['ratio']:.2f}x" if nodes == "2" else "",
            )
    kill = result.get("takeover")
    if kill is not None:
        out.caption = (
            f"{out.caption}\nkill 1 of 2: {kill['victim_completed']}/{kill['victim_turns']} "
            "of its turns done "
            f"{kill['resume_s']:.1f} s after the kill (node TTL {kill['node_ttl_s']:g} s); "
            f"{kill['completed']}/{kill['turns']} in all; {result['cpus']} cores, shared"
        )
    return out
