"""The DecisionActor's state machine over a turn: its rounds without agents, the guards that
end it (refusals, iterations, budget), cancel, and what follows the turn.

``transition`` is pure, so these tests feed events and read effects: no actor, no
NATS, no clock.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from actline.actors.configuration.turn_settings import Limits
from actline.actors.turn.events import (
    AnswerDeferred,
    CallModel,
    CallRefused,
    CancelModel,
    CancelReAct,
    CancelTools,
    CancelWaitTimer,
    Effect,
    EmitProgress,
    FinalizeBestEffort,
    FinalizeFromReplies,
    Finish,
    Ignored,
    ModelAnswered,
    ModelDecided,
    ModelFailed,
    ProtocolViolation,
    RecordLateSignal,
    RecordNotice,
    RecordSignal,
    RunTools,
    SendAgentTask,
    StartReAct,
    StartWaitTimer,
    ToolsFinished,
)
from actline.actors.turn.state import DecisionState, TurnPhase, transition
from tests.actors.turn.state.machine import (
    ASK_REVIEWER,
    SEARCH,
    TURN,
    acting,
    complete_with_open_task,
    done,
    idle_after_turn,
    kinds,
    of,
    run,
    thinking,
    waiting,
)

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


def test_a_model_that_keeps_breaking_the_protocol_gets_three_repair_rounds_then_a_best_effort() -> (
    None
):
    state, effects = run(
        thinking(),
        ProtocolViolation(1, "missing_decision", "no decision"),
        ModelDecided(2),
        ProtocolViolation(3, "schema_error", "not JSON"),
        ProtocolViolation(4, "repetition", "looped"),
    )
    assert (state.phase, state.status, state.round) == (TurnPhase.COMPLETE, "protocol_failed", 4)
    assert of(effects, CallModel) == [CallModel(2), CallModel(3), CallModel(4)]
    assert [n.code for n in of(effects, RecordNotice)] == [
        "protocol_violation.missing_decision",
        "protocol_violation.empty_decision",
        "protocol_violation.schema_error",
        "protocol_violation.repetition",
    ]
    assert kinds(effects)[-3:] == ["FinalizeFromReplies", "EmitProgress", "Finish"]
    assert state.error is not None and "4 times in a row" in state.error
    assert "3 repair rounds" in state.error and "last: repetition: looped" in state.error
    assert of(effects, FinalizeFromReplies)[0].reason == state.error
    assert (
        of(effects, Finish)[0].answer is None and of(effects, Finish)[0].status == "protocol_failed"
    )
    assert not of(effects, FinalizeBestEffort)  # no further model call


def test_a_usable_decision_resets_the_repair_count() -> None:
    state, _ = run(
        thinking(),
        ProtocolViolation(1, "missing_decision"),
        ProtocolViolation(2, "missing_decision"),
        ProtocolViolation(3, "missing_decision"),
        ModelDecided(4, (SEARCH,)),
        ToolsFinished(4),
        ProtocolViolation(5, "missing_decision"),
    )
    assert (state.phase, state.round, state.consecutive_violations) == (TurnPhase.THINKING, 6, 1)


def test_no_repair_rounds_end_the_turn_at_the_first_broken_reply() -> None:
    state, effects = run(thinking(Limits(max_repair_rounds=0)), ProtocolViolation(1, "bad_json"))
    assert (state.status, state.round) == ("protocol_failed", 1)
    assert of(effects, CallModel) == []


def test_refusals_and_broken_replies_are_counted_apart() -> None:
    state, _ = run(
        thinking(),
        ProtocolViolation(1, "bad_json"),
        CallRefused(2, "repeat"),
        ProtocolViolation(3, "bad_json"),
    )
    assert (state.consecutive_violations, state.consecutive_refusals) == (2, 1)


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


def test_an_answer_deferred_for_unseen_input_thinks_again_within_the_budget() -> None:
    state, out = transition(thinking(Limits(max_iterations=2)), AnswerDeferred(1, "followup"))
    assert state.phase is TurnPhase.THINKING and of(out, CallModel) == [CallModel(2)]
    state, out = transition(state, AnswerDeferred(2, "followup"))
    assert state.status == "budget_exhausted"
    assert kinds(out)[-2:] == ["EmitProgress", "Finish"] and of(out, FinalizeBestEffort)


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
