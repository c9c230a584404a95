"""The DecisionActor's state machine as a pure function.

``transition(state, event) -> (state, effects)`` does no I/O, reads no clock and never
raises for a well-typed event: every (phase, event) pair below is defined. The actor
executes the effects in order. Events and effects live in ``actline.actors.turn.events``.

Here is the dispatch; its modules, all pure: the state record (``record``) and its
checkpoint form (``checkpoint``), the steps shared by many rows (``steps``), the
transitions of a turn's start and end (``lifecycle``), of a round (``rounds``: thinking,
acting), of the wait for agents (``waiting``: DONEs, skip, timeout) and of the approval
wait (``approval_wait``).

Steps shared by many rows:

* **model checkpoint** (before every model call): apply the queued DONEs; if
  ``round >= max_iterations`` or ``tokens_used >= token_budget`` -> complete
  (budget_exhausted) with ``FinalizeBestEffort`` before ``Finish``; else round + 1 and
  -> thinking with ``CallModel(round)``.
* **wait checkpoint** (entering Waiting, after a tool round): apply the queued DONEs;
  no awaited task open -> model checkpoint; a SkipWaiting queued -> consume it, stop
  awaiting the open tasks (notice ``wait_skipped``), model checkpoint; else -> waiting
  with ``StartWaitTimer(generation + 1, wait_timeout_s)``.
* **complete(status)**: queued DONEs -> ``RecordLateSignal`` (a queued skip ->
  ``Ignored``), ``EmitProgress("complete")``, ``Finish(status, ...)``.
* **approval wait** (a decision with calls that need approval, ``ToolSpec.approval_id``):
  every ordinary call of the decision is *held*; -> waiting with
  ``StartWaitTimer(generation + 1, wait_timeout_s)`` and the approval card
  (``EmitProgress("waiting", data={"approvals": [...]})``). Nothing held runs before every
  approval is resolved, so a decision stays one tool round.
* **release** (the last pending approval resolved): ``CancelWaitTimer``; per held call in
  order, denied -> ``DenyCall`` and notice ``approval_denied`` / ``approval_timeout`` /
  ``approval_skipped`` (who, why); approved or ungated -> run; any to run -> acting with
  ``RunTools``, none -> wait checkpoint.

=================  ================  =========================================================
event              phase             outcome
=================  ================  =========================================================
StartReAct(t)      idle              model checkpoint of turn t; complete(cancelled) at once if
                                     CancelReAct(t) came first
StartReAct         other             ignored (a turn is running, or Reset first)
ResumeReAct(t)     idle              the checkpoint's round, tokens, tasks and seen signals,
                                     notice card, then wait checkpoint (a crash mid-wait waits
                                     again), or with held calls pending approval the approval
                                     wait again (nothing held has run); a round past
                                     the limits' max_iterations raises it to that round,
                                     with notice ``limits_lowered`` (the model checkpoint
                                     then completes it, spent); complete(cancelled) if
                                     CancelReAct(t) came first
ResumeReAct        other             ignored
ModelDecided(r)    thinking, r       no calls: a broken reply (``empty_decision``, as
                                     ProtocolViolation); else refusals = violations = 0,
                                     ``SendAgentTask``
                                     per agent call, then a call needing approval -> approval
                                     wait; other ordinary calls -> acting with ``RunTools``,
                                     agent calls only -> wait checkpoint
ModelAnswered(r)   thinking, r       complete(completed)
AnswerDeferred(r)  thinking, r       notice card (user input landed unseen), model checkpoint
ProtocolViolation  thinking, r       notice ``protocol_violation.<code>``, violations + 1;
                                     past ``max_repair_rounds`` in a row ->
                                     complete(protocol_failed) with ``FinalizeFromReplies``
                                     (the answer salvaged from the broken replies), else
                                     model checkpoint
CallRefused(r)     thinking, r       notice ``protocol_violation.<code>``, refusals + 1; the
                                     ``max_consecutive_refusals``-th -> complete(failed), else
                                     model checkpoint
ModelFailed(r)     thinking, r       complete(failed)
any model event    other, or not r   ignored (stale)
ToolsFinished(r)   acting, r         wait checkpoint
ToolsFinished      other, or not r   ignored (stale)
DoneSignal         any               duplicate signal id: ignored; else classified (below):
                                     *open* -> queued in thinking/acting and in an approval
                                     wait, applied in waiting;
                                     *refused* -> notice (its id is not remembered, so a
                                     corrected resend counts); *late* -> ``RecordLateSignal``
DONE applied       waiting           ``RecordSignal``; no awaited task left ->
                                     ``CancelWaitTimer``, model checkpoint; else stay
SkipWaiting        waiting           stop awaiting the open tasks (they stay open), notice
                                     ``wait_skipped``, ``CancelWaitTimer``, model checkpoint;
                                     in an approval wait: every pending approval denied
                                     (``approval_skipped``), release
SkipWaiting        thinking, acting  queued for the next wait for agents (at most one is
                                     queued; an approval wait does not consume it)
SkipWaiting        idle, complete    ignored; also when it names another turn
WaitTimeout(g)     waiting, g        stop awaiting the open tasks, notice ``wait_timeout``
                                     naming the agents, model checkpoint; in an approval wait:
                                     every pending approval denied (``approval_timeout``),
                                     release
WaitTimeout        other, or not g   ignored (stale)
CancelReAct        thinking/acting/  ``CancelModel`` / ``CancelTools`` / ``CancelWaitTimer``,
                   waiting           notice ``cancelled`` (what was interrupted),
                                     complete(cancelled)
CancelReAct(t)     idle              remembered for StartReAct(t); ignored without a turn id
                                     or for the turn that just completed
CancelReAct        complete          ignored; also when it names another turn
ApprovalDecided    waiting for       the named approval (None: every pending one) approved or
                   approvals         denied, ``ApprovalVerdict(ok)``, a notice card; the last
                                     one pending -> release; else the approval card again
ApprovalDecided    other             ``ApprovalVerdict`` refused: ``not_waiting`` (no approval
                                     pending), ``unknown_turn``, ``unknown_approval`` (not
                                     pending: unknown or already resolved); nothing changes
Reset              complete          -> idle; the ended turn's tasks are kept (one turn back)
                                     to classify late DONEs; seen signal ids are kept for good
Reset              other             ignored
=================  ================  =========================================================

DONE classification (a given turn id selects the turn): *open* when the running turn
has the task open (no task id: the agent's oldest open task not claimed by a queued
DONE); *refused* with ``done_wrong_agent`` (the task went to another agent),
``done_already_answered`` (its task has its DONE, in this turn or the one before: an agent
that restarted mid-task and answered twice) or ``done_unknown_task``; *late* otherwise
(its turn ended).

Every transition that changes the state emits an ``EmitProgress`` card, except Reset
(bookkeeping the client never sees); an ignored event yields only ``Ignored`` (a refused
approval only ``ApprovalVerdict``). No ``RunTools`` ever carries a call whose approval is
not ``approved`` (tests/actors/turn/state/test_properties.py, random event sequences).
"""

