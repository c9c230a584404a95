"""The DecisionActor's state machine, whole: every (phase, event) pair has a defined outcome,
and wire messages become its events.

``transition`` is pure, so these tests feed events and read effects: no actor, no
NATS, no clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import pytest

from actline import messages
from actline.actors.configuration.settings import NodeSettings
from actline.actors.configuration.turn_settings import Limits, TurnSettings
from actline.actors.errors import InputRefused
from actline.actors.turn.events import (
    AnswerDeferred,
    ApprovalDecided,
    CallRefused,
    CancelReAct,
    DoneSignal,
    Event,
    ModelAnswered,
    ModelDecided,
    ModelFailed,
    ProtocolViolation,
    Reset,
    ResumeReAct,
    SkipWaiting,
    StartReAct,
    ToolsFinished,
    WaitTimeout,
    event_from_message,
)
from actline.actors.turn.state import DecisionState, transition
from tests.actors.turn.state.machine import (
    CALL,
    CANCEL,
    DENY_ALL,
    FINISH,
    IGNORED,
    LATE,
    NOT_WAITING,
    NOTICE,
    SEARCH,
    TURN,
    acting,
    complete_with_open_task,
    done,
    idle_after_turn,
    kinds,
    thinking_with_open_task,
    waiting,
    waiting_for_approval,
)

# --- the whole table -----------------------------------------------------------------------

STATES: dict[str, Callable[[], DecisionState]] = {
    "idle": DecisionState,
    "thinking": thinking_with_open_task,
    "acting": acting,
    "waiting": waiting,
    "waiting for approval": waiting_for_approval,
    "complete": complete_with_open_task,
    "idle after a turn": idle_after_turn,
}

EVENTS: dict[str, Callable[[DecisionState], Event]] = {
    "StartReAct": lambda s: StartReAct("turn-2"),
    "ResumeReAct": lambda s: ResumeReAct("turn-2", round=2),
    "ModelDecided": lambda s: ModelDecided(s.round, (SEARCH,)),
    "ModelAnswered": lambda s: ModelAnswered(s.round, "the answer"),
    "AnswerDeferred": lambda s: AnswerDeferred(s.round, "a followup landed"),
    "ProtocolViolation": lambda s: ProtocolViolation(s.round, "bad_json", "not JSON"),
    "CallRefused": lambda s: CallRefused(s.round, "repeat", "fourth identical call"),
    "ModelFailed": lambda s: ModelFailed(s.round, "overloaded"),
    "ToolsFinished": lambda s: ToolsFinished(s.round),
    "DoneSignal": lambda s: done("sig-9"),
    "SkipWaiting": lambda s: SkipWaiting(TURN),
    "WaitTimeout": lambda s: WaitTimeout(s.wait_generation),
    "CancelReAct": lambda s: CancelReAct(TURN),
    "ApprovalDecided": lambda s: ApprovalDecided(TURN, None, True, "alice"),
    "Reset": lambda s: Reset(),
}

TABLE: dict[str, dict[str, tuple[str, list[str]]]] = {
    "idle": {
        "StartReAct": ("thinking", CALL),
        "ResumeReAct": ("thinking", ["EmitProgress", *CALL]),
        "DoneSignal": LATE,
        "CancelReAct": ("same", ["EmitProgress"]),  # remembered for StartReAct(turn-1)
    },
    "thinking": {
        "ModelDecided": ("acting", ["EmitProgress", "RunTools"]),
        "ModelAnswered": ("complete", FINISH),
        "AnswerDeferred": ("thinking", ["EmitProgress", *CALL]),
        "ProtocolViolation": ("thinking", [*NOTICE, *CALL]),
        "CallRefused": ("thinking", [*NOTICE, *CALL]),
        "ModelFailed": ("complete", FINISH),
        "DoneSignal": ("same", ["EmitProgress"]),  # queued
        "SkipWaiting": ("same", ["EmitProgress"]),  # queued
        "CancelReAct": ("complete", ["CancelModel", *CANCEL]),
    },
    "acting": {
        "ToolsFinished": ("waiting", ["EmitProgress", "StartWaitTimer", "EmitProgress"]),
        "DoneSignal": ("same", ["EmitProgress"]),  # queued
        "SkipWaiting": ("same", ["EmitProgress"]),  # queued
        "CancelReAct": ("complete", ["CancelTools", *CANCEL]),
    },
    "waiting": {
        "DoneSignal": (
            "thinking",
            ["RecordSignal", "EmitProgress", "CancelWaitTimer", *CALL],
        ),
        "SkipWaiting": ("thinking", ["CancelWaitTimer", *NOTICE, *CALL]),
        "WaitTimeout": ("thinking", [*NOTICE, *CALL]),
        "CancelReAct": ("complete", ["CancelWaitTimer", *CANCEL]),
    },
    "waiting for approval": {
        "DoneSignal": ("same", ["EmitProgress"]),  # queued until the held calls ran
        "SkipWaiting": ("acting", [*DENY_ALL, "RunTools"]),  # the search still runs
        "WaitTimeout": ("acting", [*DENY_ALL, "RunTools"]),
        "CancelReAct": ("complete", ["CancelWaitTimer", *CANCEL]),
        "ApprovalDecided": (
            "acting",
            ["ApprovalVerdict", "EmitProgress", "CancelWaitTimer", "RunTools"],
        ),
    },
    "complete": {
        "DoneSignal": LATE,
        "Reset": ("idle", []),
    },
    "idle after a turn": {
        "StartReAct": ("thinking", CALL),
        "ResumeReAct": ("thinking", ["EmitProgress", *CALL]),
        "DoneSignal": LATE,
    },
}
CASES = [
    (p, e, *TABLE[p].get(e, NOT_WAITING if e == "ApprovalDecided" else IGNORED))
    for p in STATES
    for e in EVENTS
]


@pytest.mark.parametrize(("start", "event_name", "phase", "effects"), CASES)
def test_every_phase_and_event_pair_has_a_defined_outcome(
    start: str, event_name: str, phase: str, effects: list[str]
) -> None:
    before = STATES[start]()
    after, out = transition(before, EVENTS[event_name](before))
    assert kinds(out) == effects
    if effects == ["Ignored"]:
        assert after == before
    assert after.phase == (before.phase if phase == "same" else phase)


def test_the_table_covers_every_event_type() -> None:
    assert set(EVENTS) == {cls.__name__ for cls in get_args(Event)}


# --- wire messages --------------------------------------------------------------------------


def test_wire_messages_become_events() -> None:
    wire_done = messages.DoneSignal(agent="reviewer", task_id="task-1", summary="ok")
    assert event_from_message(wire_done) == DoneSignal(
        wire_done.signal_id, "reviewer", None, "task-1", "ok", ()
    )
    assert event_from_message(messages.SkipWaiting(turn_id=TURN)) == SkipWaiting(TURN)
    assert event_from_message(messages.CancelReAct(turn_id=TURN, reason="x")) == CancelReAct(
        TURN, "x"
    )


def test_turn_limits_take_a_token_budget_and_refuse_a_bad_override() -> None:
    config = {"max_tokens": 5000, "wait_timeout_s": 30}
    parsed = TurnSettings.parse(config, NodeSettings())
    assert parsed.limits == Limits(
        max_iterations=15, token_budget=5000, wait_timeout_s=30.0, max_consecutive_refusals=3
    )
    with pytest.raises(InputRefused) as refused:
        TurnSettings.parse({**config, "max_consecutive_refusals": "many"}, NodeSettings())
    assert refused.value.field == "config.max_consecutive_refusals"
    assert TurnSettings.parse({"max_iterations": 4}, NodeSettings()).limits == Limits(
        max_iterations=4, wait_timeout_s=600.0
    )
