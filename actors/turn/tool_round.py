"""One round's tool calls while their outcomes come in (the DecisionActor holds one).

React.* calls run on the ConversationActor (their outcomes come back as ``ReactRan``),
external ones on the tool executors (``ExternalRan``), at the same time. ``ToolRound``
joins the two parts in call order; it does no I/O (``BlockBudget.read`` does one read).

The block quota (``actline.storage.quota``) is applied here, when the round is complete: given the
conversation's stored block bytes and its quota (``BlockBudget``), outcomes are kept in call
order while their blocks fit, and one that does not fit is replaced by a short failed outcome
naming the quota, the usage and the limit. The call itself ran (files it wrote stay); only its
result is not kept, so the turn goes on and can end cleanly.

With hooks (``actline.tools.hooks``), ``gate`` asks them about each call before the round runs
(a refused call is a failed outcome at once, ``ToolRound.gated``) and ``after`` passes each
outcome through the post hooks, as a ``ToolOutput`` (``output_of`` / ``with_output``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from actline.actors.services.shared import Services
from actline.storage import Quota, Usage
from actline.storage.layout import pack
from actline.timeline import Block
from actline.tools.hooks import Refusal, ToolHooks, ToolUse
from actline.tools.react.core import ReactOutcome
from actline.tools.registry import ToolOutput, is_in_loop

from . import events as ev
from .mailbox import ToolOutcome

NoticeBlock = Callable[[str, str], Block]
"""Builds the ``react.notice`` block of (code, text) for the running turn."""
RESULT_OVERHEAD = 256
"""Bytes a stored result block adds to its data (path, type, ids, meta)."""


@dataclass(frozen=True, slots=True)
class BlockBudget:
    """What the conversation's stored blocks hold and its quotas, when the tools finish."""

    conversation_id: str
    usage: Usage
    quota: Quota

    @classmethod
    def read(cls, services: Services, conversation_id: str) -> BlockBudget:
        """The budget as stored now: one LMDB read, and the node's quotas."""
        usage = services.store.usage(conversation_id)
        return cls(conversation_id, usage, services.settings.quota)

    @property
    def room(self) -> int | None:
        """Bytes of tool results that still fit (None: no block quota)."""
        return self.quota.room("block_bytes", self.usage)


def stored_size(outcome: ToolOutcome) -> int:
    """About what an outcome's blocks take in the store (packed as the store packs them)."""
    try:
        size = RESULT_OVERHEAD + len(pack(dict(outcome.data)))
        return size + sum(len(pack(b.to_dict())) for b in outcome.after)
    except (TypeError, ValueError):  # not packable: the commit refuses it, not the quota
        return RESULT_OVERHEAD


def over_quota(outcome: ToolOutcome, size: int, budget: BlockBudget) -> ToolOutcome:
    """The failed outcome that stands for a result too large for the block quota."""
    used, limit = budget.usage.block_bytes, budget.quota.block_bytes
    error = (
        f"quota_block_bytes exceeded in conversation {budget.conversation_id}: the result of "
        f"{outcome.tool} ({size:,} bytes) was not kept, {used:,} of {limit:,} bytes of stored "
        "blocks are used. The call itself ran (files it wrote are kept); ask for a smaller "
        "result or go on without it."
    )
    data = {
        "status": "error",
        "error": error,
        "code": "quota_exceeded",
        "quota": "quota_block_bytes",
        "usage": used,
        "limit": limit,
        "needed": size,
    }
    return ToolOutcome(outcome.call_id, outcome.tool, False, data)