from __future__ import annotations

from .. import events as ev
from .approval_wait import on_approval
from .lifecycle import on_cancel, on_reset, on_resume, on_start
from .record import DecisionState, Step, TurnPhase
from .rounds import on_model_event, on_tools_finished
from .steps import ignore
from .waiting import on_done, on_skip, on_wait_timeout

__all__ = ["DecisionState", "TurnPhase", "transition"]


def transition(state: DecisionState, event: ev.Event) -> Step:
    """The next state and the effects to execute, in order, for ``event``."""
    match event:
        case ev.StartReAct():
            return on_start(state, event)
        case ev.ResumeReAct():
            return on_resume(state, event)
        case (
            ev.ModelDecided()
            | ev.ModelAnswered()
            | ev.AnswerDeferred()
            | ev.ProtocolViolation()
            | ev.CallRefused()
            | ev.ModelFailed()
        ):
            return on_model_event(state, event)
        case ev.ToolsFinished():
            return on_tools_finished(state, event)
        case ev.DoneSignal():
            return on_done(state, event)
        case ev.SkipWaiting():
            return on_skip(state, event)
        case ev.WaitTimeout():
            return on_wait_timeout(state, event)
        case ev.CancelReAct():
            return on_cancel(state, event)
        case ev.ApprovalDecided():
            return on_approval(state, event)
        case ev.Reset():
            return on_reset(state)
    return ignore(f"not an event: {type(event).__name__}", state)
