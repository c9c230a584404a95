"""Approvals in the pure state machine (``actline.actors.turn.state``): the approval wait,
its resolutions, the checkpoint that carries it over a restart, and a property over random event
sequences with crashes: no call that needs approval ever runs without one.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actline.actors.configuration.profiles import parse_patterns
from actline.actors.configuration.settings import NodeSettings, load_mcp_config
from actline.actors.configuration.turn_settings import Limits
from actline.actors.errors import InputRefused, McpConfigError, SettingsError
from actline.actors.turn.approvals import approval_reply, gate, needs_approval
from actline.actors.turn.events import (
    ApprovalDecided,
    ApprovalVerdict,
    CallModel,
    CancelReAct,
    DenyCall,
    EmitProgress,
    ModelDecided,
    RecordNotice,
    RecordSignal,
    RunTools,
    SkipWaiting,
    StartWaitTimer,
    ToolsFinished,
    ToolSpec,
    WaitTimeout,
)
from actline.actors.turn.state import DecisionState, TurnPhase, transition
from actline.actors.turn.state.checkpoint import checkpoint, resume_event
from actline.messages import Ack, ErrorReply
from tests.actors.turn.state.machine import (
    ASK_REVIEWER,
    GATED,
    SEARCH,
    TURN,
    check_invariants,
    done,
    draw_event,
    of,
    run,
    thinking,
)

DEPLOY = ToolSpec("call-5", "ops.deploy", {"target": "prod"}, approval_id="ap-2")


def gated_wait() -> DecisionState:
    """Round 1: two gated calls, a search and a task for the reviewer."""
    return run(thinking(), ModelDecided(1, (GATED, SEARCH, DEPLOY), (ASK_REVIEWER,)))[0]


def test_a_gated_decision_waits_with_an_approval_card_and_runs_nothing() -> None:
    state, effects = run(thinking(), ModelDecided(1, (GATED, SEARCH, DEPLOY), (ASK_REVIEWER,)))
    assert state.phase is TurnPhase.WAITING
    assert not of(effects, RunTools)
    assert [t.task_id for t in state.tasks] == ["task-1"]  # the agent task went out at once
    [timer] = of(effects, StartWaitTimer)
    assert timer.generation == state.wait_generation
    card = of(effects, EmitProgress)[-1]
    assert card.phase == "waiting" and "code.exec_python(code='print(1)')" in card.detail
    assert [a["approval_id"] for a in card.data["approvals"]] == ["ap-1", "ap-2"]
    assert card.data["approvals"][1]["params"] == {"target": "prod"}


def test_the_held_calls_run_together_once_every_approval_is_resolved() -> None:
    state, effects = run(gated_wait(), ApprovalDecided(TURN, "ap-2", True, "alice"))
    assert state.phase is TurnPhase.WAITING and not of(effects, RunTools)
    assert [a["approval_id"] for a in of(effects, EmitProgress)[-1].data["approvals"]] == ["ap-1"]
    state, effects = run(state, ApprovalDecided(None, "ap-1", True, "bob", "looks safe"))
    assert state.phase is TurnPhase.ACTING
    [tools] = of(effects, RunTools)
    assert tools.calls == (GATED, SEARCH, DEPLOY)  # one tool round, the decision's order
    assert state.held == () and state.approvals == ()
    # then the agent wait as usual
    state, _ = run(state, ToolsFinished(1))
    assert state.phase is TurnPhase.WAITING and state.awaited


def test_a_denied_call_gets_its_refusal_and_a_notice_and_the_others_run() -> None:
    state, effects = run(
        gated_wait(),
        ApprovalDecided(TURN, "ap-1", False, "bob", "no code today"),
        ApprovalDecided(TURN, "ap-2", True, "alice"),
    )
    [denied] = of(effects, DenyCall)
    assert (denied.call, denied.code) == (GATED, "approval_denied")
    assert (
        denied.text
        == "code.exec_python was not run: the approval was denied by bob (no code today)"
    )
    assert [n.code for n in of(effects, RecordNotice)] == ["approval_denied"]
    assert of(effects, RunTools)[0].calls == (SEARCH, DEPLOY)
    assert state.phase is TurnPhase.ACTING


def test_when_every_call_is_denied_the_model_is_called_with_the_notice() -> None:
    state, _ = run(thinking(), ModelDecided(1, (GATED,)))
    state, effects = run(state, ApprovalDecided(TURN, None, False, "bob"))
    assert not of(effects, RunTools)
    assert of(effects, CallModel) == [CallModel(2)]
    assert state.phase is TurnPhase.THINKING


def test_a_wait_timeout_denies_the_pending_approvals_and_a_stale_one_does_nothing() -> None:
    state = gated_wait()
    stale, effects = run(state, WaitTimeout(state.wait_generation - 1))
    assert stale == state
    state, effects = run(state, WaitTimeout(state.wait_generation))
    assert {d.code for d in of(effects, DenyCall)} == {"approval_timeout"}
    assert "no approval within 600 s" in of(effects, DenyCall)[0].text
    assert of(effects, RunTools)[0].calls == (SEARCH,)


def test_skip_denies_a_pending_approval_but_a_skip_queued_earlier_does_not() -> None:
    state, effects = run(gated_wait(), SkipWaiting(TURN))
    assert {d.code for d in of(effects, DenyCall)} == {"approval_skipped"}
    queued, _ = run(thinking(), SkipWaiting(TURN))
    state, effects = run(queued, ModelDecided(1, (GATED,), (ASK_REVIEWER,)))
    assert state.phase is TurnPhase.WAITING and state.pending_approvals
    assert any(isinstance(p, SkipWaiting) for p in state.pending)  # kept for the agent wait
    state, _ = run(state, ApprovalDecided(TURN, None, True, "alice"), ToolsFinished(1))
    assert state.phase is TurnPhase.THINKING  # the queued skip ended the agent wait


def test_a_done_during_the_approval_wait_is_queued_and_applied_after_the_tools() -> None:
    state, effects = run(gated_wait(), done())
    assert state.phase is TurnPhase.WAITING and not of(effects, RecordSignal)
    state, effects = run(state, ApprovalDecided(TURN, None, True, "alice"), ToolsFinished(1))
    assert [s.task_id for s in of(effects, RecordSignal)] == ["task-1"]
    assert of(effects, CallModel) == [CallModel(2)]


def test_cancel_in_the_approval_wait_runs_nothing() -> None:
    state, effects = run(gated_wait(), CancelReAct(TURN, "changed my mind"))
    assert (state.phase, state.status) == (TurnPhase.COMPLETE, "cancelled")
    assert not of(effects, RunTools) and not of(effects, DenyCall)
    assert "waiting for approval of code.exec_python" in (state.error or "")


def test_refused_approvals_change_nothing_and_say_why() -> None:
    state = gated_wait()
    for event, code in (
        (ApprovalDecided(TURN, "ap-9", True, "alice"), "unknown_approval"),
        (ApprovalDecided("turn-9", None, True, "alice"), "unknown_turn"),
    ):
        after, effects = transition(state, event)
        assert after == state and of(effects, ApprovalVerdict)[0].code == code
        reply = approval_reply(TURN, effects)
        assert isinstance(reply, ErrorReply) and reply.code == code
    resolved, _ = run(state, ApprovalDecided(TURN, "ap-1", True, "alice"))
    again = transition(resolved, ApprovalDecided(TURN, "ap-1", False, "bob"))
    assert again[0] == resolved  # already resolved: not pending any more
    idle_reply = approval_reply(TURN, transition(thinking(), ApprovalDecided(TURN, None, True))[1])
    assert isinstance(idle_reply, ErrorReply) and idle_reply.code == "not_waiting"
    ok = approval_reply(TURN, transition(state, ApprovalDecided(TURN, None, True, "alice"))[1])
    assert isinstance(ok, Ack) and "approved by alice" in ok.detail


def test_a_turn_that_died_waiting_for_approval_waits_for_the_same_ones_again() -> None:
    record = checkpoint(gated_wait())
    state, effects = run(DecisionState(), resume_event(record, Limits()))
    assert state.phase is TurnPhase.WAITING and not of(effects, RunTools)
    assert [a.approval_id for a in state.pending_approvals] == ["ap-1", "ap-2"]
    assert state.held == (GATED, SEARCH, DEPLOY)
    state, effects = run(state, ApprovalDecided(TURN, None, True, "alice"))
    assert of(effects, RunTools)[0].calls == (GATED, SEARCH, DEPLOY)


def test_a_checkpoint_never_resumes_into_running_an_unapproved_call() -> None:
    record = checkpoint(gated_wait())
    for approval in record["approvals"]:
        approval["status"] = "weird"
    state, effects = run(DecisionState(), resume_event(record, Limits()))
    assert len(state.pending_approvals) == 2 and not of(effects, RunTools)
    record = checkpoint(gated_wait())
    for approval in record["approvals"]:
        approval["status"] = "approved"  # all resolved yet held: asked again, never assumed
    state, effects = run(DecisionState(), resume_event(record, Limits()))
    assert len(state.pending_approvals) == 2 and not of(effects, RunTools)


def test_patterns_are_checked_and_matched() -> None:
    assert parse_patterns(" code.*, http.fetch ,", "X") == ("code.*", "http.fetch")
    assert parse_patterns(["ops.*", "ops.*"], "X") == ("ops.*",)
    assert parse_patterns("*", "X") == ("*",)  # every tool that can wait for approval
    for bad in ("code.*; rm", 7, [""], ["x" * 200], ["agent.send"], "ops.*, agent.*"):
        try:
            parse_patterns(bad, "config.approve_tools")
        except InputRefused as exc:
            assert exc.field == "config.approve_tools"
            assert "agent." not in str(bad) or "never waits" in str(exc)  # a hand-off: named
        else:
            raise AssertionError(f"{bad!r} was accepted")
    assert needs_approval("mcp.git.push", ("mcp.git.*",))
    assert not needs_approval("mcp.git.status", ("mcp.git.push",))
    assert gate(SEARCH, ("code.*",)) is SEARCH
    assert gate(SEARCH, ("web.*",)).approval_id is not None


@settings(max_examples=300)
@given(st.data())
def test_no_gated_call_ever_runs_unapproved_even_across_crashes(data: st.DataObject) -> None:
    """Random events, and crashes that resume from the last stored checkpoint (stored where
    the actor stores it: at each wait and each model call)."""
    counter = itertools.count()

    def fresh() -> str:
        return f"id-{next(counter)}"

    state = DecisionState()
    stored: dict[str, object] | None = None
    approved: set[str] = set()
    for _ in range(data.draw(st.integers(1, 60))):
        if stored is not None and data.draw(st.integers(0, 9)) == 0:
            event: object = resume_event(stored, state.limits)
            before, state = DecisionState(), DecisionState()
            approved = {
                str(a["approval_id"])
                for a in stored.get("approvals", ())
                if a["status"] == "approved"
            }
        else:
            event = draw_event(data, state, fresh)
            before = state
        state, effects = transition(before, event)
        check_invariants(state)
        if isinstance(event, ApprovalDecided) and event.approved:
            verdicts = of(effects, ApprovalVerdict)
            if verdicts and verdicts[0].ok:
                approved |= {
                    a.approval_id
                    for a in before.pending_approvals
                    if event.approval_id in (None, a.approval_id)
                }
        for run_tools in of(effects, RunTools):
            for call in run_tools.calls:
                assert call.approval_id is None or call.approval_id in approved, (event, effects)
        if of(effects, StartWaitTimer) or of(effects, CallModel):
            stored = checkpoint(state)


def test_the_node_setting_and_the_mcp_config_name_what_needs_approval(tmp_path: Path) -> None:
    assert NodeSettings.from_env({"ACTLINE_APPROVE_TOOLS": "code.*, ops.deploy"}).approve_tools
    with pytest.raises(SettingsError) as refused:
        NodeSettings.from_env({"ACTLINE_APPROVE_TOOLS": "code.*;rm"})
    assert "ACTLINE_APPROVE_TOOLS" in str(refused.value)
    config = tmp_path / "mcp.json"
    for approval, ok in ((True, True), (["echo"], True), ("yes", False), ([1], False)):
        config.write_text(json.dumps({"mcpServers": {"e": {"command": "x", "approval": approval}}}))
        if ok:
            assert load_mcp_config(config)["e"]["approval"] == approval
            continue
        with pytest.raises(McpConfigError) as bad:
            load_mcp_config(config)
        assert "approval must be true, false or a list" in str(bad.value)
