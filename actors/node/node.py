"""The node: one process (or one Ray actor) that serves turns from the durable queue.

A node connects to NATS, pulls turn requests from the queue all nodes share
(``actline.actors.node.turn_queue``), hands each to the ConversationActor of its conversation
(loaded from LMDB on first use) and hosts this node's StreamerActor and
ToolExecutorActor pools. It routes ``agent.done`` signals to the turn that sent the task
(``actline.actors.agents.done_routing``): straight to a running turn's DecisionActor, else to
the conversation (a late or duplicate DONE), serves followups and feedback, and the outside
agents' hellos and list (``actline.actors.agents.inboxes``: their durable inboxes and presence).

Where conversations live is the ownership seam (``actline.actors.ownership.ownership``), chosen once
in
``start``: ``LocalOwnership``, or ``ClusterOwnership`` (``ACTLINE_CLUSTER``: leases in
JetStream KV, the durable copy, every node hearing inputs and the owner answering).

Approvals (``turn.approval`` on an approver's ``<prefix>.approve.<role>.<name>.<tid>…``)
go to the running turn the same way (``done_routing.route_approval``); only the node that
runs it answers.

``python -m actline.cli.node --nats URL`` runs one node until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from actline import messages
from actline.actors.agents.done_queue import DoneQueue
from actline.actors.agents.done_routing import ASK_TIMEOUT_S, DoneRouter, route_approval
from actline.actors.agents.inboxes import AgentTasks
from actline.actors.client.results import open_results
from actline.actors.configuration.checks import not_running, refusal, validate_input
from actline.actors.configuration.models import NodeModels
from actline.actors.configuration.settings import NodeSettings
from actline.actors.conversation.actor import ConversationActor
from actline.actors.conversation.workspace_server import WorkspaceServer
from actline.actors.errors import ActorStopped, InputRefused, NodeNotStarted
from actline.actors.ownership.ownership import (
    ClusterOwnership,
    LocalOwnership,
    Ownership,
    renewal_ticks,
)
from actline.actors.pools.streamer import StreamerActor
from actline.actors.pools.tool_executor import ToolExecutorActor, ToolRegistry
from actline.actors.pools.toolbox import register_node_tools
from actline.actors.services.memory import BackgroundEmbedding
from actline.actors.services.shared import Services
from actline.actors.services.task_book import TaskBook
from actline.actors.tracing import sinks as trace_sinks
from actline.actors.turn.mailbox import Control, TurnJob, UserInput
from actline.bus import Bus, Envelope, Subscription, replicas_for
from actline.llm import LLMSettings
from actline.llm.prompt import system_prompt
from actline.llm.protocol import Model
from actline.messages import (
    Ack,
    ApprovalDecision,
    CancelReAct,
    ErrorReply,
    Feedback,
    Followup,
    SkipWaiting,
    SubjectError,
    TurnHandoff,
    TurnRequest,
)
from actline.storage import Store, committer
from actline.storage.committer import Committer
from actline.tools import KnowledgeSpace
from actline.tools.hooks import ToolHooks
from actline.tools.react.core import ReactTools
from actline.tools.workspace.workspace import TurnFiles

from . import gc_tuning
from .holding import Holds, evict_idle
from .manage import Management
from .post import PostOffice
from .turn_queue import TurnQueue

log = logging.getLogger(__name__)

DONE_HORIZON_S = 30.0
"""A DONE that no node could route for this long gets its refusal (at least 4 ack waits)."""


class Node:
    """Serves turns; ``await start()``, then ``await stop()`` (or ``async with``)."""

    def __init__(
        self,
        bus: Bus,
        settings: NodeSettings | None = None,
        *,
        model: Model | None = None,
        models: Mapping[str, Model] | None = None,
        llm: LLMSettings | None = None,
        registry: ToolRegistry | None = None,
        store: Store | None = None,
        knowledge: KnowledgeSpace | None = None,
        hooks: ToolHooks | None = None,
    ) -> None:
        self.bus = bus
        self.hooks = hooks
        """The permission callback and hooks around every tool call of this node's turns."""
        self.settings = settings or NodeSettings.from_env()
        self.registry = registry if registry is not None else ToolRegistry()
        self._model = model
        self._models = dict(models or {})
        self._llm = llm  # model settings (None: LLMSettings.from_env); claude needs its key
        self._store = store
        self._own_store = store is None
        self._knowledge = knowledge
        self._conversations: dict[str, ConversationActor] = {}
        self._loading: dict[str, asyncio.Future[ConversationActor]] = {}
        self._holds = Holds()
        self._background: list[asyncio.Task[None]] = []
        """The node's own loops (idle eviction, ownership renewal), cancelled by ``stop``."""
        self._subs: list[Subscription] = []
        self.streamer: StreamerActor | None = None
        self.executor: ToolExecutorActor | None = None
        self.post: PostOffice | None = None
        """The mail of this node's actors over NATS (the local shortcut off)."""
        self.services: Services | None = None
        self.agents: AgentTasks | None = None
        self.management: Management | None = None
        """Conversation management (``conv.manage``: list, rename, delete, export, fork)."""
        self._mcp = contextlib.AsyncExitStack()
        self._commits: Committer | None = None
        self.ownership: Ownership = LocalOwnership()
        self.queue = TurnQueue(
            bus,
            ack_wait_s=self.settings.ack_wait_s,
            max_active=self.settings.max_active_turns,
            park_s=self.settings.park_s,
            node_id=self.settings.node_id,
        )
        self.dones = DoneQueue(bus, horizon_s=max(DONE_HORIZON_S, 4 * self.settings.ack_wait_s))
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------------
    async def __aenter__(self) -> Node:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    @property
    def store(self) -> Store:
        if self._store is None:
            raise NodeNotStarted("the node's store")
        return self._store

    @property
    def conversations(self) -> dict[str, ConversationActor]:
        """The conversations this node holds now (one lost to another node is not)."""
        return {cid: c for cid, c in self._conversations.items() if not c.lost}

    @property
    def turns_taken(self) -> int:
        return self.queue.taken

    @property
    def turns_settled(self) -> int:
        return self.queue.settled

    @property
    def turns_deferred(self) -> int:
        """Turn requests handed back because another node held the conversation's lease."""
        return self.queue.deferred

    async def start(self) -> None:
        if self._started:
            return
        settings = self.settings
        # A replica count the cluster cannot hold is refused here, before anything is made.
        replicas_for(self.bus, settings.js_replicas)
        self.bus.js_replicas = settings.js_replicas
        self._started = True
        gc_tuning.tune_gc(settings.gc_threshold)
        if self._store is None:
            self._store = await asyncio.to_thread(Store, settings.home, sync=settings.storage_sync)
        if self._knowledge is None and settings.knowledge_dir is not None:
            self._knowledge = await asyncio.to_thread(KnowledgeSpace, settings.knowledge_dir)
        skills = await register_node_tools(settings, self.registry, self._mcp)
        if settings.cluster:
            self.ownership = ClusterOwnership(
                self.bus,
                self.node_id,
                node_ttl_s=settings.node_ttl_s,
                copy_every_s=settings.copy_every_s,
            )
        await self.ownership.start()
        tools = self.registry.prompt_entries()
        self._commits = Committer(self._store)
        self._commits.start()
        book = TaskBook()
        tracer = trace_sinks.tracer(settings)
        self.agents = AgentTasks(self.bus, settings, book, self._store)
        self.services = Services(
            bus=self.bus,
            store=self._store,
            commits=self._commits,
            settings=settings,
            react=ReactTools(skills=skills),
            system_prompt=system_prompt(tools, skills=skills.listing() if skills else ()),
            knowledge=self._knowledge,
            external_tools=self.registry.names,
            approval_tools=self.registry.approval_required,
            tool_hooks=self.hooks,
            task_book=book,
            agents=self.agents,
            local_tools=settings.tool_workers > 0,
            ownership=self.ownership,
            settler=self.queue,
            tracer=tracer,
            embedding=BackgroundEmbedding.of(self._store, settings),
        )
        if settings.streamers > 0:
            self.streamer = StreamerActor(
                self.bus,
                NodeModels.of_node(self.settings.model, self._model, self._models, self._llm),
                concurrency=settings.streamers,
                timeout_s=settings.model_timeout_s,
                tracer=tracer,
            )
            await self.streamer.start()
            self.services.streamer = self.streamer
        if not settings.local_shortcut:
            self.post = PostOffice(self.bus, self.node_id)
            await self.post.start()
            self.services.refs = self.post
        if settings.tool_workers > 0:
            self.executor = ToolExecutorActor(
                self.bus,
                self.registry,
                concurrency=settings.tool_workers,
                node_id=self.node_id,
                files=self._turn_files,
                tracer=tracer,
            )
            await self.executor.start()
        subjects = self.bus.subjects
        self._subs.append(await self.bus.subscribe(subjects.turn_control_any, self._on_control))
        self._subs.append(await self.bus.subscribe(subjects.approvals_all, self._on_approval))
        self._subs.append(await self.bus.subscribe(subjects.conv_any("followup"), self._on_input))
        self._subs.append(
            await self.bus.subscribe(
                subjects.conv_any("feedback"), self._on_input, queue=self.ownership.input_queue
            )
        )
        self.management = Management(
            self.bus,
            self._store,
            settings,
            actors=self._conversations,
            loading=self._loading,
            holds=self._holds,
            release=self.ownership.release,
        )
        self._subs.append(await self.management.start())
        workspaces = WorkspaceServer(self.bus, self.node_id, lambda c: self.conversations.get(c))
        self._subs.append(await workspaces.start())  # for tool executors without the files
        recovered = self.services.task_book.recover(
            await asyncio.to_thread(self._store.unfinished_turns)
        )
        if recovered:
            log.info("%d open agent task(s) of unfinished turns wait for their DONE", recovered)
        await open_results(self.bus, settings)
        await self.agents.start()
        if settings.cluster:
            self._subs.append(
                await self.bus.subscribe(
                    subjects.node_turns(self.node_id), self._on_handoff, concurrency=8
                )
            )
        await self.queue.start(self._take, self.ownership.holder)
        await self.dones.start(DoneRouter(self.services, self.ownership, self.conversation).route)
        self._background.append(asyncio.create_task(self._evict_idle(), name="node:evict"))
        self._background.append(asyncio.create_task(self._renew(), name="node:ownership"))
        log.info("node %s serving %s", self.node_id, subjects.turn_submit)

    async def stop(self) -> None:
        """Stop pulling; turns not finished are handed back to the queue (nak)."""
        if not self._started:
            return
        self._started = False
        for loop in self._background:
            loop.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background.clear()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()
        await self.dones.stop()  # before the turns a DONE being routed may ask
        for conv in list(self._conversations.values()):
            await conv.kill()
        self._conversations.clear()
        if self.agents is not None:
            await self.agents.stop()
        await self.queue.stop()
        await self.ownership.stop()
        if self.post is not None:
            await self.post.stop()
            self.post = None
        if self.streamer is not None:
            await self.streamer.stop()
        if self.executor is not None:
            await self.executor.stop()
        await self._mcp.aclose()
        if self.services is not None:
            await self.services.aclose()
        if self._commits is not None:
            self._commits.close()
            self._commits = None
        if self._own_store and self._store is not None:
            self._store.close()
            self._store = None

    def _turn_files(self, conversation_id: str, turn_id: str) -> TurnFiles | None:
        conv = self._conversations.get(conversation_id)
        return conv.turn_files(turn_id) if conv is not None else None

    # -- conversations ----------------------------------------------------------------------------
    async def _take(self, request: TurnRequest) -> str | None:
        """Hand a turn request to its conversation: None when taken, else the node that
        holds the conversation (empty when it cannot be named)."""
        cid = request.conversation_id
        async with self._holds.claiming(cid):  # not let go meanwhile (actline.actors.node.holding)
            holder = await self.ownership.claim(cid)
            if holder is not None:
                return holder
            conv = await self.conversation(cid)
            conv.tell(TurnJob(request))
        return None

    async def _on_handoff(self, msg: messages.Message, env: Envelope) -> messages.Message:
        """A turn another node pulled, passed here because this node holds its conversation
        (``TurnQueue.receive``)."""
        if not isinstance(msg, TurnHandoff):
            return ErrorReply(
                code="unexpected_message", message=f"expected turn.handoff, got {msg.kind}"
            )
        return await self.queue.receive(msg, self._take)

    async def conversation(self, cid: str) -> ConversationActor:
        """The actor of ``cid``, loaded from this node's store on first use (an actor that
        lost its conversation to another node is dropped and the conversation reloaded)."""
        conv = self._conversations.get(cid)
        if conv is not None and conv.running and not conv.lost:
            return conv
        if conv is not None:
            del self._conversations[cid]
        pending = self._loading.get(cid)
        if pending is not None:
            return await pending
        future: asyncio.Future[ConversationActor] = asyncio.get_running_loop().create_future()
        self._loading[cid] = future
        try:
            if self.services is None:
                raise NodeNotStarted("the node's conversations")
            await self.ownership.prepare(cid, self.store)
            conv = await ConversationActor.load(cid, self.services)
            conv.start()
            self._conversations[cid] = conv
            future.set_result(conv)
            return conv
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a waiter may not exist
            raise
        finally:
            self._loading.pop(cid, None)

    async def _renew(self) -> None:
        async for _ in renewal_ticks(self.ownership):
            for cid in await self.ownership.renew():
                log.warning("lease of %s lapsed: dropping it here", cid)
                conv = self._conversations.pop(cid, None)
                if conv is None:
                    continue
                await conv.kill()
                if conv.running_turn is not None and self.services is not None:
                    self.services.task_book.turn_ended(conv.running_turn)
                for tid in self.queue.running():
                    if conv.has_turn(tid):
                        await self.queue.requeue(tid)

    async def _evict_idle(self) -> None:
        while True:
            await asyncio.sleep(min(max(self.settings.idle_evict_s / 4, 1.0), 60.0))
            if self.services is None:
                continue
            now = self.services.clock()
            idle_s = self.settings.idle_evict_s
            await evict_idle(
                self._holds, self._conversations, self.ownership.release, now=now, idle_s=idle_s
            )

    # -- control, followups, feedback -------------------------------------------------------------
    async def _on_control(self, msg: messages.Message, env: Envelope) -> None:
        """Skip-waiting or cancel: to the turn's DecisionActor when it runs here."""
        if not isinstance(msg, SkipWaiting | CancelReAct) or self.services is None:
            return
        running = self.services.task_book.running(msg.turn_id)
        if running is not None:
            with contextlib.suppress(ActorStopped):
                running.decision.tell(Control(msg))

    async def _on_approval(self, msg: messages.Message, env: Envelope) -> messages.Message | None:
        """An approval or denial: the node running the turn answers (``route_approval``)."""
        if not isinstance(msg, ApprovalDecision):
            return ErrorReply(
                code="unexpected_message", message=f"expected turn.approval, got {msg.kind}"
            )
        if self.services is None:
            return None
        return await route_approval(self.services, msg, env.subject)

    async def _on_input(self, msg: messages.Message, env: Envelope) -> messages.Message | None:
        if not isinstance(msg, Followup | Feedback):
            return ErrorReply(
                code="unexpected_message",
                message=f"expected turn.followup or turn.feedback, got {msg.kind}",
            )
        verb = "followup" if isinstance(msg, Followup) else "feedback"
        try:
            cid = self.bus.subjects.conversation_of(env.subject, verb)
        except SubjectError:
            cid = ""
        if cid != msg.conversation_id:
            return ErrorReply(
                code="wrong_subject",
                message=f"the message is for conversation {msg.conversation_id}, "
                f"sent on {env.subject}",
            )
        async with self._holds.claiming(cid):
            loaded = cid in self._conversations
            if not await self.ownership.accepts(cid, msg, loaded=loaded):
                return None  # every node hears it; the conversation's owner answers
            if isinstance(msg, Followup) and not loaded:
                return not_running(msg.turn_id)
            conv = await self.conversation(cid)
            try:
                msg = validate_input(msg, self.settings, conv.services.clock())
            except InputRefused as exc:
                return refusal(exc)
            answer = await conv.ask(UserInput(msg), timeout=ASK_TIMEOUT_S)
        assert isinstance(answer, Ack | ErrorReply)
        return answer

    def stats(self) -> dict[str, Any]:
        """What the node holds and has done (``commits``: ``actline.storage.committer.stats``)."""
        return {
            "node": self.node_id,
            "conversations": len(self._conversations),
            "active_turns": self.queue.active,
            "turns_taken": self.turns_taken,
            "turns_settled": self.turns_settled,
            "commits": {} if self._commits is None else committer.stats(self._commits),
        }
