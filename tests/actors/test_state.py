"""The DecisionActor's state machine: every (phase, event) pair, the DONE handshake, guards.

``transition`` is pure, so these tests feed events and read effects: no actor, no
NATS, no clock. The Hypothesis properties at the end drive random event sequences.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import TypeVar, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actline import messages
from actline.actors.configuration.settings import NodeSettings
from actline.actors.configuration.turn_settings import Limits, TurnSettings
from actline.actors.errors import InputRefused
from actline.actors.turn.events import (
    AgentCall,
    AnswerDeferred,
    ApprovalDecided,
    ApprovalVerdict,
    CallModel,
    CallRefused,
    CancelModel,
    CancelReAct,
    CancelTools,
    CancelWaitTimer,
    DenyCall,
    DoneSignal,
    Effect,
    EmitProgress,
    Event,
    FinalizeBestEffort,
    Finish,
    Ignored,
    ModelAnswered,
    ModelDecided,
    ModelFailed,
    ProtocolViolation,
    RecordLateSignal,
    RecordNotice,
    RecordSignal,
    Reset,
    ResumeReAct,
    RunTools,
    SendAgentTask,
    SkipWaiting,
    StartReAct,
    StartWaitTimer,
    ToolsFinished,
    ToolSpec,
    WaitTimeout,
    event_from_message,
)
from actline.actors.turn.state import DecisionState, TurnPhase, transition
from actline.actors.turn.state.checkpoint import checkpoint, resume_event
from actline.actors.turn.state.record import RUNNING, QueuedDone

T = TypeVar("T")
TURN = "turn-1"
SEARCH = ToolSpec("call-1", "web.search", {"query": "actors"})
ASK_REVIEWER = AgentCall("call-2", "task-1", "reviewer", "review the plan")
ASK_TESTER = AgentCall("call-3", "task-2", "tester", "run the tests")
GATED = ToolSpec("call-4", "code.exec_python", {"code": "print(1)"}, approval_id="ap-1")


def run(state: DecisionState, *events: Event) -> tuple[DecisionState, list[Effect]]:
    """Feed events in order; return the last state and all effects."""
    effects: list[Effect] = []
    for event in events:
        state, out = transition(state, event)
        effects.extend(out)
    return state, effects


def kinds(effects: list[Effect] | tuple[Effect, ...]) -> list[str]:
    return [type(e).__name__ for e in effects]


def of(effects: list[Effect] | tuple[Effect, ...], cls: type[T]) -> list[T]:
    return [e for e in effects if isinstance(e, cls)]


def done(
    signal_id: str = "sig-1",
    agent: str = "reviewer",
    task_id: str | None = "task-1",
    turn_id: str | None = TURN,
) -> DoneSignal:
    """A DONE; by default the reviewer's answer to task-1 of turn-1."""
    return DoneSignal(signal_id, agent, turn_id, task_id, summary=f"{agent} is done")


def thinking(limits: Limits | None = None) -> DecisionState:
    return run(DecisionState(), StartReAct(TURN, limits or Limits()))[0]


def acting(limits: Limits | None = None) -> DecisionState:
    """Round 1 runs a search; task-1 went to the reviewer."""
    return run(thinking(limits), ModelDecided(1, (SEARCH,), (ASK_REVIEWER,)))[0]


def waiting(limits: Limits | None = None) -> DecisionState:
    return run(acting(limits), ToolsFinished(1))[0]


def waiting_for_approval() -> DecisionState:
    """Round 1 decided a gated call, a search and task-1: the calls wait for approval ap-1."""
    return run(thinking(), ModelDecided(1, (GATED, SEARCH), (ASK_REVIEWER,)))[0]


def thinking_with_open_task() -> DecisionState:
    """Round 2, after the wait for task-1 was skipped: task-1 stays open."""
    return run(waiting(), SkipWaiting(TURN))[0]


def complete_with_open_task() -> DecisionState:
    return run(thinking_with_open_task(), ModelAnswered(2, "the answer"))[0]


def idle_after_turn() -> DecisionState:
    return run(complete_with_open_task(), Reset())[0]


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

IGNORED = ("same", ["Ignored"])
NOT_WAITING = ("same", ["ApprovalVerdict"])  # a refused approval: the sender is told why
NOTICE = ["RecordNotice", "EmitProgress"]
LATE = ("same", ["RecordLateSignal", "EmitProgress"])
CALL = ["EmitProgress", "CallModel"]
FINISH = ["EmitProgress", "Finish"]
CANCEL = [*NOTICE, *FINISH]
DENY_ALL = ["ApprovalVerdict", "EmitProgress", "CancelWaitTimer", "DenyCall", *NOTICE]

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


# --- a turn without agents ----------------------------------------------------------------


def test_start_calls_the_model_for_round_one() -> None:
    state, effects = run(DecisionState(), StartReAct(TURN))
    assert (state.phase, state.turn_id, state.round) == (TurnPhase.THINKING, TURN, 1)
    assert of(effects, CallModel) == [CallModel(1)]
    assert of(effects, EmitProgress)[0].phase == "thinking"


