"""The render pipeline: timeline -> the ordered content parts a model sees, with cache marks.

Order: TTL pruning -> tool-response retention (``actline.timeline.editing.retention``:
a batch of old results by policy, at once when the cache is cold) -> compaction
when over the ceiling (retaining what waits first, which may be enough) -> slice
after the latest summary -> hidden replacements -> cache marks -> SOURCES POOL
and ANNOUNCE appended as the uncached tail.

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
from .policy import ContextPolicy, Moment

T = TypeVar("T")

DEFAULT_CACHE_SECONDS = 300
"""The provider cache lifetime assumed for restore points when TTL pruning is off."""
MAX_REMEMBERED_MARKS = 64
COLD_TTL = frozenset({"no_effect", "pruned", "pruned_light"})
"""TTL pass results that mean the provider cache expired."""
BUDGET = "context budget"


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


@dataclass(slots=True)
class _Round:
    """The round being rendered: its TTL pass, its moment, what its passes did."""

    ttl: ttl.TtlOutcome
    moment: Moment
    retained: retention.RetentionOutcome = retention.DISABLED
    compaction_decided: bool = False


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
        self._retention = retention.RetentionState(timeline)
        self._rendered_at: float | None = None
        """The time of the previous ``render``: results stamped since are new to the model."""
        self._changed: int | None = None
        """The lowest entry rebuilt because content changed (not appended) since the last render."""
        self._marked: dict[str, tuple[Block, float]] = {}
        """Blocks that carried a mark in recent renders, with the time of the last one."""
        self.policy = ContextPolicy()
        """Where and when view edits go (``actline.timeline.rendering.policy``)."""
        self._round: _Round | None = None
        """The round in progress between ``plan_compaction`` and ``render``."""

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

    def _cost(self, block: Block) -> int:
        """What ``block`` costs in the stream as last synced (0 when not shown)."""
        entry = self.entry_of(block)
        return 0 if entry is None else self.block_entry_tokens(entry)

    def block_entry_tokens(self, entry: int) -> int:
        """Tokens of one entry of the visible stream."""
        return self._cum[entry] - (self._cum[entry - 1] if entry else 0)

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
                self.policy.rounds_in_view(self.stable_tokens, self._ceiling()),
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
        current = self._begin(now, boundary)
        compacted = None
        chosen = self._compaction_plan(system_tokens, force_compaction, current)
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
                self._after_compaction(current)
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
                announce or AnnounceContext(), now=now, plan=tl.plans.current, notices=notices
            )
            tail.append({"type": "text", "text": text})
            labels.append("announce")
            tail_tokens += self.counter.count(text)
        n = len(self._bi)
        self._rendered_at = now
        tl.mark_rendered()
        last = max(points.marks, default=-1)
        self.policy.end(self.stable_tokens, points, self._cum[last] if last >= 0 else 0)
        self._round = None
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
        current = self._begin(now, boundary)
        return self._compaction_plan(system_tokens, force, current)

    def finish_compaction(
        self, chosen: compaction.CompactionPlan, texts: Sequence[str], *, now: float
    ) -> compaction.CompactionOutcome | None:
        """Apply a plan from ``plan_compaction`` with its summary texts (see there)."""
        outcome = compaction.finish(self.timeline, chosen, texts, now=now, counter=self.counter)
        self.sync()
        if outcome is not None and self._round is not None:
            self._after_compaction(self._round)
        return None if outcome is None else replace(outcome, after_tokens=self.stable_tokens)

    # -- the context policy ---------------------------------------------------------------------

    def _begin(self, now: float, boundary: bool | None) -> _Round:
        """The round's first pass (``plan_compaction`` or ``render``, whichever comes first):
        TTL pruning, the round's moment, and the retention the policy allows now."""
        if self._round is not None:
            return self._round
        tl = self.timeline
        if self._rendered_at is None:  # a new renderer (e.g. after a restart): the stored time
            self._rendered_at = tl.cache.last_touch_at
        nothing_cached = tl.cache.last_touch_at is None
        self.sync()
        new_turn = self.policy.begin(tl.current_turn_id, self.stable_tokens)
        before = self.stable_tokens
        pruned = ttl.apply(tl, self.config, now=now, counter=self.counter)
        self.sync()
        moment: Moment = "round"
        if nothing_cached or pruned.status in COLD_TTL:
            moment = "cold"
        elif new_turn if boundary is None else boundary:
            moment = "boundary"
        if pruned.hidden_paths:
            edit = Edit(
                "ttl",
                before - self.stable_tokens,
                0,
                self.policy.rounds_in_view(self.stable_tokens, self._ceiling()),
                cold=True,
                paths=pruned.hidden_paths,
            )
            self.policy.record(self.policy.judge(edit, "cold", forced="the cache expired"))
        current = self._round = _Round(pruned, moment)
        current.retained = self._retain_pass(current)
        return current

    def _retain_pass(self, current: _Round) -> retention.RetentionOutcome:
        """Tool-response retention this round: under the ``cost`` policy, the batch of waiting
        results the cost model finds most worth it where an edit may go now."""
        cfg = self.config
        if not cfg.retention:
            return retention.DISABLED
        if cfg.context_policy == "append":
            outcome = retention.apply(
                self.timeline,
                cfg,
                counter=self.counter,
                state=self._retention,
                fresh_since=self._rendered_at,
                force=current.ttl.status in COLD_TTL,
            )
            self.sync()
            return outcome
        waiting = self._waiting()
        if not waiting:
            return retention.RetentionOutcome("none")
        chosen = self._best_batch(waiting, current.moment)
        if not chosen:
            return retention.RetentionOutcome("waiting", pending=len(waiting))
        outcome = retention.retain(self.timeline, chosen, self._retention)
        self.sync()
        return outcome

    def _waiting(self) -> list[retention.Pending]:
        return retention.collect(
            self.timeline,
            self.config,
            counter=self.counter,
            state=self._retention,
            fresh_since=self._rendered_at,
            turn_id=self.timeline.current_turn_id,
        )

    def _best_batch(
        self, waiting: Sequence[retention.Pending], moment: Moment
    ) -> list[retention.Pending]:
        """The waiting results to retain now: the batch (every result from some position on,
        one rewrite) the cost model values most where an edit may go; none when no batch
        pays there. A batch that waits or does not pay is reported once."""
        located = sorted(
            ((e, p) for p in waiting if (e := self.entry_of(p.block)) is not None),
            key=lambda pair: pair[0],
        )
        rounds = self.policy.rounds_in_view(self.stable_tokens, self._ceiling())
        best: tuple[float, int, Verdict] | None = None
        widest: Verdict | None = None
        saved = 0
        for k in range(len(located) - 1, -1, -1):
            entry, item = located[k]
            saved += item.saved
            before = self._cum[entry - 1] if entry else 0
            edit = Edit(
                "retention",
                saved,
                max(0, self.policy.cached_tokens - before - saved),
                rounds,
                cold=moment == "cold",
                paths=tuple(p.block.path for _, p in located[k:]),
            )
            widest = self.policy.judge(edit, self.policy.where(moment, entry))
            net = widest.gain - widest.cost
            if widest.take and (best is None or net > best[0]):
                best = (net, k, widest)
        if best is None:
            if widest is not None and len(located) > self.policy.queued:
                self.policy.record(widest)
                self.policy.queued = len(located)
            return []
        self.policy.record(best[2])
        self.policy.queued = best[1]
        return [p for _, p in located[best[1] :]]

    def _retain_all(self, why: str, *, cold: bool = False) -> retention.RetentionOutcome:
        """Retain every waiting result now (the budget needs it, or the prefix is rewritten
        anyway after a compaction)."""
        if not self.config.retention:
            return retention.DISABLED
        waiting = self._waiting()
        if not waiting:
            return retention.RetentionOutcome("none")
        first = min((e for p in waiting if (e := self.entry_of(p.block)) is not None), default=0)
        saved = sum(p.saved for p in waiting)
        before = self._cum[first - 1] if first else 0
        edit = Edit(
            "retention",
            saved,
            0 if cold else max(0, self.policy.cached_tokens - before - saved),
            self.policy.rounds_in_view(self.stable_tokens, self._ceiling()),
            cold=cold,
            paths=tuple(p.block.path for p in waiting),
        )
        verdict = self.policy.judge(edit, "cold" if cold else "budget", forced=why)
        self.policy.record(verdict)
        if not verdict.take:
            return retention.RetentionOutcome("waiting", pending=len(waiting))
        outcome = retention.retain(self.timeline, waiting, self._retention)
        self.policy.queued = 0
        self.sync()
        return outcome

    def _after_compaction(self, current: _Round) -> None:
        """A compaction rewrote the prefix from its summary: what waits goes with it."""
        if self.config.context_policy == "append":
            current.retained = current.retained.merge(self._retain(force=True))
        else:
            more = self._retain_all("the prefix is rewritten by the compaction", cold=True)
            current.retained = current.retained.merge(more)

    def _compaction_plan(
        self, system_tokens: int, force: bool, current: _Round
    ) -> compaction.CompactionPlan | None:
        """The compaction due this round, or None.

        Always at the ceiling (or ``force``): first what retention waits with, then a
        compaction if that is not enough. Under the ``cost`` policy, also at a boundary
        or a cold cache: when the next turn is expected to pass the ceiling (it keeps
        what leaves room for that turn), or when the cost model says a compaction pays.
        """
        cfg = self.config
        if not cfg.max_tokens:
            return None
        ceiling = self._ceiling()
        if force or system_tokens + self.stable_tokens > ceiling:
            if cfg.context_policy == "append":
                more = self._retain(force=True)
                self.sync()
            else:
                more = self._retain_all(BUDGET)
            current.retained = current.retained.merge(more)
            if not force and system_tokens + self.stable_tokens <= ceiling:
                return None
            current.compaction_decided = True
            limit = None
            if cfg.context_policy == "cost" and not force:
                room = ceiling - system_tokens - self.policy.remaining_growth()
                limit = max(1, int(room) - self._summary_allowance(system_tokens))
            chosen = self._plan(system_tokens, force=force, keep_limit=limit)
            if chosen is not None:
                why = "the model refused the context as too long" if force else BUDGET
                edit = self._compaction_edit(chosen, system_tokens, current.moment)
                self.policy.record(self.policy.judge(edit, "budget", forced=why))
            return chosen
        if cfg.context_policy != "cost" or current.moment == "round":
            return None
        if current.compaction_decided:
            return None
        current.compaction_decided = True
        asked, self.policy.asked = self.policy.asked, ""
        growth = self.policy.expected_growth
        if growth and system_tokens + self.stable_tokens + growth > ceiling:
            more = self._retain_all(f"{BUDGET} within the next turn")
            current.retained = current.retained.merge(more)
            if system_tokens + self.stable_tokens + growth <= ceiling:
                return None
            room = int(ceiling - system_tokens - growth) - self._summary_allowance(system_tokens)
            chosen = self._plan(system_tokens, keep_limit=max(1, min(room, self._last_turns())))
            if chosen is not None:
                edit = self._compaction_edit(chosen, system_tokens, current.moment)
                why = f"{BUDGET} within the next turn"
                self.policy.record(self.policy.judge(edit, current.moment, forced=why))
            return chosen
        if self.stable_tokens < cfg.compaction_floor_tokens:
            return None  # too small to compact for cost (the watchdog asks only above it too)
        chosen = self._plan(system_tokens, keep_limit=self._last_turns())
        if chosen is None:
            if asked:  # nothing older than the turn that just ended to compact
                rounds = self.policy.rounds_in_view(self.stable_tokens, ceiling)
                nothing = self.policy.judge(Edit("compaction", 0, 0, rounds), current.moment)
                self.policy.record(replace(nothing, reason=f"{nothing.reason}; asked: {asked}"))
            return None
        edit = self._compaction_edit(chosen, system_tokens, current.moment)
        verdict = self.policy.judge(edit, current.moment)
        if asked:
            verdict = replace(verdict, reason=f"{verdict.reason}; asked: {asked}")
        self.policy.record(verdict)
        return chosen if verdict.take else None

    def _plan(
        self, system_tokens: int, *, force: bool = False, keep_limit: int | None = None
    ) -> compaction.CompactionPlan | None:
        return compaction.plan(
            self.timeline,
            self.config,
            system_tokens=system_tokens,
            counter=self.counter,
            force=force,
            cost=self._cost,
            keep_limit=keep_limit,
        )

    def _compaction_edit(
        self, chosen: compaction.CompactionPlan, system_tokens: int, moment: Moment
    ) -> Edit:
        """What ``chosen`` would do, for the cost model: the summary replaces the range, and
        the stream is written again from the summary on."""
        summary = self._summary_allowance(system_tokens)
        call = self.policy.summaries_cost_a_call
        return Edit(
            "compaction",
            chosen.saved_tokens - summary,
            chosen.before_tokens - chosen.saved_tokens + summary,
            self.policy.rounds_in_view(self.stable_tokens, self._ceiling()),
            work_input=chosen.saved_tokens if call else 0,
            work_output=summary if call else 0,
            cold=moment == "cold",
            paths=(chosen.cut.path,),
        )

    def _last_turns(self, turns: int = 2) -> int:
        """Stream tokens from the header of the ``turns``-th newest turn to the end: what a
        compaction at a boundary keeps at most (the turn that just ended and the new one;
        keeping more raw costs its rewrite now and its reads until the next compaction)."""
        tl = self.timeline
        ids = tl.turn_ids()
        if len(ids) < turns:
            return self.stable_tokens
        header = tl.header(ids[-turns])
        entry = None if header is None else self.entry_of(header)
        if entry is None:
            return self.stable_tokens
        return self.stable_tokens - (self._cum[entry - 1] if entry else 0)

    def _summary_allowance(self, system_tokens: int) -> int:
        """The tokens a compaction summary may take (``CompactionPlan.requests``)."""
        cfg = self.config
        budget = max(1, cfg.max_tokens - system_tokens)
        return max(32, min(cfg.summary_max_tokens, budget // 10))

    def _ceiling(self) -> int:
        cfg = self.config
        return int(cfg.compaction_ratio * cfg.max_tokens)

    def _retain(self, *, force: bool) -> retention.RetentionOutcome:
        return retention.apply(
            self.timeline,
            self.config,
            counter=self.counter,
            state=self._retention,
            fresh_since=self._rendered_at,
            force=force,
        )

    def _pool_text(self) -> tuple[str, int]:
        pool = self.timeline.sources
        revision, text, tokens = self._pool_cache
        if revision != pool.revision:
            text = pool_text(pool, self.config.sources_text_chars)
            tokens = self.counter.count(text)
            self._pool_cache = (pool.revision, text, tokens)
        return text, tokens
