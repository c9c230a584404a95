"""The DecisionActor: runs one turn's state machine and executes its effects.

``actors.state.transition`` decides; this actor does. Everything that reaches it
becomes an event (a model reply, a finished tool round, a DONE routed by the node,
skip/cancel from ``al.turn.<tid>.control``, its wait timer) and the effects come back
in order. Slow work runs in child tasks that post their outcome to the mailbox: the
model call (render on the ConversationActor, generate on a StreamerActor), the tool
round (react.* on the ConversationActor, the rest on the ToolExecutorActor pool), the
wait timer, the followup grace. So a cancel or a DONE is handled at once whatever
is in flight.

What the model wrote is checked here (``decision_protocol``): every refusal and
violation becomes a ``react.notice`` block the model sees next round. Before each
model call and on entering Waiting the turn is persisted with its checkpoint, so a
node that dies loses at most the round in flight; a ``ResumeReAct`` continues it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import nats.errors

import messages
from bus import BusError
from channels import strip_fence
from messages import (
    Ack,
    AgentTask,
    CancelReAct,
    ErrorReply,
    GenerateRequest,
    GenerateResult,
    ReActProgress,
    ReActResult,
    SkipWaiting,
    ToolCall,
    ToolResult,
    TurnRequest,
    Usage,
    new_id,
)
from messages.ids import is_valid_name
from timeline import AnnounceContext, Block, Timeline
from timeline.blocks import (
    COMPLETION,
    NOTICE,
    REACT_NOTES,
    SIGNAL_DONE,
    SUGGESTED_FOLLOWUPS,
    TOOL_CALL,
    TOOL_RESULT,
)
from timeline.paths import ar_path, tc_path
from timeline.sources import SourceRow

from . import events as ev
from .base import Actor, ActorStopped
from .cluster import ConversationLost
from .conversation import (
    Append,
    Apply,
    ConversationActor,
    Persist,
    Render,
    RunReact,
    TurnEnded,
    TurnLost,
)
from .conversation import UnseenFollowups as UnseenFollowupsQuery
from .decision_protocol import CallLedger, Notice, ToolCallSpec, check_decision
from .services import TaskEntry
from .state import DecisionState, checkpoint, resume_event, transition
from .streamer import failed_result

log = logging.getLogger(__name__)

AGENT_SEND = "agent.send"
MAX_TOOL_SOURCES = 20
"""Source rows one external tool result may add to the pool."""
BEST_EFFORT_NOTICE = (
    "The turn's budget is spent ({reason}). Write your final answer now from what is on "
    "the timeline: action complete, no tool calls."
)


# --- mailbox messages (besides actors.events) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _Begin:
    pass


@dataclass(frozen=True, slots=True)
class _ModelReply:
    round: int
    result: GenerateResult
    forced: bool


@dataclass(frozen=True, slots=True)
class _GraceOver:
    round: int
    answer: str
    tokens: int


@dataclass(frozen=True, slots=True)
class _FollowupArrived:
    pass


@dataclass(frozen=True, slots=True)
class _Control:
    message: SkipWaiting | CancelReAct


@dataclass(frozen=True, slots=True)
class _DoneIn:
    signal: messages.DoneSignal
    reply: asyncio.Future[messages.Message]


# --- the actor ----------------------------------------------------------------------------


class DecisionActor(Actor):
    """The decision loop of one turn, on the node of its ConversationActor."""

    def __init__(
        self,
        conv: ConversationActor,
        request: TurnRequest,
        state: DecisionState,
        *,
        resume: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"turn:{request.turn_id}")
        self.conv = conv
        self.services = conv.services
        self.request = request
        self.cid = request.conversation_id
        self.tid = request.turn_id
        self.state = state
        self.resume = resume
        self.limits = _limits(request, self.services.settings)
        self.max_calls = _int(request.config.get("max_tool_calls_per_decision"), 5)
        self.grace_s = _float(
            request.config.get("followup_grace_s"), self.services.settings.followup_grace_s
        )
        self.model = str(request.config.get("model") or self.services.settings.model)
        self.ledger = CallLedger()
        self.usage = Usage()
        self.seq = 0
        self.notices = 0
        self.best_effort: str | None = None
        self.followups: list[str] = []
        self.sources_used: list[int] = []
        self.client_answers: dict[str, str] = {}
        """Raw answer -> the text clients saw (citations resolved by the streamer)."""
        self._model_task: asyncio.Task[None] | None = None
        self._tools_task: asyncio.Task[None] | None = None
        self._timer: asyncio.Task[None] | None = None
        self._grace: asyncio.Task[None] | None = None
        self._control: Any = None
        self._finished = False

    # -- entry points used by the conversation and the node --------------------------------------
    def start(self) -> None:
        super().start()
        self.tell(_Begin())

    def tell_followup(self) -> None:
        if not self._finished:
            self.tell(_FollowupArrived())

    def ask_done(self, signal: messages.DoneSignal) -> asyncio.Future[messages.Message]:
        """Route a DONE here; the future answers ``Ack`` or ``ErrorReply``."""
        future: asyncio.Future[messages.Message] = asyncio.get_running_loop().create_future()
        self.tell(_DoneIn(signal, future))
        return future

    # -- mailbox ---------------------------------------------------------------------------------
    async def receive(self, message: object) -> object:
        if self._finished:
            if isinstance(message, _DoneIn) and not message.reply.done():
                message.reply.set_exception(ActorStopped(self.name))
            return None
        try:
            await self._receive(message)
        except asyncio.CancelledError:
            raise
        except ConversationLost as exc:
            if isinstance(message, _DoneIn) and not message.reply.done():
                message.reply.set_exception(exc)
            await self._give_up(exc)
        except Exception as exc:
            log.exception("turn %s failed handling %s", self.tid, type(message).__name__)
            if isinstance(message, _DoneIn) and not message.reply.done():
                message.reply.set_exception(exc)
            await self._abort(f"{type(exc).__name__}: {exc}")
        return None

    async def _receive(self, message: object) -> None:
        match message:
            case _Begin():
                await self._begin()
            case _ModelReply():
                await self._on_model_reply(message)
            case _GraceOver():
                await self._on_grace_over(message)
            case _FollowupArrived():
                if self._grace is not None and not self._grace.done():
                    self._grace.cancel()
                    self._grace = None
                    await self.feed(ev.AnswerDeferred(self.state.round, "a followup arrived"))
            case _Control(message=SkipWaiting() as skip):
                await self.feed(ev.SkipWaiting(skip.turn_id, skip.reason))
            case _Control(message=CancelReAct() as cancel):
                await self.feed(ev.CancelReAct(cancel.turn_id, cancel.reason))
            case _DoneIn():
                await self._on_done(message)
            case ev.ToolsFinished() | ev.WaitTimeout():
                await self.feed(message)
            case _:
                raise TypeError(f"{self.name} does not take {type(message).__name__}")

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
                    self.tell(_Control(msg))

        self._control = await bus.subscribe(bus.subjects.turn_control(self.tid), on_control)
        if self.resume is not None:
            await self.feed(resume_event(self.resume, self.limits))
        else:
            await self.feed(ev.StartReAct(self.tid, self.limits))

    # -- effects --------------------------------------------------------------------------------
    async def _execute(self, effect: ev.Effect) -> None:
        match effect:
            case ev.CallModel(round=r):
                await self._checkpoint()
                self._model_task = self.spawn(self._model_round(r), f"model-{r}")
            case ev.CancelModel():
                await self._cancel_model()
            case ev.RunTools(round=r, calls=calls):
                self._tools_task = self.spawn(self._tools_round(r, calls), f"tools-{r}")
            case ev.CancelTools():
                if self._tools_task is not None:
                    self._tools_task.cancel()
            case ev.SendAgentTask():
                await self._send_task(effect)
            case ev.StartWaitTimer(generation=g, seconds=s):
                await self._checkpoint()
                self._timer = self.spawn(self._wait(g, s), f"wait-{g}")
            case ev.CancelWaitTimer():
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            case ev.RecordSignal(signal=signal, task_id=task_id):
                await self._record_signal(signal, task_id)
            case ev.RecordLateSignal(signal=signal, reason=reason):
                conv = self.conv
                await conv.ask(Apply(lambda tl: conv.record_late_signal(signal, reason)))
            case ev.RecordNotice(code=code, text=text):
                await self._append(self._notice_block(code, text))
            case ev.EmitProgress(phase=phase, round=r, detail=detail):
                await self._progress(phase, r, detail)
            case ev.FinalizeBestEffort(reason=reason):
                self.best_effort = await self._best_effort(reason)
            case ev.Finish():
                await self._finish(effect)
            case ev.Ignored(reason=reason):
                log.debug("turn %s ignored: %s", self.tid, reason)

    async def _append(self, *blocks: Block) -> list[Block]:
        appended: list[Block] = await self.conv.ask(Append(tuple(blocks)))
        return appended

    def _notice_block(self, code: str, text: str) -> Block:
        self.notices += 1
        path = ar_path(self.tid, f"react.notice.{self.state.round}.{self.notices}")
        return Block.new(
            NOTICE,
            self.tid,
            self.services.clock(),
            path=path,
            text=f"{code}: {text}",
            meta={"code": code},
        )

    async def _checkpoint(self) -> None:
        await self.conv.ask(Persist({self.tid: checkpoint(self.state)}))

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
    def _announce(self, notices: tuple[str, ...] = ()) -> AnnounceContext:
        budget = self.limits.token_budget
        return AnnounceContext(
            iteration=self.state.round,
            max_iterations=self.limits.max_iterations,
            budget_tokens=None if budget is None else max(budget - self.state.tokens_used, 0),
            notices=notices,
        )

    async def _render(
        self, round_: int, *, force: bool = False, notices: tuple[str, ...] = ()
    ) -> GenerateRequest:
        request: GenerateRequest = await self.conv.ask(
            Render(
                self.tid,
                round_,
                self._announce(notices),
                model=self.model,
                max_output_tokens=self.services.settings.max_output_tokens,
                seq_start=self.seq,
                force_compaction=force,
            )
        )
        return request

    async def _model_round(self, round_: int, *, force: bool = False) -> None:
        try:
            request = await self._render(round_, force=force)
            result = await self._generate(request)
        except asyncio.CancelledError:
            raise
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
        self.tell(_ModelReply(round_, result, force))

    async def _generate(self, request: GenerateRequest) -> GenerateResult:
        """One model call on a streamer: this node's by reference, else the pool."""
        services = self.services
        bus = services.bus
        timeout = services.settings.model_timeout_s + 5.0
        shelf = services.shelf
        if shelf is not None:
            ref = shelf.put(request)
            small = GenerateRequest(
                conversation_id=request.conversation_id,
                turn_id=request.turn_id,
                round=request.round,
                context_ref=ref,
            )
            try:
                reply = await bus.request(
                    bus.subjects.llm_generate_local(shelf.node_id),
                    small,
                    timeout=timeout,
                    raise_remote=False,
                )
                if isinstance(reply, GenerateResult):
                    return reply
                log.warning("local streamer refused round %d: %s", request.round, reply)
            except BusError as exc:
                log.warning("local streamer unreachable (%s); using the pool", exc)
            finally:
                shelf.drop(ref)
        try:
            reply = await bus.request(
                bus.subjects.llm_generate, request, timeout=timeout, raise_remote=False
            )
        except BusError as exc:
            return failed_result(request, "model_unreachable", f"no streamer answered: {exc}")
        if isinstance(reply, GenerateResult):
            return reply
        text = reply.message if isinstance(reply, ErrorReply) else f"unexpected {reply.kind}"
        return failed_result(request, "model_unreachable", text)

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

    async def _on_model_reply(self, reply: _ModelReply) -> None:
        state = self.state
        if state.round != reply.round or state.phase != "thinking":
            log.debug("stale model reply of round %d", reply.round)
            return
        result = reply.result
        self.usage = self.usage + result.usage
        self.seq = max(self.seq, result.seq_end)
        tokens = result.usage.total_input_tokens + result.usage.output_tokens
        if result.error_code == "context_window" and not reply.forced:
            self._model_task = self.spawn(
                self._model_round(reply.round, force=True), f"model-{reply.round}-compacted"
            )
            return
        if result.error_code:
            await self.feed(
                ev.ModelFailed(reply.round, f"{result.error_code}: {result.error}", tokens)
            )
            return
        channels = result.channels
        answer = channels.get("answer", "")
        checked = check_decision(
            channels.get("decision", ""),
            external=self.services.external_tools(),
            max_calls=self.max_calls,
            answer=answer,
        )
        await self._record_round(reply.round, channels.get("thinking", ""), checked.notes)
        notices = list(checked.notices)
        if checked.action in ("complete", "exit"):
            await self._record_notices(notices)
            self.followups = _followups(channels.get("followup", ""))
            self.sources_used = list(result.used_sources)
            self.client_answers[answer.strip()] = result.answer_emitted.strip()
            await self._answered(reply.round, answer.strip(), tokens)
            return
        calls: list[ev.ToolSpec] = []
        agent_calls: list[ev.AgentCall] = []
        refused: list[Notice] = []
        for index, call in enumerate(checked.calls, start=1):
            problem = self.ledger.admit(call) or _agent_problem(call)
            if problem is not None:
                (refused if problem.code == "repeated_call" else notices).append(problem)
                continue
            call_id = f"c{reply.round}-{index}"
            if call.tool == AGENT_SEND:
                agent_calls.append(
                    ev.AgentCall(
                        call_id,
                        new_id("task-"),
                        str(call.params["name"]),
                        str(call.params["text"]),
                    )
                )
            else:
                calls.append(ev.ToolSpec(call_id, call.tool, dict(call.params)))
        if calls or agent_calls:
            await self._record_notices([*notices, *refused])
            await self.feed(ev.ModelDecided(reply.round, tuple(calls), tuple(agent_calls), tokens))
        elif refused:
            await self._record_notices(notices + refused[1:])
            first = refused[0]
            await self.feed(ev.CallRefused(reply.round, first.code, first.message, tokens))
        else:
            first = notices[0] if notices else Notice("empty_decision", "no usable call")
            await self._record_notices(notices[1:])
            await self.feed(ev.ProtocolViolation(reply.round, first.code, first.message, tokens))

    async def _record_round(self, round_: int, thinking: str, notes: str) -> None:
        text = "\n".join(part for part in (thinking.strip(), notes.strip()) if part)
        now = self.services.clock()
        tid = self.tid
        if text:
            path = ar_path(tid, f"react.notes.{round_}")
            await self._append(Block.new(REACT_NOTES, tid, now, path=path, text=text))
        if notes.strip():
            await self.conv.ask(
                Apply(lambda tl: tl.acknowledge(notes, turn_id=tid, ts=now, iteration=round_))
            )

    async def _record_notices(self, notices: list[Notice]) -> None:
        if notices:
            await self._append(*(self._notice_block(n.full_code, n.message) for n in notices))
            for n in notices:
                await self._progress("notice", self.state.round, f"{n.full_code}: {n.message}")

    async def _answered(self, round_: int, answer: str, tokens: int) -> None:
        unseen: int = await self.conv.ask(UnseenFollowupsQuery())
        if unseen:
            await self.feed(ev.AnswerDeferred(round_, f"{unseen} followup(s) not seen yet", tokens))
            return
        if self.grace_s <= 0:
            await self.feed(ev.ModelAnswered(round_, answer, tokens))
            return

        async def grace() -> None:
            await asyncio.sleep(self.grace_s)
            self.tell(_GraceOver(round_, answer, tokens))

        self._grace = self.spawn(grace(), f"grace-{round_}")

    async def _on_grace_over(self, message: _GraceOver) -> None:
        self._grace = None
        unseen: int = await self.conv.ask(UnseenFollowupsQuery())
        if unseen:
            event: ev.Event = ev.AnswerDeferred(message.round, "a followup arrived", message.tokens)
        else:
            event = ev.ModelAnswered(message.round, message.answer, message.tokens)
        await self.feed(event)

    async def _best_effort(self, reason: str) -> str:
        """One tool-free model call for an answer when the budget is spent."""
        fallback = (
            f"I could not finish this within the turn's budget ({reason}). "
            "What I found so far is on the timeline."
        )
        if self.limits.token_budget is not None and self.state.tokens_used >= (
            self.limits.token_budget
        ):
            return fallback
        try:
            request = await self._render(
                self.state.round + 1, notices=(BEST_EFFORT_NOTICE.format(reason=reason),)
            )
            result = await self._generate(request)
        except (TimeoutError, BusError) as exc:
            log.warning("best-effort answer of turn %s failed: %s", self.tid, exc)
            return fallback
        self.usage = self.usage + result.usage
        self.seq = max(self.seq, result.seq_end)
        answer = result.channels.get("answer", "").strip()
        if answer:
            self.followups = _followups(result.channels.get("followup", ""))
            self.sources_used = list(result.used_sources)
            self.client_answers[answer] = result.answer_emitted.strip()
        return answer or fallback

    # -- tools ----------------------------------------------------------------------------------
    async def _tools_round(self, round_: int, calls: tuple[ev.ToolSpec, ...]) -> None:
        now = self.services.clock()
        await self._append(
            *(
                Block.new(
                    TOOL_CALL,
                    self.tid,
                    now,
                    path=tc_path(self.tid, c.call_id, "call"),
                    call_id=c.call_id,
                    mime="application/json",
                    data={"tool": c.tool, "params": dict(c.params)},
                )
                for c in calls
            )
        )
        outcomes = await asyncio.gather(*(self._guarded_call(c) for c in calls))
        blocks: list[Block] = []
        failed = 0
        for call, (ok, data, extra, notices) in zip(calls, outcomes, strict=True):
            failed += not ok
            blocks.append(
                Block.new(
                    TOOL_RESULT,
                    self.tid,
                    self.services.clock(),
                    path=tc_path(self.tid, call.call_id, "result"),
                    call_id=call.call_id,
                    mime="application/json",
                    data=data,
                    meta={"tool": call.tool, "ok": ok},
                )
            )
            blocks.extend(extra)
            blocks.extend(self._notice_block(n.full_code, n.message) for n in notices)
        await self._append(*blocks)
        detail = f"{len(calls)} result(s)" + (f", {failed} failed" if failed else "")
        self.tell(ev.ToolsFinished(round_, detail))

    async def _guarded_call(
        self, call: ev.ToolSpec
    ) -> tuple[bool, dict[str, Any], list[Block], list[Notice]]:
        try:
            return await self._run_call(call)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("tool %s (call %s) of turn %s failed", call.tool, call.call_id, self.tid)
            error = f"the tool failed inside the runtime: {type(exc).__name__}: {exc}"
            return False, {"status": "error", "error": error}, [], []

    async def _run_call(
        self, call: ev.ToolSpec
    ) -> tuple[bool, dict[str, Any], list[Block], list[Notice]]:
        if call.tool.startswith("react."):
            outcome = await self.conv.ask(RunReact(call.tool, call.params, self.tid, call.call_id))
            return outcome.ok, outcome.result, list(outcome.blocks), list(outcome.notices)
        bus = self.services.bus
        timeout = _float(self.request.config.get("tool_timeout_s"), 0.0) or (
            self.services.settings.tool_timeout_s
        )
        message = ToolCall(
            conversation_id=self.cid,
            turn_id=self.tid,
            call_id=call.call_id,
            tool=call.tool,
            params=dict(call.params),
            timeout_s=timeout,
        )
        subject = (
            bus.subjects.tools_exec_local(self.services.settings.node_id)
            if self.services.local_tools
            else bus.subjects.tools_exec
        )
        try:
            reply = await bus.request(subject, message, timeout=timeout + 2.0, raise_remote=False)
        except BusError as exc:
            error = f"the tool executors did not answer: {exc}"
            return False, {"status": "error", "error": error}, [], []
        if not isinstance(reply, ToolResult):
            error = reply.message if isinstance(reply, ErrorReply) else f"got {reply.kind}"
            return False, {"status": "error", "error": error}, [], []
        data: dict[str, Any] = {"status": "ok" if reply.ok else "error"}
        content = reply.content
        rows = reply.data.get("sources") if reply.ok else None
        if isinstance(rows, list) and rows:
            pooled = await self.conv.ask(Apply(lambda tl: _pool_sources(tl, rows)))
            if pooled:
                data["sources"] = pooled
                heads = [f"[S:{r['sid']}] {r['title']} — {r['url']}" for r in pooled]
                content = "\n".join(heads) + ("\n" + content if content else "")
        if content:
            data["content"] = content
        if reply.data:
            data["data"] = {k: v for k, v in reply.data.items() if k != "sources"}
        if reply.error:
            data["error"] = reply.error
        if reply.artifacts:
            data["artifacts"] = [a.model_dump(mode="json") for a in reply.artifacts]
        return reply.ok, data, [], []

    # -- outside agents -------------------------------------------------------------------------
    async def _send_task(self, effect: ev.SendAgentTask) -> None:
        services = self.services
        bus = services.bus
        now = services.clock()
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
        params = {"name": effect.agent, "text": effect.text}
        call = Block.new(
            TOOL_CALL,
            self.tid,
            now,
            path=tc_path(self.tid, effect.call_id, "call"),
            call_id=effect.call_id,
            mime="application/json",
            data={"tool": AGENT_SEND, "params": params},
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
        result = Block.new(
            TOOL_RESULT,
            self.tid,
            services.clock(),
            path=tc_path(self.tid, effect.call_id, "result"),
            call_id=effect.call_id,
            mime="application/json",
            data=status,
            meta={"tool": AGENT_SEND, "ok": status["status"] == "sent"},
        )
        await self._append(call, result)

    async def _record_signal(self, signal: ev.DoneSignal, task_id: str) -> None:
        self.services.tasks.answered(task_id)
        text = f"{signal.agent}: {signal.summary}"
        for artifact in signal.artifacts:
            text += f"\n- artifact {artifact.path} ({artifact.mime})"
            if artifact.text:
                text += f": {artifact.text}"
        await self._append(
            Block.new(
                SIGNAL_DONE,
                self.tid,
                self.services.clock(),
                path=ar_path(self.tid, f"signal.done.{task_id}"),
                text=text,
                meta={"agent": signal.agent, "task_id": task_id, "signal_id": signal.signal_id},
            )
        )

    async def _on_done(self, message: _DoneIn) -> None:
        signal = message.signal
        event = ev.event_from_message(signal)
        try:
            effects = await self.feed(event)
        except Exception as exc:
            if not message.reply.done():
                message.reply.set_exception(exc)
            raise
        if not message.reply.done():
            message.reply.set_result(_verdict(signal, effects))

    async def _wait(self, generation: int, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.tell(ev.WaitTimeout(generation))

    # -- the end --------------------------------------------------------------------------------
    async def _finish(self, effect: ev.Finish) -> None:
        answer = effect.answer if effect.answer is not None else (self.best_effort or "")
        now = self.services.clock()
        blocks = []
        if answer:
            blocks.append(
                Block.new(
                    COMPLETION,
                    self.tid,
                    now,
                    path=ar_path(self.tid, "assistant.completion"),
                    text=answer,
                    meta={"status": effect.status},
                )
            )
        if self.followups:
            blocks.append(
                Block.new(
                    SUGGESTED_FOLLOWUPS,
                    self.tid,
                    now,
                    path=ar_path(self.tid, "stage.suggested_followups"),
                    mime="application/json",
                    data=list(self.followups),
                )
            )
        if blocks:
            await self._append(*blocks)
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
        record = {
            "status": effect.status,
            "turn_id": self.tid,
            "result": result.model_dump(mode="json"),
        }
        await self.conv.ask(Persist({self.tid: record}))
        bus = self.services.bus
        for task in (self._timer, self._grace, self._tools_task):
            if task is not None:
                task.cancel()
        self._finished = True
        await bus.publish(bus.subjects.result(self.tid), result)
        if self._control is not None:
            await self._control.unsubscribe()
        self.conv.tell(TurnEnded(self.tid, self.state, result))
        self.request_stop()

    async def _give_up(self, exc: ConversationLost) -> None:
        """Another node owns the conversation now: stop without a result; the turn goes back
        to the queue and resumes there from the durable copy."""
        if self._finished:
            return
        self._finished = True
        await self._cancel_model()
        for task in (self._tools_task, self._timer, self._grace):
            if task is not None:
                task.cancel()
        if self._control is not None:
            with contextlib.suppress(Exception):
                await self._control.unsubscribe()
        log.warning("turn %s handed back: %s", self.tid, exc.reason)
        self.conv.tell(TurnLost(self.tid))
        self.request_stop()

    async def _abort(self, error: str) -> None:
        """The runtime itself failed (storage full, a bug): fail the turn, say why, go on."""
        if self._finished:
            return
        await self._cancel_model()
        for task in (self._tools_task, self._timer, self._grace):
            if task is not None:
                task.cancel()
        self.state, _ = transition(self.state, ev.CancelReAct(self.tid, "runtime failure"))
        result = ReActResult(
            conversation_id=self.cid,
            turn_id=self.tid,
            status="failed",
            usage=self.usage,
            rounds=self.state.round,
            error=f"the runtime failed: {error}",
        )
        record = {"status": "failed", "turn_id": self.tid, "result": result.model_dump(mode="json")}
        try:
            await self.conv.ask(Persist({self.tid: record}))
        except Exception as exc:
            log.error("turn %s: its failure could not be persisted either: %s", self.tid, exc)
        self._finished = True
        bus = self.services.bus
        with contextlib.suppress(BusError, nats.errors.Error):
            await self._progress("complete", self.state.round, result.error or "failed")
            await bus.publish(bus.subjects.result(self.tid), result)
        if self._control is not None:
            with contextlib.suppress(Exception):
                await self._control.unsubscribe()
        self.conv.tell(TurnEnded(self.tid, self.state, result))
        self.request_stop()


# --- helpers ------------------------------------------------------------------------------


def _limits(request: TurnRequest, settings: Any) -> ev.Limits:
    config = request.config
    budget = _int(config.get("max_tokens"), settings.token_budget)
    return ev.Limits(
        max_iterations=_int(config.get("max_iterations"), settings.max_iterations),
        token_budget=budget if budget > 0 else None,
        max_consecutive_refusals=_int(config.get("max_consecutive_refusals"), 3),
        wait_timeout_s=_float(config.get("wait_timeout_s"), settings.wait_timeout_s),
    )


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _float(value: object, default: float) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def _followups(raw: str) -> list[str]:
    try:
        data = json.loads(strip_fence(raw).strip() or "[]")
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [str(item) for item in data if isinstance(item, str | int | float)][:5]


def _agent_problem(call: ToolCallSpec) -> Notice | None:
    if call.tool != AGENT_SEND:
        return None
    name = call.params.get("name")
    if not isinstance(name, str) or not is_valid_name(name):
        return Notice(
            "bad_params",
            f"agent.send needs the agent's name (letters, digits, '-', '_'), got {name!r}.",
            AGENT_SEND,
        )
    if not isinstance(call.params.get("text"), str) or not call.params["text"].strip():
        return Notice("bad_params", "agent.send needs the task text.", AGENT_SEND)
    return None


def _verdict(signal: messages.DoneSignal, effects: tuple[ev.Effect, ...]) -> messages.Message:
    """What the sender of a DONE is told, from what the state machine did with it."""
    ref = signal.task_id or signal.turn_id or ""
    for effect in effects:
        match effect:
            case ev.RecordNotice(code=code, text=text, signal_id=sid) if sid == signal.signal_id:
                return ErrorReply(code=code, message=text)
            case ev.RecordSignal(task_id=task_id):
                return Ack(ref=task_id, detail="applied")
            case ev.RecordLateSignal():
                return Ack(ref=ref, detail="late: recorded, announced next turn")
            case ev.Ignored(reason=reason) if "duplicate" in reason:
                return Ack(ref=ref, detail="duplicate: already applied")
    return Ack(ref=ref, detail="queued: applied when the turn next waits")


def _pool_sources(tl: Timeline, rows: list[Any]) -> list[dict[str, Any]]:
    """Add a tool's source rows (url, title, text) to the pool; the SIDs they got."""
    proposals = [
        SourceRow(
            0,
            url=str(row.get("url") or ""),
            title=str(row.get("title") or ""),
            text=str(row.get("text") or "")[:2000],
            provider=str(row.get("provider") or ""),
        )
        for row in rows[:MAX_TOOL_SOURCES]
        if isinstance(row, Mapping)
    ]
    out: list[dict[str, Any]] = []
    for pooled in tl.sources.add_rows(proposals):
        if pooled is not None:
            out.append({"sid": pooled.sid, "title": pooled.title, "url": pooled.url})
    return out
