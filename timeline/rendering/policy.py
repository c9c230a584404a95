"""The context policy: where and when a view edit may change the rendered prefix.

A request's prefix through its last cache mark is cached; any byte changed before a mark
makes everything after it be written again (1.25x) instead of read (0.1x). So, under the
``cost`` policy (``TimelineConfig.context_policy``, the default), every edit of the rendered
context — tool-response retention, TTL pruning, react.hide, compaction — changes the prefix
only

- inside the **editable tail**, after the previous request's pre-tail mark (CP2);
- at a **turn boundary** (a turn's first round), all that waits batched into one rewrite;
- when the cache is **cold** (it expired, or nothing is cached yet): everything is written
  anyway;
- or when the context budget leaves no choice (the context passed its compaction ceiling).

Anywhere else an edit is queued until one of those moments. Whether a possible edit is taken
is the cost model's decision (``actline.timeline.editing.cost``); each decision is kept as a
``Verdict`` for the trace (``take_decisions``).

What the policy remembers between renders: the turn of the last render, the tokens the
context grew by in recent turns (what the next turn is expected to add), the tokens cached
through the last request's last mark, and a compaction asked for by the context watchdog
(evaluated at the next boundary, where it can wait).

The ``append`` policy is the smart layer's switch: no queueing and no cost decisions; each
edit the configuration enables runs when its own rule says, and compaction happens only at
the context's ceiling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from actline.timeline.cache import CachePoints
from actline.timeline.editing.cost import DEFAULT_PRICES, Edit, Prices, Verdict, decide, horizon

Moment = Literal["cold", "boundary", "round"]
GROWTH_TURNS = 3
"""Recent turns whose growth predicts the next turn's (the largest of them)."""
MAX_DECISIONS = 256
"""Decisions kept for the trace between two takes (a bound, not a budget)."""


@dataclass(slots=True)
class ContextPolicy:
    """One renderer's context policy state (see the module docstring)."""

    prices: Prices = DEFAULT_PRICES
    summaries_cost_a_call: bool = False
    """Compaction summaries are written by a model call (its prompt and output count)."""
    turn: str | None = None
    """The turn of the last render."""
    grown: int = 0
    """Tokens the context grew by in the current turn, edits aside."""
    growths: list[int] = field(default_factory=list)
    """The growth of recent finished turns."""
    rounds: int = 0
    """Rounds rendered in the current turn."""
    turn_rounds: list[int] = field(default_factory=list)
    """The rounds of recent finished turns."""
    last_stable: int | None = None
    """Stable tokens at the end of the last render."""
    cached_tokens: int = 0
    """Stable tokens through the last render's last mark (what the provider has cached)."""
    last_points: CachePoints | None = None
    asked: str = ""
    """A compaction the watchdog asked for (its reason), evaluated at the next boundary."""
    decisions: list[Verdict] = field(default_factory=list)
    queued: int = 0
    """Results queued and already reported as such (so a queue is reported once)."""

    def begin(self, turn: str | None, stable_tokens: int) -> bool:
        """A round's first pass: account the growth since the last render; True when
        ``turn`` is not the turn of the last render (a boundary, unless told otherwise). A
        new policy's first render is not one: it cannot tell where the turn stands (a
        renderer made after a restart may be in the middle of one)."""
        delta = 0 if self.last_stable is None else max(0, stable_tokens - self.last_stable)
        first = self.last_stable is None
        new_turn = turn != self.turn
        if new_turn:
            if self.turn is not None:
                self.growths = [*self.growths, self.grown][-GROWTH_TURNS:]
                self.turn_rounds = [*self.turn_rounds, self.rounds][-GROWTH_TURNS:]
            self.turn, self.grown, self.rounds = turn, delta, 1
        else:
            self.grown += delta
            self.rounds += 1
        return new_turn and not first

    def end(self, stable_tokens: int, points: CachePoints, cached_tokens: int) -> None:
        """The render is done: what the next one starts from."""
        self.last_stable = stable_tokens
        self.last_points = points
        self.cached_tokens = cached_tokens

    @property
    def expected_growth(self) -> int:
        """What the next turn is expected to add: the largest recent turn's growth."""
        return max(self.growths, default=0)

    @property
    def round_growth(self) -> float:
        """What one round adds, on average over recent turns (this turn's so far before)."""
        if self.turn_rounds and sum(self.turn_rounds):
            return sum(self.growths) / sum(self.turn_rounds)
        return self.grown / self.rounds if self.rounds else 0.0

    def remaining_growth(self) -> int:
        """What the rest of the running turn is expected to add (at least two rounds')."""
        return int(max(self.expected_growth - self.grown, 2 * self.round_growth))

    def rounds_in_view(self, tokens: int, ceiling: int) -> float:
        """The requests content removed now would otherwise stay in view (``horizon``)."""
        return horizon(tokens=tokens, growth=self.round_growth, ceiling=ceiling)

    def where(self, moment: Moment, entry: int) -> str:
        """Where an edit at stream position ``entry`` falls this round."""
        if moment != "round":
            return moment
        floor = self.last_points.hide_floor if self.last_points is not None else None
        return "tail" if floor is not None and floor >= 0 and entry > floor else "round"

    def judge(self, edit: Edit, where: str, *, forced: str = "") -> Verdict:
        """The cost model's verdict on ``edit`` at ``where`` (queued mid-turn unless forced)."""
        verdict = decide(edit, self.prices, forced=forced, where=where)
        if where == "round" and verdict.take and not forced:
            verdict = Verdict(
                edit, False, verdict.gain, verdict.cost, "waits for a boundary", where
            )
        return verdict

    def record(self, verdict: Verdict) -> None:
        self.decisions.append(verdict)
        del self.decisions[:-MAX_DECISIONS]

    def take_decisions(self) -> tuple[Verdict, ...]:
        out = tuple(self.decisions)
        self.decisions.clear()
        return out
