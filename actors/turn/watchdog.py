"""The context watchdog: per-round telemetry of a turn, and
compaction before a hard limit when the context starts to degrade.

Three signals, each against its profile threshold (``actline.actors.configuration.profiles``):

- **token drift**: how fast the rendered context grows, in tokens per round averaged over the
  last ``DRIFT_ROUNDS`` rounds since the turn began or the context was last compacted (the
  original measured the growth of one whole agent pass; a round is actline's pass).
- **over-tooling**: the share of the last ``TOOLING_WINDOW`` rounds that only called tools
  without progress (every call a repeated read of a path this turn already read, or refused),
  judged once ``TOOLING_MIN_ROUNDS`` rounds are in; and repeated reads of one path
  (``repeated_reads`` times or more), which fire the same signal.
- **context rot**: the share of summarised, hidden, TTL-pruned and archived content among the
  visible blocks: (2 x summaries + blocks shown by a replacement) / visible blocks, as the
  original's ``estimateContextRotScore`` weighs summaries (a folded ``react.write`` anchor is
  shown by its digest by design: not rot).

A signal that crosses its threshold gives the model a notice (once, until it falls back
under). Over-tooling, repeated reads and context rot also ask for a compaction when the
context is at least ``watchdog_floor_tokens`` large (at most once per ``COOLDOWN_ROUNDS``
rounds); token drift alone never does: a context that grows is what a working turn looks
like, and the context policy compacts before the budget is reached anyway. An ask is not a
compaction: the conversation's context policy (``actline.timeline.rendering.policy``) weighs
it with the cost model at the next moment a rewrite is cheap (a turn boundary), so the
cached prefix is not rewritten in the middle of a turn for it. The readings go on progress
cards and into the turn result's ``usage.context``.

A turn's checkpoint keeps the watchdog (``snapshot``), so that a turn resumed after a crash
goes on from the same rounds, reads and signals (``resumed``) and says what the turn not
interrupted says. It replays the round its checkpoint was taken in, which was checked
already: that check is answered again without its notices (they are stored with the
checkpoint) and with its compaction (that ran after the checkpoint's commit began, and
is not stored).

Pure: the DecisionActor feeds it what the conversation measured and what the model decided.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actline.actors.configuration.profiles import Profile
from actline.messages import ContextTelemetry
from actline.timeline import Block
from actline.timeline.rendering.render import rot_weight

from . import events as ev

DRIFT_ROUNDS = 3
TOOLING_WINDOW = 5
TOOLING_MIN_ROUNDS = 3
COOLDOWN_ROUNDS = 3
READ = "react.read"
WATCHDOG = "context_watchdog"
"""The code of the watchdog's notices."""


@dataclass(frozen=True, slots=True)
class ContextStats:
    """What the conversation measured when it rendered a round."""

    tokens: int = 0
    """The rendered context (the stable part), in tokens."""
    blocks: int = 0
    """Visible content blocks."""
    rotten: int = 0
    """Of them, weighted: 2 per summary, 1 per block shown by a replacement."""
    compacted: bool = False
    """A compaction ran in this render."""
    for_ask: bool = False
    """That compaction weighed a watchdog's ask (at the turn boundary after it)."""

    @classmethod
    def of(cls, visible: Iterable[Block], tokens: int, compacted: bool) -> ContextStats:
        """The stats of a list of visible blocks (the renderer keeps them as it goes:
        ``Renderer.rot_counts``)."""
        weights = [rot_weight(block) for block in visible]
        return cls(tokens, sum(w[0] for w in weights), sum(w[1] for w in weights), compacted)

    @property
    def rot(self) -> float:
        return round(min(1.0, self.rotten / self.blocks), 3) if self.blocks else 0.0