def test_a_decision_runs_its_tools_and_sends_its_agent_tasks() -> None:
    state, effects = run(thinking(), ModelDecided(1, (SEARCH,), (ASK_REVIEWER,), tokens=30))
    assert state.phase is TurnPhase.ACTING
    assert of(effects, RunTools) == [RunTools(1, (SEARCH,))]
    assert of(effects, SendAgentTask) == [
        SendAgentTask("call-2", "task-1", "reviewer", "review the plan")
    ]
    assert [(t.task_id, t.agent, t.round) for t in state.outstanding] == [("task-1", "reviewer", 1)]
    assert "web.search" in of(effects, EmitProgress)[0].detail
    assert state.tokens_used == 30


def test_tools_finished_without_agent_tasks_calls_the_model_again() -> None:
    state, effects = run(thinking(), ModelDecided(1, (SEARCH,)), ToolsFinished(1, "1 result"))
    assert (state.phase, state.round) == (TurnPhase.THINKING, 2)
    assert [e.phase for e in of(effects, EmitProgress)][-2:] == ["tool_result", "thinking"]
    assert of(effects, CallModel)[-1] == CallModel(2)


def test_tools_finished_with_an_open_agent_task_starts_the_wait_timer() -> None:
    state, effects = run(acting(Limits(wait_timeout_s=30)), ToolsFinished(1))
    assert state.phase is TurnPhase.WAITING
    assert of(effects, StartWaitTimer) == [StartWaitTimer(state.wait_generation, 30)]
    assert "reviewer" in of(effects, EmitProgress)[-1].detail


def test_an_agent_only_decision_goes_straight_to_waiting() -> None:
    state, effects = run(thinking(), ModelDecided(1, (), (ASK_REVIEWER,)))
    assert state.phase is TurnPhase.WAITING
    assert kinds(effects) == ["EmitProgress", "SendAgentTask", "StartWaitTimer", "EmitProgress"]


def test_an_answer_completes_the_turn_with_its_rounds_and_tokens() -> None:
    state, effects = run(thinking(), ModelAnswered(1, "42", tokens=12))
    assert (state.phase, state.status) == (TurnPhase.COMPLETE, "completed")
    assert effects[-1] == Finish("completed", "42", None, rounds=1, tokens_used=12)


def test_a_model_failure_fails_the_turn_with_its_error() -> None:
    state, effects = run(thinking(), ModelFailed(1, "HTTP 529 overloaded"))
    assert state.status == "failed"
    assert state.error is not None and "HTTP 529" in state.error
    assert of(effects, Finish)[0].status == "failed"


def test_a_stale_model_result_is_ignored() -> None:
    before = run(thinking(), ProtocolViolation(1, "bad_json"))[0]
    after, effects = transition(before, ModelAnswered(1, "from round one"))
    assert (after, kinds(effects)) == (before, ["Ignored"])


def test_a_stale_tool_round_is_ignored() -> None:
    before = acting()
    after, effects = transition(before, ToolsFinished(7))
    assert (after, kinds(effects)) == (before, ["Ignored"])


def test_usage_from_every_model_event_adds_up() -> None:
    state, _ = run(
        thinking(),
        ProtocolViolation(1, "bad_json", tokens=10),
        CallRefused(2, "repeat", tokens=20),
        ModelDecided(3, (SEARCH,), tokens=30),
        ToolsFinished(3),
        ModelAnswered(4, "ok", tokens=40),
    )
    assert state.tokens_used == 100


# --- guards -------------------------------------------------------------------------------


def test_a_protocol_violation_becomes_a_notice_and_the_model_is_called_again() -> None:
    state, effects = run(thinking(), ProtocolViolation(1, "bad_json", "no JSON object"))
    assert of(effects, RecordNotice) == [
        RecordNotice("protocol_violation.bad_json", "no JSON object")
    ]
    assert (state.phase, state.round, state.consecutive_refusals) == (TurnPhase.THINKING, 2, 0)


def test_an_empty_decision_is_a_protocol_violation() -> None:
    state, effects = run(thinking(), ModelDecided(1))
    assert of(effects, RecordNotice)[0].code == "protocol_violation.empty_decision"
    assert (state.phase, state.round) == (TurnPhase.THINKING, 2)


def test_three_refusals_in_a_row_fail_the_turn_with_a_clear_error() -> None:
    state, effects = run(
        thinking(), CallRefused(1, "repeat"), CallRefused(2, "repeat"), CallRefused(3, "too_many")
    )
    assert (state.phase, state.status) == (TurnPhase.COMPLETE, "failed")
    assert state.error == "3 decisions in a row were refused (last: too_many)"
    assert [n.code for n in of(effects, RecordNotice)] == ["protocol_violation.repeat"] * 2 + [
        "protocol_violation.too_many"
    ]
    assert of(effects, Finish)[0].error == state.error


def test_a_successful_decision_resets_the_refusal_count() -> None:
    state, _ = run(
        thinking(),
        CallRefused(1, "repeat"),
        CallRefused(2, "repeat"),
        ModelDecided(3, (SEARCH,)),
        ToolsFinished(3),
        CallRefused(4, "repeat"),
        CallRefused(5, "repeat"),
    )
    assert (state.phase, state.consecutive_refusals) == (TurnPhase.THINKING, 2)


