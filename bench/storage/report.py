"""The storage benchmark's tables: persisting a turn at every size, and the growing pool."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench.harness import ms, new_table, times, verdict


def table(result: dict[str, Any]) -> Table:
    rows = result["sizes"]
    flat, ratio = result["targets"]
    columns = ("stored blocks", "lmdb p50", "lmdb p90", "naive p50", "naive/lmdb", "flat")
    out = new_table(
        (
            f"storage: persist one turn of {result['turn_blocks']} blocks, ms per call, "
            f"{result['samples']} samples per size, sync=True"
        ),
        (*columns, "header", "verdict"),
        left=("stored blocks", "verdict"),
        caption=(
            "lmdb: Store.append_turn (the new blocks + header, one transaction); persist(): "
            "Store.persist(tl), the production call (same rows, plus finding the new blocks "
            "in the timeline); fixed hdr: append_turn with a header that does not grow with the "
            "conversation; naive: whole timeline as one JSON file + fsync + os.replace; "
            f"flat: p50 against the {rows[0]['blocks']:,}-block case; no fsync: "
            "Store(sync=False), lmdb only; targets on the lmdb rows"
        ),
    )
    for row in rows:
        naive = row["naive"]
        out.add_row(
            f"{row['blocks']:,}",
            ms(row["lmdb"]["p50_ms"]),
            ms(row["lmdb"]["p90_ms"]),
            ms(naive["p50_ms"]) if naive else "skipped" if row["naive_skipped"] else "-",
            times(row["ratio_naive_to_lmdb"], 0),
            times(row["lmdb_flatness"]),
            f"{row['header_bytes'] / 1024:.1f} KB",
            "",
        )
    out.add_section()
    for row in rows:
        out.add_row(
            f"{row['blocks']:,} fixed hdr",
            ms(row["lmdb_fixed"]["p50_ms"]),
            ms(row["lmdb_fixed"]["p90_ms"]),
            "",
            times(row["ratio_naive_to_lmdb_fixed"], 0),
            times(row["lmdb_fixed_flatness"]),
            f"{row['fixed_header_bytes'] / 1024:.1f} KB",
        )
    out.add_section()
    for row in rows:
        out.add_row(
            f"{row['blocks']:,} persist()",
            ms(row["persist"]["p50_ms"]),
            ms(row["persist"]["p90_ms"]),
            "",
            times(row["ratio_naive_to_persist"], 0),
            times(row["persist_flatness"]),
        )
    if all(row["nosync"] is not None for row in rows):
        out.add_section()
        for row in rows:
            out.add_row(
                f"{row['blocks']:,} no fsync",
                ms(row["nosync"]["p50_ms"]),
                ms(row["nosync"]["p90_ms"]),
                "",
                "",
                times(row["nosync_flatness"]),
            )
    out.add_section()
    out.add_row(
        "verdict",
        "",
        "",
        "",
        f"{ratio['blocks']:,}: ≥{ratio['minimum']:.0f}x",
        f"{flat['blocks']:,}: ≤{flat['maximum']:.1f}x",
        "",
        f"flat {verdict(flat['met'])}, naive/lmdb {verdict(ratio['met'])}",
    )
    return out


def pool_table(pool: dict[str, Any]) -> Table:
    """The growing-pool case: persist p50 and bytes per round at 10 and at 2,000 turns."""
    flat, grown = pool["targets"]
    # old hdr: what one round wrote as the header before the pool and plans became rows
    columns = ("turns", "pool", "p50 ms", "p90 ms", "flat", "rows", "hdr+rows", "blocks", "old hdr")
    out = new_table(
        (
            f"storage: growing pool, Store.persist_round after every turn, "
            f"{pool['sources']:,} sources and {pool['plans']:,} plans after "
            f"{pool['turns']:,} turns, {pool['samples']} samples each, sync=True"
        ),
        columns,
        left=("turns",),
        caption=(
            "hdr+rows: bytes of the stored header plus the header rows the round wrote (key + "
            "msgpack), mean over 4 rounds (one new plan, three acks); blocks: msgpack of the "
            "round's blocks; old hdr: the header as every round wrote it before (pool and plans "
            "inline)"
        ),
    )
    for key, turns, old in (
        ("small", pool["small_turns"], pool["full_header_bytes"]["at_small"]),
        ("big", pool["turns"], pool["full_header_bytes"]["at_big"]),
    ):
        timing, written = pool[f"persist_{key}"], pool[f"bytes_{key}"]
        out.add_row(
            f"{turns:,}",
            f"{written['sources']:,}",
            ms(timing["p50_ms"] if timing else None),
            ms(timing["p90_ms"] if timing else None),
            times(flat["value"]) if key == "big" else "1.00x",
            f"{written['rows']:.2f}",
            f"{written['header_and_row_bytes']:,.0f} B",
            f"{written['block_bytes'] / 1024:.1f} KB",
            f"{old / 1024:,.1f} KB",
        )
    out.add_section()
    low, high = pool["header_and_row_bytes_range"]
    out.add_row(
        "verdict",
        "",
        "",
        "",
        f"≤{flat['maximum']:.1f}x {verdict(flat['met'])}",
        "",
        f"+{grown['value']:.0f} B (≤{grown['maximum']}) {verdict(grown['met'])}",
        "",
        f"every round {low:,}-{high:,} B",
    )
    return out