NO_STATS = ContextStats()


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the watchdog asks before a model call: a notice, and whether to ask for a
    compaction (``reason``: the signals that ask)."""

    notices: tuple[str, ...] = ()
    compact: bool = False
    reason: str = ""


@dataclass(slots=True)
class Watchdog:
    """One turn's watchdog."""

    profile: Profile
    tokens: list[int] = field(default_factory=list)
    """Rendered tokens of the rounds since the turn began or the last compaction."""
    tooling: list[bool] = field(default_factory=list)
    """Per tool round: True when it made no progress."""
    reads: Counter[str] = field(default_factory=Counter)
    stats: ContextStats = NO_STATS
    peak_tokens: int = 0
    compactions: int = 0
    watchdog_compactions: int = 0
    fired: Counter[str] = field(default_factory=Counter)
    """How many times each signal crossed its threshold."""
    _over: frozenset[str] = frozenset()
    _asked: str = ""
    """The reason of a compaction asked for the next render ("" for none)."""
    _last_compaction_round: int = -COOLDOWN_ROUNDS
    _round: int = 0
    _checked: int = 0
    """The last round checked."""

    # -- kept with the turn's checkpoint -------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """What a turn's checkpoint keeps of it (plain values; ``resumed`` reads it back)."""
        stats = self.stats
        return {
            "tokens": list(self.tokens),
            "tooling": list(self.tooling),
            "reads": dict(self.reads),
            "stats": [stats.tokens, stats.blocks, stats.rotten, stats.compacted],
            "peak_tokens": self.peak_tokens,
            "compactions": self.compactions,
            "watchdog_compactions": self.watchdog_compactions,
            "fired": dict(self.fired),
            "over": sorted(self._over),
            "asked": self._asked,
            "last_compaction_round": self._last_compaction_round,
            "round": self._round,
            "checked": self._checked,
        }

    @classmethod
    def resumed(cls, profile: Profile, snapshot: Mapping[str, Any] | None) -> Watchdog:
        """The watchdog a ``snapshot`` kept (a new one when there is none)."""
        dog = cls(profile)
        if not snapshot:
            return dog
        tokens, blocks, rotten, compacted = snapshot.get("stats") or (0, 0, 0, False)
        dog.tokens = [int(t) for t in snapshot.get("tokens", ())]
        dog.tooling = [bool(t) for t in snapshot.get("tooling", ())]
        dog.reads = Counter({str(p): int(n) for p, n in (snapshot.get("reads") or {}).items()})
        dog.stats = ContextStats(int(tokens), int(blocks), int(rotten), bool(compacted))
        dog.peak_tokens = int(snapshot.get("peak_tokens", 0))
        dog.compactions = int(snapshot.get("compactions", 0))
        dog.watchdog_compactions = int(snapshot.get("watchdog_compactions", 0))
        dog.fired = Counter({str(k): int(n) for k, n in (snapshot.get("fired") or {}).items()})
        dog._over = frozenset(str(name) for name in snapshot.get("over", ()))
        asked = snapshot.get("asked", "")
        dog._asked = asked if isinstance(asked, str) else ("watchdog" if asked else "")
        dog._last_compaction_round = int(snapshot.get("last_compaction_round", -COOLDOWN_ROUNDS))
        dog._round = int(snapshot.get("round", 0))
        dog._checked = int(snapshot.get("checked", 0))
        return dog

    # -- what it is told -----------------------------------------------------------------------
    def rendered(self, round_: int, stats: ContextStats) -> None:
        """The conversation rendered round ``round_``."""
        self._round = round_
        self.stats = stats
        self.peak_tokens = max(self.peak_tokens, stats.tokens)
        if stats.compacted:
            self.compactions += 1
            self.watchdog_compactions += stats.for_ask  # asked, and something was compacted
            self._last_compaction_round = round_
            self.tokens = []
        self._asked = ""
        self.tokens = [*self.tokens, stats.tokens][-(DRIFT_ROUNDS + 1) :]

    def decided(self, event: ev.ModelEvent) -> None:
        """The model's decision this round. Calls that run, a task for an agent: a tool
        round; refused calls: a tool round without progress; anything else: none."""
        match event:
            case ev.ModelDecided(calls=calls, agent_calls=agents):
                self._tool_round(calls, progress=bool(agents))
            case ev.CallRefused():
                self._tool_round((), progress=False)

    def _tool_round(self, calls: Sequence[ev.ToolSpec], *, progress: bool) -> None:
        for call in calls:
            if call.tool != READ:
                progress = True
                continue
            paths = call.params.get("paths")
            names = [p for p in paths if isinstance(p, str)] if isinstance(paths, list) else []
            if not names or any(self.reads[p] == 0 for p in names):
                progress = True
            self.reads.update(names)
        self.tooling = [*self.tooling, not progress][-TOOLING_WINDOW:]

    # -- what it says --------------------------------------------------------------------------
    @property
    def token_drift(self) -> int:
        if len(self.tokens) < 2:
            return 0
        return max(0, (self.tokens[-1] - self.tokens[0]) // (len(self.tokens) - 1))

    @property
    def over_tooling(self) -> float:
        if len(self.tooling) < TOOLING_MIN_ROUNDS:
            return 0.0
        return round(sum(self.tooling) / len(self.tooling), 2)

    @property
    def repeated_reads(self) -> int:
        return max(self.reads.values(), default=0)

    def check(self, round_: int) -> Verdict:
        """Before the model call of round ``round_``: the signals over their thresholds now.
        A round checked already (replayed by a resumed turn) gets its compaction again and
        no notice."""
        p = self.profile
        if not p.watchdog:
            return Verdict()
        if round_ <= self._checked:
            return Verdict((), bool(self._asked), self._asked)
        self._checked = round_
        values = {
            "token_drift": (self.token_drift, p.token_drift, "tokens per round"),
            "over_tooling": (self.over_tooling, p.over_tooling, "of recent rounds"),
            "repeated_reads": (self.repeated_reads, p.repeated_reads, "reads of one path"),
            "context_rot": (self.stats.rot, p.context_rot, "of the visible blocks"),
        }
        over = frozenset(name for name, (value, limit, _) in values.items() if value >= limit)
        new = sorted(over - self._over)
        self._over = over
        self.fired.update(new)
        if not new:
            return Verdict()
        cooled = self._round - self._last_compaction_round >= COOLDOWN_ROUNDS
        asking = [name for name in new if name != "token_drift"]
        compact = bool(asking) and cooled and self.stats.tokens >= p.watchdog_floor_tokens
        what = "; ".join(
            f"{name.replace('_', ' ')} {_show(values[name][0])} >= {_show(values[name][1])} "
            f"{values[name][2]}"
            for name in new
        )
        reason = "watchdog: " + ", ".join(asking) if compact else ""
        if compact:
            self._asked = reason
            self._last_compaction_round = self._round + 1
            action = (
                "the older context is compacted at the next turn boundary, or sooner if the "
                "context budget needs it; what it held reopens by path (su:, tc:, ar:) with "
                "react.read"
            )
        else:
            action = (
                "work from what you have: avoid re-reading paths and calls without new information"
            )
        if "repeated_reads" in new or "over_tooling" in new:
            top = [path for path, n in self.reads.most_common(3) if n > 1]
            if top:
                action += "; read more than once: " + ", ".join(top)
        return Verdict((f"context watchdog: {what}. {action}.",), compact, reason)

    def telemetry(self) -> ContextTelemetry:
        """The readings as the turn result's ``usage.context`` carries them."""
        return ContextTelemetry(**self.readings())

    def readings(self) -> dict[str, Any]:
        """The readings as a card's ``data.context`` carries them: ``telemetry().model_dump()``
        built without the model (a card is sent several times a round)."""
        return {
            "tokens": self.stats.tokens,
            "peak_tokens": self.peak_tokens,
            "token_drift": self.token_drift,
            "over_tooling": self.over_tooling,
            "repeated_reads": self.repeated_reads,
            "context_rot": self.stats.rot,
            "compactions": self.compactions,
            "watchdog_compactions": self.watchdog_compactions,
            "signals": dict(self.fired),
        }


def _show(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"
