"""The console's list of conversations and a conversation's turns as conversations grow:
outlines and turn briefs against whole loads and block scans.

A store (LMDB, no sync) holds ``--conversations`` conversations of N blocks each
(``--sizes``; ``bench.loop.prefill``: turns of a prompt, tool rounds and a completion, each
turn with its completed record). The list the console serves (``actline.web.views.
conversations``, one ``Store.outline`` per conversation) is timed against what it did
before, loading every conversation whole (``Store.load`` and every block again for the
title and status), in the same process and alternately, ``--repeat`` times each.

Opening a conversation (``views.turns``: each turn's prompt and answer, from the turn log
and the path index, ``Store.turn_briefs``) is timed likewise against what it did before,
reading every stored block of the conversation, ``OPENS`` times per repeat each way, after
checking that both give the same turns.

Target (``target_met``): at every size the list costs at most a tenth of the whole loads
(``TARGET_RATIO``), and from the smallest size to the largest its cost grows at most a
fifth as much as the conversations do (``GROWTH_SHARE``: it reads the first blocks, the last
one and the turn records' keys, not the blocks); opening a conversation costs at most a
quarter of the block scan at every size (``TARGET_OPEN_RATIO``: it reads two blocks per
turn, never the tool rounds, so it grows with the turns).

    python -m bench.console_list [--sizes 100,1000,5000] [--conversations 20] [--repeat 5]
"""

from __future__ import annotations

import platform
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from actline.storage import Store
from actline.stored import stored_conversations
from actline.timeline import Block
from actline.timeline.blocks import COMPLETION, USER_PROMPT
from actline.web import views
from bench.harness import (
    SanityCheckFailed,
    add_counts,
    add_sizes,
    finish,
    median_ms,
    new_table,
    parser,
    settle,
)
from bench.loop import prefill

TARGET_RATIO = 0.1
"""The most the list may cost against loading every conversation whole, at every size."""
TARGET_OPEN_RATIO = 0.25
"""The most opening a conversation may cost against reading all its blocks, at every size."""
OPENS = 5
"""Opens of one conversation timed per repeat, each way."""
GROWTH_SHARE = 0.2
"""The most the list's cost may grow, as a share of how much the conversations grow: it
counts a conversation's turns by their records' keys, one key per turn, so it is not flat."""
END = 2e9
"""The prefilled conversations' last block time (a fixed clock: the same store each run)."""
DEFAULTS: dict[str, Any] = {"sizes": [100, 1000, 5000], "conversations": 20, "repeat": 5}


def whole_loads(store: Store) -> list[tuple[str, int, int]]:
    """The list as it was: every conversation loaded, and all its blocks read again."""
    rows = []
    for row in stored_conversations(store):
        cid = row["conversation_id"]
        loaded = store.load(cid)
        blocks = [Block.from_dict(d) for d in store.iter_blocks(cid)]
        rows.append((cid, len(loaded.timeline.turn_ids()), len(blocks)))
    return rows


def scanned_turns(store: Store, cid: str) -> list[dict[str, Any]]:
    """A conversation's turns as the console read them before: every stored block, in order."""
    out: dict[str, dict[str, Any]] = {}
    for raw in store.iter_blocks(cid):
        block = Block.from_dict(raw)
        turn = out.setdefault(block.turn_id, {"turn_id": block.turn_id, "prompt": "", "answer": ""})
        if block.type == USER_PROMPT and not turn["prompt"]:
            turn["prompt"] = block.text
        elif block.type == COMPLETION and block.text:
            turn["answer"] = block.text
    return list(out.values())


def fill(store: Store, blocks: int, conversations: int) -> int:
    """``conversations`` conversations of ``blocks`` blocks, each turn with its record; the
    turns of one."""
    turns = 0
    for k in range(conversations):
        tl = prefill(blocks, f"c-list-{k}", end=END)
        tids = tl.turn_ids()
        store.persist(tl, turn_records={tid: {"status": "completed"} for tid in tids})
        turns = len(tids)
    return turns


