"""``actline timeline``: a stored conversation read straight from the node's LMDB.

No NATS is needed: the store at ``ACTLINE_HOME`` (or ``--home``) is opened read-mostly next to
any node using it (LMDB readers never block the writer). Views: the stored blocks as a table
(default) or as JSON lines (``--json``), the context the model would see next with its cache
marks (``--rendered``), and the stored conversations with what their turns cost in USD
(``--list``). Below the table, each finished turn's tokens, cost and what caching saved
(read from the stored turn results), and what the conversation holds against its quotas
(``actline.storage.quota``).

A Ray job's home (``--home .actline-cluster``) holds a node home per node actor,
``<home>/<node id>``: ``--list`` lists the conversations of every node with the node, and
``CID`` is shown from the node that holds its newest revision (a conversation that moved
between nodes is in both stores; the older copies are named below the table).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from actline.config import ConfigError
from actline.llm.pricing import format_usd
from actline.messages import Cost
from actline.storage import NotStored, Store, quota
from actline.stored import (
    TEXT_WIDTH,
    TurnCost,
    block_text,
    conversation_costs,
    costs_by_day,
    finished_turns,
    first_line,
    node_homes,
    open_existing,
    stored_conversations,
    turn_costs,
)
from actline.timeline import Block, Renderer, TimelineConfig

from ..turns import check_conversation_id, load_config

__all__ = ["run_timeline"]

WIDE = 200
"""Width of the table when stdout is not a terminal (a pipe should not fold paths)."""


def _print_wide(console: Console, renderable: Any) -> None:
    if not console.is_terminal and console.width < WIDE:
        console = Console(file=console.file, width=WIDE, highlight=False, emoji=False)
    console.print(renderable, crop=False)


def _usd(cost: Cost, value: float | None = None) -> str:
    return format_usd(cost.total_usd if value is None else value, estimated=cost.estimated)


NodeStore = tuple[str, Store]
"""A store and its node's name ("" for a home that is itself a node's)."""


def _open_stores(home: Path) -> list[NodeStore]:
    """The stores of ``home``, or of each node home under it (a Ray job's home)."""
    homes = node_homes(home)
    stored = [h for h in homes if (h / "data.mdb").is_file()]
    if not stored:
        open_existing(home)  # raises, naming what is missing
    out: list[NodeStore] = []
    try:
        for h in stored:
            out.append(("" if h == home else h.name, open_existing(h)))
    except ConfigError:
        _close(out)
        raise
    return out


def _close(stores: list[NodeStore]) -> None:
    for _, store in stores:
        store.close()


def _list(console: Console, stores: list[NodeStore], home: Path, as_json: bool) -> int:
    rows: list[dict[str, Any]] = []
    turns_by_id: dict[str, TurnCost] = {}  # a turn copied to several nodes counts once
    for node, store in stores:
        costs = conversation_costs(store)
        for row in stored_conversations(store):
            cost, turns = costs.get(row["conversation_id"], (Cost(), 0))
            if node:
                row["node"] = node
            row.update(
                title=store.outline(row["conversation_id"]).title,
                turns=turns,
                cost_usd=cost.total_usd,
                saved_usd=cost.saved_usd,
                cost_estimated=cost.estimated,
                cost=cost,
            )
            rows.append(row)
        for _, turn in finished_turns(store):
            turns_by_id.setdefault(turn.turn_id, turn)
    if as_json:
        for row in rows:
            print(json.dumps({k: v for k, v in row.items() if k != "cost"}), flush=True)
        return 0
    if not rows:
        console.print(Text(f"no conversations stored in {home}", "dim"))
        return 0
    nodes = any(node for node, _ in stores)
    table = Table(title=f"conversations in {home}", header_style="bold")
    table.add_column("conversation", no_wrap=True)
    if nodes:
        table.add_column("node", no_wrap=True)
    table.add_column("title", max_width=40, overflow="ellipsis", no_wrap=True)
    for name in ("revision", "blocks", "turns", "cost", "caching saved"):
        table.add_column(name, no_wrap=True, justify="right")
    table.add_column("last active", no_wrap=True)
    for row in sorted(rows, key=lambda r: (r["conversation_id"], r.get("node", ""))):
        stamp = row["last_active"]
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp)) if stamp else ""
        cost = row["cost"]
        table.add_row(
            row["conversation_id"],
            *([row.get("node", "")] if nodes else []),
            row["title"],
            str(row["revision"]),
            str(row["blocks"]),
            str(row["turns"]),
            _usd(cost),
            _usd(cost, cost.saved_usd),
            when,
        )
    _print_wide(console, table)
    days = Table(title="cost by day (UTC)", header_style="bold")
    days.add_column("day", no_wrap=True)
    for name in ("turns", "cost", "caching saved"):
        days.add_column(name, no_wrap=True, justify="right")
    for day, cost, turns in costs_by_day(turns_by_id.values()):
        days.add_row(day, str(turns), _usd(cost), _usd(cost, cost.saved_usd))
    if days.row_count:
        _print_wide(console, days)
    return 0