def test_a_protocol_violation_neither_counts_nor_resets_refusals() -> None:
    state, _ = run(thinking(), CallRefused(1, "repeat"), ProtocolViolation(2, "bad_json"))
    assert state.consecutive_refusals == 1


def test_max_iterations_ends_the_turn_with_a_best_effort_answer() -> None:
    state, effects = run(
        thinking(Limits(max_iterations=2)),
        ModelDecided(1, (SEARCH,)),
        ToolsFinished(1),
        ModelDecided(2, (SEARCH,)),
        ToolsFinished(2),
    )
    assert (state.phase, state.status, state.round) == (TurnPhase.COMPLETE, "budget_exhausted", 2)
    assert of(effects, CallModel) == [CallModel(2)]
    assert kinds(effects)[-3:] == ["FinalizeBestEffort", "EmitProgress", "Finish"]
    assert "max_iterations (2)" in of(effects, FinalizeBestEffort)[0].reason
    assert of(effects, Finish)[0].answer is None


def test_the_token_budget_ends_the_turn_before_the_next_model_call() -> None:
    state, effects = run(
        thinking(Limits(token_budget=100)), ModelDecided(1, (SEARCH,), tokens=100), ToolsFinished(1)
    )
    assert state.status == "budget_exhausted"
    assert state.error == "token budget (100) spent: 100 tokens used"
    assert not of(effects, CallModel)
    assert kinds(effects)[-3:] == ["FinalizeBestEffort", "EmitProgress", "Finish"]


def test_the_budget_is_checked_after_a_protocol_violation_too() -> None:
    state, _ = run(thinking(Limits(max_iterations=1)), ProtocolViolation(1, "bad_json"))
    assert state.status == "budget_exhausted"


# --- DONE while waiting ------------------------------------------------------------------


def test_done_for_the_last_awaited_task_resumes_thinking() -> None:
    state, effects = run(waiting(), done())
    assert (state.phase, state.round) == (TurnPhase.THINKING, 2)
    assert of(effects, RecordSignal) == [RecordSignal(done(), "task-1")]
    assert of(effects, CancelWaitTimer) == [CancelWaitTimer(waiting().wait_generation)]
    assert state.outstanding == () and state.applied_signals == {"sig-1"}


def test_done_for_one_of_two_tasks_keeps_waiting_for_the_other() -> None:
    two = run(thinking(), ModelDecided(1, (), (ASK_REVIEWER, ASK_TESTER)))[0]
    state, effects = run(two, done())
    assert state.phase is TurnPhase.WAITING
    assert kinds(effects) == ["RecordSignal", "EmitProgress", "EmitProgress"]
    assert of(effects, EmitProgress)[-1].detail == "waiting for tester (task task-2)"


def test_a_duplicate_done_is_applied_once() -> None:
    _, effects = run(waiting(), done(), done())
    assert len(of(effects, RecordSignal)) == 1
    assert isinstance(effects[-1], Ignored) and "duplicate" in effects[-1].reason


def test_a_duplicate_done_in_a_later_turn_is_still_a_no_op() -> None:
    state = run(waiting(), done(), ModelAnswered(2, "ok"), Reset(), StartReAct("turn-2"))[0]
    state = run(state, ModelAnswered(1, "ok"), Reset(), StartReAct("turn-3"))[0]
    state = run(state, ModelDecided(1, (), (AgentCall("c", "task-7", "reviewer", "again"),)))[0]
    after, effects = transition(state, done(task_id=None, turn_id=None))
    assert (after, kinds(effects)) == (state, ["Ignored"])


def test_done_from_the_wrong_agent_is_refused_with_a_notice_and_not_applied() -> None:
    state, effects = run(waiting(), done(agent="intruder"))
    assert state.phase is TurnPhase.WAITING and state.outstanding[0].task_id == "task-1"
    notice = of(effects, RecordNotice)[0]
    assert (notice.code, notice.signal_id) == ("done_wrong_agent", "sig-1")
    assert "sent to reviewer" in notice.text
    assert not of(effects, RecordSignal)


def test_done_for_an_unknown_task_is_refused_with_a_notice() -> None:
    state, effects = run(waiting(), done(task_id="task-404"))
    assert of(effects, RecordNotice)[0].code == "done_unknown_task"
    assert state.phase is TurnPhase.WAITING


def test_a_second_done_for_an_answered_task_is_refused_with_a_notice() -> None:
    state, effects = run(waiting(), done("sig-1"), done("sig-2"))
    notice = of(effects, RecordNotice)[0]
    assert (notice.code, notice.signal_id) == ("done_already_answered", "sig-2")
    assert state.applied_signals == {"sig-1"}


def test_a_second_done_for_an_answered_task_after_its_turn_ended_is_refused_not_late() -> None:
    # an agent that restarted mid-task answers the task it was given again
    ended = run(waiting(), done("sig-1"), ModelAnswered(2, "ok"), Reset())[0]
    for state in (ended, run(ended, StartReAct("turn-2"))[0]):
        after, effects = transition(state, done("sig-2"))
        assert kinds(effects) == NOTICE and not of(effects, RecordLateSignal)
        assert of(effects, RecordNotice)[0].code == "done_already_answered"
        assert after == state


