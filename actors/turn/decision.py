"""The DecisionActor: runs one turn's state machine and executes its effects.

``actline.actors.turn.state.transition`` decides; this actor does. What reaches it becomes an event
(a model reply, tool outcomes, a DONE or skip/cancel routed by the node, its timers)
and the effects run in order. Slow work runs in jobs the actor spawns, or in other actors,
that post their outcome back, so a cancel or a DONE is handled at once whatever is in flight.
While the state machine waits on outside input the turn is parked
(``actline.actors.services.parking``).

What the turn puts on the timeline is collected as ``Writes`` and travels with its next
exchange with the conversation (``actline.actors.turn.mailbox``: a round is at most three, and one
group commit). A round's commit becomes durable while its model call runs; the reply is
acted on only after ``Durable``, so a node that dies loses at most the round in flight
and ``ResumeReAct`` continues it. Every way a turn ends is one ``EndTurn``. Every tool call
passes the node's hooks (``actline.tools.hooks``) here: a round's calls in ``_start_tools``
(a job, so a cancel is not held up), their outcomes as they come back, and ``agent.send`` in
``_send_task``. Stopping the actor cancels the jobs it spawned (an ask in flight is
abandoned); ``self.trace`` records the turn's spans (``actline.actors.turn.trace``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from actline import messages
from actline.actors.base import Actor, Ref
from actline.actors.configuration.turn_settings import TurnSettings
from actline.actors.errors import ActorStopped, ConversationLost, UnexpectedMessage
from actline.actors.services.shared import Services
from actline.bus import BusError
from actline.messages import CancelReAct, GenerateResult, ReActResult, SkipWaiting, TurnRequest
from actline.timeline import AnnounceContext, Block
from actline.tools.hooks import Refusal, ToolHooks, ToolUse

from . import events as ev
from . import mailbox as mb
from . import remote
from .approvals import approval_reply, denied_writes
from .blocks import call_block, final_blocks, notes_block, notice_block, signal_block
from .displays import publish_displays, unresolved_notices
from .protocol import CallLedger, Notice
from .reply import AGENT_ABSENT, AGENT_SEND, TurnOutput, classify_reply
from .salvage import answer_from_replies, salvage
from .state import DecisionState, TurnPhase, transition
from .state.checkpoint import checkpoint, resume_event
from .tool_round import BlockBudget, ToolRound, after, gate, refused
from .trace import TurnTrace
from .verdict import verdict
from .watchdog import WATCHDOG, Watchdog

log = logging.getLogger(__name__)

ASK_TIMEOUT_S = 120.0  # how long one exchange with the conversation may take


class _Begin:
    """First message: start or resume the state machine."""


@dataclass(frozen=True, slots=True)
class _NotSent:
    """An ``agent.send`` the hooks refused: its task is answered at once, so the turn does
    not wait for an agent that never got it."""

    signal: ev.DoneSignal


class DecisionActor(Actor):
    """The decision loop of one turn, on the node of its ConversationActor."""

    def __init__(
        self,
        conv: Ref,
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
        """The turn's settings; ``turn.limits`` are its limits as asked (``state.limits`` are
        those the state machine checks: a resumed turn's may be raised to the rounds made)."""
        self.ledger = CallLedger()
        self.out = TurnOutput(self.cid, self.tid)
        self.notices = 0
        self.pending: list[mb.Write] = []  # on the timeline with the next exchange
        self.followups_arrived = 0
        self.followups_rendered = 0
        self.best_effort: str | None = None
        self.salvaged = ""
        """The prose of the latest reply that broke the decision protocol (the answer of a
        turn that ends ``protocol_failed``)."""
        self._model_job: asyncio.Task[None] | None = None
        self._tools_job: asyncio.Task[None] | None = None
        self._round_tools: ToolRound | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._grace: asyncio.Task[None] | None = None
        self._finished = False
        self._durable: set[int] = set()  # rounds whose commit is durable
        self._parked: bool | None = None  # its queue message parked (None: not told yet)
        self._held: mb.ModelReply | None = None  # a model reply waiting for its round's commit
        self.watchdog = Watchdog(turn.profile)
        if resume is not None:
            self._carry_on(resume)
        self.trace = TurnTrace(services.tracer.session(self.tid, self.cid), self.cid)

    def _carry_on(self, record: Mapping[str, Any]) -> None:
        """A resumed turn goes on from its checkpoint (``_checkpoint``): its notices numbered
        after the stored ones, its identical calls and its watchdog's readings counted over
        the whole turn, so that it says what the turn not interrupted says."""
        self.notices = int(record.get("notices", 0))
        self.ledger = CallLedger.of(record.get("calls"))
        self.watchdog = Watchdog.resumed(self.turn.profile, record.get("watchdog"))

    def _checkpoint(self) -> dict[str, object]:
        """The state machine's checkpoint, with what ``_carry_on`` reads back: taken with the
        writes it accounts for, which travel in the same commit."""
        return {
            **checkpoint(self.state),
            "notices": self.notices,
            "calls": self.ledger.counts(),
            "watchdog": self.watchdog.snapshot(),
        }

    def start(self) -> None:
        super().start()
        self.tell(_Begin())

    # -- mailbox ---------------------------------------------------------------------------------
    async def receive(self, message: object) -> object:
        if self._finished:
            if isinstance(message, mb.ApplyDone):
                raise ActorStopped(self.name)  # the conversation classifies it (late)
            return None
        try:
            return await self._receive(message)
        except asyncio.CancelledError:
            raise
        except ConversationLost as exc:
            await self._end("lost", reason=exc.reason)
            if isinstance(message, mb.ApplyDone):
                raise
        except Exception as exc:
            log.exception("turn %s failed handling %s", self.tid, type(message).__name__)
            await self._abort(f"{type(exc).__name__}: {exc}")
            if isinstance(message, mb.ApplyDone):
                raise
        return None

    async def _receive(self, message: object) -> object:
        match message:
            case _Begin():
                await self._begin()
            case mb.ModelReply(round=r) if message.gated and r not in self._durable:
                self._held = message  # acted on once the round before it is stored
            case mb.ModelReply():
                await self._on_model_reply(message)
            case mb.Durable(lost=lost) if lost:
                raise ConversationLost(self.cid, lost)
            case mb.Durable(error=error) if error:
                await self._abort(f"the round could not be stored: {error}")
            case mb.Durable(round=r):
                self._durable.add(r)
                self.trace.durable(r)
                held = self._held
                self._held = None
                if held is not None and held.round == r:
                    await self._on_model_reply(held)
            case mb.GraceOver():
                self._grace = None
                await self._answer(message.round, message.answer, message.tokens, grace=False)
            case mb.FollowupArrived(count=count):
                self.followups_arrived = count
                if self._grace is not None and not self._grace.done():
                    self._grace.cancel()
                    self._grace = None
                    await self.feed(ev.AnswerDeferred(self.state.round, "a followup arrived"))
            case mb.Control(message=SkipWaiting() as skip):
                await self.feed(ev.SkipWaiting(skip.turn_id, skip.reason))
            case mb.Control(message=CancelReAct() as cancel):
                await self.feed(ev.CancelReAct(cancel.turn_id, cancel.reason))
            case mb.ApplyApproval(decision=approval):
                return approval_reply(self.tid, await self.feed(ev.event_from_message(approval)))
            case mb.ApplyDone(signal=signal):
                return verdict(signal, await self.feed(ev.event_from_message(signal)))
            case mb.ReactRan() | mb.ExternalRan():
                await self._tools_ran(message)
            case ev.WaitTimeout():
                await self.feed(message)
            case _NotSent(signal=signal):
                await self.feed(signal)
            case ConversationLost():
                raise message
            case _:
                raise UnexpectedMessage(self.name, type(message).__name__)
        return None

    async def feed(self, event: ev.Event) -> tuple[ev.Effect, ...]:
        self.state, effects = transition(self.state, event)
        self.trace.fed(event, self.state)
        self.services.task_book.awaiting(self.tid, [t.task_id for t in self.state.awaited])
        for effect in effects:
            await self._execute(effect)
        waiting = self.state.phase is TurnPhase.WAITING
        if waiting is not self._parked:
            self._parked = waiting  # waiting on outside input holds no work slot
            if waiting:
                await self.services.settler.park(self.tid)
            else:
                await self.services.settler.unpark(self.tid)
        return effects

    async def _begin(self) -> None:
        limits = self.turn.limits
        if self.resume is None:
            await self.feed(ev.StartReAct(self.tid, limits))
        else:
            await self.feed(resume_event(self.resume, limits))

    def _writes(self) -> mb.Writes:
        """What waits for the timeline, taken to travel with the next exchange."""
        writes = mb.Writes(tuple(self.pending))
        self.pending = []
        return writes

    # -- effects --------------------------------------------------------------------------------
    async def _execute(self, effect: ev.Effect) -> None:
        match effect:
            case ev.CallModel(round=r):
                self.trace.round(r)
                verdict = self.watchdog.check(r)  # a notice and compaction before this round
                for text in verdict.notices:
                    self.pending.append(self._notice(WATCHDOG, text))
                    await self._progress("notice", r, text)
                render = self._render_message(r, record=self._checkpoint(), ask=verdict.reason)
                self._model_job = self.spawn(self._model_round(render), f"model-{r}")
            case ev.CancelModel():
                await self._cancel_model()
            case ev.RunTools(round=r, calls=calls):
                self._start_tools(r, calls)
            case ev.CancelTools():
                if self._tools_job is not None:
                    self._tools_job.cancel()
            case ev.SendAgentTask():
                await self.services.ownership.settled(self.cid)  # a copy point
                await self._send_task(effect)
            case ev.StartWaitTimer(generation=g, seconds=s):
                commit = mb.Commit(self.tid, self._writes(), self._checkpoint())
                with self.trace.step("commit", self.state.round):
                    await self.conv.ask(commit, timeout=ASK_TIMEOUT_S)
                    await self.services.ownership.settled(self.cid)  # a copy point
                self.trace.wait(self.state)
                self._timer = self.later(s, ev.WaitTimeout(g))
            case ev.CancelWaitTimer():
                if self._timer is not None:
                    self._timer.cancel()
                    self._timer = None
            case ev.RecordSignal(signal=signal, task_id=task_id):
                self.services.task_book.answered(task_id)
                self.pending.append(signal_block(self.tid, signal, task_id, self._now()))
            case ev.RecordLateSignal(signal=signal, reason=reason):
                self.pending.append(mb.LateSignal(signal, reason))
            case ev.RecordNotice(code=code, text=text):
                self.pending.append(self._notice(code, text))
            case ev.EmitProgress(phase=phase, round=r, detail=detail, data=data):
                await self._progress(phase, r, detail, data)
            case ev.DenyCall():
                self.pending.extend(denied_writes(self.tid, effect, self._now()))
            case ev.FinalizeBestEffort(reason=reason):
                self.best_effort = await self._best_effort(reason)
            case ev.FinalizeFromReplies(reason=reason):
                self.best_effort = answer_from_replies(self.salvaged, reason)
            case ev.Finish():
                await self._finish(effect)
            case ev.Ignored(reason=reason) | ev.ApprovalVerdict(text=reason):
                log.debug("turn %s: %s", self.tid, reason)

    def _now(self) -> float:
        return self.services.clock()

    def _notice(self, code: str, text: str) -> Block:
        self.notices += 1
        return notice_block(self.tid, self.state.round, self.notices, code, text, self._now())

    async def _progress(
        self, phase: messages.Phase, round_: int, detail: str, data: Mapping[str, Any] | None = None
    ) -> None:
        """A card, with the watchdog's readings in ``data.context``."""
        data = {**(data or {}), "context": self.watchdog.readings()}
        await remote.publish_card(self.services, self.cid, self.tid, phase, round_, detail, data)

    # -- the model ----------------------------------------------------------------------------
    def _render_message(
        self,
        round_: int,
        *,
        record: dict[str, object] | None = None,
        force: bool = False,
        ask: str = "",
        notices: tuple[str, ...] = (),
    ) -> mb.Render:
        limits = self.turn.limits
        budget = limits.token_budget
        announce = AnnounceContext(
            iteration=self.state.round,
            max_iterations=limits.max_iterations,
            budget_tokens=None if budget is None else max(budget - self.state.tokens_used, 0),
            notices=notices,
        )
        return mb.Render(
            self.tid,
            round_,
            announce,
            writes=self._writes(),
            record=record,
            model=self.turn.model,
            max_output_tokens=self.turn.profile.max_output_tokens,
            seq_start=self.out.seq,
            force_compaction=force,
            ask_compaction=ask,
        )

    async def _model_round(self, render: mb.Render) -> None:
        round_ = render.round
        try:
            with self.trace.step("render", round_) as span:
                rendered = await self.conv.ask(render, timeout=ASK_TIMEOUT_S)
                self.trace.rendered(span, rendered)
            self.watchdog.rendered(round_, rendered.stats)
            gated = rendered.committing
            with self.trace.step("model", round_) as span:
                result = rendered.counted(await remote.generate(self.services, rendered.request))
                self.trace.generated(span, result)
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
                seq_end=self.out.seq,
            )
            followups = self.followups_rendered
            gated = False
        self.tell(mb.ModelReply(round_, result, render.force_compaction, followups, gated))

    async def _cancel_model(self) -> None:
        if self._model_job is not None:
            self._model_job.cancel()
            self._model_job = None
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None
        bus = self.services.bus
        try:
            await bus.publish(bus.subjects.llm_cancel, CancelReAct(turn_id=self.tid))
        except BusError as exc:
            log.warning("could not cancel the model call of turn %s: %s", self.tid, exc)

    async def _on_model_reply(self, reply: mb.ModelReply) -> None:
        state = self.state
        if state.round != reply.round or state.phase != "thinking":
            log.debug("stale model reply of round %d", reply.round)
            return
        result = reply.result
        self.followups_rendered = reply.followups_rendered
        tokens = self.out.add(result)
        if result.error_code == "context_window" and not reply.forced:
            render = self._render_message(reply.round, force=True)
            self._model_job = self.spawn(self._model_round(render), f"model-{reply.round}-c")
            return
        if result.error_code == "model_stream":  # cut mid-way: a repair round, not the end
            text = f"the reply was cut off mid-way ({result.error}); write it again"
            await self.feed(ev.ProtocolViolation(reply.round, "stream_dropped", text, tokens))
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
            approval_tools=self.turn.approval_tools + tuple(self.services.approval_tools()),
            stop_reason=result.usage.stop_reason,
        )
        if isinstance(classified.event, ev.ProtocolViolation):
            self.salvaged = salvage(channels) or self.salvaged
        now = self._now()
        notes = notes_block(
            self.tid, reply.round, channels.get("thinking", ""), classified.notes, now
        )
        if notes is not None:
            self.pending.append(notes)
        if classified.notes.strip():
            self.pending.append(mb.NotesAck(classified.notes, reply.round, now))
        await self._record_notices(classified.notices + unresolved_notices(result))
        if classified.event is not None:
            self.watchdog.decided(classified.event)
            await self.feed(classified.event)
            return
        self.out.answered(result, classified.answer)
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
            self.tell(mb.GraceOver(round_, answer, tokens))

        self._grace = self.spawn(wait(), f"grace-{round_}")

    async def _best_effort(self, reason: str) -> str:
        """One tool-free model call for an answer when the budget is spent (none when
        its tokens are spent too)."""
        budget = self.turn.limits.token_budget
        render = None
        if budget is None or self.state.tokens_used < budget:
            notice = remote.BEST_EFFORT_NOTICE.format(reason=reason)
            render = self._render_message(self.state.round + 1, notices=(notice,))
        return await remote.best_effort(
            self.services, self.conv, render, self.out, reason, ASK_TIMEOUT_S
        )

    # -- tools and outside agents ---------------------------------------------------------------
    def _start_tools(self, round_: int, calls: tuple[ev.ToolSpec, ...]) -> None:
        """React.* calls go to the conversation (told; ``ReactRan`` comes back), external
        ones to the tool executors from a spawned job (``ExternalRan``), at the same time."""
        now = self._now()
        self.pending.extend(call_block(self.tid, c.call_id, c.tool, c.params, now) for c in calls)
        self.trace.tools(round_, calls)
        tools = self._round_tools = ToolRound(round_, calls)
        hooks = self.services.tool_hooks
        if hooks:  # the permission callback and the pre hooks first (actline.tools.hooks)
            self._tools_job = self.spawn(self._gated(tools, hooks), f"tools-{round_}")
            return
        if tools.react:
            self.conv.tell(mb.RunTools(self.tid, round_, tools.react, self._writes()))
        if tools.external:
            self._tools_job = self.spawn(self._external(round_, tools.external), f"tools-{round_}")

    async def _gated(self, tools: ToolRound, hooks: ToolHooks) -> None:
        """The round's calls past the hooks: the refused ones are failed outcomes at once,
        the others run as ``_start_tools`` runs them, with the params the hooks left."""
        running, refusals = await gate(hooks, tools.calls, self.cid, self.tid)
        if self._round_tools is not tools:
            return
        tools.gated(running, refusals)
        if not running:
            self.tell(mb.ExternalRan(tools.round, ()))  # every call refused: the round is done
            return
        if tools.react:
            self.conv.tell(mb.RunTools(self.tid, tools.round, tools.react, self._writes()))
        if tools.external:
            await self._external(tools.round, tools.external)

    async def _external(self, round_: int, calls: tuple[ev.ToolSpec, ...]) -> None:
        try:
            await self.services.ownership.settled(self.cid)  # a copy point: the calls act outside
        except ConversationLost as exc:
            self.tell(exc)
            return
        outcomes = await remote.call_tools(
            self.services,
            calls,
            conversation_id=self.cid,
            turn_id=self.tid,
            timeout_s=self.turn.tool_timeout_s,
            headers=self.trace.headers,
        )
        hooks = self.services.tool_hooks
        if hooks:
            outcomes = await after(hooks, calls, outcomes, self.cid, self.tid)
        self.tell(mb.ExternalRan(round_, outcomes))

    async def _tools_ran(self, message: mb.ReactRan | mb.ExternalRan) -> None:
        """One part of a round's tools is in; when all are, the round goes on."""
        tools = self._round_tools
        if tools is None or tools.round != message.round or self.state.round != message.round:
            log.debug("stale tool outcomes of round %d", message.round)
            return
        self.trace.tools_ran(message, tools.react)
        if isinstance(message, mb.ReactRan):
            tools.react_ran(message.outcomes, self._notice)
            await publish_displays(self.services.bus, self.out, tools, message.outcomes)
            hooks = self.services.tool_hooks
            if hooks and hooks.post_hooks:
                ran = [tools.outcomes[c.call_id] for c in tools.react]
                posted = await after(hooks, tools.react, ran, self.cid, self.tid)
                tools.outcomes.update((o.call_id, o) for o in posted)
        else:
            tools.external_ran(message.outcomes)
        complete = tools.complete(BlockBudget.read(self.services, self.cid))  # the block quota
        if complete is not None:
            self._round_tools = None
            outcomes, detail = complete
            self.pending.extend(outcomes)
            await self.feed(ev.ToolsFinished(message.round, detail))

    async def _send_task(self, effect: ev.SendAgentTask) -> None:
        params = {"name": effect.agent, "text": effect.text}
        call = call_block(self.tid, effect.call_id, AGENT_SEND, params, self._now())
        hooks = self.services.tool_hooks
        if hooks:
            use = ToolUse(AGENT_SEND, params, self.cid, self.tid, effect.call_id)
            verdict = await hooks.before(use)
            if not isinstance(verdict, Refusal) and verdict.params.get("name") != effect.agent:
                reason = "a hook may change the text of agent.send, not the agent it goes to"
                verdict = Refusal("the hooks", reason, "hook_failed")
            if isinstance(verdict, Refusal):
                self.pending.extend((call, refused(effect.call_id, AGENT_SEND, verdict)))
                summary = f"the task was not sent: {verdict.error(AGENT_SEND)}"
                signal = ev.DoneSignal(
                    f"refused-{effect.call_id}", effect.agent, self.tid, effect.task_id, summary
                )
                self.tell(_NotSent(signal))
                return
            effect = replace(effect, text=str(verdict.params.get("text", effect.text)))
        sent = await remote.send_task(
            self.services, effect, conversation_id=self.cid, turn_id=self.tid
        )
        self.pending.extend((call, sent.outcome))
        if sent.notice is not None:  # the agent is not connected: the model hears it
            self.pending.append(self._notice(AGENT_ABSENT, sent.notice))

    # -- the end --------------------------------------------------------------------------------
    async def _finish(self, effect: ev.Finish) -> None:
        answer = effect.answer if effect.answer is not None else (self.best_effort or "")
        now = self._now()
        self.pending.extend(final_blocks(self.tid, answer, effect.status, self.out.followups, now))
        result = self.out.result(
            effect.status, answer, effect.rounds, effect.error, self.watchdog.telemetry()
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
            usage=self.out.usage.model_copy(update={"context": self.watchdog.telemetry()}),
            cost=self.out.cost,
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
        self.trace.finish(result, how)
        if how == "lost":
            await self._cancel_model()
        for job in (self._tools_job, self._timer, self._grace):
            if job is not None:
                job.cancel()
        if how == "lost":
            log.warning("turn %s handed back: %s", self.tid, reason)
        self.conv.tell(mb.EndTurn(self.tid, how, self.state, result, self._writes(), reason))
        self.request_stop()
