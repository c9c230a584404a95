"""The cost model of a view edit: does changing the rendered context pay for the cache it breaks?

Every edit of the rendered context (tool-response retention, TTL pruning, react.hide, a
compaction) removes tokens the model would otherwise read again on each later round, and
forces the provider to write again everything from the edit point to the end of the cached
prefix. Priced in base input tokens by the model's price table (``Prices``: a cache read
0.1x, a cache write 1.25x for the 5-minute lifetime and 2x for the hour), an edit that
removes ``saved`` tokens and makes ``rewrite`` tokens be written again:

- **gain** = ``read x saved x rounds``: the reads it spares over the ``rounds`` requests
  the removed content would otherwise have stayed in view (the next request included);
- **cost** = ``(write - read) x rewrite``: the rewritten tokens cost a write instead of the
  read they would have been, plus the work the edit needs (a summary call's prompt at 1x
  and its output at the output price), and nothing for the rewrite when the cache is cold
  (everything is written anyway) or when the prefix is written again for another reason
  (``cold``).

It pays when ``gain > cost``. An edit that saves nothing is never taken, whatever else asks
for it; a larger ``rounds`` only raises the gain, so it never turns a taken edit into a
refused one. ``forced`` names what takes an edit that does not pay (the context budget, the
model's own react.hide): the verdict keeps the arithmetic, so the trace shows what it cost.

``horizon`` estimates ``rounds``: the requests until the context would reach its compaction
ceiling at the growth seen, when old content leaves the view anyway, capped at
``HORIZON_CAP``.

Pure: numbers in, a verdict out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

EditKind = Literal["retention", "ttl", "hide", "compaction"]
HORIZON_CAP = 40
"""The most rounds an edit is credited with: a conversation may end at any turn, and
savings far ahead are the least certain."""


@dataclass(frozen=True, slots=True)
class Prices:
    """Multiples of the model's base input price."""

    read: float = 0.1
    write: float = 1.25
    output: float = 5.0
    """The output price over the input price (a summary call's output)."""

    def __post_init__(self) -> None:
        if not 0 <= self.read <= self.write or self.output < 0:
            raise ValueError(f"prices need 0 <= read <= write and output >= 0, got {self}")


DEFAULT_PRICES = Prices()


@dataclass(frozen=True, slots=True)
class Edit:
    """What one edit would do to the rendered context (tokens)."""

    kind: EditKind
    saved: int
    """Tokens it removes from the context (the full content minus its short view)."""
    rewrite: int
    """Tokens written again from the edit point to the end of the cached prefix, after it
    (its own short view or summary included)."""
    rounds: float
    """Requests the removed content would otherwise stay in view, the next one included."""
    work_input: int = 0
    """Prompt tokens of the work it needs at 1x (a summary call)."""
    work_output: int = 0
    """Output tokens of that work."""
    cold: bool = False
    """The prefix is written again anyway (the cache expired, or nothing is cached yet)."""
    paths: tuple[str, ...] = ()
    """What it edits, for the trace."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The cost model's answer for one edit, with its inputs."""

    edit: Edit
    take: bool
    gain: float
    cost: float
    reason: str
    where: str = ""
    """Where in the stream the edit falls: ``tail`` (after the pre-tail mark), ``boundary``
    (a turn's first round), ``cold``, or ``round`` (the middle of a turn: queued)."""

    def event(self) -> dict[str, Any]:
        """The verdict as a trace event's attributes (scalars only)."""
        e = self.edit
        return {
            "kind": e.kind,
            "verdict": "take" if self.take else ("queue" if self.where == "round" else "refuse"),
            "reason": self.reason,
            "where": self.where,
            "saved_tokens": e.saved,
            "rewrite_tokens": e.rewrite,
            "rounds": round(e.rounds, 2),
            "work_input_tokens": e.work_input,
            "work_output_tokens": e.work_output,
            "cold": e.cold,
            "gain": round(self.gain, 1),
            "cost": round(self.cost, 1),
            "edits": len(e.paths),
            "first_path": e.paths[0] if e.paths else "",
        }


def gain(edit: Edit, prices: Prices = DEFAULT_PRICES) -> float:
    """Base-price tokens of the reads the edit spares."""
    return prices.read * max(0, edit.saved) * max(0.0, edit.rounds)


def cost(edit: Edit, prices: Prices = DEFAULT_PRICES) -> float:
    """Base-price tokens the edit costs: the rewrite and the work it needs."""
    rewrite = 0.0 if edit.cold else (prices.write - prices.read) * max(0, edit.rewrite)
    return rewrite + max(0, edit.work_input) + prices.output * max(0, edit.work_output)


def decide(
    edit: Edit, prices: Prices = DEFAULT_PRICES, *, forced: str = "", where: str = ""
) -> Verdict:
    """Take ``edit`` when it pays (or ``forced`` names why it must), never when it saves
    nothing."""
    g, c = gain(edit, prices), cost(edit, prices)
    if edit.saved <= 0:
        return Verdict(edit, False, g, c, "saves nothing", where)
    if g > c:
        return Verdict(edit, True, g, c, "cache cold" if edit.cold else "pays", where)
    if forced:
        return Verdict(edit, True, g, c, forced, where)
    return Verdict(edit, False, g, c, "costs more than it saves", where)


def horizon(*, tokens: int, growth: float, ceiling: int, cap: int = HORIZON_CAP) -> float:
    """Requests until the context reaches ``ceiling`` growing ``growth`` tokens a request
    (at least 1, at most ``cap``; ``cap`` when it does not grow or has no ceiling)."""
    if growth <= 0 or ceiling <= 0:
        return float(cap)
    return float(min(cap, max(1, math.ceil((ceiling - tokens) / growth))))
