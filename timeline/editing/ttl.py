"""Session TTL pruning: once the provider cache has gone cold, hide old payloads by path.

Runs first in every render. While the cache
is warm (less than ``ttl - buffer`` since the last render) nothing changes and
the check is O(1). Once it has expired, rewriting the prefix costs nothing
extra, so:

- old turns (outside the last ``keep_recent_turns``) are hidden path by path,
  each path's first block showing a short view that says how to restore it;
  notes, plans, followups, headers and summaries are never pruned, and neither
  is a block smaller than its view would be (the original pruned those too);
- recent turns that are not among the last ``keep_recent_intact_turns`` are
  pruned lightly: skill reads, oversized tool results, images and PDFs beyond
  the newest ``keep_recent_images``, other large binaries;
- when anything changed, a ``system.message`` (kind ``cache_ttl_pruned``) is
  appended once per turn and a one-time ANNOUNCE notice is queued.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from actline.timeline.blocks import (
    NOTE,
    NOTE_PRESERVED,
    PLAN,
    PLAN_ACK,
    REACT_NOTES,
    SUMMARY,
    SYSTEM_MESSAGE,
    TOOL_CALL,
    TOOL_RESULT,
    TURN_HEADER,
    USER_FOLLOWUP,
    USER_FOLLOWUP_PRESERVED,
    Block,
)
from actline.timeline.config import TimelineConfig
from actline.timeline.paths import ar_path
from actline.timeline.timeline import Timeline
from actline.timeline.tokens import TokenCounter, block_tokens
from actline.timeline.view import preview

TtlStatus = Literal["armed", "fresh", "empty", "disabled", "no_effect", "pruned", "pruned_light"]

NEVER_PRUNED = frozenset(
    {
        TURN_HEADER,
        SUMMARY,
        NOTE,
        NOTE_PRESERVED,
        REACT_NOTES,
        PLAN,
        PLAN_ACK,
        USER_FOLLOWUP,
        USER_FOLLOWUP_PRESERVED,
        "user.steer",
        "user.steer.preserved",
        "react.round.start",
        "react.plan.history",
    }
)


@dataclass(frozen=True, slots=True)
class TtlOutcome:
    status: TtlStatus
    hidden_paths: tuple[str, ...] = ()
    skip_old_turns: bool = False


def is_expired(tl: Timeline, cfg: TimelineConfig, now: float) -> bool:
    """True when the session cache is cold (the next render would prune)."""
    ttl = _ttl(tl, cfg)
    last = tl.cache.last_touch_at
    return bool(ttl) and last is not None and now - last >= ttl - cfg.cache_ttl_prune_buffer_seconds


def _ttl(tl: Timeline, cfg: TimelineConfig) -> int:
    stored = tl.cache.last_ttl_seconds
    return stored if tl.cache.restored and stored is not None else cfg.cache_ttl_seconds


def apply(tl: Timeline, cfg: TimelineConfig, *, now: float, counter: TokenCounter) -> TtlOutcome:
    """Check the session TTL and prune when it has expired (see the module docstring)."""
    state = tl.cache
    ttl = _ttl(tl, cfg)
    expired = is_expired(tl, cfg, now)
    armed = state.last_touch_at is None
    state.restored = False
    state.last_ttl_seconds = cfg.cache_ttl_seconds
    state.last_touch_at = now
    if not ttl:
        return TtlOutcome("disabled")
    if not tl.blocks:
        return TtlOutcome("empty")
    if armed:
        return TtlOutcome("armed")
    if not expired:
        return TtlOutcome("fresh")
    turns = tl.turn_ids()
    recent = set(turns[-cfg.keep_recent_turns :]) if cfg.keep_recent_turns else set()
    intact = set(turns[-cfg.keep_recent_intact_turns :]) if cfg.keep_recent_intact_turns else set()
    skip_old = cfg.keep_recent_turns >= len(turns)
    window = tl.blocks[tl.visible_start :]
    groups: dict[str, list[Block]] = {}
    for block in window:
        if block.path and not block.hidden and block.type not in NEVER_PRUNED:
            groups.setdefault(block.path, []).append(block)
    hidden: list[str] = []
    if not skip_old:
        for path, blocks in groups.items():
            old = [b for b in blocks if b.turn_id not in recent]
            if old:
                view = _old_view(old[0], cfg)
                if sum(block_tokens(b, counter) for b in old) > counter.count(view):
                    tl.set_hidden(old, view)
                    hidden.append(path)
    light = _light(tl, cfg, groups, intact, counter)
    hidden.extend(p for p in light if p not in hidden)
    if not hidden:
        return TtlOutcome("no_effect", skip_old_turns=skip_old)
    _note(tl, ttl, now)
    status: TtlStatus = "pruned_light" if skip_old or set(hidden) == set(light) else "pruned"
    return TtlOutcome(status, tuple(hidden), skip_old)


def _light(
    tl: Timeline,
    cfg: TimelineConfig,
    groups: dict[str, list[Block]],
    intact: set[str],
    counter: TokenCounter,
) -> list[str]:
    keep = _kept_binaries(reversed(tl.blocks), cfg)
    hidden: list[str] = []
    for path, blocks in groups.items():
        light = [b for b in blocks if not b.hidden and b.turn_id not in intact]
        if not light:
            continue
        first = light[0]
        view = None
        if path.startswith("sk:"):
            view = f"[skill content removed by pruning: {path}]"
        elif first.base64 and first not in keep:
            view = f"[binary removed by pruning: {first.mime}, {len(first.base64):,} base64 chars]"
        elif (
            first.type == TOOL_RESULT
            and block_tokens(first, counter) > cfg.light_prune_result_tokens
        ):
            view = _result_view(first, cfg)
        if view is not None:
            view = _restore(view, path)
            if sum(block_tokens(b, counter) for b in light) > counter.count(view):
                tl.set_hidden(light, view)
                hidden.append(path)
    return hidden


def _kept_binaries(newest_first: Iterable[Block], cfg: TimelineConfig) -> set[Block]:
    """The newest images/PDFs that stay visible, within the count and size budgets.

    The newest one is always kept; small non-media binaries are kept too.
    """
    kept: set[Block] = set()
    media_kept = 0
    budget = cfg.max_image_base64_chars
    for block in newest_first:
        if not block.base64 or block.hidden:
            continue
        if not (block.mime.startswith("image/") or block.mime == "application/pdf"):
            if len(block.base64) <= cfg.max_base64_chars:
                kept.add(block)
            continue
        if media_kept >= cfg.keep_recent_images or (media_kept and len(block.base64) > budget):
            continue
        budget -= len(block.base64)
        media_kept += 1
        kept.add(block)
    return kept


def _restore(view: str, path: str) -> str:
    return f'{view} Pruned after the session cache expired; restore with react.read(["{path}"])'


def _result_view(block: Block, cfg: TimelineConfig) -> str:
    rows = block.meta.get("sources")
    if isinstance(rows, list) and rows:
        keys = ("sid", "title", "url")
        compact = [{k: r[k] for k in keys if k in r} for r in rows[:50] if isinstance(r, dict)]
        more = f" (+{len(rows) - 50} more)" if len(rows) > 50 else ""
        listing = json.dumps(compact, ensure_ascii=False, sort_keys=True)
        return f"[TRUNCATED RESULT] sources: {listing}{more}"
    return f"[TRUNCATED RESULT] {preview(block.content, cfg.replacement_preview_chars)}"


def _old_view(block: Block, cfg: TimelineConfig) -> str:
    path = block.path
    if path.startswith("sk:"):
        view = f"[skill content removed by pruning: {path}]"
    elif block.type == TOOL_CALL:
        view = f"[TOOL CALL] {preview(block.content, cfg.replacement_preview_chars)}"
    elif block.type == TOOL_RESULT:
        view = _result_view(block, cfg)
    elif path.startswith("fi:"):
        size = len(block.base64) * 3 // 4 if block.base64 else len(block.content)
        summary = preview(block.content, cfg.replacement_preview_chars // 2)
        view = f"[TRUNCATED FILE] path={path} mime={block.mime} size={size} summary={summary}"
    else:
        view = f"[TRUNCATED] {preview(block.content, cfg.replacement_preview_chars)}"
    return _restore(view, path)


def _note(tl: Timeline, ttl: int, now: float) -> None:
    turn = tl.current_turn_id or (tl.turn_ids() or ["conversation"])[-1]
    path = ar_path(turn, "system.message.cache_pruned")
    text = (
        f"[SYSTEM MESSAGE] Context was pruned because the session TTL ({ttl}s) was exceeded. "
        "Older blocks now show short views that keep their paths; restore any of them with "
        "react.read(path)."
    )
    if not tl.blocks_at(path):
        tl.append(
            Block.new(
                SYSTEM_MESSAGE,
                turn,
                now,
                path=path,
                text=text,
                author="system",
                meta={"kind": "cache_ttl_pruned", "ttl_seconds": ttl},
            )
        )
    tl.notices.once.append(
        f"context pruned: the session cache expired ({ttl}s); hidden blocks say how to restore them"
    )