def measure(sizes: Sequence[int], conversations: int, repeat: int) -> list[dict[str, Any]]:
    rows = []
    for blocks in sizes:
        with tempfile.TemporaryDirectory(prefix="actline-bench-list-") as tmp:
            with Store(Path(tmp) / "db", sync=False) as store:
                turns = fill(store, blocks, conversations)
                listed = views.conversations(store, {}, {})
                if len(listed) != conversations or any(r["turns"] != turns for r in listed):
                    raise SanityCheckFailed(blocks, f"the list shows {listed[:2]}…")
                opened = listed[0]["conversation_id"]
                if views.turns(store, opened) != scanned_turns(store, opened):
                    raise SanityCheckFailed(blocks, f"{opened}: the turns differ from the scan")
                outline: list[float] = []
                whole: list[float] = []
                briefs: list[float] = []
                scans: list[float] = []
                for _ in range(repeat):  # alternately, so both see the same machine
                    t0 = time.perf_counter()
                    views.conversations(store, {}, {})
                    outline.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    whole_loads(store)
                    whole.append(time.perf_counter() - t0)
                    for _ in range(OPENS):
                        t0 = time.perf_counter()
                        views.turns(store, opened)
                        briefs.append(time.perf_counter() - t0)
                        t0 = time.perf_counter()
                        scanned_turns(store, opened)
                        scans.append(time.perf_counter() - t0)
        rows.append(
            {
                "blocks": blocks,
                "turns": turns,
                "conversations": conversations,
                "list_p50_ms": median_ms(outline),
                "whole_p50_ms": median_ms(whole),
                "open_p50_ms": median_ms(briefs),
                "scan_p50_ms": median_ms(scans),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    cli = parser("console_list", __doc__)
    add_sizes(cli, "blocks per conversation (100,1000,5000)")
    add_counts(cli, conversations="conversations in the store (20)", repeat="timed lists (5)")
    args = cli.parse_args(argv)
    options = settle(args, DEFAULTS)
    sizes = sorted(set(options["sizes"]))
    conversations = options["conversations"]
    console = Console()
    with console.status("building the stores and listing them"):
        rows = measure(sizes, conversations, max(1, options["repeat"]))
    names = ("blocks each", "turns each", "list p50", "whole loads p50", "list / whole")
    table = new_table(
        f"the console's list of {conversations} conversations, and opening one",
        (*names, "open p50", "block scan p50", "open / scan"),
    )
    for row in rows:
        row["ratio"] = row["list_p50_ms"] / row["whole_p50_ms"]
        row["open_ratio"] = row["open_p50_ms"] / row["scan_p50_ms"]
        table.add_row(
            f"{row['blocks']:,}",
            f"{row['turns']:,}",
            f"{row['list_p50_ms']:.2f} ms",
            f"{row['whole_p50_ms']:.1f} ms",
            f"{row['ratio']:.3f}",
            f"{row['open_p50_ms']:.2f} ms",
            f"{row['scan_p50_ms']:.2f} ms",
            f"{row['open_ratio']:.3f}",
        )
    console.print(table)
    first, last = rows[0], rows[-1]
    grew = last["list_p50_ms"] / first["list_p50_ms"]
    size_grew = last["blocks"] / first["blocks"]
    growth_ok = len(rows) < 2 or grew - 1 <= GROWTH_SHARE * (size_grew - 1)
    ratio_ok = all(r["ratio"] <= TARGET_RATIO for r in rows)
    open_ok = all(r["open_ratio"] <= TARGET_OPEN_RATIO for r in rows)
    console.print(
        f"the list grew {grew:.2f}x while the conversations grew {size_grew:.0f}x "
        f"(target: at most {1 + GROWTH_SHARE * (size_grew - 1):.1f}x); list / whole at most "
        f"{TARGET_RATIO} at every size: {'met' if ratio_ok else 'missed'}; open / scan at "
        f"most {TARGET_OPEN_RATIO} at every size: {'met' if open_ok else 'missed'}"
    )
    result = {
        "benchmark": "console_list",
        "machine": platform.platform(),
        "rows": rows,
        "list_growth": grew,
        "size_growth": size_grew,
        "target_ratio": TARGET_RATIO,
        "growth_share": GROWTH_SHARE,
        "target_open_ratio": TARGET_OPEN_RATIO,
        "target_met": ratio_ok and growth_ok and open_ok,
    }
    return finish(console, args.out, result, result["target_met"])


if __name__ == "__main__":
    raise SystemExit(main())
