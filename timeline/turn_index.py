"""The turn index ``ar:<turn>.react.turn.index``: a map of one turn, built on demand.

Not a stored block: it is reconstructed from the turn's blocks whenever it is
read, so it is never stale. It lists the turn's summaries, messages, tools,
artifacts, notes and sources, each with its logical path and a short hint, as
the bridge from a summary to the exact refs worth reopening.
"""

from __future__ import annotations

from typing import Any

from actline.timeline.view import preview

from .blocks import (
    COMPLETION,
    NOTE,
    NOTE_PRESERVED,
    PLAN,
    PLAN_ACK,
    REACT_NOTES,
    SUMMARY,
    TOOL_CALL,
    TOOL_RESULT,
    USER_FOLLOWUP,
    USER_PROMPT,
    Block,
)
from .paths import ar_path
from .timeline import Timeline

HINT_CHARS = 80
SECTIONS = ("summaries", "messages", "tools", "artifacts", "notes", "sources")


def index_path(turn_id: str) -> str:
    return ar_path(turn_id, "react.turn.index")


def _hint(block: Block) -> str:
    return preview(block.content or block.replacement, HINT_CHARS)


def _section(block: Block) -> str | None:
    if block.type == SUMMARY:
        return "summaries"
    if block.type in (USER_PROMPT, USER_FOLLOWUP, COMPLETION):
        return "messages"
    if block.type in (TOOL_CALL, TOOL_RESULT):
        return "tools"
    if block.type in (NOTE, NOTE_PRESERVED, REACT_NOTES, PLAN, PLAN_ACK):
        return "notes"
    if block.path.startswith("fi:"):
        return "artifacts"
    return None


def turn_index(tl: Timeline, turn_id: str) -> dict[str, Any]:
    """The index of one turn as a JSON-safe dict (empty sections included)."""
    index: dict[str, Any] = {"turn_id": turn_id, "path": index_path(turn_id)}
    for name in SECTIONS:
        index[name] = []
    seen: set[tuple[str, str]] = set()
    sids: set[int] = set()
    for block in tl.turn_blocks(turn_id):
        for row in block.meta.get("sources", ()) if isinstance(block.meta, dict) else ():
            if isinstance(row, dict) and isinstance(row.get("sid"), int):
                sids.add(row["sid"])
        section = _section(block)
        if section is None or not block.path or (section, block.path) in seen:
            continue
        seen.add((section, block.path))
        entry: dict[str, Any] = {"path": block.path, "type": block.type, "hint": _hint(block)}
        if block.hidden:
            entry["hidden"] = True
        index[section].append(entry)
    for summary in tl.blocks:
        covered = summary.meta.get("covered_turn_ids", ()) if summary.type == SUMMARY else ()
        if turn_id in covered and summary.turn_id != turn_id:
            index["summaries"].append(
                {"path": summary.path, "type": SUMMARY, "hint": _hint(summary)}
            )
    pool = {row.sid: row for row in tl.sources.select(sorted(sids))}
    index["sources"] = [
        {"sid": sid, "title": pool[sid].title, "url": pool[sid].url} for sid in sorted(pool)
    ]
    return index


def turn_index_text(index: dict[str, Any]) -> str:
    """The index as the text react.read shows."""
    lines = [f"TURN INDEX {index['turn_id']} ({index['path']})"]
    for name in SECTIONS:
        items = index.get(name) or []
        if not items:
            continue
        lines.append(f"{name}:")
        for item in items:
            if name == "sources":
                lines.append(f"  [S:{item['sid']}] {item['title']} — {item['url']}")
            else:
                hidden = " (hidden)" if item.get("hidden") else ""
                lines.append(f"  {item['path']}{hidden} — {item['hint']}")
    return "\n".join(lines)