def test_done_without_a_task_id_goes_to_the_agents_oldest_open_task() -> None:
    again = AgentCall("call-4", "task-3", "reviewer", "and this one")
    two = run(thinking(), ModelDecided(1, (), (ASK_REVIEWER, again)))[0]
    state, effects = run(two, done("sig-a", task_id=None, turn_id=None))
    assert of(effects, RecordSignal)[0].task_id == "task-1"
    state, effects = run(state, done("sig-b", task_id=None, turn_id=None))
    assert of(effects, RecordSignal)[0].task_id == "task-3"
    assert state.phase is TurnPhase.THINKING


def test_two_human_dones_while_thinking_do_not_claim_the_same_task() -> None:
    human = done("sig-a", task_id=None, turn_id=None)
    state, effects = run(thinking_with_open_task(), human, done("sig-b", task_id=None))
    assert state.pending == (QueuedDone(human, "task-1"),)
    assert of(effects, RecordNotice)[0].code == "done_unknown_task"


def test_done_without_a_task_id_from_an_agent_without_open_task_is_refused() -> None:
    _, effects = run(waiting(), done(agent="tester", task_id=None, turn_id=None))
    assert of(effects, RecordNotice)[0].code == "done_unknown_task"


# --- DONE and SkipWaiting outside Waiting: queued, never dropped --------------------------


def test_done_during_thinking_is_queued_and_consumed_on_entering_waiting() -> None:
    """The reviewer answers while the model is deciding to ask the tester too."""
    queued, effects = run(thinking_with_open_task(), done())
    assert kinds(effects) == ["EmitProgress"] and queued.pending == (QueuedDone(done(), "task-1"),)
    state, effects = run(queued, ModelDecided(2, (SEARCH,), (ASK_TESTER,)), ToolsFinished(2))
    assert state.phase is TurnPhase.WAITING and state.pending == ()
    assert of(effects, RecordSignal) == [RecordSignal(done(), "task-1")]
    assert [t.task_id for t in state.awaited] == ["task-2"]


def test_done_during_acting_is_queued_and_ends_the_wait_at_once() -> None:
    queued, effects = run(acting(), done())
    assert queued.phase is TurnPhase.ACTING and len(queued.pending) == 1
    assert not of(effects, RecordSignal)
    state, effects = run(queued, ToolsFinished(1))
    assert (state.phase, state.round) == (TurnPhase.THINKING, 2)
    assert kinds(effects) == ["EmitProgress", "RecordSignal", "EmitProgress", *CALL]
    assert not of(effects, StartWaitTimer)


def test_a_queued_done_is_applied_before_the_next_model_call() -> None:
    state, effects = run(thinking_with_open_task(), done(), ProtocolViolation(2, "bad_json"))
    assert of(effects, RecordSignal) == [RecordSignal(done(), "task-1")]
    assert kinds(effects)[-2:] == CALL and state.pending == ()


def test_a_queued_done_left_when_the_turn_completes_is_recorded_late() -> None:
    state, effects = run(thinking_with_open_task(), done(), ModelAnswered(2, "answer"))
    assert of(effects, RecordLateSignal) == [
        RecordLateSignal(done(), "the turn ended before it was used")
    ]
    assert kinds(effects)[-2:] == FINISH and state.pending == ()


def test_done_after_the_wait_timed_out_is_queued_while_the_turn_goes_on() -> None:
    timed_out, effects = run(waiting(), WaitTimeout(waiting().wait_generation))
    notice = of(effects, RecordNotice)[0]
    assert notice.code == "wait_timeout" and "reviewer (task task-1)" in notice.text
    assert timed_out.outstanding[0].task_id == "task-1"
    state, effects = run(timed_out, done())
    assert state.pending == (QueuedDone(done(), "task-1"),)
    state, effects = run(state, ModelDecided(2, (SEARCH,)), ToolsFinished(2))
    assert of(effects, RecordSignal) == [RecordSignal(done(), "task-1")]
    assert state.phase is TurnPhase.THINKING


def test_done_after_the_wait_timed_out_and_the_turn_completed_is_late() -> None:
    timed_out = run(waiting(), WaitTimeout(waiting().wait_generation))[0]
    state, effects = run(timed_out, ModelAnswered(2, "answer"), done())
    assert of(effects, RecordLateSignal) == [RecordLateSignal(done(), "its turn is not running")]
    assert state.phase is TurnPhase.COMPLETE and not of(effects, RecordSignal)


def test_skip_waiting_during_thinking_skips_the_next_wait() -> None:
    state, effects = run(
        thinking(), SkipWaiting(TURN), ModelDecided(1, (SEARCH,), (ASK_REVIEWER,)), ToolsFinished(1)
    )
    assert (state.phase, state.round) == (TurnPhase.THINKING, 2)
    assert of(effects, RecordNotice)[0].code == "wait_skipped"
    assert not of(effects, StartWaitTimer)
    assert state.outstanding[0].task_id == "task-1"


