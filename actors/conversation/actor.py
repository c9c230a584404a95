"""The ConversationActor: one conversation's timeline, its turns, and what touches them.

It owns the ``Timeline`` (with its sources pool and plans), the ``Renderer`` that keeps
the rendered prefix between rounds, the workspace, and the conversation's decision
state between turns. Its mailbox takes the named messages of ``actline.actors.turn.mailbox``: the
running turn's exchanges (``Render``, ``RunTools``, ``Commit``, ``EndTurn``), turn
requests from the node's queue (``TurnJob``), user input (``UserInput``) and DONEs for
turns that ended (``RouteDone``). Turns of one conversation run one after the other: a
turn request that arrives while a turn runs waits in ``backlog``.

Turn lifecycle: a new turn opens its header, contributes the user prompt and
attachments, a ``stage.gate`` with the title for a new conversation, persists them with
a ``running`` turn record, and starts a ``DecisionActor``. A turn id whose record is
final is answered with the stored result; one whose record says ``running`` (the node
that ran it died) resumes from the persisted timeline. Every commit is one LMDB
transaction, then handed to the node's ownership seam (the durable copy in cluster mode).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, get_args

from actline import messages
from actline.actors.base import Actor, Ref
from actline.actors.client.results import publish_result
from actline.actors.configuration.checks import not_running, refused_turn, validate_request
from actline.actors.errors import ActorStopped, ConversationLost, InputRefused, UnexpectedMessage
from actline.actors.services.memory import ConversationMemory
from actline.actors.services.shared import Services
from actline.actors.services.task_book import RunningTurn
from actline.actors.tracing import diag
from actline.actors.turn import events as ev
from actline.actors.turn.blocks import apply_writes
from actline.actors.turn.decision import DecisionActor
from actline.actors.turn.mailbox import (
    Commit,
    Durable,
    EndTurn,
    FollowupArrived,
    LateSignal,
    ReactRan,
    Render,
    Rendered,
    RouteDone,
    RunTools,
    ToolOutcome,
    TurnJob,
    UserInput,
    Writes,
)
from actline.actors.turn.state import DecisionState, transition
from actline.actors.turn.verdict import verdict
from actline.actors.turn.watchdog import ContextStats
from actline.messages import (
    Ack,
    ErrorReply,
    Feedback,
    Followup,
    ReActResult,
    TurnAccepted,
    TurnStatus,
)
from actline.storage import NotStored, StorageError
from actline.timeline import Renderer, Timeline, TimelineConfig
from actline.timeline.tokens import DEFAULT_COUNTER
from actline.tools.react.core import ReactContext, ReactOutcome
from actline.tools.workspace.workspace import TurnFiles

from . import commits
from .compactor import Compactor
from .files import ConversationFiles
from .intake import add_feedback, add_followup, contribute, followup_message_id, recorded_profile
from .title import TitleGate, TitleWritten, gate_block

log = logging.getLogger(__name__)

FINAL = frozenset(get_args(TurnStatus))
FILE_TOOLS = frozenset({"react.write", "react.patch", "react.checkout", "react.pull"})
"""react.* tools that change the workspace: serialised with code.exec_python."""
CHANNELS = ["thinking", "decision", "answer", "followup", "canvas", "usage"]


class ConversationActor(Actor):
    """One active conversation on this node."""

    def __init__(self, conversation_id: str, services: Services, timeline: Timeline) -> None:
        super().__init__(f"conv:{conversation_id}")
        self.cid = conversation_id
        self.services = services
        self.tl = timeline
        config = TimelineConfig(max_tokens=services.settings.max_context_tokens)
        self.renderer = Renderer(self.tl, config)
        self.system_tokens = DEFAULT_COUNTER.count(services.system_prompt)
        self.compactor = Compactor(services, timeline, self.renderer, self.system_tokens)
        """Model-written compaction summaries and the memory facts
        (``actline.actors.conversation.compactor``)."""
        self.decision_state = DecisionState()
        self.backlog: deque[TurnJob] = deque()
        """Turn requests that wait for the running turn to end, in arrival order."""
        self.current: DecisionActor | None = None
        self.current_ref: Ref | None = None
        """How this actor sends to ``current`` (``Services.refs``: in process, or over NATS)."""
        self.current_job: TurnJob | None = None
        self.timezone = "UTC"
        self.followups = 0
        self.last_active = services.clock()
        self.lost = False
        """Another node owns the conversation now: this actor stops and is dropped."""
        self.files = ConversationFiles(
            conversation_id, services.settings, services.store, services.commits
        )
        self.workspace = self.files.workspace
        self.local = self.files.local
        self.memory = ConversationMemory(
            conversation_id,
            services.store,
            embeddings=services.settings.embeddings,
            spawn=self.spawn,
            embed_model=services.settings.embed_model,
            model_cache=services.settings.home / "models",
            background=services.embedding,
        )
        """The memsearch index, embedded in the background (``actline.actors.services.memory``)."""
        self._committing: asyncio.Task[None] | None = None
        """The commit of the last rendered round, while it becomes durable."""

    @classmethod
    async def load(cls, conversation_id: str, services: Services) -> ConversationActor:
        """The conversation as stored on this node (a new one when nothing is stored)."""
        try:
            loaded = await asyncio.to_thread(services.store.load, conversation_id)
            timeline = loaded.timeline
        except NotStored:
            timeline = Timeline(conversation_id)
        return cls(conversation_id, services, timeline)

    @property
    def busy(self) -> bool:
        return self.current is not None or bool(self.backlog)

    @property
    def running_turn(self) -> str | None:
        return self.current_job.request.turn_id if self.current_job is not None else None

    def has_turn(self, turn_id: str) -> bool:
        """True when ``turn_id`` runs or waits here (a redelivered request joins it)."""
        if self.running_turn == turn_id:
            return True
        return any(job.request.turn_id == turn_id for job in self.backlog)

    # -- dispatch ---------------------------------------------------------------------------
    async def receive(self, message: object) -> object:
        self.last_active = self.services.clock()
        match message:
            case Render():
                return await self._render(message)
            case RunTools():
                await self._settled()
                self._apply(message.turn_id, message.writes)
                outcomes = await self._run_tools(message)
                if self.current is not None and self.running_turn == message.turn_id:
                    self._tell_turn(ReactRan(message.round, outcomes))
                return None
            case Commit():
                self._apply(message.turn_id, message.writes)
                return await self._persist({message.turn_id: message.record or {}})
            case EndTurn():
                await self._end_turn(message)
                return None
            case TurnJob():
                self.backlog.append(message)
                if self.current is None:
                    await self._next_turn()
                return None
            case RouteDone():
                return await self._route_done(message.signal)
            case UserInput(message=Followup() as followup):
                return await self._followup(followup)
            case UserInput(message=Feedback() as feedback):
                return await self._feedback(feedback)
            case TitleWritten():
                await self._titled(message)
                return None
        raise UnexpectedMessage(self.name, type(message).__name__)

    def _apply(self, turn_id: str, writes: Writes) -> None:
        if any(
            isinstance(w, ToolOutcome) and not w.tool.startswith("react.") for w in writes.items
        ):
            self.files.changed()  # code.exec_python and the like may change files
        if writes:
            now = self.services.clock()
            apply_writes(self.tl, writes.items, turn_id=turn_id, running=self.running_turn, ts=now)

    # -- turns -------------------------------------------------------------------------------
    async def _next_turn(self) -> None:
        while self.current is None and self.backlog and not self.lost:
            job = self.backlog.popleft()
            try:
                started = await self._begin(job)
            except ConversationLost as exc:
                await self._lose(job, exc.reason)
                return
            except Exception as exc:
                log.exception("turn %s of %s could not start", job.request.turn_id, self.cid)
                await self._publish_result(
                    ReActResult(
                        conversation_id=self.cid,
                        turn_id=job.request.turn_id,
                        status="failed",
                        error=f"the turn could not start: {exc}",
                    )
                )
                started = False
            if not started:
                await self.services.settler.settle(job.request.turn_id)

    async def _begin(self, job: TurnJob) -> bool:
        """Start (or resume, or answer again) a turn; False when nothing runs."""
        request = job.request
        services = self.services
        record = services.store.turn_record(self.cid, request.turn_id)  # one small LMDB read
        if record is not None and record.get("status") in FINAL:
            await self._publish_result(ReActResult.model_validate(record["result"], strict=False))
            log.info("turn %s already has a result; answered again", request.turn_id)
            return False
        try:  # before anything is announced or stored; False: settled, holds no slot
            request = validate_request(request, services.settings, services.clock())
            turn = services.turn_settings(recorded_profile(self.tl, request))
        except InputRefused as exc:
            log.warning("turn %s of %s refused: %s", request.turn_id, self.cid, exc.field)
            await self._publish_result(refused_turn(request, exc))
            return False
        self.timezone = request.timezone
        await services.bus.publish(
            services.bus.subjects.stream(self.cid),
            TurnAccepted(
                conversation_id=self.cid,
                turn_id=request.turn_id,
                node=services.settings.node_id,
            ),
        )
        await self.files.begin(request.turn_id)
        self.renderer.config = turn.timeline
        if record is None:
            # Stored with the first round's checkpoint: a crash before it leaves no record,
            # and the redelivered request starts the turn afresh. Its files first, off the
            # event loop when the workspace is slow.
            files = await self.files.attachments(request.turn_id, request.attachments)
            new_conversation = not self.tl.turn_ids()
            contribute(self.tl, request, turn.profile.as_table(), files)
            if new_conversation:
                self._start_title(request, turn.model)
        else:
            self.tl.begin_turn(request.turn_id, request.ts.timestamp())
            services.task_book.recover([(self.cid, record)])  # its open agent tasks
            log.info("resuming turn %s after round %s", request.turn_id, record.get("round"))
        self.followups = 0
        await self.compactor.begin_turn(request, turn)
        self.current_job = job
        decision = DecisionActor(
            services.refs.conversation(self, self.cid),
            services,
            request,
            self.decision_state,
            turn,
            resume=record,
        )
        self.current = decision
        self.current_ref = services.refs.turn(decision, request.turn_id)
        services.task_book.turn_started(RunningTurn(request.turn_id, self.cid, self.current_ref))
        decision.start()
        return True

    def _start_title(self, request: messages.TurnRequest, model: str) -> None:
        """A real model writes the new conversation's title beside its first turn."""
        gate = TitleGate.for_model(self.services, model)
        if gate is None:
            return

        async def write() -> None:
            titled = await gate.write(self.cid, request.turn_id, request.text)
            if titled.usage is not None and self.accepting:  # a call was made: record it
                self.ref().tell(
                    TitleWritten(request.turn_id, titled.title, titled.source, titled.usage)
                )

        self.spawn(write(), "title")

    async def _titled(self, message: TitleWritten) -> None:
        """Store the model's title: the newer ``stage.gate`` block of the first turn,
        persisted now when no turn runs, else with the running turn's next commit."""
        if self.lost:
            return
        block = gate_block(
            message.turn_id, self.services.clock(), message.title, message.source, message.usage
        )
        self.tl.append(block)
        if self.current is None:
            await self._persist({})

    async def _end_turn(self, end: EndTurn) -> None:
        """The one way a turn ends: its result persisted and published, or handed back."""
        decision = self.current
        job = self.current_job
        self.current = None
        self.current_ref = None
        self.current_job = None
        self.services.task_book.turn_ended(end.turn_id, settled=end.how == "result")
        if decision is not None:
            await decision.stop()
        if end.how == "lost":
            await self._lose(job, end.reason)
            return
        self.decision_state, _ = transition(end.state, ev.Reset())
        assert end.result is not None
        self._apply(end.turn_id, end.writes)
        record = {
            "status": end.result.status,
            "turn_id": end.turn_id,
            "result": end.result.model_dump(mode="json"),
        }
        try:
            await self._persist({end.turn_id: record})
            await self.services.ownership.settled(self.cid)  # cluster: copied, then told
        except ConversationLost as exc:
            await self._lose(job, exc.reason)
            return
        except Exception as exc:  # the result still goes out; a restart may run it again
            log.error("turn %s: its result could not be persisted: %s", end.turn_id, exc)
        await self._publish_result(end.result)
        await self.files.close(end.turn_id)
        await self.services.settler.settle(end.turn_id)
        await self._next_turn()

    async def _lose(self, job: TurnJob | None, reason: str) -> None:
        """Another node owns the conversation now: let it go (lease, durable head), then
        requeue every turn here and stop (the timeline may be stale); the node drops it.
        In that order: a turn requeued and taken back here at once keeps its new lease."""
        self.lost = True
        services = self.services
        log.warning("conversation %s lost to another node (%s); requeueing", self.cid, reason)
        try:
            await services.ownership.release(self.cid)
        finally:
            if job is not None:
                await services.settler.requeue(job.request.turn_id)
            for waiting in self.backlog:
                await services.settler.requeue(waiting.request.turn_id)
            self.backlog.clear()
            self.request_stop()

    async def _publish_result(self, result: ReActResult) -> None:
        """Stored before the turn's request is acked (``actline.actors.client.results``: failure
        rules)."""
        await publish_result(self.services.bus, result, self.services.settings)

    def turn_files(self, turn_id: str) -> TurnFiles | None:
        """The running turn's workspace for the tools of this node (None: not running here)."""
        if self.running_turn != turn_id:
            return None
        return self.files.turn(turn_id)

    # -- rounds ------------------------------------------------------------------------------
    async def _render(self, message: Render) -> Rendered:
        """Apply the writes, start their commit with the checkpoint, render and answer at
        once: the commit becomes durable while the model runs, and the decision acts on
        the model's reply only after ``Durable`` (told when it is, with the ownership
        seam's copy done too), so nothing the round does leaves the node before it."""
        self._apply(message.turn_id, message.writes)
        await self._settled()
        committing = message.record is not None
        if message.record is not None:
            if self.current is not None:
                self.current.trace.persisting(message.round)  # until Durable
            started = self._start_commit({message.turn_id: message.record})
            self._committing = self.spawn(
                self._durable(started, message.round), f"commit-{message.round}"
            )
        before = self.compactor.compactions
        began = self.services.clock()
        if message.ask_compaction:
            self.renderer.ask_compaction(message.ask_compaction)
        usage, forced = await self.compactor.before_render(
            message.model, force=message.force_compaction, boundary=message.round == 1
        )
        request, stats, edits = self._render_request(
            message, message.force_compaction and not forced, self.compactor.compactions > before
        )
        if stats.compacted and self.current is not None:  # the turn's trace: how long it took
            self.current.trace.compaction(message.round, began, usage)
        return Rendered(request, self.followups, committing, stats, usage, edits)

    async def _durable(self, started: commits.Started, round_: int) -> None:
        """Await a round's commit, then tell the running turn how it went."""
        try:
            await self._commit(started)
        except ConversationLost as exc:
            outcome = Durable(round_, lost=exc.reason)
        except Exception as exc:
            log.exception("the commit of round %d of %s failed", round_, self.cid)
            outcome = Durable(round_, error=f"{type(exc).__name__}: {exc}")
        else:
            outcome = Durable(round_)
        if self.current is not None:
            self._tell_turn(outcome)

    def _tell_turn(self, message: object) -> None:
        """Tell the running turn's decision (``ActorStopped`` once it has stopped, wherever
        the message would travel)."""
        current, ref = self.current, self.current_ref
        if current is None or ref is None:
            return
        if not current.accepting:
            raise ActorStopped(current.name)
        ref.tell(message)

    async def _settled(self) -> None:
        """Wait for the commit in flight (its outcome went to the turn), before the next."""
        committing = self._committing
        self._committing = None
        if committing is not None:
            await asyncio.wait([committing])

    def _render_request(
        self, message: Render, force: bool, compacted: bool
    ) -> tuple[messages.GenerateRequest, ContextStats, tuple[dict[str, Any], ...]]:
        """The model request of a round (``compacted``: the model compacted before it), its
        context as the watchdog reads it, and the context policy's decisions (trace events)."""
        services = self.services
        announce = self.compactor.announce(message.announce)
        if announce.timezone != self.timezone:
            announce = replace(announce, timezone=self.timezone)
        workspace = self.files.lines(message.turn_id)
        if workspace:
            announce = replace(announce, workspace=[*announce.workspace, *workspace])
        result = self.renderer.render(
            now=services.clock(),
            system_tokens=self.system_tokens,
            announce=announce,
            force_compaction=force,
            boundary=message.round == 1,
        )
        compacted = compacted or result.events.compaction is not None
        edits = tuple(verdict.event() for verdict in result.events.edits)
        asked = any(
            v.take and v.edit.kind == "compaction" and "asked:" in v.reason
            for v in result.events.edits
        )
        stats = ContextStats(result.stable_tokens, *self.renderer.rot_counts, compacted, asked)
        # Built from our own render: construct without re-validating thousands of parts.
        request = messages.GenerateRequest.model_construct(
            conversation_id=self.cid,
            turn_id=message.turn_id,
            round=message.round,
            model=message.model,
            system=services.system_prompt,
            blocks=result.parts(),
            cache_marks=list(result.marks),
            channels=CHANNELS,
            max_output_tokens=message.max_output_tokens,
            sources=self.compactor.citable(),
            seq_start=message.seq_start,
            ts=messages.utcnow(),  # every field given: no default factory to inspect
        )
        return request, stats, edits

    async def _run_tools(self, message: RunTools) -> tuple[ReactOutcome, ...]:
        outcomes = []
        if any(call.tool in FILE_TOOLS for call in message.calls):
            self.files.changed()
        for call in message.calls:
            started = time.monotonic()
            outcome = await self._run_react(call, message.turn_id)
            outcomes.append(outcome)
            diag.react_ran(self.cid, message.turn_id, call, outcome, started)
        await self.compactor.flush()  # [K] notes under memory scope user
        return tuple(outcomes)

    async def _run_react(self, call: ev.ToolSpec, turn_id: str) -> ReactOutcome:
        memindex = None
        if call.tool == "react.memsearch":
            memindex = await self.memory.for_search()
        ctx = ReactContext(
            timeline=self.tl,
            renderer=self.renderer,
            turn_id=turn_id,
            call_id=call.call_id,
            now=self.services.clock(),
            store=self.services.store,
            knowledge=self.services.knowledge,
            workspace=self.workspace,
            local=self.local,
            memindex=memindex,
            facts=self.compactor.book,
        )
        try:
            if call.tool in FILE_TOOLS:
                async with self.files.lock:  # not while code.exec_python collects the turn root
                    return self.services.react.run(call.tool, call.params, ctx)
            return self.services.react.run(call.tool, call.params, ctx)
        except Exception as exc:
            log.exception(
                "react tool %s (call %s) of turn %s failed", call.tool, call.call_id, turn_id
            )
            error = f"the tool failed inside the runtime: {type(exc).__name__}: {exc}"
            return ReactOutcome({"status": "error", "error": error})

    async def _persist(self, records: Mapping[str, Mapping[str, Any]]) -> int:
        """One write (blocks, header rows, index rows, turn records) in the node's next group
        commit, then the ownership seam (cluster mode: the durable copy, check-and-set)."""
        await self._settled()
        return await self._commit(self._start_commit(records))

    def _start_commit(self, records: Mapping[str, Mapping[str, Any]]) -> commits.Started:
        return commits.start(self.services, self.tl, records)

    async def _commit(self, started: commits.Started) -> int:
        revision = await commits.finish(self.services, self.cid, started)
        if started.index_rows:
            self.memory.written(started.index_rows)
        return revision

    # -- input from outside ----------------------------------------------------------------------
    async def _followup(self, msg: Followup) -> messages.Message:
        running = self.running_turn
        if running is None or msg.turn_id != running or self.current is None:
            return not_running(msg.turn_id, self.cid)
        number = self.followups + 1
        message_id = followup_message_id(number, msg)
        try:  # its files first: one that cannot be stored leaves nothing of the followup
            files = await self.files.attachments(running, msg.attachments, message_id=message_id)
        except StorageError as exc:
            return ErrorReply(
                code="not_stored",
                message=f"the followup's attachments could not be stored ({exc}); nothing "
                f"of it joined turn {running}: send it again without them or smaller",
            )
        finally:
            if msg.attachments:
                self.files.changed()
        try:  # the turn may have answered while the files were stored (off the event loop)
            self._tell_turn(FollowupArrived(number))
        except ActorStopped:
            await self.files.discard(running, files)
            return not_running(msg.turn_id, self.cid, "it answered while the files were stored")
        add_followup(self.tl, running, number, msg, message_id=message_id, files=files)
        self.followups = number
        return Ack(ref=running, detail="joined the running turn; the model sees it next round")

    async def _feedback(self, msg: Feedback) -> messages.Message:
        turns = self.tl.turn_ids()
        if msg.turn_id not in turns:
            return ErrorReply(
                code="unknown_turn", message=f"conversation {self.cid} has no turn {msg.turn_id}"
            )
        add_feedback(self.tl, self.running_turn or turns[-1], msg)
        if self.current is None:
            await self._persist({})
        return Ack(ref=msg.turn_id, detail="feedback recorded; announced next turn")

    async def _route_done(self, signal: messages.DoneSignal) -> messages.Message:
        """A DONE that no running turn here took: late, duplicate or refused."""
        event = ev.event_from_message(signal)
        self.decision_state, effects = transition(self.decision_state, event)
        for effect in effects:
            if isinstance(effect, ev.RecordLateSignal):
                late = LateSignal(effect.signal, effect.reason)
                apply_writes(
                    self.tl,
                    (late,),
                    turn_id=self.running_turn or "",
                    running=self.running_turn,
                    ts=self.services.clock(),
                )
                await self._persist({})
        return verdict(signal, effects)
