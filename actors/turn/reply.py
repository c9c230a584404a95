"""The pure decisions of a turn that sit beside the state machine (``actline.actors.turn.state``).

Nothing here does I/O or reads a clock. ``TurnSettings.parse`` reads a turn request's
``config`` once (the one place turn limits are parsed); ``classify_reply`` turns one
model reply into the event the state machine takes plus the notices the model sees
next round; ``parse_followups`` reads the followup channel; ``verdict`` says what the
sender of a DONE is told, from what the state machine did with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from actline.channels import strip_fence
from actline.llm.pricing import price
from actline.messages import (
    ContextTelemetry,
    Cost,
    GenerateResult,
    ReActResult,
    TurnStatus,
    Usage,
    new_id,
)
from actline.messages.ids import is_valid_name

from . import events as ev
from .approvals import gate
from .protocol import CallLedger, Notice, check_decision

AGENT_SEND = "agent.send"
AGENT_ABSENT = "agent_absent"
"""The code of the notice that a task waits in the inbox of an agent that is not connected."""
ONE_HANDOFF = "one_handoff_per_decision"
"""The code of the notice that refuses a second ``agent.send`` in one decision."""
MAX_FOLLOWUPS = 5

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Classified:
    """One model reply, classified.

    ``kind`` ``answer``: the model completed with ``answer`` (the caller decides, from
    unseen followups and the grace, whether it ends the turn); otherwise ``event`` is
    the state machine's event. ``notices`` are recorded before the event is fed.
    """

    kind: Literal["answer", "event"]
    notes: str
    notices: tuple[Notice, ...]
    event: ev.ModelEvent | None = None
    answer: str = ""


def classify_reply(
    round_: int,
    channels: Mapping[str, str],
    *,
    ledger: CallLedger,
    external: list[str],
    max_calls: int,
    tokens: int,
    approval_tools: tuple[str, ...] = (),
    stop_reason: str = "",
) -> Classified:
    """What round ``round_``'s reply means; ``ledger`` counts the calls it admits. A call
    whose tool matches ``approval_tools`` gets an approval id (it waits for approval).
    A decision hands work to one outside agent at most: its first admitted ``agent.send``
    goes out, every further one is not sent and becomes a notice (``ONE_HANDOFF``) that
    the model sees next round; it never reaches the state machine, so no replay sends it.
    A reply that broke the protocol because it was empty, hit the output limit
    (``stop_reason`` ``max_tokens``) or was stopped repeating itself (``repetition``) is
    named so, with what it broke."""
    answer = channels.get("answer", "")
    checked = check_decision(
        channels.get("decision", ""),
        external=external,
        max_calls=max_calls,
        answer=answer,
        round_=round_,
    )
    notices = list(checked.notices)
    if checked.action in ("complete", "exit"):
        return Classified("answer", checked.notes, tuple(notices), answer=answer.strip())
    calls: list[ev.ToolSpec] = []
    agent_calls: list[ev.AgentCall] = []
    refused: list[Notice] = []
    for call in checked.calls:
        if call.tool == AGENT_SEND and agent_calls:
            notices.append(_second_handoff(call, agent_calls[0]))
            continue
        problem = ledger.admit(call) or _agent_problem(call)
        if problem is not None:
            (refused if problem.code == "repeated_call" else notices).append(problem)
            continue
        if call.tool == AGENT_SEND:
            name, text = str(call.params["name"]), str(call.params["text"])
            agent_calls.append(ev.AgentCall(call.call_id, new_id("task-"), name, text))
        else:
            calls.append(gate(call, approval_tools))
    event: ev.ModelEvent
    if calls or agent_calls:
        event = ev.ModelDecided(round_, tuple(calls), tuple(agent_calls), tokens)
        notices += refused
    elif refused:
        first = refused[0]
        event = ev.CallRefused(round_, first.code, first.message, tokens)
        notices += refused[1:]
    else:
        first = notices.pop(0) if notices else Notice("empty_decision", "no usable call")
        first = why_broken(first, channels, stop_reason)
        event = ev.ProtocolViolation(round_, first.code, first.message, tokens)
    return Classified("event", checked.notes, tuple(notices), event=event)


@dataclass(slots=True)
class TurnOutput:
    """What a turn gathers from its model calls for its ``turn.result``."""

    conversation_id: str
    turn_id: str
    usage: Usage = field(default_factory=Usage)
    seq: int = 0
    """The next ``stream.delta`` seq of the turn."""
    followups: list[str] = field(default_factory=list)
    sources_used: list[int] = field(default_factory=list)
    client_answers: dict[str, str] = field(default_factory=dict)
    """Raw answer -> the text clients saw (citations resolved by the streamer)."""

    def add(self, result: GenerateResult) -> int:
        """Count one model call; returns the tokens it used."""
        self.usage = self.usage + result.usage
        self.seq = max(self.seq, result.seq_end)
        return result.usage.total_input_tokens + result.usage.output_tokens

    @property
    def cost(self) -> Cost:
        """What the turn's model calls (their compaction summaries included) cost so far."""
        return price(self.usage)

    def answered(self, result: GenerateResult, answer: str) -> None:
        """The answer of ``result`` is the turn's: its followups, citations, client text."""
        self.followups = parse_followups(result.channels.get("followup", ""))
        self.sources_used = list(result.used_sources)
        self.client_answers[answer] = result.answer_emitted.strip()

    def result(
        self,
        status: TurnStatus,
        answer: str,
        rounds: int,
        error: str | None,
        context: ContextTelemetry | None = None,
    ) -> ReActResult:
        return ReActResult(
            conversation_id=self.conversation_id,
            turn_id=self.turn_id,
            status=status,
            answer=self.client_answers.get(answer, answer),
            followups=list(self.followups),
            sources_used=list(self.sources_used),
            usage=self.usage.model_copy(update={"context": context}) if context else self.usage,
            cost=self.cost,
            rounds=rounds,
            error=error,
        )


