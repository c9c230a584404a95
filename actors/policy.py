"""The pure decisions of a turn that sit beside the state machine (``actors.state``).

Nothing here does I/O or reads a clock. ``TurnSettings.parse`` reads a turn request's
``config`` once (the one place turn limits are parsed); ``classify_reply`` turns one
model reply into the event the state machine takes plus the notices the model sees
next round; ``parse_followups`` reads the followup channel; ``verdict`` says what the
sender of a DONE is told, from what the state machine did with it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, TypeVar

import messages
from channels import strip_fence
from messages import (
    Ack,
    ContextTelemetry,
    ErrorReply,
    GenerateResult,
    ReActResult,
    TurnStatus,
    Usage,
    new_id,
)
from messages.ids import is_valid_name
from timeline import TimelineConfig

from . import events as ev
from .approvals import gate, split_config
from .decision_protocol import CallLedger, Notice, check_decision
from .limits import check_config, check_defaults
from .profiles import BALANCED, Profile, parse_patterns, resolve

AGENT_SEND = "agent.send"
AGENT_ABSENT = "agent_absent"
"""The code of the notice that a task waits in the inbox of an agent that is not connected."""
MAX_FOLLOWUPS = 5
MAX_CALLS = 5
"""Tool calls one decision may make unless the turn's config says otherwise."""
MAX_REFUSALS = 3
"""Refused decisions in a row that fail a turn unless its config says otherwise."""

T = TypeVar("T")


class TurnDefaults(Protocol):
    """The node settings a turn's config falls back to (``NodeSettings`` is one)."""

    @property
    def max_iterations(self) -> int: ...
    @property
    def token_budget(self) -> int: ...
    @property
    def wait_timeout_s(self) -> float: ...
    @property
    def followup_grace_s(self) -> float: ...
    @property
    def tool_timeout_s(self) -> float: ...
    @property
    def model(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def profiles(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def approve_tools(self) -> str: ...
    @property
    def max_context_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TurnSettings:
    """Everything a turn's ``config`` may set, resolved against the node's defaults."""

    limits: ev.Limits
    timeline: TimelineConfig
    """The renderer's settings under ``profile``, the context capped by the node's (made
    with the settings, so once per distinct config: ``SettingsMemo``)."""
    max_calls: int = MAX_CALLS
    grace_s: float = 0.75
    model: str = "extractive"
    tool_timeout_s: float = 60.0
    profile: Profile = BALANCED
    """The turn's resolved profile, the config's top-level limits included."""
    approval_tools: tuple[str, ...] = ()
    """Tool name patterns whose calls wait for an approval (``actors.approvals``): the
    node's, the profile's and the config's ``approve_tools``."""

    @property
    def memory_scope(self) -> Literal["conversation", "user"]:
        """Where memory facts live: this conversation, or every conversation of the turn's
        user (the profile's ``memory_scope``)."""
        return "user" if self.profile.memory_scope == "user" else "conversation"

    @property
    def memory_hotset(self) -> int:
        """How many memory facts ANNOUNCE shows (the profile's ``memory_hotset``)."""
        return self.profile.memory_hotset

    @classmethod
    def parse(cls, config: Mapping[Any, Any], defaults: TurnDefaults) -> TurnSettings:
        """The settings of a turn: ``config``'s values, else its profile's
        (``actors.profiles``: ``config["profile"]``, else the node's), else the node's
        (``max_tokens`` 0: no token budget). Every value is of its type, finite and within
        its bound (``actors.limits.CONFIG``, docs/limits.md); ``InputRefused`` (a
        ``SettingsError``) names the first key that is not, an unknown key or profile, or a
        default out of bounds. ``approve_tools`` (in the config or its profile) adds to the
        node's approval patterns, never removes one."""
        config, added = split_config(config)
        required = parse_patterns(defaults.approve_tools, "ACTLINE_APPROVE_TOOLS")
        given = check_config(config)
        check_defaults(defaults)
        profile = resolve(
            given.profile, defaults.profiles, defaults, defaults.profile, where="config.profile"
        )
        profile = replace(
            profile,
            max_iterations=_pick(given.max_iterations, profile.max_iterations),
            token_budget=_pick(given.max_tokens, profile.token_budget),
            max_tool_calls_per_decision=_pick(
                given.max_tool_calls_per_decision, profile.max_tool_calls_per_decision
            ),
            wait_timeout_s=float(_pick(given.wait_timeout_s, profile.wait_timeout_s)),
            approve_tools=tuple(dict.fromkeys(required + profile.approve_tools + added)),
        )
        budget = profile.token_budget
        limits = ev.Limits(
            max_iterations=profile.max_iterations,
            token_budget=budget if budget > 0 else None,
            max_consecutive_refusals=_pick(given.max_consecutive_refusals, MAX_REFUSALS),
            wait_timeout_s=profile.wait_timeout_s,
        )
        return cls(
            limits=limits,
            timeline=profile.timeline_config(defaults.max_context_tokens),
            max_calls=profile.max_tool_calls_per_decision,
            grace_s=float(_pick(given.followup_grace_s, defaults.followup_grace_s)),
            model=_pick(given.model, defaults.model),
            tool_timeout_s=float(_pick(given.tool_timeout_s, defaults.tool_timeout_s)),
            profile=profile,
            approval_tools=profile.approve_tools,
        )


class SettingsMemo:
    """The settings of the configs a node saw lately: a turn's settings depend only on its
    config and the node's defaults, so each distinct config is parsed once, not per turn.
    A config that is refused, or is not plain JSON, is parsed (and refused) every time."""

    SIZE = 256

    def __init__(self, defaults: TurnDefaults) -> None:
        self.defaults = defaults
        self._memo: dict[str, TurnSettings] = {}

    def parse(self, config: Mapping[Any, Any]) -> TurnSettings:
        try:
            key = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            return TurnSettings.parse(config, self.defaults)
        settings = self._memo.get(key)
        if settings is None:
            settings = TurnSettings.parse(config, self.defaults)
            if len(self._memo) >= self.SIZE:
                del self._memo[next(iter(self._memo))]  # the oldest
            self._memo[key] = settings
        return settings


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
) -> Classified:
    """What round ``round_``'s reply means; ``ledger`` counts the calls it admits. A call
    whose tool matches ``approval_tools`` gets an approval id (it waits for approval)."""
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


def verdict(signal: messages.DoneSignal, effects: tuple[ev.Effect, ...]) -> messages.Message:
    """What the sender of a DONE is told, from what the state machine did with it."""
    ref = signal.task_id or signal.turn_id or ""
    for effect in effects:
        match effect:
            case ev.RecordNotice(code=code, text=text, signal_id=sid) if sid == signal.signal_id:
                return ErrorReply(code=code, message=text)
            case ev.RecordSignal(task_id=task_id):
                return Ack(ref=task_id, detail="applied")
            case ev.RecordLateSignal():
                return Ack(ref=ref, detail="late: recorded, announced next turn")
            case ev.Ignored(reason=reason) if "duplicate" in reason:
                return Ack(ref=ref, detail="duplicate: already applied")
    return Ack(ref=ref, detail="queued: applied when the turn next waits")


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


def _pick(given: T | None, default: T) -> T:
    return default if given is None else given
