"""The timeline of one conversation: ordered blocks, path index, pool, plans, cache state.

Append-only in content: blocks are added (at the end, or where their start time
puts them inside their turn, or before a compaction cut) and their visibility
can change (hide/unhide); nothing is deleted. Every change records the lowest
position it touched, which is what lets the renderer redo only the changed part
(``take_dirty``).

Late blocks: once a render has sent the timeline to the model (``mark_rendered``),
a block appended afterwards never lands before anything rendered, whatever its
timestamp says: a followup stamped a little in the past would otherwise be
inserted inside the cached prefix and cost a cache write of everything after
it. Such a block is placed right after the last rendered block (``meta["placed"]``
records where, so a restore puts it back); its ``ts`` stays the sender's.

Pure: no I/O, no clocks (times are passed in), no asyncio.
"""

from __future__ import annotations

import bisect
import math
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actline.timeline.facts import FACT_PREFIX, FactBook

from .blocks import PLAN, PLAN_ACK, SUMMARY, TURN_HEADER, Block
from .errors import BlockError, PathError
from .memory import AckUpdate, Plan, PlanBook, ack_text, parse_ack_lines
from .paths import ar_path, check_path
from .snapshot import (
    FULL_VERSION,
    NEXT_SID,
    PLAN_PREFIX,
    SNAPSHOT_VERSION,
    SOURCE_PREFIX,
    check_version,
    plan_rows,
    restore_plans,
    restore_pool,
    source_rows,
)
from .sources import SourcesPool


@dataclass(slots=True)
class CacheState:
    """What TTL pruning needs to know between renders (persisted with the snapshot)."""

    last_touch_at: float | None = None
    last_ttl_seconds: int | None = None
    restored: bool = False
    """True until the first render after a restore (that render uses the stored TTL)."""


class DirtyMark:
    """The lowest position changed since its owner last looked (see ``Timeline.watch``)."""

    __slots__ = ("__weakref__", "position")

    def __init__(self, position: int) -> None:
        self.position = position


@dataclass(slots=True)
class Notices:
    """ANNOUNCE notices: shown on every render of the current turn; ``next`` waits a turn."""

    current: list[str] = field(default_factory=list)
    next: list[str] = field(default_factory=list)
    once: list[str] = field(default_factory=list)
    """Shown by the next render only (e.g. the TTL pruning notice)."""


