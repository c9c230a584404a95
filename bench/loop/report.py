"""The loop benchmark's table: rounds against both floors, the commits, the tool, throughput,
authentication and memory."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench.harness import verdict
from bench.loop.compare import cell_ms, cell_x, mode_label
from bench.loop.rounds import TARGET_DURABLE_RATIO, TARGET_RATIO


def _verdict(result: dict[str, Any], row: dict[str, Any]) -> str:
    if not row["sync"]:
        return ""
    mine = [t for t in result["targets"] if t["blocks"] == row["blocks"]]
    mine += [t for t in result.get("floor_targets", []) if t["blocks"] == row["blocks"]]
    parts = []
    for target in mine:
        what = {
            "ratio_p50": f"≤{TARGET_RATIO:.0f}x NATS",
            "ratio_durable_p50": f"≤{TARGET_DURABLE_RATIO:.0f}x durable",
        }.get(target["figure"], f"<{target['maximum']:.0f} ms")
        parts.append(f"{what} {verdict(target['met'])}")
    return ", ".join(parts)


def table(result: dict[str, Any]) -> Table:
    floor = result["floor"]
    out = Table(
        title=(
            f"decision loop with an instant model: {result['turns']} turns of "
            f"{result['rounds']} rounds per case"
        ),
        caption=(
            "round: between consecutive thinking cards (node timestamps); model leg: thinking "
            "to tool_call card (checkpoint, render, model call, decision); tools leg: tool_call "
            "to tool_result (blocks appended, react.search_knowledge run); NATS floor: nats-py "
            "publish + request/reply, no actline code; commit: one LMDB write txn of the bytes a "
            "round persists (blocks/round + rows/round + header + turn record), synced like the "
            "case; durable floor: NATS floor + commit; targets on the sync rows"
        ),
    )
    for column in ("measure", "p50", "p90", "p99", "x NATS", "x durable", "detail", "verdict"):
        left = column in ("measure", "detail", "verdict")
        out.add_column(column, justify="left" if left else "right")
    for row in result["cases"]:
        r = row["round"]
        out.add_row(
            f"round, {row['blocks_before']:,} blocks, {mode_label(row['sync'])}",
            cell_ms(r["p50_ms"]),
            cell_ms(r["p90_ms"]),
            cell_ms(r["p99_ms"]),
            cell_x(row["ratio_p50"]),
            cell_x(row.get("ratio_durable_p50")),
            f"model {cell_ms(row['model_leg']['p50_ms'])}, "
            f"tools {cell_ms(row['tools_leg']['p50_ms'])}; "
            f"pickup p50 {cell_ms(row['pickup']['p50_ms'])}; n={r['n']}",
            _verdict(result, row),
        )
    out.add_section()
    sizes = floor["payload_bytes"]
    out.add_row(
        "NATS floor (nats-py)",
        cell_ms(floor["p50_ms"]),
        cell_ms(floor["p90_ms"]),
        cell_ms(floor["p99_ms"]),
        "1.00x",
        "",
        f"publish {sizes['card']} B + request {sizes['request']} B / reply {sizes['reply']} B; "
        f"n={floor['n']}",
    )
    for row in result["cases"]:
        commit, persisted, durable = row["commit"], row["persisted"], row["durable_floor"]
        out.add_row(
            f"commit, {row['blocks']:,} blocks, {mode_label(commit['sync'])}",
            cell_ms(commit["p50_ms"]),
            cell_ms(commit["p90_ms"]),
            cell_ms(commit["p99_ms"]),
            "",
            "",
            f"{commit['bytes']:,} B = blocks {persisted['blocks_per_round_bytes']:,} + rows "
            f"{persisted['rows_per_round_bytes']:,} + header {persisted['header_bytes']:,} + "
            f"turn record {persisted['turn_record_bytes']:,}; "
            f"durable floor p50 {cell_ms(durable['p50_ms'])} p90 {cell_ms(durable['p90_ms'])}; "
            f"n={commit['n']}",
        )
    for row in result["cases"]:
        own = row["store_commit"]
        less = own["round_less_commit_p50_ms"]
        rest = (
            "some on the writer thread: not subtracted"
            if less is None
            else f"round p50 less it: {cell_ms(less)}, {cell_x(own['ratio_durable_less_commit'])} "
            "the durable floor"
        )
        out.add_row(
            f"node's own commit, {row['blocks']:,} blocks, {mode_label(row['sync'])}",
            "",
            "",
            "",
            "",
            "",
            f"mean {cell_ms(own['mean_ms'])} "
            f"({cell_x(own['vs_floor_commit'])} the floor's commit), "
            f"{own['per_turn']:.1f} per turn, {own['inline']}/{own['transactions']} on the event "
            f"loop; {rest}",
        )
    search = result["tool"]["search"]
    out.add_row(
        "tool alone (in process)",
        cell_ms(search["p50_ms"]),
        cell_ms(search["p90_ms"]),
        cell_ms(search["p99_ms"]),
        "",
        "",
        "KnowledgeSpace.search(query, 1) over examples/kb",
    )
    out.add_section()
    for tput in result["throughput"]:
        turn = tput["turn"]
        out.add_row(
            f"throughput, {tput['conversations']} conversations, {mode_label(tput['sync'])}",
            cell_ms(turn["p50_ms"]),
            cell_ms(turn["p90_ms"]),
            cell_ms(turn["p99_ms"]),
            "",
            "",
            f"{tput['turns_per_s']:.0f} turns/s, {tput['rounds_per_s']:.0f} rounds/s, "
            f"{tput['cpu_ms_per_turn']:.1f} ms CPU/turn ({tput['turns']} turns in "
            f"{tput['seconds']:.1f} s; p50-p99: turn latency)",
        )
    auth = result["auth"]
    out.add_row(
        "authentication: throughput authenticated / open",
        "",
        "",
        "",
        "",
        "",
        f"{auth['turns_per_s_ratio']:.2f}x turns/s ({auth['auth_turns_per_s']:.0f} vs "
        f"{auth['open_turns_per_s']:.0f}), {auth['cpu_ratio']:.2f}x CPU/turn; sync, "
        f"{auth['turns']} turns each run, open/auth/auth/open",
    )
    mem = result["memory"]
    growth = mem["rss_after_bytes"] - mem["rss_before_bytes"]
    out.add_row(
        "memory per waiting conversation",
        "",
        "",
        "",
        "",
        "",
        f"{mem['per_conversation_bytes'] / 1024:.1f} KB ({mem['waiting']} waiting on a DONE; "
        f"RSS +{growth / 1e6:.1f} MB, {mem['rss_source']})",
    )
    return out
