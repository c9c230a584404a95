"""Cache points over the stable stream: CP1 previous turn, CP2 pre-tail, CP3 tail.

Rounds: a block belongs to the round of its call id (``call_id``, else
``meta.tool_call_id``, else the call segment of a ``tc:`` path); a completion,
suggested followups or exit without a call id belong to the turn's final round
``__final__:<turn>``; other blocks are in no round. A round ends at its last
block.

- CP3 (tail) = the end of the latest round (the last block when there are no
  rounds at all).
- CP2 (pre-tail) = the end of the round ``offset`` rounds before the tail,
  present once ``min_rounds`` rounds exist and different from CP3 (without
  rounds: ``offset`` blocks before the last, once ``min_rounds`` blocks exist).
- CP1 (previous turn) = the block right before the current turn's header.
- Each point moves forward to the end of a run of consecutive blocks sharing one
  path, so a mark never splits what a react.read or a hide treats as one thing.
- After a hide in this turn, CP1 moves up to CP2 when it is before it.
- Restore point: when content changed since the last render (a hide, tool-response
  retention, TTL pruning, an un-hide), CP1 instead marks the newest entry before the
  change that a recent render marked (``restore_point``). Its prefix was written then,
  so the request reads everything up to the change and writes only from there; the
  other marks' 20-block lookback often falls short of it (bench/cache.py).
- At most three marks, all in the stable stream; the tail (SOURCES POOL,
  ANNOUNCE) is never marked. The system prompt is marked by the model client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from actline.timeline.blocks import FINAL_ROUND_TYPES, Block


def call_of(block: Block) -> str | None:
    """The id of the tool call a block belongs to (its turn's own), or None."""
    if block.call_id:
        return block.call_id
    call = block.meta.get("tool_call_id")
    if isinstance(call, str) and call:
        return call
    if block.path.startswith("tc:"):
        parts = block.path.split(".")
        if len(parts) >= 3:
            return parts[1]
    return None


def round_key(block: Block) -> str | None:
    """The round a block belongs to, or None. Call ids are a turn's own (``c1-1`` comes
    again in the next turn), so the key is qualified by the turn."""
    call = call_of(block)
    if call is not None:
        return f"{block.turn_id}:{call}"
    if block.type in FINAL_ROUND_TYPES:
        return f"__final__:{block.turn_id}"
    return None


@dataclass(frozen=True, slots=True)
class CachePoints:
    """Positions in the stable stream (None when absent) and the marks they give."""

    cp1: int | None = None
    cp2: int | None = None
    cp3: int | None = None

    @property
    def marks(self) -> tuple[int, ...]:
        return tuple(sorted({p for p in (self.cp1, self.cp2, self.cp3) if p is not None}))

    @property
    def hide_floor(self) -> int:
        """Positions at or before this are in the cached prefix: hide may not touch them."""
        if self.cp2 is not None:
            return self.cp2
        if self.cp1 is not None:
            return self.cp1
        return -1


def group_end(paths: Sequence[str], index: int, limit: int) -> int:
    """Move ``index`` forward to the last of consecutive entries sharing its path."""
    path = paths[index]
    if not path:
        return index
    while index + 1 < limit and paths[index + 1] == path:
        index += 1
    return index


def compute_points(
    *,
    count: int,
    paths: Sequence[str],
    round_ends: Sequence[int],
    header: int | None,
    offset: int,
    min_rounds: int,
    prefer_pre_tail: bool,
) -> CachePoints:
    """Cache points for a stable stream of ``count`` entries.

    ``round_ends`` are the last positions of every round, ascending; ``header`` is the
    position of the current turn's header (None when it is not in the stream).
    """
    if count == 0:
        return CachePoints()
    offset = max(1, offset)
    min_rounds = max(1, min_rounds)
    if round_ends:
        tail: int | None = round_ends[-1]
        pre: int | None = None
        if len(round_ends) >= min_rounds:
            pre = round_ends[max(0, len(round_ends) - 1 - offset)]
    else:
        tail = count - 1
        pre = max(0, count - 1 - offset) if count >= min_rounds else None
    if pre is not None and pre == tail:
        pre = None
    prev = header - 1 if header is not None and header > 0 else None
    cp1 = None if prev is None else group_end(paths, prev, count)
    cp2 = None if pre is None else group_end(paths, pre, count)
    cp3 = None if tail is None else group_end(paths, tail, count)
    if prefer_pre_tail and cp1 is not None and cp2 is not None and cp1 < cp2:
        cp1 = cp2
    return CachePoints(cp1, cp2, cp3)


def restore_point(points: CachePoints, marked: Sequence[int], changed: int) -> CachePoints:
    """``points`` with CP1 on the newest of the ``marked`` entries before ``changed``.

    ``marked`` are the entries earlier renders marked, still cached; ``changed`` is the
    first entry whose content changed since the last render. Unchanged when none is
    before it or when it is already CP2 or CP3.
    """
    before = [e for e in marked if e < changed]
    if not before:
        return points
    best = max(before)
    if best in (points.cp2, points.cp3):
        return points
    return CachePoints(best, points.cp2, points.cp3)