def parse_followups(raw: str) -> list[str]:
    """The followup channel's JSON list (at most five); anything else is no followups."""
    try:
        data = json.loads(strip_fence(raw).strip() or "[]")
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [str(item) for item in data if isinstance(item, str | int | float)][:MAX_FOLLOWUPS]


STOPPED = {
    "max_tokens": (
        "truncated",
        "The reply reached the output limit (max_tokens) before it was complete",
    ),
    "repetition": ("repetition", "The reply kept repeating itself and was stopped"),
}
"""Stop reasons that explain a broken reply -> its notice code and first words."""


def why_broken(first: Notice, channels: Mapping[str, str], stop_reason: str) -> Notice:
    """The notice of a reply that gave no usable decision: ``first`` (what it broke), named
    by its cause when the reply was empty or was stopped."""
    if not any(text.strip() for text in channels.values()):
        return Notice(
            "empty_reply",
            "The reply was empty. Write the thinking channel, then one JSON decision.",
        )
    stopped = STOPPED.get(stop_reason)
    if stopped is None:
        return first
    code, words = stopped
    return Notice(
        code,
        f"{words} ({first.code}: {first.message}) Write less: one short thinking line, "
        "then the decision.",
    )


def _second_handoff(call: ev.ToolSpec, sent: ev.AgentCall) -> Notice:
    """The notice of an ``agent.send`` refused because ``sent`` hands off this decision."""
    name = call.params.get("name")
    to = f"to {name}" if isinstance(name, str) and is_valid_name(name) else "call"
    return Notice(
        ONE_HANDOFF,
        f"One hand-off per decision: this agent.send {to} was not sent; this decision "
        f"handed work to {sent.agent} (task {sent.task_id}). You may send the next "
        "hand-off after this one, in a later decision.",
        AGENT_SEND,
    )


def _agent_problem(call: ev.ToolSpec) -> Notice | None:
    if call.tool != AGENT_SEND:
        return None
    name = call.params.get("name")
    if not isinstance(name, str) or not is_valid_name(name):
        return Notice(
            "bad_params",
            f"agent.send needs the agent's name (letters, digits, '-', '_'), got {name!r}.",
            AGENT_SEND,
        )
    text = call.params.get("text")
    if not isinstance(text, str) or not text.strip():
        return Notice("bad_params", "agent.send needs the task text.", AGENT_SEND)
    return None
