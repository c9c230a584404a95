"""``actline conversations`` (list, show, rename, delete, export, search) and ``actline fork``:
thin layers over ``Runtime.conversations``.

Where the conversations are: with ``NATS_URL`` or ``--nats`` (or a running ``actline serve``
of the home) a client asks the nodes over NATS (``conv.manage``); otherwise the embedded
server of ``--home`` starts with a node in this process, over that home's store. A refusal
(not found, busy, bad input) is a ``ConfigError``: one line naming the fix, exit code 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from actline.config import ConfigError
from actline.conversations import ConversationInfo
from actline.llm.pricing import format_usd
from actline.runtime import Runtime

from .turns import load_config

__all__ = ["run_conversations", "run_fork"]


def _when(ts: float) -> str:
    """A unix time as a local date and time (``-`` for none)."""
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else "-"


def _cost(info: ConversationInfo) -> str:
    return "-" if info.cost_usd is None else format_usd(info.cost_usd)


WIDE = 140
"""The width a table is printed at when the output is not a terminal."""


def _table(infos: list[ConversationInfo]) -> Table:
    table = Table(header_style="bold")
    table.add_column("id", no_wrap=True)
    table.add_column("title", max_width=50, overflow="ellipsis", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("updated", no_wrap=True)
    table.add_column("turns", justify="right", no_wrap=True)
    table.add_column("cost", justify="right", no_wrap=True)
    for info in infos:
        title = Text(info.title or "(untitled)")
        if info.forked_from:
            title.append(" (fork)", style="dim")
        table.add_row(
            info.conversation_id,
            title,
            _when(info.created),
            _when(info.updated),
            str(info.turns),
            _cost(info),
        )
    return table


def _print_wide(console: Console, table: Table) -> None:
    if not console.is_terminal and console.width < WIDE:
        console = Console(file=console.file, width=WIDE, highlight=False, emoji=False)
    console.print(table, crop=False)


def _print_json(value: Any) -> None:
    print(json.dumps(value, ensure_ascii=False), flush=True)


def _show(console: Console, info: ConversationInfo) -> None:
    rows = [
        ("id", info.conversation_id),
        ("title", info.title or "(untitled)"),
        ("created", _when(info.created)),
        ("updated", _when(info.updated)),
        ("turns", str(info.turns)),
        (
            "tokens",
            f"in {info.input_tokens:,} · out {info.output_tokens:,} · "
            f"cache read {info.cache_read_tokens:,}",
        ),
        ("cost", _cost(info)),
    ]
    if info.forked_from:
        rows.append(("forked from", f"{info.forked_from[0]} at turn {info.forked_from[1]}"))
    for name, value in rows:
        console.print(Text.assemble((f"{name:>12}  ", "dim"), value), highlight=False)


def _connect(args: argparse.Namespace) -> Runtime:
    """A client of the nodes over NATS when a server is named or served for the home, else
    the home's embedded server with a node here (which needs no knowledge folder)."""
    config = load_config(args)
    if config.nats_url is not None:
        return Runtime(config, node=False)
    return Runtime(config.with_node(knowledge_dir=None), node=True)


def _need(args: argparse.Namespace, count: int, usage: str) -> list[str]:
    given: list[str] = list(args.args)
    if len(given) < count:
        raise ConfigError(f"usage: actline conversations {args.action} {usage}")
    return given


def _confirm(cid: str, args: argparse.Namespace) -> bool:
    """``--yes``, else the user's yes on a terminal; off a terminal ``--yes`` is required."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigError(
            f"delete {cid}: not asked on a terminal: add --yes to delete without asking"
        )
    answer = input(f"Delete conversation {cid} and everything stored of it? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


async def run_conversations(args: argparse.Namespace, console: Console) -> int:
    """One action of ``actline conversations``; 0 on success, 1 when a delete was declined."""
    action: str = args.action
    async with _connect(args) as rt:
        convs = rt.conversations
        if action in ("list", "search"):
            words = " ".join(args.args) if action == "search" else None
            if action == "search" and not (words or "").strip():
                raise ConfigError("usage: actline conversations search WORDS")
            infos = await convs.list(search=words)
            if args.json:
                _print_json([i.to_json() for i in infos])
            elif not infos:
                found = f"matching {words!r}" if words else "stored"
                console.print(Text(f"no conversations {found}", "dim"))
            else:
                _print_wide(console, _table(infos))
            return 0
        if action == "show":
            [cid, *_] = _need(args, 1, "CID")
            info = await convs.get(cid)
            if args.json:
                _print_json(info.to_json())
            else:
                _show(console, info)
            return 0
        if action == "rename":
            cid, *title = _need(args, 2, "CID TITLE")
            info = await convs.rename(cid, " ".join(title))
            if args.json:
                _print_json(info.to_json())
            else:
                console.print(Text(f"renamed {cid}: {info.title}"), highlight=False)
            return 0
        if action == "delete":
            [cid, *_] = _need(args, 1, "CID")
            await convs.get(cid)  # not found: said before asking
            if not _confirm(cid, args):
                console.print(Text("not deleted", "dim"))
                return 1
            removed = await convs.delete(cid)
            if args.json:
                _print_json(removed.to_json())
            else:
                console.print(
                    Text(
                        f"deleted {cid}: {removed.blocks} blocks, {removed.turns} turns, "
                        f"{removed.files} file versions, {removed.artifacts} artifacts"
                    ),
                    highlight=False,
                )
            return 0
        [cid, *_] = _need(args, 1, "CID")  # export
        text = await convs.export(cid, args.format)
    out: Path | None = args.out
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        await asyncio.to_thread(out.write_text, text, encoding="utf-8")
        print(f"exported {cid} ({args.format}, {len(text):,} characters) to {out}", file=sys.stderr)
    return 0


async def run_fork(args: argparse.Namespace, console: Console) -> int:
    """``actline fork CID --at TURN``: the new conversation's id (0), or a refusal (2)."""
    at: str = str(args.at).strip()
    async with _connect(args) as rt:
        info = await rt.conversations.fork(args.conversation, at=at, title=args.title)
    if args.json:
        _print_json(info.to_json())
    else:
        turn = info.forked_from[1] if info.forked_from else at
        console.print(
            Text(
                f"forked {args.conversation} at turn {turn} ({info.turns} turn(s)) as "
                f"{info.conversation_id}: {info.title or '(untitled)'}"
            ),
            highlight=False,
        )
        console.print(
            Text(f"continue it: actline ask --conversation {info.conversation_id} '...'", "dim"),
            highlight=False,
        )
    return 0