def test_skip_waiting_during_acting_skips_the_wait_it_was_meant_for() -> None:
    state, effects = run(acting(), SkipWaiting(TURN), ToolsFinished(1))
    assert state.phase is TurnPhase.THINKING and not of(effects, StartWaitTimer)


def test_skip_waiting_is_queued_once() -> None:
    queued = run(thinking(), SkipWaiting(TURN))[0]
    state, effects = transition(queued, SkipWaiting(TURN))
    assert (state, kinds(effects)) == (queued, ["Ignored"])


def test_skip_waiting_in_waiting_resumes_thinking_and_keeps_the_task_open() -> None:
    state, effects = run(waiting(), SkipWaiting(TURN, "user pressed ESC"))
    assert kinds(effects) == ["CancelWaitTimer", *NOTICE, *CALL]
    assert "user pressed ESC" in of(effects, RecordNotice)[0].text
    assert state.outstanding[0].task_id == "task-1" and state.awaited == ()


def test_a_skipped_task_does_not_hold_later_tool_rounds_in_waiting() -> None:
    state, effects = run(thinking_with_open_task(), ModelDecided(2, (SEARCH,)), ToolsFinished(2))
    assert state.phase is TurnPhase.THINKING and not of(effects, StartWaitTimer)


def test_a_late_done_for_a_skipped_task_is_applied_in_the_next_wait() -> None:
    waiting_again = run(thinking_with_open_task(), ModelDecided(2, (), (ASK_TESTER,)))[0]
    state, effects = run(waiting_again, done())
    assert of(effects, RecordSignal)[0].task_id == "task-1"
    assert state.phase is TurnPhase.WAITING and [t.agent for t in state.awaited] == ["tester"]


@pytest.mark.parametrize("make", [DecisionState, complete_with_open_task, idle_after_turn])
def test_skip_waiting_without_a_running_turn_is_ignored(
    make: Callable[[], DecisionState],
) -> None:
    before = make()
    after, effects = transition(before, SkipWaiting(TURN))
    assert (after, kinds(effects)) == (before, ["Ignored"])


def test_skip_waiting_for_another_turn_is_ignored() -> None:
    before = waiting()
    after, effects = transition(before, SkipWaiting("turn-0"))
    assert (after, kinds(effects)) == (before, ["Ignored"])


# --- the wait timer ----------------------------------------------------------------------------


def test_a_timer_of_an_earlier_wait_is_ignored() -> None:
    first = waiting()
    resumed = run(first, done())[0]
    again = run(resumed, ModelDecided(2, (), (ASK_TESTER,)))[0]
    assert again.phase is TurnPhase.WAITING
    after, effects = transition(again, WaitTimeout(first.wait_generation))
    assert (after, kinds(effects)) == (again, ["Ignored"])


def test_a_timer_firing_after_the_wait_ended_is_ignored() -> None:
    before = run(waiting(), done())[0]
    after, effects = transition(before, WaitTimeout(waiting().wait_generation))
    assert (after, kinds(effects)) == (before, ["Ignored"])


def test_wait_generations_never_repeat_across_turns() -> None:
    first = waiting().wait_generation
    later = run(waiting(), CancelReAct(), Reset(), StartReAct("turn-2"))[0]
    later = run(later, ModelDecided(1, (), (AgentCall("c", "task-9", "tester", "x"),)))[0]
    assert later.wait_generation > first


# --- cancel -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "stop", "interrupted"),
    [
        (thinking, CancelModel(1), "thinking (round 1)"),
        (acting, CancelTools(1), "running the tools of round 1"),
        (waiting, CancelWaitTimer(1), "waiting for reviewer (task task-1)"),
    ],
)
def test_cancel_stops_what_runs_and_completes_the_turn_as_cancelled(
    make: Callable[[], DecisionState], stop: Effect, interrupted: str
) -> None:
    state, effects = run(make(), CancelReAct(TURN, "ESC twice"))
    assert (state.phase, state.status) == (TurnPhase.COMPLETE, "cancelled")
    assert effects[0] == stop
    assert of(effects, RecordNotice)[0].text == f"cancelled while {interrupted} (ESC twice)"
    assert effects[-1] == Finish("cancelled", None, state.error, state.round, 0)


def test_cancel_records_the_signals_still_queued() -> None:
    _, effects = run(acting(), done(), CancelReAct())
    assert of(effects, RecordLateSignal)[0].signal == done()


def test_cancel_of_a_complete_turn_is_a_no_op() -> None:
    before = complete_with_open_task()
    after, effects = transition(before, CancelReAct(TURN))
    assert (after, kinds(effects)) == (before, ["Ignored"])


def test_cancel_for_another_turn_does_not_touch_the_running_one() -> None:
    before = thinking()
    after, effects = transition(before, CancelReAct("turn-0"))
    assert (after, kinds(effects)) == (before, ["Ignored"])


def test_cancel_of_the_turn_that_just_completed_does_not_touch_the_next_one() -> None:
    state, effects = run(idle_after_turn(), CancelReAct(TURN), StartReAct("turn-2"))
    assert kinds(effects)[0] == "Ignored" and state.phase is TurnPhase.THINKING