@dataclass(slots=True)
class ToolRound:
    """The calls of round ``round`` and the outcomes that arrived so far."""

    round: int
    calls: tuple[ev.ToolSpec, ...]
    outcomes: dict[str, ToolOutcome] = field(default_factory=dict)
    running: tuple[ev.ToolSpec, ...] | None = None
    """The calls that run, with the params they run with, once the hooks have let them
    (None: no hooks, every call as decided)."""

    @property
    def react(self) -> tuple[ev.ToolSpec, ...]:
        run = self.calls if self.running is None else self.running
        return tuple(c for c in run if c.tool.startswith("react."))

    @property
    def external(self) -> tuple[ev.ToolSpec, ...]:
        run = self.calls if self.running is None else self.running
        return tuple(c for c in run if not c.tool.startswith("react."))

    def gated(self, running: Sequence[ev.ToolSpec], refused: Sequence[ToolOutcome]) -> None:
        """The hooks have spoken: ``running`` run, ``refused`` are outcomes already."""
        self.running = tuple(running)
        self.outcomes.update((o.call_id, o) for o in refused)

    def react_ran(self, outcomes: tuple[ReactOutcome, ...], notice: NoticeBlock) -> None:
        """The react.* outcomes, in the order of ``react``; their notices become blocks."""
        for call, outcome in zip(self.react, outcomes, strict=False):
            after = [*outcome.blocks, *(notice(n.full_code, n.message) for n in outcome.notices)]
            self.outcomes[call.call_id] = ToolOutcome(
                call.call_id, call.tool, outcome.ok, outcome.result, (), tuple(after)
            )

    def external_ran(self, outcomes: tuple[ToolOutcome, ...]) -> None:
        self.outcomes.update((o.call_id, o) for o in outcomes)

    def complete(
        self, budget: BlockBudget | None = None
    ) -> tuple[tuple[ToolOutcome, ...], str] | None:
        """Every outcome in call order and the card's detail, once all are in; with a
        ``budget``, results past the block quota are replaced (module docstring)."""
        if len(self.outcomes) < len(self.calls):
            return None
        ordered = tuple(self.outcomes[c.call_id] for c in self.calls)
        room = budget.room if budget is not None else None
        if budget is not None and room is not None:
            kept: list[ToolOutcome] = []
            for outcome in ordered:
                size = stored_size(outcome)
                if size > room:
                    outcome = over_quota(outcome, size, budget)
                    size = stored_size(outcome)
                kept.append(outcome)
                room -= size
            ordered = tuple(kept)
        bad = sum(not o.ok for o in ordered)
        return ordered, f"{len(ordered)} result(s)" + (f", {bad} failed" if bad else "")


# -- the hooks around the calls (actline.tools.hooks) -------------------------------------------
def use_of(call: ev.ToolSpec, conversation_id: str, turn_id: str) -> ToolUse:
    return ToolUse(call.tool, dict(call.params), conversation_id, turn_id, call.call_id)


def refused(call_id: str, tool: str, refusal: Refusal) -> ToolOutcome:
    """The failed outcome of a call the permission callback or a pre hook refused."""
    data = {"status": "error", "error": refusal.error(tool), "code": refusal.code}
    return ToolOutcome(call_id, tool, False, data)


async def gate(
    hooks: ToolHooks, calls: Sequence[ev.ToolSpec], conversation_id: str, turn_id: str
) -> tuple[tuple[ev.ToolSpec, ...], tuple[ToolOutcome, ...]]:
    """The calls that run (their params as the hooks left them) and the refused ones'
    outcomes, each call asked in order."""
    running: list[ev.ToolSpec] = []
    refusals: list[ToolOutcome] = []
    for call in calls:
        verdict = await hooks.before(use_of(call, conversation_id, turn_id))
        if isinstance(verdict, Refusal):
            refusals.append(refused(call.call_id, call.tool, verdict))
        else:
            running.append(replace(call, params=dict(verdict.params)))
    return tuple(running), tuple(refusals)


def output_of(outcome: ToolOutcome) -> ToolOutput:
    """What the post hooks see of an outcome: an external tool's content, data and error as
    the executor answered; an in-loop tool's result as data."""
    raw = dict(outcome.data)
    error = None if outcome.ok else str(raw.get("error") or "the call failed")
    if is_in_loop(outcome.tool):
        data = {k: v for k, v in raw.items() if k not in ("status", "error")}
        return ToolOutput(data=data, error=error)
    inner = raw.get("data")
    return ToolOutput(
        content=str(raw.get("content") or ""),
        data=dict(inner) if isinstance(inner, dict) else {},
        error=error,
    )


def with_output(outcome: ToolOutcome, output: ToolOutput) -> ToolOutcome:
    """``outcome`` with the output a post hook put in its place (its blocks after stay)."""
    data: dict[str, Any] = {"status": "ok" if output.error is None else "error"}
    if output.content:
        data["content"] = output.content
    if output.data:
        data["data"] = dict(output.data)
    if output.error is not None:
        data["error"] = output.error
    if output.artifacts:
        data["artifacts"] = [a.model_dump(mode="json") for a in output.artifacts]
    return replace(outcome, ok=output.error is None, data=data)


async def after(
    hooks: ToolHooks,
    calls: Sequence[ev.ToolSpec],
    outcomes: Sequence[ToolOutcome],
    conversation_id: str,
    turn_id: str,
) -> tuple[ToolOutcome, ...]:
    """Each outcome after the post hooks (``calls``: the calls as they ran, by call id)."""
    if not hooks.post_hooks:
        return tuple(outcomes)
    by_id = {c.call_id: c for c in calls}
    out = []
    for outcome in outcomes:
        call = by_id.get(outcome.call_id)
        if call is not None:
            before = output_of(outcome)
            output = await hooks.after(use_of(call, conversation_id, turn_id), before)
            if output is not before:
                outcome = with_output(outcome, output)
        out.append(outcome)
    return tuple(out)
