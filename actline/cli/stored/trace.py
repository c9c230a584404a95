"""``actline trace TURN_ID``: a turn's span tree from the JSONL trace sink under the home.

The tree shows each span's duration, tokens in (every prompt token: uncached, cache reads
and writes) and out, the cache-read share of the input
(cache read / (input + cache read + cache write)), what its model calls cost in USD (the
turn's line also what caching saved), tools, waits and status, and under a span its events
(``context.edit``: name and attributes on one line); spans served on other nodes join it
when their home's traces are merged in (``--home`` is repeatable; a Ray job's home,
``--home .actline-cluster``, stands for the node homes under it). ``--json`` prints the
session and its spans as one JSON object; ``--last`` picks the latest turn traced. No NATS
is needed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from actline.actors.tracing import sinks as trace_sinks
from actline.config import ConfigError
from actline.llm.pricing import format_usd
from actline.stored import node_homes
from actline.traces import COST, ESTIMATED, UNCACHED, turn_trace

from ..turns import load_config

__all__ = ["event_label", "label", "run_trace"]

WIDE = 200
EVENT_ATTRS = 160
"""Characters of an event's attributes the tree shows."""


def cache_share(attrs: dict[str, Any]) -> float | None:
    read = int(attrs.get("cache_read_tokens") or 0)
    total = int(attrs.get("input_tokens") or 0) + read + int(attrs.get("cache_write_tokens") or 0)
    return None if total == 0 else read / total


def label(span: dict[str, Any]) -> str:
    """One line of the tree: name, duration, and the figures the span has."""
    a = span.get("attrs") or {}
    parts = [f"[bold]{span['name']}[/bold]", f"{float(span.get('duration_ms') or 0):.1f} ms"]
    for key in ("round", "tool", "model", "agents", "ended", "node"):
        value = span.get(key) if key == "node" else a.get(key)
        if value not in (None, ""):
            parts.append(f"{key}={value}")
    if "input_tokens" in a or "output_tokens" in a:
        prompt = sum(
            int(a.get(k) or 0) for k in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
        )
        parts.append(f"tokens {prompt} in / {a.get('output_tokens', 0)} out")
        share = cache_share(a)
        if share is not None:
            parts.append(f"cache read {share:.0%}")
    if COST in a:
        estimated = bool(a.get(ESTIMATED))
        parts.append(f"cost {format_usd(float(a[COST]), estimated=estimated)}")
        if UNCACHED in a:
            saved = float(a[UNCACHED]) - float(a[COST])
            parts.append(f"caching saved {format_usd(saved, estimated=estimated)}")
    if "context_tokens" in a:
        parts.append(f"context {a['context_tokens']} tokens")
    if "result_bytes" in a:
        parts.append(f"{a['result_bytes']} B")
    if span.get("status") not in (None, "ok"):
        parts.append(f"[red]{span['status']}[/red]")
    return "  ".join(parts)


def event_label(event: dict[str, Any]) -> str:
    """One line of an event under its span: its name and its attributes as ``key=value``."""
    attrs = event.get("attrs") or {}
    shown = " ".join(f"{k}={v}" for k, v in attrs.items())
    if len(shown) > EVENT_ATTRS:
        shown = shown[: EVENT_ATTRS - 1] + "…"
    name = escape(str(event.get("name", "")))
    return f"[dim]event[/dim] [italic]{name}[/italic]  {escape(shown)}"


def tree(found: dict[str, Any]) -> Tree:
    session = found["session"]
    spans = found["spans"]
    title = f"turn {session['turn_id']}  trace {session['trace_id']}  status {session['status']}"
    root = Tree(title)
    nodes: dict[str, Tree] = {}
    ids = {s["span_id"] for s in spans}
    for span in spans:  # parents start before their children
        parent = span.get("parent_id")
        under = nodes.get(parent, root) if parent in ids else root
        node = nodes[span["span_id"]] = under.add(label(span))
        for event in span.get("events") or ():
            node.add(event_label(event))
    return root


def run_trace(args: argparse.Namespace, console: Console) -> int:
    """Print the span tree (or ``--json``) of one turn's trace."""
    if (args.turn is None) == (not args.last):
        raise ConfigError("actline trace needs a turn id or --last (not both)")
    homes: list[Path] = list(args.home or [])
    if not homes:
        args.home = None
        homes = [load_config(args).node.home]
    records = [r for home in homes for node in node_homes(home) for r in trace_sinks.read(node)]
    found = turn_trace(records, None if args.last else args.turn)
    if args.json:
        print(json.dumps(found, ensure_ascii=False, default=str), flush=True)
    else:
        if not console.is_terminal:  # a pipe should not fold the lines
            console.width = WIDE
        console.print(tree(found))
    return 0
