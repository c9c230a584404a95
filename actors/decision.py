"""The DecisionActor: runs one turn's state machine and executes its effects.

``actors.state.transition`` decides; this actor does. Everything that reaches it
becomes an event (a model reply, a finished tool round, a DONE routed by the node,
skip/cancel from ``al.turn.<tid>.control``, its wait timer) and the effects come back
in order. Slow work runs in child tasks that post their outcome to the mailbox: the
model call (``Render`` on the ConversationActor, then a StreamerActor), the tool round
(react.* calls in one ``RunTools`` on the ConversationActor, the rest on the
ToolExecutorActor pool), the wait timer, the followup grace. So a cancel or a DONE is
handled at once whatever is in flight.

What the turn puts on the timeline is collected as ``Writes`` and travels with the
next exchange with the conversation (``actors.mailbox``): a round is at most three of
them, and one LMDB commit. The checkpoint is committed before every model call and
on entering Waiting, so a node that dies loses at most the round in flight; a
``ResumeReAct`` continues it. Every way a turn ends (a result, a runtime failure, the
conversation lost to another node) is one ``EndTurn`` told to the conversation.

Cancellation: stopping the actor cancels its child tasks; an ask in flight to the
conversation is abandoned (its answer, if any, is dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Literal

import messages
from bus import BusError, Subscription
from messages import (
    AgentTask,
    CancelReAct,
    GenerateResult,
    ReActProgress,
    ReActResult,
    SkipWaiting,
    TurnRequest,
    Usage,
)
from timeline import AnnounceContext, Block
from tools.react import ReactOutcome

from . import events as ev
from .base import Actor, ActorRef
from .decision_protocol import CallLedger, Notice
from .errors import ActorStopped, ConversationLost
from .mailbox import (
    ApplyDone,
    Commit,
    Control,
    EndTurn,
    FollowupArrived,
    GraceOver,
    LateSignal,
    ModelReply,
    NotesAck,
    Render,
    RunTools,
    ToolOutcome,
    ToolsDone,
    Write,
    Writes,
)
from .policy import AGENT_SEND, TurnSettings, classify_reply, parse_followups, verdict
from .remote import call_tool, failed, generate
from .services import Services, TaskEntry
from .state import DecisionState, checkpoint, resume_event, transition
from .turn_blocks import call_block, final_blocks, notes_block, notice_block, signal_block

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 120.0
"""How long one exchange with the conversation may take (a render, a commit)."""
BEST_EFFORT_NOTICE = (
    "The turn's budget is spent ({reason}). Write your final answer now from what is on "
    "the timeline: action complete, no tool calls."
)


class _Begin:
    """First message: subscribe to control, start or resume the state machine."""


class DecisionActor(Actor):
    """The decision loop of one turn, on the node of its ConversationActor."""

    def __init__(
        self,
        conv: ActorRef,
        services: Services,
        request: TurnRequest,
        state: DecisionState,
        turn: TurnSettings,
        *,
        resume: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"turn:{request.turn_id}")
        self.conv = conv
        self.services = services
        self.request = request
        self.cid = request.conversation_id
        self.tid = request.turn_id
        self.state = state
        self.resume = resume
        self.turn = turn
        self.limits = turn.limits
        self.ledger = CallLedger()
        self.usage = Usage()
        self.seq = 0
        self.notices = 0
        self.pending: list[Write] = []
        """What goes on the timeline with the next exchange with the conversation."""
        self.followups_arrived = 0
        self.followups_rendered = 0
        self.best_effort: str | None = None
        self.followups: list[str] = []
        self.sources_used: list[int] = []
        self.client_answers: dict[str, str] = {}
        """Raw answer -> the text clients saw (citations resolved by the streamer)."""
        self._model_task: asyncio.Task[None] | None = None
        self._tools_task: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._grace: asyncio.Task[None] | None = None
        self._control: Subscription | None = None
        self._finished = False

    def start(self) -> None:
        super().start()
        self.tell(_Begin())

    # -- mailbox ---------------------------------------------------------------------------------
    async def receive(self, message: object) -> object:
        if self._finished:
            if isinstance(message, ApplyDone):
                raise ActorStopped(self.name)  # the conversation classifies it (late)
            return None
        try:
            return await self._receive(message)
        except asyncio.CancelledError:
            raise
        except ConversationLost as exc:
            await self._end("lost", reason=exc.reason)
            if isinstance(message, ApplyDone):
                raise
        except Exception as exc:
            log.exception("turn %s failed handling %s", self.tid, type(message).__name__)
            await self._abort(f"{type(exc).__name__}: {exc}")
            if isinstance(message, ApplyDone):
                raise
        return None

    async def _receive(self, message: object) -> object:
        match message:
            case _Begin():
                await self._begin()
            case ModelReply():
                await self._on_model_reply(message)
            case GraceOver():
                self._grace = None
                await self._answer(message.round, message.answer, message.tokens, grace=False)
            case FollowupArrived(count=count):
                self.followups_arrived = count
                if self._grace is not None and not self._grace.done():
                    self._grace.cancel()
                    self._grace = None
                    await self.feed(ev.AnswerDeferred(self.state.round, "a followup arrived"))
            case Control(message=SkipWaiting() as skip):
                await self.feed(ev.SkipWaiting(skip.turn_id, skip.reason))
            case Control(message=CancelReAct() as cancel):
                await self.feed(ev.CancelReAct(cancel.turn_id, cancel.reason))
            case ApplyDone(signal=signal):
                return verdict(signal, await self.feed(ev.event_from_message(signal)))
            case ToolsDone():
                self.pending.extend(message.outcomes)
                await self.feed(ev.ToolsFinished(message.round, message.detail))
            case ev.WaitTimeout():
                await self.feed(message)
            case ConversationLost():
                raise message
            case _:
                raise TypeError(f"{self.name} does not take {type(message).__name__}")
        return None

    async def feed(self, event: ev.Event) -> tuple[ev.Effect, ...]:
        self.state, effects = transition(self.state, event)
        for effect in effects:
            await self._execute(effect)
        return effects

    async def _begin(self) -> None:
        bus = self.services.bus

        async def on_control(msg: messages.Message, env: Any) -> None:
            if isinstance(msg, SkipWaiting | CancelReAct) and msg.turn_id == self.tid:
                if not self._finished:
                    self.tell(Control(msg))

        self._control = await bus.subscribe(bus.subjects.turn_control(self.tid), on_control)
        if self.resume is not None:
            await self.feed(resume_event(self.resume, self.limits))
        else:
            await self.feed(ev.StartReAct(self.tid, self.limits))

    def _writes(self) -> Writes:
        items, self.pending = tuple(self.pending), []
        return Writes(items)

    # -- effects --------------------------------------------------------------------------------
    async def _execute(self, effect: ev.Effect) -> None:
        match effect:
            case ev.CallModel(round=r):
                render = self._render_message(r, record=checkpoint(self.state))
                self._model_task = self.spawn(self._model_round(render), f"model-{r}")
            case ev.CancelModel():
                await self._cancel_model()
            case ev.RunTools(round=r, calls=calls):
                self._start_tools(r, calls)
            case ev.CancelTools():
                if self._tools_task is not None:
                    self._tools_task.cancel()
            case ev.SendAgentTask():
                await self._send_task(effect)
            case ev.StartWaitTimer(generation=g, seconds=s):
                commit = Commit(self.tid, self._writes(), checkpoint(self.state))
                await self.conv.ask(commit, timeout=ASK_TIMEOUT_S)
                self._timer = self.spawn(self._wait(g, s), f"wait-{g}")
            case ev.CancelWaitTimer():
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            case ev.RecordSignal(signal=signal, task_id=task_id):
                self.services.tasks.answered(task_id)
                self.pending.append(signal_block(self.tid, signal, task_id, self._now()))
            case ev.RecordLateSignal(signal=signal, reason=reason):
                self.pending.append(LateSignal(signal, reason))
            case ev.RecordNotice(code=code, text=text):
                self.pending.append(self._notice(code, text))
            case ev.EmitProgress(phase=phase, round=r, detail=detail):
                await self._progress(phase, r, detail)
            case ev.FinalizeBestEffort(reason=reason):
                self.best_effort = await self._best_effort(reason)
            case ev.Finish():
                await self._finish(effect)
            case ev.Ignored(reason=reason):
                log.debug("turn %s ignored: %s", self.tid, reason)

    def _now(self) -> float:
        return self.services.clock()

    def _notice(self, code: str, text: str) -> Block:
        self.notices += 1
        return notice_block(self.tid, self.state.round, self.notices, code, text, self._now())

    async def _progress(self, phase: messages.Phase, round_: int, detail: str) -> None:
        bus = self.services.bus
        card = ReActProgress(
            conversation_id=self.cid, turn_id=self.tid, phase=phase, round=round_, detail=detail
        )
        try:
            await bus.publish(bus.subjects.stream(self.cid), card)
        except BusError as exc:
            log.warning("progress card of turn %s lost: %s", self.tid, exc)

    # -- the model ----------------------------------------------------------------------------
    def _render_message(
        self,
        round_: int,
        *,
        record: dict[str, object] | None = None,
        force: bool = False,
        notices: tuple[str, ...] = (),
    ) -> Render:
        budget = self.limits.token_budget
        announce = AnnounceContext(
            iteration=self.state.round,
            max_iterations=self.limits.max_iterations,
            budget_tokens=None if budget is None else max(budget - self.state.tokens_used, 0),
            notices=notices,
        )
        return Render(
            self.tid,
            round_,
            announce,
            writes=self._writes(),
            record=record,
            model=self.turn.model,
            max_output_tokens=self.services.settings.max_output_tokens,
            seq_start=self.seq,
            force_compaction=force,
        )

    async def _model_round(self, render: Render) -> None:
        round_ = render.round
        try:
            rendered = await self.conv.ask(render, timeout=ASK_TIMEOUT_S)
            result = await generate(self.services, rendered.request)
            followups = rendered.followups
        except asyncio.CancelledError:
            raise
        except ConversationLost as exc:
            self.tell(exc)
            return
        except Exception as exc:
            log.exception("round %d of turn %s failed before the model answered", round_, self.tid)
            result = GenerateResult(
                conversation_id=self.cid,
                turn_id=self.tid,
                round=round_,
                error=f"{type(exc).__name__}: {exc}",
                error_code="internal_error",
                seq_end=self.seq,
            )
            followups = self.followups_rendered
        self.tell(ModelReply(round_, result, render.force_compaction, followups))

    async def _cancel_model(self) -> None:
        if self._model_task is not None:
            self._model_task.cancel()
            self._model_task = None
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        bus = self.services.bus
        try:
            await bus.publish(bus.subjects.llm_cancel, CancelReAct(turn_id=self.tid))
        except BusError as exc:
            log.warning("could not cancel the model call of turn %s: %s", self.tid, exc)

    async def _on_model_reply(self, reply: ModelReply) -> None:
        state = self.state
        if state.round != reply.round or state.phase != "thinking":
            log.debug("stale model reply of round %d", reply.round)
            return
        result = reply.result
        self.followups_rendered = reply.followups_rendered
        self.usage = self.usage + result.usage
        self.seq = max(self.seq, result.seq_end)
        tokens = result.usage.total_input_tokens + result.usage.output_tokens
        if result.error_code == "context_window" and not reply.forced:
            render = self._render_message(reply.round, force=True)
            self._model_task = self.spawn(self._model_round(render), f"model-{reply.round}-c")
            return
        if result.error_code:
            error = f"{result.error_code}: {result.error}"
            await self.feed(ev.ModelFailed(reply.round, error, tokens))
            return
        channels = result.channels
        classified = classify_reply(
            reply.round,
            channels,
            ledger=self.ledger,
            external=self.services.external_tools(),
            max_calls=self.turn.max_calls,
            tokens=tokens,
        )
        now = self._now()
        notes = notes_block(
            self.tid, reply.round, channels.get("thinking", ""), classified.notes, now
        )
        if notes is not None:
            self.pending.append(notes)
        if classified.notes.strip():
            self.pending.append(NotesAck(classified.notes, reply.round, now))
        await self._record_notices(classified.notices)
        if classified.event is not None:
            await self.feed(classified.event)
            return
        self.followups = parse_followups(channels.get("followup", ""))
        self.sources_used = list(result.used_sources)
        self.client_answers[classified.answer] = result.answer_emitted.strip()
        await self._answer(reply.round, classified.answer, tokens, grace=True)

    async def _record_notices(self, notices: tuple[Notice, ...]) -> None:
        for n in notices:
            self.pending.append(self._notice(n.full_code, n.message))
        for n in notices:
            await self._progress("notice", self.state.round, f"{n.full_code}: {n.message}")

    async def _answer(self, round_: int, answer: str, tokens: int, *, grace: bool) -> None:
        """The model answered: one more round when a followup came that it has not seen,
        else (after the followup grace, when there is one) the turn completes."""
        unseen = self.followups_arrived - self.followups_rendered
        if unseen > 0:
            reason = f"{unseen} followup(s) not seen yet" if grace else "a followup arrived"
            await self.feed(ev.AnswerDeferred(round_, reason, tokens))
            return
        if not grace or self.turn.grace_s <= 0:
            await self.feed(ev.ModelAnswered(round_, answer, tokens))
            return

        async def wait() -> None:
            await asyncio.sleep(self.turn.grace_s)
            self.tell(GraceOver(round_, answer, tokens))

        self._grace = self.spawn(wait(), f"grace-{round_}")

    async def _best_effort(self, reason: str) -> str:
        """One tool-free model call for an answer when the budget is spent."""
        fallback = (
            f"I could not finish this within the turn's budget ({reason}). "
            "What I found so far is on the timeline."
        )
        budget = self.limits.token_budget
        if budget is not None and self.state.tokens_used >= budget:
            return fallback
        notice = BEST_EFFORT_NOTICE.format(reason=reason)
        try:
            render = self._render_message(self.state.round + 1, notices=(notice,))
            rendered = await self.conv.ask(render, timeout=ASK_TIMEOUT_S)
            result = await generate(self.services, rendered.request)
        except (TimeoutError, BusError) as exc:
            log.warning("best-effort answer of turn %s failed: %s", self.tid, exc)
            return fallback
        self.usage = self.usage + result.usage
        self.seq = max(self.seq, result.seq_end)
        answer = result.channels.get("answer", "").strip()
        if answer:
            self.followups = parse_followups(result.channels.get("followup", ""))
            self.sources_used = list(result.used_sources)
            self.client_answers[answer] = result.answer_emitted.strip()
        return answer or fallback

    # -- tools ----------------------------------------------------------------------------------
    def _start_tools(self, round_: int, calls: tuple[ev.ToolSpec, ...]) -> None:
        now = self._now()
        self.pending.extend(call_block(self.tid, c.call_id, c.tool, c.params, now) for c in calls)
        react = tuple(c for c in calls if c.tool.startswith("react."))
        run = RunTools(self.tid, react, self._writes()) if react else None
        self._tools_task = self.spawn(self._tools_round(round_, calls, run), f"tools-{round_}")

    async def _tools_round(
        self, round_: int, calls: tuple[ev.ToolSpec, ...], run: RunTools | None
    ) -> None:
        external = [c for c in calls if not c.tool.startswith("react.")]
        timeout = self.turn.tool_timeout_s
        jobs = [
            call_tool(
                self.services, c, conversation_id=self.cid, turn_id=self.tid, timeout_s=timeout
            )
            for c in external
        ]
        react_outcomes: tuple[ReactOutcome, ...] = ()
        try:
            outside = asyncio.gather(*jobs)
            if run is not None:
                ask = self.conv.ask(run, timeout=timeout + ASK_TIMEOUT_S)
                react_outcomes, outcomes = await asyncio.gather(ask, outside)
            else:
                outcomes = await outside
        except asyncio.CancelledError:
            raise
        except ConversationLost as exc:
            self.tell(exc)
            return
        except Exception as exc:
            log.exception("tool round %d of turn %s failed", round_, self.tid)
            error = f"the tool failed inside the runtime: {type(exc).__name__}: {exc}"
            self.tell(ToolsDone(round_, tuple(failed(c, error) for c in calls), "failed"))
            return
        by_id = {o.call_id: o for o in outcomes}
        for call, outcome in zip(run.calls if run else (), react_outcomes, strict=True):
            after = [
                *outcome.blocks,
                *(self._notice(n.full_code, n.message) for n in outcome.notices),
            ]
            by_id[call.call_id] = ToolOutcome(
                call.call_id, call.tool, outcome.ok, outcome.result, (), tuple(after)
            )
        ordered = tuple(by_id[c.call_id] for c in calls)
        bad = sum(not o.ok for o in ordered)
        detail = f"{len(calls)} result(s)" + (f", {bad} failed" if bad else "")
        self.tell(ToolsDone(round_, ordered, detail))

    # -- outside agents -------------------------------------------------------------------------
    async def _send_task(self, effect: ev.SendAgentTask) -> None:
        services = self.services
        bus = services.bus
        now = self._now()
        services.tasks.add(TaskEntry(effect.task_id, effect.agent, self.cid, self.tid, now))
        text = (
            f"{effect.text}\n\n---\nYou are the outside agent '{effect.agent}'. When the work "
            f"is done, publish agent.done (agent={effect.agent}, turn_id={self.tid}, "
            f"task_id={effect.task_id}, summary=...) on {bus.subjects.agent_done}, or run: "
            f'actline done {effect.agent} "<summary>" --task {effect.task_id}'
        )
        task = AgentTask(
            agent=effect.agent,
            conversation_id=self.cid,
            turn_id=self.tid,
            task_id=effect.task_id,
            text=text,
            done_subject=bus.subjects.agent_done,
        )
        status: dict[str, Any] = {
            "status": "sent",
            "agent": effect.agent,
            "task_id": effect.task_id,
        }
        try:
            await bus.publish(bus.subjects.agent_inbox(effect.agent), task)
        except BusError as exc:
            status = {"status": "error", "error": f"could not send: {exc}"}
        params = {"name": effect.agent, "text": effect.text}
        self.pending.append(call_block(self.tid, effect.call_id, AGENT_SEND, params, now))
        ok = status["status"] == "sent"
        self.pending.append(ToolOutcome(effect.call_id, AGENT_SEND, ok, status))

    async def _wait(self, generation: int, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.tell(ev.WaitTimeout(generation))

    # -- the end --------------------------------------------------------------------------------
    async def _finish(self, effect: ev.Finish) -> None:
        answer = effect.answer if effect.answer is not None else (self.best_effort or "")
        self.pending.extend(
            final_blocks(self.tid, answer, effect.status, self.followups, self._now())
        )
        result = ReActResult(
            conversation_id=self.cid,
            turn_id=self.tid,
            status=effect.status,
            answer=self.client_answers.get(answer, answer),
            followups=list(self.followups),
            sources_used=list(self.sources_used),
            usage=self.usage,
            rounds=effect.rounds,
            error=effect.error,
        )
        await self._end("result", result=result)

    async def _abort(self, error: str) -> None:
        """The runtime itself failed (storage full, a bug): fail the turn, say why, go on."""
        if self._finished:
            return
        await self._cancel_model()
        self.state, _ = transition(self.state, ev.CancelReAct(self.tid, "runtime failure"))
        result = ReActResult(
            conversation_id=self.cid,
            turn_id=self.tid,
            status="failed",
            usage=self.usage,
            rounds=self.state.round,
            error=f"the runtime failed: {error}",
        )
        await self._progress("complete", self.state.round, result.error or "failed")
        await self._end("result", result=result)

    async def _end(
        self,
        how: Literal["result", "lost"],
        *,
        result: ReActResult | None = None,
        reason: str = "",
    ) -> None:
        """Stop everything in flight and tell the conversation how the turn ended."""
        if self._finished:
            return
        self._finished = True
        if how == "lost":
            await self._cancel_model()
        for task in (self._tools_task, self._timer, self._grace):
            if task is not None:
                task.cancel()
        if self._control is not None:
            with contextlib.suppress(BusError):
                await self._control.unsubscribe()
        if how == "lost":
            log.warning("turn %s handed back: %s", self.tid, reason)
        self.conv.tell(EndTurn(self.tid, how, self.state, result, self._writes(), reason))
        self.request_stop()
