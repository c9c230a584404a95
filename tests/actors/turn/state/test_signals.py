"""The DecisionActor's state machine and the DONE handshake: DONEs while waiting, DONEs and
SkipWaiting outside Waiting (queued, never dropped), and the wait timer.

``transition`` is pure, so these tests feed events and read effects: no actor, no
NATS, no clock.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from actline.actors.turn.events import (
    AgentCall,
    CancelReAct,
    CancelWaitTimer,
    EmitProgress,
    Ignored,
    ModelAnswered,
    ModelDecided,
    ProtocolViolation,
    RecordLateSignal,
    RecordNotice,
    RecordSignal,
    Reset,
    SkipWaiting,
    StartReAct,
    StartWaitTimer,
    ToolsFinished,
    WaitTimeout,
)
from actline.actors.turn.state import DecisionState, TurnPhase, transition
from actline.actors.turn.state.record import QueuedDone
from tests.actors.turn.state.machine import (
    ASK_REVIEWER,
    ASK_TESTER,
    CALL,
    FINISH,
    NOTICE,
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
    thinking_with_open_task,
    waiting,
)

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


def test_a_refused_done_is_not_remembered_so_a_corrected_resend_is_applied() -> None:
    state, out = transition(waiting(), done("sig-1", agent="impostor"))
    assert [n.code for n in of(out, RecordNotice)] == ["done_wrong_agent"]
    assert "sig-1" not in state.seen_signals
    state, out = transition(state, done("sig-1"))
    assert kinds(out)[0] == "RecordSignal" and state.phase is TurnPhase.THINKING


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
