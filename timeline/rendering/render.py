"""The render pipeline: timeline -> the ordered content parts a model sees, with cache marks.

Order: the round's view edits (``actline.timeline.rendering.editor``: TTL pruning,
tool-response retention and compaction, each placed by the context policy of
``actline.timeline.rendering.policy`` and decided by the cost model of
``actline.timeline.editing.cost``) -> slice after the latest summary -> hidden
replacements -> cache marks -> SOURCES POOL and ANNOUNCE appended as the uncached tail.
The policy's decisions come back with the render (``RenderEvents.edits``), for the trace.

Incremental: the ``Renderer`` keeps the visible stream it built last time (one
entry per shown block: part, path, tokens, round) and, through a ``DirtyMark``
on the timeline, learns the lowest position that changed. A round that only
appended blocks renders only those blocks; the part dicts of the stable prefix
are the same objects from round to round (the model client can serialise them
once). A hide, an unhide or a prune rebuilds from the first changed block; a
compaction rebuilds from the new summary.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, overload

from actline.timeline.blocks import STAGE_GATE, SUMMARY, TURN_HEADER, Block
from actline.timeline.cache import CachePoints, compute_points, restore_point, round_key
from actline.timeline.config import TimelineConfig
from actline.timeline.editing import compaction, retention, ttl
from actline.timeline.editing.cost import Edit, Verdict
from actline.timeline.editing.hide import HideResult, hide_path
from actline.timeline.editing.summary import OfflineSummarizer, Summarizer
from actline.timeline.sources import pool_text
from actline.timeline.timeline import Timeline
from actline.timeline.tokens import DEFAULT_COUNTER, IMAGE_TOKENS, TokenCounter
from actline.timeline.view import PASS_THROUGH, block_text, to_part

from .announce import AnnounceContext, announce_text
from .editor import Editor
from .policy import ContextPolicy

T = TypeVar("T")

DEFAULT_CACHE_SECONDS = 300
"""The provider cache lifetime assumed for restore points when TTL pruning is off."""
MAX_REMEMBERED_MARKS = 64


class PrefixView(Sequence[T]):
    """A read-only view of the first ``n`` items of a list that is only appended to.

    The renderer replaces (never shrinks in place) a list when it rebuilds, so a
    view handed out with an earlier result keeps seeing what it saw.
    """

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[T], n: int) -> None:
        self._items = items
        self._n = n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> list[T]: ...
    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return self._items[: self._n][index]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._items[: self._n])  # a slice copy is ~10x faster than a generator

    def copy(self) -> list[T]:
        """The items as a new list (one copy: ``list(view)`` would copy them twice)."""
        return self._items[: self._n]


@dataclass(frozen=True, slots=True)
class RenderEvents:
    """What the pipeline did this round besides rendering."""

    ttl: ttl.TtlOutcome
    compaction: compaction.CompactionOutcome | None = None
    retention: retention.RetentionOutcome = retention.DISABLED
    edits: tuple[Verdict, ...] = ()
    """The context policy's decisions since the last render (``Verdict.event`` for a trace)."""
    moment: str = ""
    """``cold``, ``boundary`` or ``round`` (``actline.timeline.rendering.policy``)."""


@dataclass(frozen=True, slots=True)
class RenderResult:
    """One rendered context: stable parts (with marks) then the uncached tail parts."""

    stable: Sequence[dict[str, Any]]
    tail: tuple[dict[str, Any], ...]
    points: CachePoints
    paths: Sequence[str]
    stable_tokens: int
    tail_tokens: int
    events: RenderEvents
    labels: tuple[str, ...] = field(default=())
    """What each tail part is (``sources``, ``announce``)."""

    @property
    def marks(self) -> tuple[int, ...]:
        """Indices of the parts that carry a cache breakpoint (at most 3, all stable)."""
        return self.points.marks

    @property
    def tokens(self) -> int:
        return self.stable_tokens + self.tail_tokens

    def parts(self) -> list[dict[str, Any]]:
        """Every part in order (a new list; the part dicts are shared, do not mutate them).
        Built with one copy of the stable parts: it is O(blocks) every round."""
        stable = self.stable
        out = stable.copy() if isinstance(stable, PrefixView) else list(stable)
        out.extend(self.tail)
        return out

    def text(self) -> str:
        """A human-readable view with the cache marks shown (for ``actline timeline``)."""
        out: list[str] = []
        names = {self.points.cp1: "CP1", self.points.cp2: "CP2", self.points.cp3: "CP3"}
        for i, part in enumerate(self.stable):
            out.append(part.get("text") or part.get("caption", ""))
            if i in self.marks:
                tags = "+".join(n for p, n in names.items() if p == i and n)
                out.append(f"◆◆◆ cache mark {tags} ◆◆◆")
        for label, part in zip(self.labels, self.tail, strict=True):
            out.append(f"--- uncached tail: {label} ---")
            out.append(part["text"])
        return "\n".join(out)


