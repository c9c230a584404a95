"""The block: one event on a conversation's timeline.

A block is appended once and never rewritten, with two exceptions that are
updates of its visibility only: ``hidden`` (set by react.hide and TTL pruning,
cleared by react.read) and ``replacement`` (the short text shown instead).

Order: blocks of one turn stay together, turns in the order they started, the
turn's header first, and inside a turn blocks follow their event-start time: ``ts`` for discrete
blocks, ``ts_first`` for streamed aggregates (a completion that started
streaming before a followup landed sorts before that followup even though it
was appended after it). Ties keep append order (``seq``). A block that arrives
after a render and whose start is before the last rendered block is the exception:
it lands right after that block (``Timeline.mark_rendered``; ``meta["placed"]``),
so what the model has seen never changes. Blocks that compaction
inserts carry ``meta["insert_before"]`` (the id of the block they precede), so
that a restored timeline puts them back where they were inserted.

Times are float seconds since the epoch, UTC.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from actline.messages.ids import new_id

from .errors import BlockError

# Block types (a subset of the original runtime's).
TURN_HEADER = "turn.header"
USER_PROMPT = "user.prompt"
USER_ATTACHMENT_META = "user.attachment.meta"
USER_FOLLOWUP = "user.followup"
USER_FOLLOWUP_PRESERVED = "user.followup.preserved"
STAGE_GATE = "stage.gate"
REACT_NOTES = "react.notes"
TOOL_CALL = "react.tool.call"
TOOL_RESULT = "react.tool.result"
PLAN = "react.plan"
PLAN_ACK = "react.plan.ack"
NOTE = "react.note"
NOTE_PRESERVED = "react.note.preserved"
NOTICE = "react.notice"
COMPLETION = "assistant.completion"
SUGGESTED_FOLLOWUPS = "stage.suggested_followups"
SUMMARY = "conv.range.summary"
SYSTEM_MESSAGE = "system.message"
FEEDBACK = "feedback"
SIGNAL_DONE = "signal.done"

FINAL_ROUND_TYPES = frozenset({COMPLETION, SUGGESTED_FOLLOWUPS, "react.exit", "react.state"})
"""Types that form the turn's final round when they carry no call id."""

_AUTHORS = {"user": "user", "assistant": "assistant", "system": "system", "stage": "system"}


def default_author(block_type: str) -> str:
    """The author a block type implies (``user.prompt`` -> user, ``react.*`` -> react)."""
    if block_type == TOOL_RESULT:
        return "tool"
    return _AUTHORS.get(block_type.split(".", 1)[0], "react")


def iso(ts: float) -> str:
    """A timestamp as ISO-8601 UTC with a ``Z`` and second precision."""
    frac, whole = math.modf(ts)
    # The second ``datetime.fromtimestamp`` lands on: microseconds rounded half to even,
    # carried into the second (or borrowed from it) as it does.
    micros = round(frac * 1e6)
    second = int(whole) + (micros >= 1_000_000) - (micros < 0)
    return _iso_second(second)


@functools.lru_cache(maxsize=4096)
def _iso_second(second: int) -> str:
    """``iso`` of a whole second: blocks of a round share their seconds."""
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True, eq=False)
class Block:
    """One timeline event. Construct through ``Block.new`` or ``Block.from_dict``."""

    type: str
    turn_id: str
    ts: float
    text: str = ""
    path: str = ""
    mime: str = "text/markdown"
    data: Any = None
    base64: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    author: str = ""
    call_id: str = ""
    ts_first: float | None = None
    id: str = ""
    hidden: bool = False
    replacement: str = ""
    seq: int = -1
    tokens: int = -1
    """Cached token estimate of the block's own content (-1 = not counted yet)."""
    order: tuple[int, float, int, float] = (0, 0.0, 0, 0.0)
    """Sort key set by the timeline: (turn ordinal, start time, seq, insertion rank)."""

    @classmethod
    def new(cls, type: str, turn_id: str, ts: float, **fields: Any) -> Block:
        """A new block with an id and the author its type implies (unless given)."""
        block = cls(type=type, turn_id=turn_id, ts=ts, **fields)
        if not block.id:
            block.id = new_id("b")
        if not block.author:
            block.author = default_author(type)
        return block

    @property
    def start(self) -> float:
        """Event-start time: ``ts_first`` for streamed aggregates, ``ts`` otherwise."""
        return self.ts if self.ts_first is None else self.ts_first

    @property
    def content(self) -> str:
        """The block's text as the model sees it when not hidden (data as sorted JSON)."""
        if self.text:
            return self.text
        if self.data is not None:
            return json.dumps(self.data, sort_keys=True, ensure_ascii=False, default=str)
        return ""

    def to_dict(self) -> dict[str, Any]:
        """A msgpack/JSON-safe dict; empty optional fields are left out."""
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "turn_id": self.turn_id,
            "ts": self.ts,
            "seq": self.seq,
        }
        for name in _OPTIONAL:
            value = getattr(self, name)
            if value != _DEFAULTS[name]:
                out[name] = value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Block:
        """Validate a dict from the wire or from storage; ``BlockError`` names the bad field."""
        if not isinstance(raw, Mapping):
            raise BlockError(f"expected a mapping, got {type(raw).__name__}")
        values: dict[str, Any] = {}
        for name, kinds in _FIELD_TYPES.items():
            if name not in raw or raw[name] is None:
                if name in _REQUIRED:
                    raise BlockError("required", name)
                continue
            value = raw[name]
            if name in ("ts", "ts_first"):
                value = _as_time(value, name)
            elif not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise BlockError(f"expected {_kind_names(kinds)}, got {type(value).__name__}", name)
            values[name] = value
        for name in ("type", "turn_id"):
            if not values[name]:
                raise BlockError("must not be empty", name)
        if "meta" in values:
            values["meta"] = dict(values["meta"])
        return cls.new(**values)


def _as_time(value: Any, name: str) -> float:
    """Epoch seconds from a number or an ISO-8601 string (the original mixed both)."""
    if isinstance(value, bool):
        raise BlockError("expected a time, got bool", name)
    if isinstance(value, int | float):
        result = float(value)
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise BlockError(f"not an ISO-8601 time: {value[:40]!r}", name) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        result = parsed.timestamp()
    else:
        raise BlockError(f"expected a time, got {type(value).__name__}", name)
    if not math.isfinite(result):
        raise BlockError("time must be finite", name)
    return result


def _kind_names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)


_REQUIRED = frozenset({"type", "turn_id", "ts"})
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "type": (str,),
    "turn_id": (str,),
    "ts": (int, float, str),
    "text": (str,),
    "path": (str,),
    "mime": (str,),
    "data": (dict, list, str, int, float, bool),
    "base64": (str,),
    "meta": (dict,),
    "author": (str,),
    "call_id": (str,),
    "ts_first": (int, float, str),
    "id": (str,),
    "hidden": (bool,),
    "replacement": (str,),
    "seq": (int,),
    "tokens": (int,),
}
_DEFAULTS: dict[str, Any] = {
    "text": "",
    "path": "",
    "mime": "text/markdown",
    "data": None,
    "base64": None,
    "meta": {},
    "author": "",
    "call_id": "",
    "ts_first": None,
    "hidden": False,
    "replacement": "",
    "tokens": -1,
}
_OPTIONAL = tuple(_DEFAULTS)
