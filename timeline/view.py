"""How one block looks to the model: its text, round framing and content part.

A block's rendered form depends only on the block and on the round state left
by the entry before it, so once rendered it never changes while blocks are
appended after it (which is what keeps the cached prefix byte-stable).
"""

from __future__ import annotations

from typing import Any

from actline.timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTE_PRESERVED,
    NOTICE,
    PLAN,
    PLAN_ACK,
    REACT_NOTES,
    SUMMARY,
    SYSTEM_MESSAGE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_FOLLOWUP,
    USER_PROMPT,
    Block,
    iso,
)

LABELS = {
    USER_PROMPT: "USER MESSAGE",
    USER_FOLLOWUP: "USER FOLLOWUP",
    COMPLETION: "ASSISTANT",
    TOOL_CALL: "TOOL CALL",
    TOOL_RESULT: "TOOL RESULT",
    REACT_NOTES: "NOTES",
    NOTE: "INTERNAL NOTE",
    NOTE_PRESERVED: "INTERNAL NOTE (preserved)",
    NOTICE: "NOTICE",
    PLAN: "PLAN",
    PLAN_ACK: "PLAN ACK",
    SUMMARY: "CONVERSATION SUMMARY",
    SYSTEM_MESSAGE: "SYSTEM MESSAGE",
}
PASS_THROUGH = frozenset({USER_FOLLOWUP, "user.steer", "user.followup.preserved"})
"""Blocks that may land inside a round without closing it."""

ROUND_CLOSE = "└" + "─" * 30 + "┘"


def preview(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def label(block: Block) -> str:
    return LABELS.get(block.type, block.type.upper())


def round_open(number: int) -> str:
    return f"┌──────── ROUND {number} ────────┐"


def block_text(block: Block, *, opens: int | None = None, closes: bool = False) -> str:
    """The text of a block as rendered, with its round framing lines."""
    if block.type == TURN_HEADER:
        body = f"══════ TURN {block.turn_id} (started {iso(block.start)}) ══════"
    else:
        head = f"[{label(block)}{' · hidden' if block.hidden else ''}]"
        where = f" {block.path}" if block.path else ""
        first = f"{head}{where} · {iso(block.start)}"
        text = block.replacement if block.hidden else block.content
        if block.base64 and not block.hidden:
            first += f" · {block.mime} attached"
        body = f"{first}\n{text}" if text else first
    if opens is not None:
        body = f"{round_open(opens)}\n{body}"
    if closes:
        body = f"{ROUND_CLOSE}\n{body}"
    return body


def to_part(block: Block, text: str) -> dict[str, Any]:
    """The content part of a rendered block.

    Text is ``{"type": "text", "text"}``; an image or PDF is ``{"type": "image"|"document",
    "source", "caption"}`` and the model client sends its caption as a text part before it.
    """
    if block.base64 and not block.hidden:
        source = {"type": "base64", "media_type": block.mime, "data": block.base64}
        if block.mime.startswith("image/"):
            return {"type": "image", "source": source, "caption": text}
        if block.mime == "application/pdf":
            return {"type": "document", "source": source, "caption": text}
    return {"type": "text", "text": text}
