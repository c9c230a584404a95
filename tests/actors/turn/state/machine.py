"""States and events of the turn's state machine (``actline.actors.turn.state``) for its tests:
the turns every test starts from, the effects read back, and the random events the
properties draw."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hypothesis import strategies as st

from actline.actors.configuration.turn_settings import Limits
from actline.actors.turn.events import (
    AgentCall,
    ApprovalDecided,
    CallRefused,
    CancelReAct,
    DoneSignal,
    Effect,
    Event,
    ModelAnswered,
    ModelDecided,
    ModelFailed,
    ProtocolViolation,
    Reset,
    SkipWaiting,
    StartReAct,
    ToolsFinished,
    ToolSpec,
    WaitTimeout,
)
from actline.actors.turn.state import DecisionState, TurnPhase, transition
from actline.actors.turn.state.record import RUNNING

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


# --- effects, by kind ---------------------------------------------------------------------

IGNORED = ("same", ["Ignored"])
NOT_WAITING = ("same", ["ApprovalVerdict"])  # a refused approval: the sender is told why
NOTICE = ["RecordNotice", "EmitProgress"]
LATE = ("same", ["RecordLateSignal", "EmitProgress"])
CALL = ["EmitProgress", "CallModel"]
FINISH = ["EmitProgress", "Finish"]
CANCEL = [*NOTICE, *FINISH]
DENY_ALL = ["ApprovalVerdict", "EmitProgress", "CancelWaitTimer", "DenyCall", *NOTICE]


# --- random events ------------------------------------------------------------------------

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