def test_a_cancel_that_arrives_before_the_start_cancels_the_turn_when_it_starts() -> None:
    state, effects = run(DecisionState(), CancelReAct(TURN), StartReAct(TURN))
    assert (state.phase, state.status) == (TurnPhase.COMPLETE, "cancelled")
    assert not of(effects, CallModel) and of(effects, Finish)[0].rounds == 0


def test_a_cancel_for_another_turn_before_the_start_is_dropped() -> None:
    state, effects = run(DecisionState(), CancelReAct("turn-0"), StartReAct(TURN))
    assert state.phase is TurnPhase.THINKING and of(effects, Ignored)


# --- after the turn -------------------------------------------------------------------------


def test_done_after_the_turn_completed_is_recorded_late() -> None:
    state, effects = run(complete_with_open_task(), done())
    assert of(effects, RecordLateSignal) == [RecordLateSignal(done(), "its turn is not running")]
    assert "announced next turn" in of(effects, EmitProgress)[0].detail
    assert state.seen_signals == {"sig-1"}


def test_done_after_reset_is_recorded_late_and_still_checked_against_its_task() -> None:
    _, effects = run(idle_after_turn(), done("sig-1"), done("sig-2", agent="intruder"))
    assert len(of(effects, RecordLateSignal)) == 1
    assert of(effects, RecordNotice)[0].code == "done_wrong_agent"


def test_done_for_the_previous_turn_during_the_next_turn_is_late() -> None:
    next_turn = run(idle_after_turn(), StartReAct("turn-2"))[0]
    _, effects = run(next_turn, done(turn_id=TURN), done("sig-2", turn_id=None))
    assert len(of(effects, RecordLateSignal)) == 2
    assert not of(effects, RecordSignal)


def test_reset_keeps_only_the_ended_turns_tasks() -> None:
    state = idle_after_turn()
    assert (state.phase, state.turn_id, state.tasks, state.round) == (TurnPhase.IDLE, None, (), 0)
    assert state.previous is not None and state.previous.turn_id == TURN
    assert [t.task_id for t in state.previous.tasks] == ["task-1"]


def test_start_is_ignored_until_the_complete_turn_is_reset() -> None:
    before = complete_with_open_task()
    after, effects = transition(before, StartReAct("turn-2"))
    assert (after, kinds(effects)) == (before, ["Ignored"])


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


# --- properties over random event sequences ------------------------------------------------

AGENTS = ("reviewer", "tester")
SIGNAL_IDS = tuple(f"sig-{i}" for i in range(25))
KINDS = (
    "start start decided decided decided answered violation refused failed tools tools "
    "done done done done done skip timeout timeout cancel reset reset approval approval"
).split()


def draw_event(data: st.DataObject, state: DecisionState, fresh: Callable[[], str]) -> Event:
    """One event that is plausible for ``state`` (current round and timer mostly right)."""
    waiting_now = state.phase is TurnPhase.WAITING
    kind = data.draw(st.sampled_from(KINDS + ["done"] * 8 if waiting_now else KINDS))
    round_ = data.draw(st.sampled_from((state.round,) * 4 + (state.round - 1,)))
    tokens = data.draw(st.integers(0, 80))
    turns = (None, state.turn_id, "turn-x", state.previous.turn_id if state.previous else None)
    if kind == "start":
        limits = Limits(
            max_iterations=data.draw(st.integers(1, 6)),
            token_budget=data.draw(st.none() | st.integers(0, 400)),
            max_consecutive_refusals=data.draw(st.integers(1, 3)),
        )
        return StartReAct(data.draw(st.sampled_from(("turn-a", "turn-b", "turn-c"))), limits)
    if kind == "decided":
        n_tools, n_agents = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
        calls = tuple(
            ToolSpec(
                fresh(), "web.search", approval_id=fresh() if data.draw(st.booleans()) else None
            )
            for _ in range(n_tools)
        )
        agents = [data.draw(st.sampled_from(AGENTS)) for _ in range(n_agents)]
        return ModelDecided(
            round_, calls, tuple(AgentCall(fresh(), fresh(), a, "do it") for a in agents), tokens
        )
    if kind == "answered":
        return ModelAnswered(round_, "answer", tokens)
    if kind == "violation":
        return ProtocolViolation(round_, "bad_json", tokens=tokens)
    if kind == "refused":
        return CallRefused(round_, "repeat", tokens=tokens)
    if kind == "failed":
        return ModelFailed(round_, "boom", tokens)
    if kind == "tools":
        return ToolsFinished(round_)
    if kind == "done":
        tasks = state.awaited * 3 + state.tasks + (state.previous.tasks if state.previous else ())
        task = data.draw(st.none() | st.sampled_from(tasks)) if tasks else None
        agent = data.draw(
            st.sampled_from((task.agent,) * 3 + AGENTS) if task else st.sampled_from(AGENTS)
        )
        task_id = task.task_id if task else data.draw(st.sampled_from((None, "task-unknown")))
        return DoneSignal(
            data.draw(st.sampled_from(SIGNAL_IDS)),
            agent,
            data.draw(st.sampled_from(turns)),
            task_id,
        )
    if kind == "skip":
        return SkipWaiting(data.draw(st.sampled_from(turns)))
    if kind == "timeout":
        return WaitTimeout(
            data.draw(st.sampled_from((state.wait_generation,) * 3 + (state.wait_generation - 1,)))
        )
    if kind == "cancel":
        return CancelReAct(data.draw(st.sampled_from((*turns, "turn-a", "turn-b"))))
    if kind == "approval":
        ids = tuple(a.approval_id for a in state.approvals) * 3 + (None, "ap-unknown")
        return ApprovalDecided(
            data.draw(st.sampled_from(turns)),
            data.draw(st.sampled_from(ids)),
            data.draw(st.booleans()),
            "alice",
        )
    return Reset()


