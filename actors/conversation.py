"""The ConversationActor: one conversation's timeline, its turns, and what touches them.

It owns the ``Timeline`` (with its sources pool and plans), the ``Renderer`` that keeps
the rendered prefix between rounds, and the conversation's decision state between
turns. Its mailbox serves the decision loop of the running turn (render, append,
react.* tools, persist), user input that lands meanwhile (followups, feedback) and
DONE signals routed by the node. Turns of one conversation run one after the other:
a turn request that arrives while a turn runs waits in ``queue``.

Turn lifecycle (seed 000): a new turn opens its header, contributes the user prompt
and attachments, a ``stage.gate`` with the title for a new conversation, persists them
with a ``running`` turn record, and hands the loop to a ``DecisionActor``. A turn id
whose record is final is answered with the stored result; one whose record says
``running`` (the node that ran it died) resumes from the persisted timeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_args

import nats.errors

import messages
from messages import (
    Ack,
    ErrorReply,
    Feedback,
    Followup,
    ReActResult,
    TurnAccepted,
    TurnRequest,
    TurnStatus,
)
from storage import NotStored
from storage.store import PersistedRound
from timeline import AnnounceContext, Block, Renderer, Timeline, TimelineConfig
from timeline.blocks import (
    FEEDBACK,
    SIGNAL_DONE,
    STAGE_GATE,
    USER_ATTACHMENT_META,
    USER_FOLLOWUP,
    USER_PROMPT,
)
from timeline.paths import ar_path
from timeline.tokens import DEFAULT_COUNTER
from tools.embeddings import default_embedder
from tools.memindex import MemIndex
from tools.react import ReactContext, ReactOutcome, index_rows
from tools.workspace import LocalTree, TurnFiles, open_workspace, workspace_lines

from . import events as ev
from .base import Actor
from .cluster import ConversationLost, HeadConflict, JetStreamCopy, merge_rounds
from .services import Services
from .state import DecisionState, transition

log = logging.getLogger(__name__)

FINAL = frozenset(get_args(TurnStatus))
TITLE_WORDS = 8
FILE_TOOLS = frozenset({"react.write", "react.patch", "react.checkout", "react.pull"})
"""react.* tools that change the workspace: serialised with code.exec_python."""


# --- messages of the mailbox --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnJob:
    """A turn request taken from the durable queue; ``settle`` acks it after the result."""

    request: TurnRequest
    settle: Callable[[], Awaitable[None]] | None = None
    requeue: Callable[[], Awaitable[None]] | None = None
    """Hands the request back to the queue (the conversation was lost to another node)."""


@dataclass(frozen=True, slots=True)
class Render:
    """Render the context of ``round`` as a model request."""

    turn_id: str
    round: int
    announce: AnnounceContext
    model: str = ""
    max_output_tokens: int = 4096
    seq_start: int = 0
    force_compaction: bool = False


@dataclass(frozen=True, slots=True)
class Append:
    """Append blocks (already built) in order; answers the appended blocks."""

    blocks: tuple[Block, ...]


@dataclass(frozen=True, slots=True)
class Apply:
    """Run ``fn`` on the timeline inside the actor; answers its result."""

    fn: Callable[[Timeline], Any]


@dataclass(frozen=True, slots=True)
class RunReact:
    """Run one react.* tool; answers its ``ReactOutcome`` (result blocks not appended)."""

    tool: str
    params: Mapping[str, Any]
    turn_id: str
    call_id: str


@dataclass(frozen=True, slots=True)
class Persist:
    """Persist new blocks and the header with these turn records, in one transaction."""

    records: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UnseenFollowups:
    """How many followups of the running turn arrived after the last render."""


@dataclass(frozen=True, slots=True)
class RouteDone:
    """An ``agent.done`` for this conversation; answers ``Ack`` or ``ErrorReply``."""

    signal: messages.DoneSignal


@dataclass(frozen=True, slots=True)
class TurnLost:
    """The running turn stopped because this node lost the conversation (no result here)."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The running turn finished; ``state`` is the decision state it ended in."""

    turn_id: str
    state: DecisionState
    result: ReActResult


