"""The DecisionActor's state machine across a crash: a turn's checkpoint resumes it in the
phase and round it died in, with its budget, tasks and the cancels sent meanwhile.
"""

from __future__ import annotations

from actline.actors.configuration.turn_settings import Limits
from actline.actors.turn.events import (
    CallModel,
    CancelReAct,
    Finish,
    ProtocolViolation,
    RecordNotice,
    RecordSignal,
)
from actline.actors.turn.state import DecisionState, TurnPhase, transition
from actline.actors.turn.state.checkpoint import checkpoint, resume_event
from tests.actors.turn.state.machine import (
    TURN,
    check_invariants,
    done,
    kinds,
    of,
    run,
    thinking,
    waiting,
)

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


def test_a_resumed_turn_keeps_counting_its_broken_replies() -> None:
    state = run(thinking(), ProtocolViolation(1, "x"), ProtocolViolation(2, "x"))[0]
    record = checkpoint(state)
    assert record["consecutive_violations"] == 2
    resumed, _ = transition(DecisionState(), resume_event(record, Limits()))
    assert resumed.consecutive_violations == 2
    resumed, _ = run(resumed, ProtocolViolation(3, "x"), ProtocolViolation(4, "x"))
    assert resumed.status == "protocol_failed"
