"""What the console's JSON API reads from the node's store and trace files (no NATS).

``conversations`` lists the stored conversations newest first with a title (the first
user message), dates, turns, cost and last status (``with_status`` adds the status to the
rows ``Runtime.conversations`` gives); ``timeline`` gives every stored block with its
state (``visible``, ``hidden``, ``pruned``: hidden by TTL pruning or tool-response
retention, ``summarised``: before the latest summary) and the rendered view with its cache
marks (the renderer's marks, up to 3, padded to 3 so the page always shows the three
breakpoints: a missing one is labelled ``unused`` at the end of the cached parts);
``read`` resolves a logical path as ``react.read`` does (``actline.timeline.read.resolve``);
``turns`` each turn's prompt and answer, and for a finished turn its cost in USD and what
caching saved (from its stored result, ``actline.stored.turn_costs``); ``round_calls`` the
tool calls of one round (arguments, result paths and previews: a JSON result indented,
a plan's steps apart);
``sources`` the pool rows a result cites; ``trace`` a turn's spans (``actline.cli.stored.trace``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import lmdb

from actline.actors.tracing import sinks as trace_sinks
from actline.storage import Store
from actline.storage.layout import unpack
from actline.stored import block_text, turn_costs
from actline.timeline import Block, Renderer, TimelineConfig
from actline.timeline.read import resolve
from actline.traces import turn_trace

__all__ = [
    "conversations",
    "read_path",
    "round_calls",
    "sources",
    "timeline",
    "trace",
    "turns",
    "with_status",
]

MARKS = 3
PREVIEW = 600
TITLE_CHARS = 80
LIST_LIMIT = 500
"""Conversations the list shows at most (the most recently active)."""


def _blocks(store: Store, cid: str) -> list[Block]:
    return [Block.from_dict(d) for d in store.iter_blocks(cid)]


def conversations(
    store: Store,
    live_status: dict[str, str],
    running: dict[str, str],
    limit: int = LIST_LIMIT,
    *,
    search: str | None = None,
) -> list[dict[str, Any]]:
    """The ``limit`` most recently active stored conversations, newest first, read from the
    store when no node serves ``Runtime.conversations`` (the same fields: ``conversation_id,
    title, created, updated, turns, cost_usd``, and ``last_status``); a turn this console
    follows gives the live status. ``search``: words that must all occur (any case) in the
    title, a question or an answer. Each is read by ``Store.outline`` (its cost grows with a
    conversation's turns, not with its blocks)."""
    from actline.stored import conversation_costs, stored_conversations

    words = (search or "").lower().split()
    costs = conversation_costs(store)
    rows = []
    for row in stored_conversations(store):
        cid = row["conversation_id"]
        outline = store.outline(cid)
        if words and not _matches(store, cid, outline.title, words):
            continue
        last = running.get(cid) or outline.last_turn
        cost = costs.get(cid)
        rows.append(
            {
                "conversation_id": cid,
                "title": outline.title[:TITLE_CHARS] or cid,
                "turns": outline.turns,
                "last_status": live_status.get(last, outline.last_status),
                "created": _created(store, cid),
                "updated": row["last_active"] or outline.last_ts,
                "cost_usd": None if cost is None else cost[0].total_usd,
                "forked_from": None,
            }
        )
    rows.sort(key=lambda r: float(r["updated"] or 0.0), reverse=True)
    return rows[:limit]


def _matches(store: Store, cid: str, title: str, words: list[str]) -> bool:
    texts = [title, *(f"{t.prompt}\n{t.answer}" for t in store.turn_briefs(cid))]
    found = "\n".join(texts).lower()
    return all(w in found for w in words)


def _created(store: Store, cid: str) -> float:
    """The time of a conversation's first block (0.0 when it has none), read alone."""
    prefix = f"{cid}/".encode()

    def first(txn: lmdb.Transaction) -> float:
        cursor = txn.cursor(db=store.db["blocks"])
        if cursor.set_range(prefix) and bytes(cursor.key()).startswith(prefix):
            return float(unpack(cursor.value()).get("ts") or 0.0)
        return 0.0

    return store.read(first)


def with_status(
    store: Store, rows: list[dict[str, Any]], live_status: dict[str, str], running: dict[str, str]
) -> list[dict[str, Any]]:
    """``rows`` (``ConversationInfo.to_json()``) with each one's ``last_status``: the live
    status of the turn this console follows, else its last turn's stored one."""
    for row in rows:
        cid = row["conversation_id"]
        status = ""
        if store.header(cid) is not None:
            outline = store.outline(cid)
            last = running.get(cid) or outline.last_turn
            status = live_status.get(last, outline.last_status)
        row["last_status"] = status
    return rows


def turns(store: Store, cid: str) -> list[dict[str, Any]]:
    """Each stored turn of a conversation: its prompt and its answer (the latest completion),
    read turn by turn (``Store.turn_briefs``), not block by block; and ``cost`` (with
    ``saved_usd``) once the turn has a result."""
    costs = {t.turn_id: t.cost for t in turn_costs(store, cid)}
    rows: list[dict[str, Any]] = []
    for t in store.turn_briefs(cid):
        row: dict[str, Any] = {"turn_id": t.turn_id, "prompt": t.prompt, "answer": t.answer}
        cost = costs.get(t.turn_id)
        if cost is not None:
            row["cost"] = {**cost.model_dump(), "saved_usd": cost.saved_usd}
        rows.append(row)
    return rows


def _state(block: Block, visible: set[str]) -> str:
    if block.id not in visible:
        return "summarised"
    if block.hidden:
        pruned = "retention" in block.meta or "prune" in block.replacement.lower()
        return "pruned" if pruned else "hidden"
    return "visible"


def timeline(store: Store, cid: str, max_tokens: int) -> dict[str, Any]:
    """The stored blocks with their states and the rendered view with three cache marks."""
    loaded = store.load(cid)
    visible = {b.id for b in loaded.timeline.blocks}
    blocks = [
        {
            "seq": b.seq,
            "path": b.path,
            "type": b.type,
            "turn_id": b.turn_id,
            "state": _state(b, visible),
            "text": block_text(b),
        }
        for b in _blocks(store, cid)
    ]
    result = Renderer(loaded.timeline, TimelineConfig(max_tokens=max_tokens)).render(
        now=time.time()
    )
    parts = []
    for i, part in enumerate(result.stable):
        parts.append({"index": i, "cached": True, "text": _part_text(part)})
    for label, part in zip(result.labels, result.tail, strict=True):
        parts.append(
            {"index": len(parts), "cached": False, "label": label, "text": _part_text(part)}
        )
    marks = [{"after_part": m, "label": f"cache mark {n + 1}"} for n, m in enumerate(result.marks)]
    last_stable = len(result.stable) - 1
    while len(marks) < MARKS:
        marks.append({"after_part": last_stable, "label": f"cache mark {len(marks) + 1} (unused)"})
    rendered = {
        "text": result.text(),
        "parts": parts,
        "cache_marks": marks[:MARKS],
        "stable_tokens": result.stable_tokens,
        "tail_tokens": result.tail_tokens,
    }
    return {"conversation_id": cid, "blocks": blocks, "rendered": rendered}


def _part_text(part: dict[str, Any]) -> str:
    content = part.get("content", part.get("text", ""))
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        pieces = [c.get("text", "") if isinstance(c, dict) else str(c) for c in content]
        return "\n".join(p for p in pieces if p)
    return json.dumps(content, ensure_ascii=False, default=str)


def round_calls(store: Store, cid: str, turn_id: str, round_: int) -> list[dict[str, Any]]:
    """The tool calls of one round of a turn: tool, arguments, and each result's path and
    preview (``PREVIEW`` characters; the full text is ``read_path`` of the path)."""
    if store.header(cid) is None:
        return []
    prefix = f"c{round_}-"
    calls: dict[str, dict[str, Any]] = {}
    for block in _blocks(store, cid):
        if block.turn_id != turn_id or not block.call_id.startswith(prefix):
            continue
        call = calls.setdefault(block.call_id, {"call_id": block.call_id, "results": []})
        data = block.data if isinstance(block.data, dict) else {}
        if block.type == "react.tool.call":
            call.update(tool=data.get("tool", ""), params=data.get("params", {}), path=block.path)
        elif block.type == "react.tool.result":
            text = block_text(block)
            preview = _pretty(text)
            if len(preview) > PREVIEW:
                preview = preview[:PREVIEW] + "…"
            result: dict[str, Any] = {"path": block.path, "preview": preview}
            steps = _plan_steps(text)
            if steps is not None:
                result["steps"] = steps
            call["results"].append(result)
    return list(calls.values())


def _pretty(text: str) -> str:
    """A JSON result indented (one field a line), any other text as it is."""
    if not text.startswith(("{", "[")):
        return text
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def _plan_steps(text: str) -> list[str] | None:
    """The steps of a ``react.plan`` result (None for any other result)."""
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    steps = data.get("steps") if isinstance(data, dict) else None
    if "plan_id" not in data or not isinstance(steps, list):
        return None
    return [str(step) for step in steps]


def read_path(store: Store, cid: str, path: str) -> dict[str, Any]:
    """What ``react.read`` finds at ``path`` on the conversation's timeline (a JSON result
    indented)."""
    found = resolve(store.load(cid).timeline, path)
    text = _pretty(found.text)
    if not text.strip() and found.blocks:  # blocks of data only (a turn header, say)
        text = "\n\n".join(
            json.dumps(b.to_dict(), ensure_ascii=False, default=str) for b in found.blocks
        )
    if found.rows:
        text = "\n\n".join(f"[{r.sid}] {r.title} {r.url}\n{r.text}" for r in found.rows)
    return {"path": found.path, "kind": found.kind, "text": text, "error": found.error}


def sources(store: Store, cid: str, sids: list[int]) -> list[dict[str, Any]]:
    """The pool rows of ``sids`` (``sid``, ``title``, ``url``, ``text``)."""
    if not sids or store.header(cid) is None:
        return []
    rows = store.load(cid).timeline.sources.select(tuple(sids))
    return [{"sid": r.sid, "title": r.title, "url": r.url, "text": r.text[:400]} for r in rows]


def trace(home: Path, turn_id: str) -> dict[str, Any]:
    """The session and spans of one turn's trace (``ConfigError`` when it has none)."""
    found = turn_trace(trace_sinks.read(home), turn_id)
    spans = found["spans"]
    start = min((float(s.get("start") or 0.0) for s in spans), default=0.0)
    for span in spans:
        span["offset_ms"] = (float(span.get("start") or 0.0) - start) * 1000.0
    return found