# --- the actor ----------------------------------------------------------------------------


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
        self.decision_state = DecisionState()
        self.queue: deque[TurnJob] = deque()
        self.current: Any = None  # the running DecisionActor
        self.current_job: TurnJob | None = None
        self.timezone = "UTC"
        self.followups = 0
        self.followups_rendered = 0
        self.last_active = services.clock()
        self.turns_done = 0
        settings = services.settings
        root = settings.workspaces_dir / conversation_id
        self.workspace = open_workspace(
            settings.workspace_mode,
            store=services.store,
            root=root,
            conversation_id=conversation_id,
        )
        self.local = LocalTree(self.workspace, root)
        self.files_lock = asyncio.Lock()
        self.memindex: MemIndex | None = None
        self.head_revision: int | None = None
        """Cluster mode: the KV revision of the durable head this actor last wrote or read."""
        self.unpublished: list[PersistedRound] = []
        """Cluster mode: local rounds not yet in the durable copy (NATS was away)."""

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
        return self.current is not None or bool(self.queue)

    @property
    def running_turn(self) -> str | None:
        return self.current_job.request.turn_id if self.current_job is not None else None

    def has_turn(self, turn_id: str) -> bool:
        """True when ``turn_id`` runs or waits here (a redelivered request joins it)."""
        return self.running_turn == turn_id or any(j.request.turn_id == turn_id for j in self.queue)

    # -- dispatch ---------------------------------------------------------------------------
    async def receive(self, message: object) -> object:
        self.last_active = self.services.clock()
        match message:
            case Render():
                return self._render(message)
            case Append():
                return [self.tl.append(b) for b in message.blocks]
            case Apply():
                return message.fn(self.tl)
            case RunReact():
                return await self._run_react(message)
            case Persist():
                return await self._persist(message.records)
            case UnseenFollowups():
                return self.followups - self.followups_rendered
            case TurnJob():
                self.queue.append(message)
                if self.current is None:
                    await self._next_turn()
                return None
            case TurnEnded():
                await self._turn_ended(message)
                return None
            case TurnLost():
                await self._turn_lost(message)
                return None
            case RouteDone():
                return await self._route_done(message.signal)
            case Followup():
                return self._followup(message)
            case Feedback():
                return await self._feedback(message)
        raise TypeError(f"{self.name} does not take {type(message).__name__}")

    # -- turns -------------------------------------------------------------------------------
    async def _next_turn(self) -> None:
        while self.current is None and self.queue:
            job = self.queue.popleft()
            try:
                started = await self._begin(job)
            except Exception as exc:
                log.exception("turn %s of %s could not start", job.request.turn_id, self.cid)
                await self._publish_failure(job, f"the turn could not start: {exc}")
                started = False
            if not started:
                await _settle(job)

    async def _begin(self, job: TurnJob) -> bool:
        """Start (or resume, or answer again) a turn; False when nothing runs."""
        from .decision import DecisionActor  # the decision actor imports this module

        request = job.request
        services = self.services
        record = await asyncio.to_thread(services.store.turn_record, self.cid, request.turn_id)
        if record is not None and record.get("status") in FINAL:
            result = ReActResult.model_validate(record["result"], strict=False)
            await services.bus.publish(services.bus.subjects.result(request.turn_id), result)
            log.info("turn %s already has a result; answered again", request.turn_id)
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
        resume = record if record is not None else None
        await asyncio.to_thread(self.workspace.begin_turn, request.turn_id)
        if resume is None:
            self._contribute_request(request)
            await self._persist(
                {request.turn_id: {"status": "running", "turn_id": request.turn_id, "round": 0}}
            )
        else:
            self.tl.begin_turn(request.turn_id, request.ts.timestamp())
            log.info("resuming turn %s after round %s", request.turn_id, resume.get("round"))
        self.followups = self.followups_rendered = 0
        self.current_job = job
        services.tasks.turn_started(request.turn_id)
        self.current = DecisionActor(self, request, self.decision_state, resume=resume)
        self.current.start()
        return True

    def _contribute_request(self, request: TurnRequest) -> None:
        tid = request.turn_id
        ts = request.ts.timestamp()
        new_conversation = not self.tl.turn_ids()
        self.tl.begin_turn(tid, ts)
        self.tl.append(
            Block.new(USER_PROMPT, tid, ts, path=ar_path(tid, "user.prompt"), text=request.text)
        )
        for attachment in request.attachments:
            self.tl.append(self._attachment_block(tid, ts, attachment))
        if new_conversation:
            words = request.text.split()
            title = " ".join(words[:TITLE_WORDS]) + (" …" if len(words) > TITLE_WORDS else "")
            self.tl.append(
                Block.new(
                    STAGE_GATE,
                    tid,
                    ts,
                    path=ar_path(tid, "stage.gate"),
                    mime="application/json",
                    data={"title": title or "(untitled)", "new_conversation": True},
                )
            )

    def _attachment_block(self, tid: str, ts: float, attachment: messages.Attachment) -> Block:
        """The attachment's meta block; its bytes go to the turn's workspace when inline."""
        meta: dict[str, Any] = {"name": attachment.name, "mime": attachment.mime}
        path = ""
        if attachment.data is not None:
            path = self.workspace.write(
                tid, "user.attachments", attachment.name, attachment.data, mime=attachment.mime
            )
            meta["size"] = len(attachment.data)
        elif attachment.ref:
            meta["ref"] = attachment.ref
        text = f"attachment {attachment.name} ({attachment.mime})"
        if attachment.data is not None and attachment.mime.startswith("text/"):
            text += ":\n" + attachment.data.decode("utf-8", "replace")
        return Block.new(
            USER_ATTACHMENT_META,
            tid,
            ts,
            path=path or ar_path(tid, f"user.attachment.{len(self.tl.turn_blocks(tid))}"),
            text=text,
            meta=meta,
        )

    async def _turn_ended(self, message: TurnEnded) -> None:
        job = self.current_job
        state, _ = transition(message.state, ev.Reset())
        self.decision_state = state
        self.services.tasks.turn_ended(message.turn_id)
        decision, self.current, self.current_job = self.current, None, None
        self.turns_done += 1
        if decision is not None:
            await decision.stop()
        await self._close_files(message.turn_id)
        if job is not None:
            await _settle(job)
        await self._next_turn()

    async def _turn_lost(self, message: TurnLost) -> None:
        """Another node owns the conversation now: the turn goes back to the queue and this
        actor is dropped (its timeline may be stale)."""
        job, decision = self.current_job, self.current
        self.current, self.current_job = None, None
        self.services.tasks.turn_ended(message.turn_id)
        if decision is not None:
            await decision.stop()
        for queued in [*([job] if job is not None else []), *self.queue]:
            if queued.requeue is not None:
                with contextlib.suppress(Exception):
                    await queued.requeue()
        self.queue.clear()
        log.warning(
            "conversation %s lost to another node; turn %s requeued", self.cid, message.turn_id
        )
        if self.services.on_lost is not None:
            self.services.on_lost(self.cid)

    async def _close_files(self, turn_id: str) -> None:
        """End the turn in the workspace (git: its commit) and clear its folders on disk."""
        async with self.files_lock:
            try:
                await asyncio.to_thread(self.workspace.end_turn, turn_id)
                await asyncio.to_thread(self.local.clear)
            except Exception:
                log.exception("could not close the workspace of turn %s of %s", turn_id, self.cid)

    def turn_files(self, turn_id: str) -> TurnFiles | None:
        """The running turn's workspace for the tools of this node (None: not running here)."""
        if self.running_turn != turn_id:
            return None
        return TurnFiles(self.workspace, self.local, turn_id, self.files_lock)

    async def _publish_failure(self, job: TurnJob, error: str) -> None:
        result = ReActResult(
            conversation_id=self.cid, turn_id=job.request.turn_id, status="failed", error=error
        )
        bus = self.services.bus
        await bus.publish(bus.subjects.result(job.request.turn_id), result)

    # -- rounds ------------------------------------------------------------------------------
    def _render(self, message: Render) -> messages.GenerateRequest:
        services = self.services
        announce = message.announce
        if announce.timezone != self.timezone:
            announce = replace(announce, timezone=self.timezone)
        workspace = workspace_lines(self.workspace, message.turn_id, self.local)
        if workspace:
            announce = replace(announce, workspace=[*announce.workspace, *workspace])
        result = self.renderer.render(
            now=services.clock(),
            system_tokens=self.system_tokens,
            announce=announce,
            force_compaction=message.force_compaction,
        )
        self.followups_rendered = self.followups
        # Built from our own render: construct without re-validating thousands of parts.
        return messages.GenerateRequest.model_construct(
            conversation_id=self.cid,
            turn_id=message.turn_id,
            round=message.round,
            model=message.model,
            system=services.system_prompt,
            blocks=result.parts(),
            cache_marks=list(result.marks),
            channels=["thinking", "decision", "answer", "followup", "canvas", "usage"],
            max_output_tokens=message.max_output_tokens,
            sources=[
                {"sid": r.sid, "title": r.title, "url": r.url} for r in self.tl.sources.rows()
            ],
            seq_start=message.seq_start,
        )

    async def _run_react(self, message: RunReact) -> ReactOutcome:
        memindex = None
        if message.tool == "react.memsearch":
            memindex = await self._memory_index()
            if memindex.pending():
                await asyncio.to_thread(memindex.embed_pending)
        ctx = ReactContext(
            timeline=self.tl,
            renderer=self.renderer,
            turn_id=message.turn_id,
            call_id=message.call_id,
            now=self.services.clock(),
            store=self.services.store,
            knowledge=self.services.knowledge,
            workspace=self.workspace,
            local=self.local,
            memindex=memindex,
        )
        if message.tool in FILE_TOOLS:
            async with self.files_lock:  # not while code.exec_python collects the turn root
                return self.services.react.run(message.tool, message.params, ctx)
        return self.services.react.run(message.tool, message.params, ctx)

    async def _memory_index(self) -> MemIndex:
        """The memsearch index, loaded from the stored rows on first use, then kept current
        by ``_persist``."""
        if self.memindex is None:
            services = self.services
            embedder = None
            if services.settings.embeddings:
                embedder = await asyncio.to_thread(default_embedder)
            index = MemIndex(embedder, services.vector_cache)
            rows = await asyncio.to_thread(services.store.index_rows, self.cid)
            index.add(rows)
            self.memindex = index
        return self.memindex

    async def _persist(self, records: Mapping[str, Mapping[str, Any]]) -> int:
        """One LMDB transaction (blocks, header, index rows, turn records); in cluster mode the
        round also goes to the durable copy, with a check-and-set on its head."""
        store = self.services.store
        rows: list[dict[str, Any]] = []

        def index(blocks: Sequence[Block]) -> list[dict[str, Any]]:
            rows.extend(index_rows(blocks))
            return rows

        persisted = await asyncio.to_thread(
            store.persist_round, self.tl, turn_records=records, index=index
        )
        if rows and self.memindex is not None:
            self.memindex.add(rows)
        durable = self.services.durable
        if durable is not None:
            await self._publish(durable, persisted)
        return persisted.revision

    async def _publish(self, durable: JetStreamCopy, persisted: PersistedRound) -> None:
        self.unpublished.append(persisted)
        try:
            self.head_revision = await durable.publish_persisted(
                self.cid, merge_rounds(self.unpublished), expect=self.head_revision
            )
        except HeadConflict as exc:
            raise ConversationLost(self.cid, str(exc)) from None
        except (nats.errors.Error, TimeoutError) as exc:  # kept: the next round sends it merged
            log.warning("round of %s not copied to JetStream yet: %s", self.cid, exc)
            return
        self.unpublished.clear()

    # -- input from outside ----------------------------------------------------------------------
    def _followup(self, msg: Followup) -> messages.Message:
        running = self.running_turn
        if running is None or msg.turn_id != running:
            return ErrorReply(
                code="turn_not_running",
                message=f"turn {msg.turn_id} is not running in conversation {self.cid}; "
                "send the text as a new turn.request",
            )
        self.followups += 1
        ts = msg.ts.timestamp()
        path = ar_path(running, f"user.followup.{self.followups}")
        self.tl.append(Block.new(USER_FOLLOWUP, running, ts, path=path, text=msg.text))
        if self.current is not None:
            self.current.tell_followup()
        return Ack(ref=running, detail="joined the running turn; the model sees it next round")

    async def _feedback(self, msg: Feedback) -> messages.Message:
        turns = self.tl.turn_ids()
        if msg.turn_id not in turns:
            return ErrorReply(
                code="unknown_turn",
                message=f"conversation {self.cid} has no turn {msg.turn_id}",
            )
        anchor = self.running_turn or turns[-1]
        ts = msg.ts.timestamp()
        label = {1: "positive", -1: "negative"}.get(msg.rating, "neutral")
        text = f"feedback on turn {msg.turn_id} ({label}): {msg.text}".rstrip(": ")
        count = sum(1 for b in self.tl.turn_blocks(anchor) if b.type == FEEDBACK)
        self.tl.append(
            Block.new(
                FEEDBACK,
                anchor,
                ts,
                path=ar_path(anchor, f"stage.feedback.{count + 1}"),
                text=text,
                meta={"for_turn": msg.turn_id, "rating": msg.rating},
            )
        )
        self.tl.notices.next.append(text)
        if self.current is None:
            await self._persist({})
        return Ack(ref=msg.turn_id, detail="feedback recorded; announced next turn")

    async def _route_done(
        self, signal: messages.DoneSignal
    ) -> messages.Message | asyncio.Future[messages.Message]:
        """The verdict, or (for the running turn) a future of it: never awaited here, since
        the decision actor asks this actor to record what the DONE did."""
        if self.current is not None and signal.turn_id in (None, self.running_turn):
            future: asyncio.Future[messages.Message] = self.current.ask_done(signal)
            return future
        event = ev.event_from_message(signal)
        self.decision_state, effects = transition(self.decision_state, event)
        for effect in effects:
            if isinstance(effect, ev.RecordLateSignal):
                self.record_late_signal(effect.signal, effect.reason)
                await self._persist({})
                return Ack(ref=signal.task_id or "", detail="late: recorded, announced next turn")
            if isinstance(effect, ev.RecordNotice):
                return ErrorReply(code=effect.code, message=effect.text)
        return Ack(ref=signal.task_id or "", detail="duplicate: already applied")

    def record_late_signal(self, signal: ev.DoneSignal, reason: str) -> Block:
        """A DONE after its turn: a block under the latest turn and a notice for the next."""
        turns = self.tl.turn_ids()
        anchor = self.running_turn or (turns[-1] if turns else signal.turn_id or "late")
        text = f"late DONE from {signal.agent}"
        if signal.task_id:
            text += f" for task {signal.task_id}"
        if signal.turn_id:
            text += f" of turn {signal.turn_id}"
        text += f" ({reason}): {signal.summary}"
        block = self.tl.append(
            Block.new(
                SIGNAL_DONE,
                anchor,
                self.services.clock(),
                path=ar_path(anchor, f"signal.late.{signal.signal_id}"),
                text=text,
                meta={
                    "agent": signal.agent,
                    "task_id": signal.task_id,
                    "for_turn": signal.turn_id,
                    "late": True,
                    "signal_id": signal.signal_id,
                },
            )
        )
        self.tl.notices.next.append(text)
        return block


async def _settle(job: TurnJob) -> None:
    if job.settle is None:
        return
    try:
        await job.settle()
    except Exception:
        log.exception("could not acknowledge turn %s", job.request.turn_id)