def check_invariants(state: DecisionState) -> None:
    if state.phase is TurnPhase.WAITING and not state.pending_approvals:
        assert state.pending == () and state.awaited
    if state.pending_approvals:  # only an approval wait holds calls
        assert state.phase is TurnPhase.WAITING and state.held
    if state.phase is not TurnPhase.WAITING:
        assert state.held == () and state.approvals == ()
    assert (state.phase is TurnPhase.COMPLETE) == (state.status is not None)
    assert sum(isinstance(p, SkipWaiting) for p in state.pending) <= 1
    if state.phase not in RUNNING:
        assert state.pending == ()
    assert state.round <= max(state.limits.max_iterations, 0)
    assert state.applied_signals <= state.seen_signals


@settings(max_examples=300)
@given(st.data())
def test_random_event_sequences_keep_every_promise(data: st.DataObject) -> None:
    counter = itertools.count()

    def fresh() -> str:
        return f"id-{next(counter)}"

    state = DecisionState()
    sent: set[str] = set()
    queued: set[str] = set()
    recorded: set[str] = set()
    applied: Counter[str] = Counter()
    answered: Counter[tuple[str | None, str]] = Counter()
    completes_since_start = 0
    approved: set[str] = set()
    ran: Counter[str] = Counter()
    for _ in range(data.draw(st.integers(1, 60))):
        event = draw_event(data, state, fresh)
        before = state
        state, effects = transition(before, event)
        check_invariants(state)
        if isinstance(event, ApprovalDecided) and event.approved:
            if of(effects, ApprovalVerdict) and of(effects, ApprovalVerdict)[0].ok:
                approved |= {
                    a.approval_id
                    for a in before.pending_approvals
                    if event.approval_id in (None, a.approval_id)
                }
        # nothing runs unapproved, nothing gated runs twice, a denied call never runs
        for run_tools in of(effects, RunTools):
            for call in run_tools.calls:
                if call.approval_id is not None:
                    assert call.approval_id in approved, (event, effects)
                    ran[call.approval_id] += 1
        for denied in of(effects, DenyCall):
            assert denied.call.approval_id not in approved
        assert all(n == 1 for n in ran.values())
        for e in effects:
            if isinstance(e, RecordSignal):
                applied[e.signal.signal_id] += 1
                answered[(before.turn_id, e.task_id)] += 1
                recorded.add(e.signal.signal_id)
            if isinstance(e, RecordLateSignal):
                recorded.add(e.signal.signal_id)
            if isinstance(e, CallModel):
                assert (state.phase, state.round) == (TurnPhase.THINKING, e.round)
            if isinstance(e, StartWaitTimer):
                assert (state.phase, state.wait_generation) == (TurnPhase.WAITING, e.generation)
        # no signal is lost: a new DONE is applied, queued, refused with a notice, or late
        if isinstance(event, DoneSignal) and event.signal_id not in sent:
            sent.add(event.signal_id)
            sid = event.signal_id
            in_queue = any(
                isinstance(p, QueuedDone) and p.signal.signal_id == sid for p in state.pending
            )
            handled = [
                e
                for e in effects
                if (isinstance(e, RecordSignal | RecordLateSignal) and e.signal.signal_id == sid)
                or (isinstance(e, RecordNotice) and e.signal_id == sid)
            ]
            assert in_queue or handled, effects
            if in_queue:
                queued.add(sid)
        # Complete is reached at most once per StartReAct; every Complete finishes once
        if before.phase is TurnPhase.IDLE and state.phase is not TurnPhase.IDLE:
            completes_since_start = 0
        if before.phase is not TurnPhase.COMPLETE and state.phase is TurnPhase.COMPLETE:
            completes_since_start += 1
            assert completes_since_start == 1
            assert [f.status for f in of(effects, Finish)] == [state.status]
        else:
            assert not of(effects, Finish)
        # CancelReAct for the running turn always ends in Complete(cancelled)
        if isinstance(event, CancelReAct) and before.phase in RUNNING:
            if event.turn_id in (None, before.turn_id):
                assert (state.phase, state.status) == (TurnPhase.COMPLETE, "cancelled")
        if isinstance(event, CancelReAct) and before.phase is TurnPhase.COMPLETE:
            assert (state, kinds(effects)) == (before, ["Ignored"])
        # progress on every state change; an ignored event changes nothing
        if state != before and not isinstance(event, Reset):
            assert of(effects, EmitProgress), (event, effects)
        if effects and all(isinstance(e, Ignored) for e in effects):
            assert state == before
    # no signal applied twice; every queued DONE is applied, recorded late, or still queued
    assert all(n == 1 for n in applied.values())
    assert all(n == 1 for n in answered.values())
    still = {p.signal.signal_id for p in state.pending if isinstance(p, QueuedDone)}
    assert queued <= recorded | still


