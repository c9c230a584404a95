"""react.hide: forget a bulky tail block early, without touching the cached prefix.

Rules (made stricter where the original runtime's were unsafe):

- Only a logical path, never a search; ``invalid_path`` otherwise. Turn
  headers and summaries are structure, not payload, and the active plan is
  working memory: none of them is hidden (``hide_failed``).
- Every *visible* block at that path must sit after the hide floor: CP2, or
  CP1 when there is no CP2 (``hide_before_cache``). The original checked only
  the newest block, so hiding a path with an older copy inside the cached
  prefix rewrote that prefix; here that is refused.
- The newest block must be within ``hide_max_tail_tokens`` of the tail,
  measured as the tokens *after* it (``hide_too_old``); the block's own size
  does not count, so a huge junk result right at the tail can be hidden.
- On success every visible block at the path is hidden; the first shows a
  replacement that names what was hidden, why, and how to restore it. The
  originals stay readable (``react.read(path)`` un-hides), and CP1 moves up to
  CP2 for the rest of the turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from actline.timeline.blocks import SUMMARY, TURN_HEADER, Block
from actline.timeline.cache import CachePoints
from actline.timeline.config import TimelineConfig
from actline.timeline.errors import PathError
from actline.timeline.paths import parse_path
from actline.timeline.timeline import Timeline
from actline.timeline.tokens import TokenCounter
from actline.timeline.view import label

HideStatus = Literal["ok", "not_found", "too_old", "invalid"]
STRUCTURAL = frozenset({TURN_HEADER, SUMMARY})


@dataclass(frozen=True, slots=True)
class HideResult:
    """The react.hide tool result (``code`` is the notice code when refused)."""

    path: str
    status: HideStatus
    code: str = ""
    message: str = ""
    blocks_hidden: int = 0
    tokens_hidden: int = 0
    tail_tokens: int = 0
    tail_limit: int = 0
    before_cache: bool = False
    replacement: str = ""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "status": self.status,
            "blocks_hidden": self.blocks_hidden,
            "tokens_hidden": self.tokens_hidden,
            "tail_tokens": self.tail_tokens,
            "tail_limit": self.tail_limit,
        }
        if self.code:
            out["code"] = self.code
            out["message"] = self.message
        if self.before_cache:
            out["before_cache"] = True
        return out


def replacement_text(path: str, what: str, tokens: int, note: str) -> str:
    """The short text shown instead of hidden blocks: what, why, and how to restore it."""
    why = " ".join(note.split())[:500] or "no longer needed"
    return (
        f"[hidden by react.hide: {what} at {path}, {tokens:,} tokens. Why: {why}. "
        f'Restore with react.read(["{path}"])]'
    )


class HideView(Protocol):
    """What a hide reads of a synced renderer (``Renderer`` is one): its rendered entries."""

    @property
    def timeline(self) -> Timeline: ...

    @property
    def config(self) -> TimelineConfig: ...

    @property
    def counter(self) -> TokenCounter: ...

    def entry_of(self, block: Block) -> int | None: ...

    def points(self) -> CachePoints: ...

    def block_entry_tokens(self, entry: int) -> int: ...

    def tail_tokens_after(self, entry: int) -> int: ...


def hide_path(renderer: HideView, path: str, replacement: str) -> HideResult:
    """Apply the hide rules to ``path`` on a synced renderer (see the module docstring)."""
    path = path.strip()
    limit = renderer.config.hide_max_tail_tokens
    try:
        parse_path(path)
    except PathError as exc:
        return HideResult(path, "invalid", "invalid_path", str(exc), tail_limit=limit)
    entries = [
        (e, b) for b in renderer.timeline.blocks_at(path) if (e := renderer.entry_of(b)) is not None
    ]
    visible = [(e, b) for e, b in entries if not b.hidden]
    if any(b.type in STRUCTURAL for _, b in visible):
        message = "turn headers and summaries hold the timeline together and cannot be hidden"
        return HideResult(path, "invalid", "hide_failed", message, tail_limit=limit)
    active = renderer.timeline.active_plan_block()
    if active is not None and any(b.path == active.path for _, b in visible):
        message = "the active plan is working memory; close it with react.plan(mode='close')"
        return HideResult(path, "invalid", "hide_failed", message, tail_limit=limit)
    if not visible:
        message = "every block at this path is already hidden" if entries else "no such path"
        return HideResult(path, "not_found", "hide_failed", message, tail_limit=limit)
    floor = renderer.points().hide_floor
    oldest, newest = visible[0][0], visible[-1][0]
    tail = renderer.tail_tokens_after(newest)
    if oldest <= floor:
        return HideResult(
            path,
            "too_old",
            "hide_before_cache",
            "hide only supports paths after the intermediate cache point.",
            tail_tokens=tail,
            tail_limit=limit,
            before_cache=True,
        )
    if limit and tail > limit:
        return HideResult(
            path,
            "too_old",
            "hide_too_old",
            f"the path is too far from the tail (tail_tokens={tail}, limit={limit}).",
            tail_tokens=tail,
            tail_limit=limit,
        )
    blocks = [b for _, b in visible]
    before = sum(renderer.block_entry_tokens(e) for e, _ in visible)
    text = replacement_text(path, label(blocks[0]).lower(), before, replacement)
    renderer.timeline.set_hidden(blocks, text)
    renderer.timeline.suppress_prev_turn_cache = True
    hidden_tokens = before - renderer.counter.count(text)
    return HideResult(
        path,
        "ok",
        blocks_hidden=len(blocks),
        tokens_hidden=max(0, hidden_tokens),
        tail_tokens=tail,
        tail_limit=limit,
        replacement=text,
    )
