"""The passes that edit the rendered view each round, placed by the context policy.

A round's first pass (``Editor.begin``: ``Renderer.plan_compaction`` or ``Renderer.render``,
whichever comes first) runs TTL pruning, finds the round's moment (``cold``, ``boundary`` or
``round``, ``actline.timeline.rendering.policy``) and the tool-response retention the policy
allows now; ``compaction_plan`` then says whether a compaction is due and with what cut.
Under the ``cost`` policy:

- retention takes the batch of waiting results (every one from some position on: one
  rewrite) that the cost model values most where an edit may go now — the editable tail
  mid-turn, anywhere at a boundary or on a cold cache — and reports a batch that waits;
- at the ceiling (or after the model refused the context as too long) what waits is
  retained and, if that is not enough, a compaction keeps what leaves room for the rest of
  the turn;
- at a boundary, a compaction is done when the next turn is expected to pass the ceiling,
  or, once the context passes ``compaction_floor_tokens``, when the cost model says it pays
  (a watchdog's ask is weighed there); it keeps at most the turn that just ended;
- after a compaction the prefix is written again from its summary: what waits goes with it.

Under ``append`` each pass runs by its own rule (retention as results leave the window,
compaction at the ceiling).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from actline.timeline.blocks import Block
from actline.timeline.cache import CachePoints
from actline.timeline.editing import compaction, retention, ttl
from actline.timeline.editing.cost import Edit, Verdict
from actline.timeline.editing.hide import HideView

from .policy import ContextPolicy, Moment

COLD_TTL = frozenset({"no_effect", "pruned", "pruned_light"})
"""TTL pass results that mean the provider cache expired."""
BUDGET = "context budget"


class Stream(HideView, Protocol):
    """What the passes read of the renderer's visible stream (``Renderer`` is one): what a
    hide reads, and more."""

    @property
    def stable_tokens(self) -> int: ...

    def sync(self) -> int: ...

    def tokens_before(self, entry: int) -> int: ...

    def block_cost(self, block: Block) -> int: ...


@dataclass(slots=True)
class Round:
    """The round being rendered: its TTL pass, its moment, what its passes did."""

    ttl: ttl.TtlOutcome
    moment: Moment
    retained: retention.RetentionOutcome = retention.DISABLED
    compaction_decided: bool = False


class Editor:
    """One renderer's view-editing passes and their state (see the module docstring)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.policy = ContextPolicy()
        """Where and when view edits go, and the decisions for the trace."""
        self.state = retention.RetentionState(stream.timeline)
        self.rendered_at: float | None = None
        """The time of the previous render: results stamped since are new to the model."""
        self.round: Round | None = None
        """The round in progress between ``Renderer.plan_compaction`` and its render."""

    def end(self, rendered_at: float, stable_tokens: int, points: CachePoints, cached: int) -> None:
        """The render is done (``cached``: its tokens through its last mark)."""
        self.rendered_at = rendered_at
        self.policy.end(stable_tokens, points, cached)
        self.round = None

    def begin(self, now: float, boundary: bool | None) -> Round:
        """The round's first pass (``plan_compaction`` or ``render``, whichever comes first):
        TTL pruning, the round's moment, and the retention the policy allows now."""
        if self.round is not None:
            return self.round
        tl = self.stream.timeline
        if self.rendered_at is None:  # a new renderer (e.g. after a restart): the stored time
            self.rendered_at = tl.cache.last_touch_at
        nothing_cached = tl.cache.last_touch_at is None
        self.stream.sync()
        new_turn = self.policy.begin(tl.current_turn_id, self.stream.stable_tokens)
        before = self.stream.stable_tokens
        pruned = ttl.apply(tl, self.stream.config, now=now, counter=self.stream.counter)
        self.stream.sync()
        moment: Moment = "round"
        if nothing_cached or pruned.status in COLD_TTL:
            moment = "cold"
        elif new_turn if boundary is None else boundary:
            moment = "boundary"
        if pruned.hidden_paths:
            edit = Edit(
                "ttl",
                before - self.stream.stable_tokens,
                0,
                self.policy.rounds_in_view(self.stream.stable_tokens, self.ceiling()),
                cold=True,
                paths=pruned.hidden_paths,
            )
            self.policy.record(self.policy.judge(edit, "cold", forced="the cache expired"))
        current = self.round = Round(pruned, moment)
        current.retained = self._retain_pass(current)
        return current

    def _retain_pass(self, current: Round) -> retention.RetentionOutcome:
        """Tool-response retention this round: under the ``cost`` policy, the batch of waiting
        results the cost model finds most worth it where an edit may go now."""
        cfg = self.stream.config
        if not cfg.retention:
            return retention.DISABLED
        if cfg.context_policy == "append":
            outcome = retention.apply(
                self.stream.timeline,
                cfg,
                counter=self.stream.counter,
                state=self.state,
                fresh_since=self.rendered_at,
                force=current.ttl.status in COLD_TTL,
            )
            self.stream.sync()
            return outcome
        waiting = self._waiting()
        if not waiting:
            return retention.RetentionOutcome("none")
        chosen = self._best_batch(waiting, current.moment)
        if not chosen:
            return retention.RetentionOutcome("waiting", pending=len(waiting))
        outcome = retention.retain(self.stream.timeline, chosen, self.state)
        self.stream.sync()
        return outcome

    def _waiting(self) -> list[retention.Pending]:
        return retention.collect(
            self.stream.timeline,
            self.stream.config,
            counter=self.stream.counter,
            state=self.state,
            fresh_since=self.rendered_at,
            turn_id=self.stream.timeline.current_turn_id,
        )

    def _best_batch(
        self, waiting: Sequence[retention.Pending], moment: Moment
    ) -> list[retention.Pending]:
        """The waiting results to retain now: the batch (every result from some position on,
        one rewrite) the cost model values most where an edit may go; none when no batch
        pays there. A batch that waits or does not pay is reported once."""
        located = sorted(
            ((e, p) for p in waiting if (e := self.stream.entry_of(p.block)) is not None),
            key=lambda pair: pair[0],
        )
        rounds = self.policy.rounds_in_view(self.stream.stable_tokens, self.ceiling())
        best: tuple[float, int, Verdict] | None = None
        widest: Verdict | None = None
        saved = 0
        for k in range(len(located) - 1, -1, -1):
            entry, item = located[k]
            saved += item.saved
            before = self.stream.tokens_before(entry)
            edit = Edit(
                "retention",
                saved,
                max(0, self.policy.cached_tokens - before - saved),
                rounds,
                cold=moment == "cold",
            )
            widest = self.policy.judge(edit, self.policy.where(moment, entry))
            net = widest.gain - widest.cost
            if widest.take and (best is None or net > best[0]):
                best = (net, k, widest)
        if best is None:
            if widest is not None and len(located) > self.policy.queued:
                self.policy.record(_naming(widest, located))
                self.policy.queued = len(located)
            return []
        net, k, verdict = best
        self.policy.record(_naming(verdict, located[k:]))
        self.policy.queued = k
        return [p for _, p in located[k:]]

    def _retain_all(self, why: str, *, cold: bool = False) -> retention.RetentionOutcome:
        """Retain every waiting result now (the budget needs it, or the prefix is rewritten
        anyway after a compaction)."""
        if not self.stream.config.retention:
            return retention.DISABLED
        waiting = self._waiting()
        if not waiting:
            return retention.RetentionOutcome("none")
        first = min(
            (e for p in waiting if (e := self.stream.entry_of(p.block)) is not None), default=0
        )
        saved = sum(p.saved for p in waiting)
        before = self.stream.tokens_before(first)
        edit = Edit(
            "retention",
            saved,
            0 if cold else max(0, self.policy.cached_tokens - before - saved),
            self.policy.rounds_in_view(self.stream.stable_tokens, self.ceiling()),
            cold=cold,
            paths=tuple(p.block.path for p in waiting),
        )
        verdict = self.policy.judge(edit, "cold" if cold else "budget", forced=why)
        self.policy.record(verdict)
        if not verdict.take:
            return retention.RetentionOutcome("waiting", pending=len(waiting))
        outcome = retention.retain(self.stream.timeline, waiting, self.state)
        self.policy.queued = 0
        self.stream.sync()
        return outcome

    def after_compaction(self, current: Round) -> None:
        """A compaction rewrote the prefix from its summary: what waits goes with it."""
        if self.stream.config.context_policy == "append":
            current.retained = current.retained.merge(self._retain(force=True))
        else:
            more = self._retain_all("the prefix is rewritten by the compaction", cold=True)
            current.retained = current.retained.merge(more)

    def compaction_plan(
        self, system_tokens: int, force: bool, current: Round
    ) -> compaction.CompactionPlan | None:
        """The compaction due this round, or None.

        Always at the ceiling (or ``force``): first what retention waits with, then a
        compaction if that is not enough. Under the ``cost`` policy, also at a boundary
        or a cold cache: when the next turn is expected to pass the ceiling (it keeps
        what leaves room for that turn), or when the cost model says a compaction pays.
        """
        cfg = self.stream.config
        if not cfg.max_tokens:
            return None
        ceiling = self.ceiling()
        if force or system_tokens + self.stream.stable_tokens > ceiling:
            if cfg.context_policy == "append":
                more = self._retain(force=True)
                self.stream.sync()
            else:
                more = self._retain_all(BUDGET)
            current.retained = current.retained.merge(more)
            if not force and system_tokens + self.stream.stable_tokens <= ceiling:
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
        if growth and system_tokens + self.stream.stable_tokens + growth > ceiling:
            more = self._retain_all(f"{BUDGET} within the next turn")
            current.retained = current.retained.merge(more)
            if system_tokens + self.stream.stable_tokens + growth <= ceiling:
                return None
            room = int(ceiling - system_tokens - growth) - self._summary_allowance(system_tokens)
            chosen = self._plan(system_tokens, keep_limit=max(1, min(room, self._last_turns())))
            if chosen is not None:
                edit = self._compaction_edit(chosen, system_tokens, current.moment)
                why = f"{BUDGET} within the next turn"
                self.policy.record(self.policy.judge(edit, current.moment, forced=why))
            return chosen
        floor = cfg.compaction_floor_tokens
        if not floor or self.stream.stable_tokens < floor:
            return None  # too small to compact for cost (the watchdog asks only above it too)
        chosen = self._plan(system_tokens, keep_limit=self._last_turns())
        if chosen is None:
            if asked:  # nothing older than the turn that just ended to compact
                rounds = self.policy.rounds_in_view(self.stream.stable_tokens, ceiling)
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
            self.stream.timeline,
            self.stream.config,
            system_tokens=system_tokens,
            counter=self.stream.counter,
            force=force,
            cost=self.stream.block_cost,
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
            self.policy.rounds_in_view(self.stream.stable_tokens, self.ceiling()),
            work_input=chosen.saved_tokens if call else 0,
            work_output=summary if call else 0,
            cold=moment == "cold",
            paths=(chosen.cut.path,),
        )

    def _last_turns(self, turns: int = 2) -> int:
        """Stream tokens from the header of the ``turns``-th newest turn to the end: what a
        compaction at a boundary keeps at most (the turn that just ended and the new one;
        keeping more raw costs its rewrite now and its reads until the next compaction)."""
        tl = self.stream.timeline
        ids = tl.turn_ids()
        if len(ids) < turns:
            return self.stream.stable_tokens
        header = tl.header(ids[-turns])
        entry = None if header is None else self.stream.entry_of(header)
        if entry is None:
            return self.stream.stable_tokens
        return self.stream.stable_tokens - (self.stream.tokens_before(entry))

    def _summary_allowance(self, system_tokens: int) -> int:
        """The tokens a compaction summary may take (``CompactionPlan.requests``)."""
        cfg = self.stream.config
        budget = max(1, cfg.max_tokens - system_tokens)
        return max(32, min(cfg.summary_max_tokens, budget // 10))

    def ceiling(self) -> int:
        cfg = self.stream.config
        return int(cfg.compaction_ratio * cfg.max_tokens)

    def _retain(self, *, force: bool) -> retention.RetentionOutcome:
        return retention.apply(
            self.stream.timeline,
            self.stream.config,
            counter=self.stream.counter,
            state=self.state,
            fresh_since=self.rendered_at,
            force=force,
        )


def _naming(verdict: Verdict, located: Sequence[tuple[int, retention.Pending]]) -> Verdict:
    """``verdict`` with the paths of the results it is about (for the trace)."""
    paths = tuple(p.block.path for _, p in located)
    return replace(verdict, edit=replace(verdict.edit, paths=paths))