@settings(max_examples=100)
@given(st.data())
def test_transition_is_a_function_of_its_inputs(data: st.DataObject) -> None:
    counter = itertools.count()
    state = DecisionState()
    for _ in range(20):
        event = draw_event(data, state, lambda: f"id-{next(counter)}")
        assert transition(state, event) == transition(state, event)
        state = transition(state, event)[0]


# --- crash resumption ----------------------------------------------------------------------


def test_a_turn_that_died_waiting_resumes_waiting_for_the_same_task() -> None:
    record = checkpoint(waiting())
    assert record["round"] == 1 and record["status"] == "running"
    state, out = transition(DecisionState(), resume_event(record, Limits()))
    assert state.phase is TurnPhase.WAITING and state.round == 1
    assert [t.task_id for t in state.awaited] == ["task-1"]
    assert kinds(out) == ["EmitProgress", "StartWaitTimer", "EmitProgress"]
    state, out = transition(state, done("sig-1"))
    assert state.phase is TurnPhase.THINKING and state.round == 2
    assert of(out, CallModel) == [CallModel(2)]


def test_a_turn_that_died_in_a_model_call_calls_the_model_of_that_round_again() -> None:
    state = run(waiting(), done("sig-1"))[0]
    assert state.phase is TurnPhase.THINKING and state.round == 2
    record = checkpoint(state)
    assert record["round"] == 1  # round 2's call was in flight: not on the timeline
    resumed, out = transition(DecisionState(), resume_event(record, Limits()))
    assert resumed.round == 2 and of(out, CallModel) == [CallModel(2)]
    assert resumed.tasks == state.tasks
    # the DONE applied before the crash stays a duplicate if the agent sends it again
    assert kinds(transition(resumed, done("sig-1"))[1]) == ["Ignored"]


def test_a_resumed_turn_keeps_its_budget_and_a_cancel_sent_before_it_resumed_wins() -> None:
    spent = Limits(max_iterations=3)
    record = checkpoint(
        run(thinking(spent), ProtocolViolation(1, "x"), ProtocolViolation(2, "x"))[0]
    )
    state, out = transition(DecisionState(), resume_event(record, spent))
    assert state.round == 3 and of(out, CallModel) == [CallModel(3)]
    record["round"] = 3
    state, out = transition(DecisionState(), resume_event(record, spent))
    assert state.status == "budget_exhausted" and kinds(out)[-1] == "Finish"
    early = transition(DecisionState(), CancelReAct(TURN))[0]
    state, out = transition(early, resume_event(record, spent))
    assert state.status == "cancelled"


def test_a_turn_resumed_under_a_lowered_limit_ends_spent_and_says_why() -> None:
    """Its model calls stand (rounds are not rewritten) and it never calls the model again."""
    ran = Limits(max_iterations=4)
    record = checkpoint(run(thinking(ran), ProtocolViolation(1, "x"), ProtocolViolation(2, "x"))[0])
    assert record["round"] == 2
    state, out = transition(DecisionState(), resume_event(record, Limits(max_iterations=1)))
    check_invariants(state)
    assert state.status == "budget_exhausted" and state.round == 2 and not of(out, CallModel)
    [notice] = of(out, RecordNotice)
    assert notice.code == "limits_lowered"
    assert "max_iterations is 1 now" in notice.text and "2 model calls" in notice.text
    assert of(out, Finish)[0].rounds == 2
    waited = checkpoint(waiting())  # it waits for its agent first, then ends spent
    waited["round"] = 3
    state, out = transition(DecisionState(), resume_event(waited, Limits(max_iterations=2)))
    check_invariants(state)
    assert state.phase is TurnPhase.WAITING and of(out, RecordNotice)[0].code == "limits_lowered"
    state, out = transition(state, done("sig-1"))
    assert state.status == "budget_exhausted" and not of(out, CallModel)
    assert of(out, RecordSignal) and of(out, Finish)[0].rounds == 3


def test_an_answer_deferred_for_unseen_input_thinks_again_within_the_budget() -> None:
    state, out = transition(thinking(Limits(max_iterations=2)), AnswerDeferred(1, "followup"))
    assert state.phase is TurnPhase.THINKING and of(out, CallModel) == [CallModel(2)]
    state, out = transition(state, AnswerDeferred(2, "followup"))
    assert state.status == "budget_exhausted"
    assert kinds(out)[-2:] == ["EmitProgress", "Finish"] and of(out, FinalizeBestEffort)


def test_a_refused_done_is_not_remembered_so_a_corrected_resend_is_applied() -> None:
    state, out = transition(waiting(), done("sig-1", agent="impostor"))
    assert [n.code for n in of(out, RecordNotice)] == ["done_wrong_agent"]
    assert "sig-1" not in state.seen_signals
    state, out = transition(state, done("sig-1"))
    assert kinds(out)[0] == "RecordSignal" and state.phase is TurnPhase.THINKING