class Timeline:
    """All blocks of a conversation in restored order, with the state derived from them."""

    def __init__(self, conversation_id: str = "") -> None:
        self.conversation_id = conversation_id
        self.blocks: list[Block] = []
        self._keys: list[tuple[int, float, int, float]] = []
        self._by_id: dict[str, Block] = {}
        self._by_path: dict[str, list[Block]] = {}
        self._turns: dict[str, int] = {}
        self._next_seq = 0
        self._watchers: weakref.WeakSet[DirtyMark] = weakref.WeakSet()
        self._summary: Block | None = None
        self._plan_blocks: dict[str, Block] = {}
        self._headers: dict[str, Block] = {}
        self._version = 0
        self._restyled: dict[str, Block] = {}
        self._boundary: tuple[Block | None, int] = (None, 0)
        self._by_seq: list[Block] = []
        self._seqs: list[int] = []
        self._seqs_sorted = True
        self._rendered: Block | None = None
        """The last block when the model last saw the timeline (``mark_rendered``)."""
        self.sources = SourcesPool()
        self.plans = PlanBook()
        self.facts = FactBook()
        """The conversation's memory facts (``actline.timeline.facts``), persisted as
        ``fact/`` rows."""
        self._rows_of: tuple[SourcesPool, PlanBook] = (self.sources, self.plans)
        """The pool and book whose changes ``take_row_changes`` tracks (a new one is all new)."""
        self.cache = CacheState()
        self.notices = Notices()
        self.current_turn_id: str | None = None
        self.suppress_prev_turn_cache = False
        """Set by a successful hide: CP1 moves up to CP2 for the rest of the turn."""
        self.stored_seq: int | None = None
        """Blocks below this seq are in the store, as this timeline's last commit left it
        (``Store.prepare_round``); None: ask the store."""

    # -- reading ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.blocks)

    def __iter__(self) -> Iterator[Block]:
        return iter(self.blocks)

    def index_of(self, block: Block) -> int:
        """The current position of ``block`` (positions shift when blocks are inserted)."""
        i = bisect.bisect_left(self._keys, block.order)
        if i < len(self.blocks) and self.blocks[i] is block:
            return i
        raise BlockError(f"block {block.id} is not on this timeline", "id")

    def get(self, block_id: str) -> Block | None:
        return self._by_id.get(block_id)

    def blocks_at(self, path: str) -> list[Block]:
        """Every block stored under ``path`` in order: visible, hidden and compacted ones."""
        return list(self._by_path.get(path, ()))

    @property
    def visible_start(self) -> int:
        """Position of the latest summary: the visible stream starts there (0 without one)."""
        return 0 if self._summary is None else self.index_of(self._summary)

    @property
    def latest_summary(self) -> Block | None:
        return self._summary

    def turn_ids(self) -> list[str]:
        """Turn ids in the order the turns started."""
        return list(self._turns)

    def turn_blocks(self, turn_id: str) -> list[Block]:
        return [b for b in self.blocks if b.turn_id == turn_id]

    # -- changes ------------------------------------------------------------------------------

    def watch(self) -> DirtyMark:
        """A mark that records the lowest position changed from now on.

        Appends at the end are not changes: the owner sees them as positions past
        where it stopped. Its owner resets ``position`` to ``len(timeline)`` after
        catching up. Marks are held weakly; keep a reference.
        """
        mark = DirtyMark(len(self.blocks))
        self._watchers.add(mark)
        return mark

    def take_dirty(self, mark: DirtyMark) -> int:
        """The lowest position changed since the last take (``len`` when nothing changed)."""
        dirty, mark.position = mark.position, len(self.blocks)
        return dirty

    @property
    def version(self) -> int:
        """Increments on every change (append, hide, unhide): detects stale plans."""
        return self._version

    def _touch(self, position: int) -> None:
        self._version += 1
        for mark in self._watchers:
            if position < mark.position:
                mark.position = position

    def append(self, block: Block) -> Block:
        """Add a block where its turn and start time put it; returns it (with seq and order)."""
        if block.id in self._by_id:
            raise BlockError(f"duplicate block id {block.id}", "id")
        if block.path:
            try:
                check_path(block.path)
            except PathError as exc:
                raise BlockError(f"not a logical path ({exc.rule}): {exc.detail}", "path") from exc
        if block.seq < 0:
            block.seq = self._next_seq
        self._next_seq = max(self._next_seq, block.seq + 1)
        anchor = self._by_id.get(block.meta.get("insert_before", ""))
        if anchor is not None:
            rank = float(block.meta.get("insert_rank", anchor.order[3] - 1.0))
            block.order = (anchor.order[0], anchor.order[1], anchor.order[2], rank)
        else:
            block.order = self._place(block)
        position = bisect.bisect_right(self._keys, block.order)
        if position == len(self.blocks):
            self._version += 1
            self.blocks.append(block)
            self._keys.append(block.order)
        else:
            self.blocks.insert(position, block)
            self._keys.insert(position, block.order)
            self._touch(position)
        self._by_id[block.id] = block
        if self._seqs and block.seq < self._seqs[-1]:
            self._seqs_sorted = False
        self._by_seq.append(block)
        self._seqs.append(block.seq)
        same = self._by_path.setdefault(block.path, [])
        same.append(block)
        if len(same) > 1 and same[-2].order > block.order:
            same.sort(key=_order)
        if block.type == TURN_HEADER:
            self._headers.setdefault(block.turn_id, block)
        if block.type == SUMMARY and (self._summary is None or block.order > self._summary.order):
            self._summary = block
            self._touch(0)
        if block.type == PLAN and isinstance(block.data, Mapping):
            plan = Plan.from_dict(block.data)
            newest = self._plan_blocks.get(plan.plan_id)
            if newest is None or block.order > newest.order:
                self._plan_blocks[plan.plan_id] = block
                self.plans.load(plan)
        return block

    def _place(self, block: Block) -> tuple[int, float, int, float]:
        """The order key of a block that is not inserted by compaction.

        Its turn and start time, unless that is before the last rendered block: then
        the rendered block's turn and start (the seq, newer than any rendered one, puts
        it after), recorded in ``meta["placed"]`` as ``[turn_id, start]``.
        """
        placed = block.meta.get("placed")
        if isinstance(placed, list | tuple) and len(placed) == 2:  # restored
            turn_id, start = str(placed[0]), float(placed[1])
            return (self._turns.setdefault(turn_id, len(self._turns)), start, block.seq, 0.0)
        ordinal = self._turns.setdefault(block.turn_id, len(self._turns))
        start = -math.inf if block.type == TURN_HEADER else block.start
        order = (ordinal, start, block.seq, 0.0)
        floor = self._rendered
        if floor is None or order > floor.order:
            return order
        block.meta["placed"] = [floor.turn_id, floor.order[1]]
        return (floor.order[0], floor.order[1], block.seq, 0.0)

    def mark_rendered(self) -> None:
        """The model has now seen every block present (the renderer calls this on each
        render): a block appended from now on lands after all of them."""
        if self.blocks:
            self._rendered = self.blocks[-1]

    @property
    def rendered_block(self) -> Block | None:
        """The last block present at the last ``mark_rendered`` (None before any)."""
        return self._rendered

    def extend(self, blocks: Iterable[Block]) -> None:
        for block in blocks:
            self.append(block)

    def contribute(self, raw: Mapping[str, Any], *, turn_id: str, ts: float) -> Block:
        """Append a block from a dict (wire or tool); missing turn id and ts are filled in."""
        values = dict(raw)
        values.setdefault("turn_id", turn_id)
        values.setdefault("ts", ts)
        return self.append(Block.from_dict(values))

    def insert_before(self, anchor: Block, blocks: Sequence[Block]) -> None:
        """Insert ``blocks`` (in order) right before ``anchor``; used by compaction.

        They take ranks strictly between the block now before ``anchor`` and
        ``anchor`` itself; the rank is kept in ``meta`` so a restore puts them back.
        """
        position = self.index_of(anchor)
        high = anchor.order[3]
        low = high - 1.0
        if position > 0:
            before = self.blocks[position - 1].order
            if before[:3] == anchor.order[:3]:
                low = before[3]
        step = (high - low) / (len(blocks) + 1)
        for i, block in enumerate(blocks):
            block.meta["insert_before"] = anchor.id
            block.meta["insert_rank"] = low + step * (i + 1)
            self.append(block)

    def set_hidden(self, blocks: Sequence[Block], replacement: str) -> None:
        """Hide ``blocks``: the first shows ``replacement``, the others disappear."""
        for i, block in enumerate(blocks):
            block.hidden = True
            block.replacement = replacement if i == 0 else ""
            self._restyled[block.id] = block
            self._touch(self.index_of(block))

    def unhide(self, path: str) -> int:
        """Make every hidden block at ``path`` visible again; returns how many changed."""
        changed = 0
        for block in self._by_path.get(path, ()):
            if block.hidden:
                block.hidden = False
                self._restyled[block.id] = block
                self._touch(self.index_of(block))
                changed += 1
        return changed

    def take_restyled(self) -> list[Block]:
        """Blocks whose visibility changed since the last call (storage rewrites them)."""
        changed, self._restyled = list(self._restyled.values()), {}
        return changed

    def requeue_restyled(self, blocks: Iterable[Block]) -> None:
        """Give blocks from ``take_restyled`` back after a write that failed."""
        for block in blocks:
            self._restyled.setdefault(block.id, block)

    # -- turns, notices and plans ------------------------------------------------------------------

    def begin_turn(self, turn_id: str, ts: float, meta: Mapping[str, Any] | None = None) -> Block:
        """Open a turn: append its header (once, with ``meta``: the turn's resolved profile,
        not rendered), move ``next`` notices to ``current``."""
        existing = self._headers.get(turn_id)
        self.current_turn_id = turn_id
        self.suppress_prev_turn_cache = False
        if existing is not None:
            return existing
        self.notices.current, self.notices.next = self.notices.next, []
        path = ar_path(turn_id, "turn.header")
        header = Block.new(
            TURN_HEADER, turn_id, ts, path=path, author="system", meta=dict(meta or {})
        )
        return self.append(header)

    def header(self, turn_id: str) -> Block | None:
        """The turn's header block (None before ``begin_turn``)."""
        return self._headers.get(turn_id)

    def record_plan(self, plan: Plan, *, turn_id: str, ts: float) -> Block:
        """Append a ``react.plan`` snapshot at ``ar:<turn>.react.plan.<plan_id>``."""
        return self.append(
            Block.new(
                PLAN,
                turn_id,
                ts,
                path=ar_path(turn_id, f"react.plan.{plan.plan_id}"),
                mime="application/json",
                data=plan.to_dict(),
            )
        )

    def acknowledge(
        self, notes: str, *, turn_id: str, ts: float, iteration: int
    ) -> tuple[list[Block], list[str]]:
        """Apply plan-ack lines in ``notes`` to the current plan.

        The acknowledgement that completes the plan queues its one-time ``completed``
        notice: the next render says so, and no render announces the plan after that.
        Returns the blocks appended (a new snapshot and a ``react.plan.ack`` at
        ``ar:<turn>.react.plan.ack.<iteration>``) and the reasons of ignored lines.
        """
        updates: list[AckUpdate] = parse_ack_lines(notes)
        if not updates:
            return [], []
        was_active = self.plans.active is not None
        plan, ignored = self.plans.ack(updates)
        if plan is None:
            return [], ignored
        if was_active and plan.complete:
            self.notices.once.append(plan.completed_line())
        snapshot = self.record_plan(plan, turn_id=turn_id, ts=ts)
        ack = self.append(
            Block.new(
                PLAN_ACK,
                turn_id,
                ts,
                path=ar_path(turn_id, f"react.plan.ack.{iteration}"),
                text=ack_text(plan, updates),
            )
        )
        return [snapshot, ack], ignored

    def latest_plan_block(self, plan_id: str) -> Block | None:
        """The newest snapshot of a plan: what ``ar:plan.latest:<plan_id>`` opens."""
        return self._plan_blocks.get(plan_id)

    def active_plan_block(self) -> Block | None:
        """The newest snapshot of the active plan (``PlanBook.active``), if any."""
        plan = self.plans.active
        return None if plan is None else self.latest_plan_block(plan.plan_id)

    # -- persistence ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The small header: the state outside the blocks, minus the pool and plans.

        Its size does not grow with the conversation; the pool and plans are rows
        (``take_row_changes``, see ``actline.timeline.snapshot``). With it, the rows and any
        suffix of the block log that starts at or before the latest summary,
        ``restore`` rebuilds an equal timeline. msgpack/JSON-safe.
        """
        header = self._header(SNAPSHOT_VERSION)
        header[NEXT_SID] = self.sources.next_sid
        return header

    def full_snapshot(self) -> dict[str, Any]:
        """The version 1 header: ``snapshot()`` with the whole pool and plans inline.

        Costs O(pool + plans); for a caller that needs everything in one dict.
        """
        header = self._header(FULL_VERSION)
        header["sources"] = self.sources.to_dict()
        header["plans"] = self.plans.to_dict()
        return header

    def _header(self, version: int) -> dict[str, Any]:
        return {
            "version": version,
            "conversation_id": self.conversation_id,
            "next_seq": self._next_seq,
            "current_turn_id": self.current_turn_id,
            "suppress_prev_turn_cache": self.suppress_prev_turn_cache,
            "rendered_block": None if self._rendered is None else self._rendered.id,
            "cache": {
                "last_touch_at": self.cache.last_touch_at,
                "last_ttl_seconds": self.cache.last_ttl_seconds,
            },
            "notices": {
                "current": list(self.notices.current),
                "next": list(self.notices.next),
                "once": list(self.notices.once),
            },
        }

    def take_row_changes(self) -> dict[str, Any]:
        """``{row key: row}`` for source rows and plans added or changed since the last call.

        Keys are ``src/<sid:06d>`` and ``plan/<plan_id>`` (``actline.timeline.snapshot``); a pool
        or plan book assigned in place of the tracked one reports all its rows. Storage
        writes these with ``snapshot()``; give them back with ``requeue_row_changes``
        when that write fails.
        """
        if self._rows_of[0] is not self.sources:
            self.sources.mark_dirty()
        if self._rows_of[1] is not self.plans:
            self.plans.mark_dirty()
        self._rows_of = (self.sources, self.plans)
        rows = source_rows(self.sources.take_dirty())
        rows.update(plan_rows(self.plans.take_dirty()))
        rows.update(self.facts.take_dirty())
        return rows

    def requeue_row_changes(self, rows: Iterable[str]) -> None:
        """Report the rows with these keys again on the next ``take_row_changes``."""
        rows = list(rows)
        sids: list[int] = []
        plan_ids: list[str] = []
        for key in rows:
            if key.startswith(SOURCE_PREFIX) and key[len(SOURCE_PREFIX) :].isdigit():
                sids.append(int(key[len(SOURCE_PREFIX) :]))
            elif key.startswith(PLAN_PREFIX):
                plan_ids.append(key[len(PLAN_PREFIX) :])
        self.facts.mark_dirty(k for k in rows if k.startswith(FACT_PREFIX))
        self.sources.mark_dirty(sids)
        self.plans.mark_dirty(plan_ids)

    @property
    def boundary_seq(self) -> int:
        """The lowest seq of the visible view: storage loads from there.

        Computed once per summary (new blocks only ever have higher seqs).
        """
        summary = self._summary
        if summary is None:
            return 0
        if self._boundary[0] is not summary:
            start = self.index_of(summary)
            self._boundary = (summary, min(b.seq for b in self.blocks[start:]))
        return self._boundary[1]

    def blocks_since(self, seq: int) -> list[Block]:
        """Blocks with ``seq >= seq`` in seq order (what storage has not written yet)."""
        if self._seqs_sorted:
            return self._by_seq[bisect.bisect_left(self._seqs, seq) :]
        return sorted((b for b in self.blocks if b.seq >= seq), key=lambda b: b.seq)

    @classmethod
    def restore(
        cls,
        snapshot: Mapping[str, Any],
        blocks: Iterable[Block | Mapping[str, Any]],
        *,
        rows: Mapping[str, Any] | None = None,
    ) -> Timeline:
        """Rebuild a timeline from ``snapshot``, its ``rows`` and stored blocks (any order).

        The blocks may be any suffix of the log (by seq) that includes the latest
        summary's cut: blocks inserted before a cut that is not among them belong
        to the compacted past and are left out. ``rows`` are every stored row
        (``take_row_changes`` merged over time). A version 1 snapshot with the pool
        and plans inline is read too; its rows then count as changed, so the next
        persist stores them as rows.
        """
        check_version(snapshot)
        tl = cls(str(snapshot.get("conversation_id", "")))
        loaded = [b if isinstance(b, Block) else Block.from_dict(b) for b in blocks]
        loaded.sort(key=lambda b: b.seq)
        # Turns start in seq order (a turn's header is its first block), so the order of
        # first appearance among the stored blocks is the turn order; blocks inserted by
        # compaction carry an older turn's id and take their place from their anchor.
        for block in loaded:
            if "insert_before" not in block.meta:
                tl._turns.setdefault(block.turn_id, len(tl._turns))
        for block in loaded:
            anchor = block.meta.get("insert_before")
            if anchor and anchor not in tl._by_id:
                continue  # inserted before a block of the compacted past: not in this view
            tl.append(block)
        tl._next_seq = max(tl._next_seq, int(snapshot.get("next_seq", 0)))
        tl.sources, inline_sources = restore_pool(snapshot, rows or {})
        tl.plans, inline_plans = restore_plans(snapshot, rows or {})
        tl._rows_of = (tl.sources, tl.plans)
        tl.facts = FactBook.from_rows(rows or {})
        if inline_sources:
            tl.sources.mark_dirty()
        if inline_plans:
            tl.plans.mark_dirty()
        cache = snapshot.get("cache") or {}
        tl.cache = CacheState(cache.get("last_touch_at"), cache.get("last_ttl_seconds"), True)
        notices = snapshot.get("notices") or {}
        tl.notices = Notices(
            list(notices.get("current", ())),
            list(notices.get("next", ())),
            list(notices.get("once", ())),
        )
        tl.current_turn_id = snapshot.get("current_turn_id")
        tl.suppress_prev_turn_cache = bool(snapshot.get("suppress_prev_turn_cache"))
        rendered = snapshot.get("rendered_block")
        if rendered:  # not among the restored blocks (compacted away): all of them were seen
            tl._rendered = tl._by_id.get(rendered) or (tl.blocks[-1] if tl.blocks else None)
        return tl


def _order(block: Block) -> tuple[int, float, int, float]:
    return block.order
