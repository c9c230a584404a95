"""The DecisionActor's state machine under random event sequences (Hypothesis): every promise
holds after every event, and ``transition`` is a function of its inputs.
"""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from actline.actors.turn.events import (
    ApprovalDecided,
    ApprovalVerdict,
    CallModel,
    CancelReAct,
    DenyCall,
    DoneSignal,
    EmitProgress,
    Finish,
    Ignored,
    RecordLateSignal,
    RecordNotice,
    RecordSignal,
    Reset,
    RunTools,
    StartWaitTimer,
)
from actline.actors.turn.state import DecisionState, TurnPhase, transition
from actline.actors.turn.state.record import RUNNING, QueuedDone
from tests.actors.turn.state.machine import check_invariants, draw_event, kinds, of

# --- properties over random event sequences ------------------------------------------------


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
