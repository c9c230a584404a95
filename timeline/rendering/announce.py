"""ANNOUNCE: the uncached signal board at the very end of every rendered context.

Never persisted, rebuilt each round: iteration and remaining budget, the
authoritative UTC time and the user's local time, the active plan with step
markers (a completed plan leaves it; the render after its completion carries a
one-time ``plan … completed`` notice), notices (pruning, feedback, late DONE
signals, ...), workspace state and the user-memory hotset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from actline.timeline.memory import Plan


@dataclass(frozen=True, slots=True)
class AnnounceContext:
    """What the decision loop knows about this round that the timeline does not."""

    iteration: int = 0
    max_iterations: int = 0
    budget_tokens: int | None = None
    """Tokens left in the turn's budget (None = no budget)."""
    timezone: str = "UTC"
    notices: Sequence[str] = ()
    workspace: Sequence[str] = ()
    hotset: Sequence[str] = field(default_factory=tuple)


def local_time(now: float, timezone: str) -> str:
    """``now`` in the user's zone, or a note that the zone is unknown."""
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown timezone {timezone!r}; use UTC"
    return datetime.fromtimestamp(now, zone).strftime("%Y-%m-%d %H:%M %Z (%A)")


def announce_text(
    ctx: AnnounceContext, *, now: float, plan: Plan | None, notices: Sequence[str]
) -> str:
    """The ANNOUNCE block text."""
    utc = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = ["[ANNOUNCE]"]
    budget = [f"iteration {ctx.iteration}/{ctx.max_iterations}" if ctx.max_iterations else ""]
    if ctx.budget_tokens is not None:
        budget.append(f"{ctx.budget_tokens:,} tokens left in this turn's budget")
    if any(budget):
        lines.append("budget: " + " · ".join(b for b in budget if b))
    lines.append(f"time: {utc} (UTC, authoritative)")
    if ctx.timezone and ctx.timezone != "UTC":
        lines.append(f"user time: {local_time(now, ctx.timezone)} [{ctx.timezone}]")
    if plan is not None:
        lines.append(f"active plan {plan.plan_id} (read ar:plan.latest:{plan.plan_id}):")
        lines.extend(f"  {line}" for line in plan.lines())
    all_notices = [*notices, *ctx.notices]
    if all_notices:
        lines.append("notices:")
        lines.extend(f"  - {n}" for n in all_notices)
    if ctx.workspace:
        lines.append("workspace:")
        lines.extend(f"  {w}" for w in ctx.workspace)
    if ctx.hotset:
        lines.append("[USER MEMORY HOTSET]")
        lines.extend(f"  - {h}" for h in ctx.hotset)
    return "\n".join(lines)