def _holder(stores: list[NodeStore], cid: str) -> tuple[NodeStore, list[str]]:
    """The store holding the newest revision of ``cid``, and the other nodes that hold it
    (``NotStored`` when none does)."""
    found: list[tuple[int, NodeStore]] = []
    for entry in stores:
        header = entry[1].header(cid)
        if header is not None:
            found.append((int(header.get("revision") or 0), entry))
    if not found:
        raise NotStored("conversation", cid)
    found.sort(key=lambda f: f[0], reverse=True)
    return found[0][1], [entry[0] for _, entry in found[1:]]


def _turns(console: Console, turns: list[TurnCost]) -> None:
    """Each finished turn's tokens, cost and what caching saved, and their total."""
    if not turns:
        return
    table = Table(title="turns", header_style="bold")
    table.add_column("turn", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for name in ("rounds", "tokens in", "tokens out", "cache read", "cost", "caching saved"):
        table.add_column(name, justify="right", no_wrap=True)
    total = Cost()
    for t in turns:
        u = t.usage
        prompt = u.total_input_tokens
        share = f"{100.0 * u.cache_read_tokens / prompt:.0f}%" if prompt else "-"
        table.add_row(
            t.turn_id,
            t.status,
            str(t.rounds),
            f"{prompt:,}",
            f"{u.output_tokens:,}",
            share,
            _usd(t.cost),
            _usd(t.cost, t.cost.saved_usd),
        )
        total = total + t.cost
    table.add_row("all", "", "", "", "", "", _usd(total), _usd(total, total.saved_usd))
    if total.priced_as or total.estimated:
        named = f" as {total.priced_as}" if total.priced_as else ""
        guess = "; ~ estimated: the model is not in the price table" if total.estimated else ""
        table.caption = f"priced{named}{guess}"
    _print_wide(console, table)


def _blocks(store: Store, cid: str) -> list[Block]:
    return [Block.from_dict(d) for d in list(store.iter_blocks(cid))]


def _table(console: Console, cid: str, blocks: list[Block], stored: str = "") -> None:
    title = f"timeline {cid} ({len(blocks)} blocks)"
    table = Table(title=title, header_style="bold")
    table.add_column("seq", justify="right", no_wrap=True, min_width=4)
    table.add_column("type", no_wrap=True, overflow="ellipsis", max_width=24)
    table.add_column("path", no_wrap=True, overflow="ellipsis", max_width=72)
    table.add_column("text", no_wrap=True, overflow="ellipsis", max_width=TEXT_WIDTH)
    table.add_column("hidden", no_wrap=True, min_width=6)
    for b in blocks:
        table.add_row(
            str(b.seq),
            b.type,
            b.path,
            Text(first_line(block_text(b))),
            "hidden" if b.hidden else "",
            style="dim" if b.hidden else None,
        )
    _print_wide(console, table)
    if stored:
        console.print(Text(stored, "dim"), soft_wrap=True)


def _rendered(console: Console, store: Store, cid: str, max_tokens: int) -> None:
    loaded = store.load(cid)
    renderer = Renderer(loaded.timeline, TimelineConfig(max_tokens=max_tokens))
    result = renderer.render(now=time.time())
    marks = ", ".join(str(m) for m in result.marks) or "none"
    console.print(
        Text(
            f"rendered view of {cid}: {len(result.stable)} cached parts + {len(result.tail)} "
            f"tail parts, {result.stable_tokens:,} + {result.tail_tokens:,} tokens, "
            f"cache marks after parts {marks}",
            "bold",
        ),
        soft_wrap=True,
    )
    console.print(Text(result.text()), highlight=False, soft_wrap=True)


async def run_timeline(args: argparse.Namespace, console: Console) -> int:
    """Print a stored conversation (or the list of them); no NATS needed."""
    config = load_config(args)
    home = config.node.home
    if args.list:
        if args.conversation is not None:
            raise ConfigError("actline timeline --list takes no conversation id")
        stores = _open_stores(home)
        try:
            return _list(console, stores, home, args.json)
        finally:
            _close(stores)
    if args.conversation is None:
        raise ConfigError(
            "actline timeline needs a conversation id: actline timeline CID "
            "(find them with actline timeline --list)"
        )
    cid = check_conversation_id(args.conversation)
    assert cid is not None
    stores = _open_stores(home)
    try:
        (node, store), older = _holder(stores, cid)
        if args.rendered:
            _rendered(console, store, cid, config.node.max_context_tokens)
        elif args.json:
            for block in _blocks(store, cid):
                print(json.dumps(block.to_dict(), ensure_ascii=False, default=str), flush=True)
        else:
            stored = "stored: " + quota.summary(store.usage(cid), config.node.quota)
            _table(console, cid, _blocks(store, cid))
            _turns(console, turn_costs(store, cid))
            console.print(Text(stored, "dim"), soft_wrap=True)
            if node:
                where = f"on node {node} ({home / node})"
                if older:
                    where += f"; older revisions on {', '.join(older)}"
                console.print(Text(where, "dim"), soft_wrap=True)
            hint = "where a turn's time and tokens went: actline trace TURN_ID (or --last)"
            console.print(Text(hint, "dim"), soft_wrap=True)
    except NotStored:
        raise ConfigError(
            f"conversation {cid!r} does not exist in {home}; list the stored conversations "
            "with actline timeline --list"
        ) from None
    finally:
        _close(stores)
    return 0