NOT_CONTENT = frozenset({TURN_HEADER, STAGE_GATE})
"""Visible blocks left out of the rot share (they carry no content)."""


def rot_weight(block: Block) -> tuple[int, int]:
    """A visible block's part in context rot: (1 when it is content, its weight):
    a summary weighs 2 (as the original's ``estimateContextRotScore``), a block shown by a
    replacement (hidden, TTL-pruned, archived) 1; a folded ``react.write`` anchor is shown by
    its digest by design and is not rot."""
    if block.type in NOT_CONTENT:
        return 0, 0
    if block.type == SUMMARY:
        return 1, 2
    return 1, int(block.hidden and not block.meta.get("anchor"))


class Renderer:
    """Renders one timeline round after round, redoing only what changed."""

    def __init__(
        self,
        timeline: Timeline,
        config: TimelineConfig | None = None,
        *,
        counter: TokenCounter = DEFAULT_COUNTER,
        summarizer: Summarizer | None = None,
    ) -> None:
        self.timeline = timeline
        self.config = config or TimelineConfig()
        self.counter = counter
        self.summarizer: Summarizer = summarizer or OfflineSummarizer(counter)
        self._mark = timeline.watch()
        self._start = -1
        self._parts: list[dict[str, Any]] = []
        self._blocks: list[Block] = []
        self._bi: list[int] = []
        self._paths: list[str] = []
        self._cum: list[int] = []
        self._rot: list[tuple[int, int]] = []
        """Cumulative (content blocks, rot weight) of the stream (``rot_weight``)."""
        self._rkeys: list[str | None] = []
        self._frame: list[tuple[str | None, int]] = []
        self._rounds: dict[str, list[int]] = {}
        self._ends: list[int] = []
        self._pool_cache: tuple[int, str, int] = (-1, "", 0)
        self._changed: int | None = None
        """The lowest entry rebuilt because content changed (not appended) since the last render."""
        self._marked: dict[str, tuple[Block, float]] = {}
        """Blocks that carried a mark in recent renders, with the time of the last one."""
        self.editor = Editor(self)
        """The passes that edit the view each round (``actline.timeline.rendering.editor``)."""

    # -- the visible stream ---------------------------------------------------------------------

    @property
    def rot_counts(self) -> tuple[int, int]:
        """The visible stream's content blocks and their rot weight (``rot_weight``), as of
        the last sync: the context watchdog's rot share, kept as blocks are added."""
        return self._rot[-1] if self._rot else (0, 0)

    @property
    def stable_tokens(self) -> int:
        return self._cum[-1] if self._cum else 0

    def sync(self) -> int:
        """Bring the visible stream up to date; returns how many entries were (re)built."""
        tl = self.timeline
        dirty = tl.take_dirty(self._mark)
        start = tl.visible_start
        if start != self._start:
            self._start, dirty = start, 0
            self._changed = 0
        keep = bisect.bisect_left(self._bi, dirty)
        if keep < len(self._bi):
            self._truncate(keep)
            self._changed = keep if self._changed is None else min(self._changed, keep)
        resume = max(start, dirty) if keep else start
        blocks = tl.blocks
        built = 0
        for i in range(resume, len(blocks)):
            block = blocks[i]
            if block.hidden and not block.replacement:
                continue
            self._add(i, block)
            built += 1
        return built

    def _add(self, index: int, block: Block) -> None:
        e = len(self._bi)
        frame: tuple[str | None, int]
        open_key, number = self._frame[-1] if e else (None, 0)
        key = round_key(block)
        opens: int | None = None
        closes = False
        if block.type == TURN_HEADER:
            key, closes, frame = None, open_key is not None, (None, 0)
        elif key is not None:
            if key != open_key:
                number += 1
                opens, closes = number, open_key is not None
            frame = (key, number)
        elif block.type in PASS_THROUGH:
            frame = (open_key, number)
        else:
            closes, frame = open_key is not None, (None, number)
        text = block_text(block, opens=opens, closes=closes)
        part = to_part(block, text)
        tokens = self.counter.count(text)
        if part["type"] != "text":
            tokens += IMAGE_TOKENS
        self._parts.append(part)
        self._blocks.append(block)
        self._bi.append(index)
        self._paths.append(block.path)
        self._cum.append((self._cum[-1] if e else 0) + tokens)
        counted, rotten = rot_weight(block)
        before = self._rot[-1] if e else (0, 0)
        self._rot.append((before[0] + counted, before[1] + rotten))
        self._rkeys.append(key)
        self._frame.append(frame)
        if key is not None:
            stack = self._rounds.setdefault(key, [])
            if stack:
                self._drop_end(stack[-1])
            stack.append(e)
            self._ends.append(e)

    def _drop_end(self, position: int) -> None:
        ends = self._ends
        if ends and ends[-1] == position:
            ends.pop()
        else:
            del ends[bisect.bisect_left(ends, position)]

    def _truncate(self, keep: int) -> None:
        for e in range(len(self._bi) - 1, keep - 1, -1):
            key = self._rkeys[e]
            if key is None:
                continue
            stack = self._rounds[key]
            stack.pop()
            self._drop_end(e)
            if stack:
                bisect.insort(self._ends, stack[-1])
            else:
                del self._rounds[key]
        # New lists, so that results handed out earlier keep their parts and paths.
        self._parts = self._parts[:keep]
        self._paths = self._paths[:keep]
        for lst in (self._blocks, self._bi, self._cum, self._rot, self._rkeys, self._frame):
            del lst[keep:]

    def entry_of(self, block: Block) -> int | None:
        """The position of ``block`` in the visible stream, or None when it is not shown."""
        try:
            index = self.timeline.index_of(block)
        except LookupError:
            return None
        e = bisect.bisect_left(self._bi, index)
        return e if e < len(self._bi) and self._bi[e] == index else None

    def stable_parts(self) -> PrefixView[dict[str, Any]]:
        """The parts of the visible stream as last synced (no pruning, no compaction)."""
        return PrefixView(self._parts, len(self._parts))

    def visible_blocks(self) -> list[Block]:
        """The blocks shown (after the slice and hidden replacements), in order."""
        self.sync()
        return list(self._blocks)

    def points(self, now: float | None = None) -> CachePoints:
        """The cache points of the stream as it is now.

        With ``now`` (a render) and content changed since the last render, CP1 is the
        restore point: the newest entry before the change that a render within the cache
        lifetime marked (``cache.restore_point``).
        """
        tl = self.timeline
        header = None
        if tl.current_turn_id is not None:
            block = tl.header(tl.current_turn_id)
            header = None if block is None else self.entry_of(block)
        points = compute_points(
            count=len(self._bi),
            paths=self._paths,
            round_ends=self._ends,
            header=header,
            offset=self.config.cache_point_offset_rounds,
            min_rounds=self.config.cache_point_min_rounds,
            prefer_pre_tail=tl.suppress_prev_turn_cache,
        )
        if now is None or self._changed is None:
            return points
        lifetime = self.config.cache_ttl_seconds or DEFAULT_CACHE_SECONDS
        marked = [
            e
            for block, at in self._marked.values()
            if now - at < lifetime and (e := self.entry_of(block)) is not None
        ]
        return restore_point(points, marked, self._changed)

    def _remember_marks(self, points: CachePoints, now: float) -> None:
        """Note the blocks marked by this render (their prefix is cached from now on)."""
        lifetime = self.config.cache_ttl_seconds or DEFAULT_CACHE_SECONDS
        for entry in points.marks:
            block = self._blocks[entry]
            self._marked.pop(block.id, None)
            self._marked[block.id] = (block, now)
        marked = self._marked  # oldest mark first: the stale ones lead
        while marked:
            key = next(iter(marked))
            if now - marked[key][1] < lifetime:
                break
            del marked[key]
        while len(self._marked) > MAX_REMEMBERED_MARKS:
            del self._marked[next(iter(self._marked))]
        self._changed = None

    @property
    def policy(self) -> ContextPolicy:
        """Where and when view edits go (``actline.timeline.rendering.policy``)."""
        return self.editor.policy

    def block_cost(self, block: Block) -> int:
        """What ``block`` costs in the stream as last synced (0 when not shown)."""
        entry = self.entry_of(block)
        return 0 if entry is None else self.block_entry_tokens(entry)

    def block_entry_tokens(self, entry: int) -> int:
        """Tokens of one entry of the visible stream."""
        return self._cum[entry] - (self._cum[entry - 1] if entry else 0)

    def tokens_before(self, entry: int) -> int:
        """Tokens of the stable stream before ``entry``."""
        return self._cum[entry - 1] if entry > 0 else 0

    def tail_tokens_after(self, entry: int) -> int:
        """Tokens of the stable stream after ``entry`` (its distance from the tail)."""
        return self.stable_tokens - self._cum[entry]

    # -- operations -------------------------------------------------------------------------

    def hide(self, path: str, replacement: str = "") -> HideResult:
        """react.hide: hide every visible block at ``path`` when the cache rules allow it
        (the editable tail only); the decision goes to the trace with what it cost."""
        self.sync()
        result = hide_path(self, path, replacement)
        if result.status == "ok":
            view = self.counter.count(result.replacement)
            edit = Edit(
                "hide",
                result.tokens_hidden,
                result.tail_tokens + view,
                self.policy.rounds_in_view(self.stable_tokens, self.editor.ceiling()),
                paths=(result.path,),
            )
            self.policy.record(self.policy.judge(edit, "tail", forced="asked by the model"))
        return result

    def ask_compaction(self, reason: str) -> None:
        """A compaction is wanted (the context watchdog's ``reason``): the policy weighs it at
        the next moment it can be done cheaply, a turn boundary or a cold cache."""
        self.policy.asked = reason

    def render(
        self,
        *,
        now: float,
        system_tokens: int = 0,
        announce: AnnounceContext | None = None,
        include_sources: bool = True,
        include_announce: bool = True,
        force_compaction: bool = False,
        boundary: bool | None = None,
    ) -> RenderResult:
        """Run the pipeline for one round at time ``now`` (epoch seconds).

        ``boundary``: this is a turn's first round (None: when the current turn is not the
        turn of the last render). ``force_compaction``: compact now (the model refused the
        context as too long).
        """
        tl = self.timeline
        editor = self.editor
        current = editor.begin(now, boundary)
        compacted = None
        chosen = editor.compaction_plan(system_tokens, force_compaction, current)
        if chosen is not None:
            compacted = compaction.summarize(
                tl,
                self.config,
                self.summarizer,
                chosen,
                system_tokens=system_tokens,
                now=now,
                counter=self.counter,
            )
            self.sync()
            if compacted is not None:
                editor.after_compaction(current)
                compacted = replace(compacted, after_tokens=self.stable_tokens)
        points = self.points(now)
        self._remember_marks(points, now)
        tail: list[dict[str, Any]] = []
        labels: list[str] = []
        tail_tokens = 0
        if include_sources:
            text, tokens = self._pool_text()
            tail.append({"type": "text", "text": text})
            labels.append("sources")
            tail_tokens += tokens
        if include_announce:
            notices = [*tl.notices.current, *tl.notices.once]
            tl.notices.once.clear()
            text = announce_text(
                announce or AnnounceContext(), now=now, plan=tl.plans.active, notices=notices
            )
            tail.append({"type": "text", "text": text})
            labels.append("announce")
            tail_tokens += self.counter.count(text)
        n = len(self._bi)
        tl.mark_rendered()
        last = max(points.marks, default=-1)
        editor.end(now, self.stable_tokens, points, self.tokens_before(last + 1))
        events = RenderEvents(
            ttl=current.ttl,
            compaction=compacted,
            retention=current.retained,
            edits=self.policy.take_decisions(),
            moment=current.moment,
        )
        return RenderResult(
            stable=PrefixView(self._parts, n),
            tail=tuple(tail),
            points=points,
            paths=PrefixView(self._paths, n),
            stable_tokens=self.stable_tokens,
            tail_tokens=tail_tokens,
            events=events,
            labels=tuple(labels),
        )

    def plan_compaction(
        self,
        *,
        now: float,
        system_tokens: int = 0,
        force: bool = False,
        boundary: bool | None = None,
    ) -> compaction.CompactionPlan | None:
        """The first half of a compaction with an async summariser (a model).

        Runs the round's first pass as ``render`` would (TTL pruning, retention), then
        returns the plan when a compaction is due (``render``'s rules), None when none is
        due or possible. Await the summaries of ``plan.requests(...)``, then call
        ``finish_compaction``; the ``render`` of the same round does not compact again
        unless the context is still over its ceiling.
        """
        current = self.editor.begin(now, boundary)
        return self.editor.compaction_plan(system_tokens, force, current)

    def finish_compaction(
        self, chosen: compaction.CompactionPlan, texts: Sequence[str], *, now: float
    ) -> compaction.CompactionOutcome | None:
        """Apply a plan from ``plan_compaction`` with its summary texts (see there)."""
        outcome = compaction.finish(self.timeline, chosen, texts, now=now, counter=self.counter)
        self.sync()
        if outcome is not None and self.editor.round is not None:
            self.editor.after_compaction(self.editor.round)
        return None if outcome is None else replace(outcome, after_tokens=self.stable_tokens)

    def _pool_text(self) -> tuple[str, int]:
        pool = self.timeline.sources
        revision, text, tokens = self._pool_cache
        if revision != pool.revision:
            text = pool_text(pool, self.config.sources_text_chars)
            tokens = self.counter.count(text)
            self._pool_cache = (pool.revision, text, tokens)
        return text, tokens
