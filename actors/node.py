"""The node: one process (or one Ray actor) that serves turns from the durable queue.

A node connects to NATS and makes sure the turn queue exists: a JetStream
work-queue stream capturing ``al.turn.submit`` (a plain core publish from a client is
enough) and one durable pull consumer that all nodes share (DESIGN.md §3). It pulls
turn requests while it has room (``max_active_turns``), hands each to the
ConversationActor of its conversation (loaded from LMDB on first use), keeps the
message *in progress* while the turn waits or runs, and acks it once the result is
published. A node that dies leaves its messages unacked: after ``ack_wait`` they go
to another node, which resumes each turn from the persisted timeline.

It also hosts this node's StreamerActor and ToolExecutorActor pools, routes
``agent.done`` signals to the turn that sent the task (DESIGN.md §2.2), and serves
followups and feedback for its conversations.

In cluster mode (``ACTLINE_CLUSTER``; ``actors.cluster``) several nodes share the queue: a
node leases a conversation in JetStream KV before running its turn (a turn of a conversation
leased elsewhere goes back to the queue for a moment), copies every persisted round to
JetStream under a check-and-set on the conversation's head, and adopts that durable copy when
it takes a conversation over; DONE signals, followups and feedback are answered by the owner.

``python -m actors.node --nats URL`` runs one node until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

import messages
from bus import Bus, BusError, Envelope
from llm.prompt import system_prompt
from llm.protocol import Model
from messages import (
    Ack,
    DeadLetter,
    DecodeError,
    DoneSignal,
    ErrorReply,
    Feedback,
    Followup,
    TurnRequest,
)
from storage import Store
from timeline import Block
from tools import KnowledgeSpace
from tools.builtin import BuiltinConfig, register_builtins
from tools.react import ReactTools, index_rows
from tools.workspace import TurnFiles

from .base import ActorStopped
from .cluster import ConversationLost, JetStreamCopy, KvLeases, adopt
from .conversation import ConversationActor, RouteDone, TurnJob
from .services import Services, TaskBook
from .settings import NodeSettings, load_mcp_config
from .streamer import ContextShelf, StreamerActor, models_by_name
from .tool_executor import ToolExecutorActor, ToolRegistry

log = logging.getLogger(__name__)

CONSUMER = "nodes"
DEFER_S = 0.2
"""How long a turn of a conversation leased to another node stays out of the queue."""
NOT_MINE = frozenset({"unknown_task", "unknown_turn", "no_outstanding_task"})
"""DONE verdicts a node keeps to itself in cluster mode (another node may run the turn)."""


def stream_name(prefix: str) -> str:
    """The JetStream stream of a deployment's turn queue (``al`` -> ``AL_TURNS``)."""
    return "".join(c if c.isalnum() else "_" for c in prefix).upper() + "_TURNS"


class Node:
    """Serves turns; ``await start()``, then ``await stop()`` (or ``async with``)."""

    def __init__(
        self,
        bus: Bus,
        settings: NodeSettings | None = None,
        *,
        model: Model | None = None,
        models: Mapping[str, Model] | None = None,
        registry: ToolRegistry | None = None,
        store: Store | None = None,
        knowledge: KnowledgeSpace | None = None,
    ) -> None:
        self.bus = bus
        self.settings = settings or NodeSettings.from_env()
        self.registry = registry or ToolRegistry()
        self._model = model
        self._models = dict(models or {})
        self._store = store
        self._own_store = store is None
        self._knowledge = knowledge
        self.conversations: dict[str, ConversationActor] = {}
        self._loading: dict[str, asyncio.Future[ConversationActor]] = {}
        self._inflight: dict[str, list[Msg]] = {}
        self._room = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._subs: list[Any] = []
        self.streamer: StreamerActor | None = None
        self.executor: ToolExecutorActor | None = None
        self.services: Services | None = None
        self._mcp = contextlib.AsyncExitStack()
        self.leases: KvLeases | None = None
        self.durable: JetStreamCopy | None = None
        self._turn_cids: dict[str, str] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.turns_taken = 0
        self.turns_settled = 0
        self.turns_deferred = 0
        """Turn requests handed back because another node held the conversation's lease."""
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
        assert self._store is not None, "start() the node first"
        return self._store

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        settings = self.settings
        if self._store is None:
            self._store = await asyncio.to_thread(Store, settings.home, sync=settings.storage_sync)
        if self._knowledge is None and settings.knowledge_dir is not None:
            self._knowledge = await asyncio.to_thread(KnowledgeSpace, settings.knowledge_dir)
        shelf = ContextShelf(self.node_id) if settings.streamers > 0 else None
        if settings.builtin_tools:
            hosts = [h.strip() for h in settings.http_allowed_hosts.split(",") if h.strip()]
            config = BuiltinConfig(
                exec_timeout_s=settings.exec_timeout_s,
                exec_memory_mb=settings.exec_memory_mb,
                http_allowed_hosts=hosts or None,
            )
            register_builtins(self.registry, config)
        if settings.mcp_config is not None:
            await self._start_mcp(settings.mcp_config)
        if settings.cluster:
            self.leases = KvLeases(self.bus, self.node_id, ttl_s=settings.lease_ttl_s)
            self.durable = JetStreamCopy(self.bus, writer=self.node_id)
            await self.leases.start()
            await self.durable.start()
        tools = {t["name"]: str(t.get("description") or "") for t in self.registry.describe()}
        self.services = Services(
            bus=self.bus,
            store=self._store,
            settings=settings,
            react=ReactTools(),
            system_prompt=system_prompt(tools),
            knowledge=self._knowledge,
            external_tools=self.registry.names,
            shelf=shelf,
            tasks=TaskBook(),
            local_tools=settings.tool_workers > 0,
            durable=self.durable,
            on_lost=self._lost,
        )
        if settings.streamers > 0:
            self.streamer = StreamerActor(
                self.bus,
                models_by_name(self._default_model(), self._models),
                shelf=shelf,
                concurrency=settings.streamers,
                timeout_s=settings.model_timeout_s,
            )
            await self.streamer.start()
        if settings.tool_workers > 0:
            self.executor = ToolExecutorActor(
                self.bus,
                self.registry,
                concurrency=settings.tool_workers,
                node_id=self.node_id,
                files=self._turn_files,
            )
            await self.executor.start()
        subjects = self.bus.subjects
        self._subs.append(await self.bus.subscribe(subjects.agent_done, self._on_done))
        self._subs.append(await self.bus.subscribe(subjects.conv_any("followup"), self._on_input))
        self._subs.append(
            await self.bus.subscribe(
                subjects.conv_any("feedback"),
                self._on_input,
                queue=None if settings.cluster else "feedback",
            )
        )
        psub = await self._ensure_queue()
        self._subs.append(psub)
        self._room.set()
        self._tasks.append(asyncio.create_task(self._pull(psub), name="node:pull"))
        self._tasks.append(asyncio.create_task(self._heartbeat(), name="node:heartbeat"))
        self._tasks.append(asyncio.create_task(self._evict_idle(), name="node:evict"))
        if self.leases is not None:
            self._tasks.append(asyncio.create_task(self._renew_leases(), name="node:leases"))
        log.info("node %s serving %s", self.node_id, subjects.turn_submit)

    async def stop(self) -> None:
        """Stop pulling; turns not finished are handed back to the queue (nak)."""
        if not self._started:
            return
        self._started = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()
        for conv in list(self.conversations.values()):
            await conv.kill()
        self.conversations.clear()
        for msgs in self._inflight.values():
            for msg in msgs:
                with contextlib.suppress(Exception):
                    await msg.nak()
        self._inflight.clear()
        if self.leases is not None:  # a graceful stop hands the conversations on at once
            for cid in list(self.leases.held):
                with contextlib.suppress(Exception):
                    await self.leases.release(cid)
        if self.streamer is not None:
            await self.streamer.stop()
        if self.executor is not None:
            await self.executor.stop()
        await self._mcp.aclose()
        if self._own_store and self._store is not None:
            self._store.close()
            self._store = None

    def _turn_files(self, conversation_id: str, turn_id: str) -> TurnFiles | None:
        conv = self.conversations.get(conversation_id)
        return conv.turn_files(turn_id) if conv is not None else None

    async def _start_mcp(self, config: Path) -> None:
        """Start the MCP servers of ``config`` and register their tools."""
        from tools.mcp_bridge import McpServer, register_mcp_server

        for name, spec in load_mcp_config(config).items():
            server = McpServer(
                name,
                spec["command"],
                spec.get("args", ()),
                env=spec.get("env"),
                cwd=spec.get("cwd"),
            )
            await self._mcp.enter_async_context(server)
            names = await register_mcp_server(self.registry, server)
            log.info("MCP server %s: %d tools", name, len(names))

    def _default_model(self) -> Model:
        if self._model is not None:
            return self._model
        from llm import LLMSettings, make_model

        return make_model(LLMSettings.from_env(model=self.settings.model))

    # -- the durable queue ---------------------------------------------------------------------
    async def _ensure_queue(self) -> Any:
        js = self.bus.jetstream()
        name = stream_name(self.bus.subjects.prefix)
        subject = self.bus.subjects.turn_submit
        try:
            await js.stream_info(name)
        except NotFoundError:
            await js.add_stream(
                StreamConfig(
                    name=name,
                    subjects=[subject],
                    retention=RetentionPolicy.WORK_QUEUE,
                    storage=StorageType.FILE,
                    max_msg_size=messages.MAX_PAYLOAD,
                )
            )
        config = ConsumerConfig(
            durable_name=CONSUMER,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.settings.ack_wait_s,
            max_deliver=-1,
            max_ack_pending=-1,
        )
        return await js.pull_subscribe(subject, durable=CONSUMER, stream=name, config=config)

    async def _pull(self, psub: Any) -> None:
        while True:
            room = self.settings.max_active_turns - len(self._inflight)
            if room <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                # One at a time: a larger batch sometimes waits for the server's request
                # timeout (up to ~1 s) to fill although a message is already delivered.
                batch = await psub.fetch(batch=1, timeout=1.0)
            except (nats.errors.TimeoutError, TimeoutError):
                continue
            except nats.errors.Error as exc:
                log.warning("turn queue fetch failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            deferred = False
            for msg in batch:
                try:
                    deferred = await self._take(msg) or deferred
                except Exception:
                    log.exception("could not take a turn request; it will be redelivered")
            if deferred:
                # Stay off the queue a little longer than the request: a waiting fetch of
                # the owner gets it, instead of this node fetching it back at once.
                await asyncio.sleep(DEFER_S * (1.5 + random.random()))

    async def _take(self, msg: Msg) -> bool:
        """Hand a turn request to its conversation; True when it was deferred (leased
        elsewhere)."""
        try:
            request = messages.decode(msg.data)
        except DecodeError as exc:
            await self._dead_letter(msg, exc.reason)
            return False
        if not isinstance(request, TurnRequest):
            await self._dead_letter(msg, f"expected turn.request, got {request.kind}")
            return False
        tid = request.turn_id
        cid = request.conversation_id
        if tid in self._inflight:  # a redelivery of a turn this node already runs
            self._inflight[tid].append(msg)
            await msg.in_progress()
            return False
        if self.leases is not None and not await self.leases.acquire(cid):
            # Another node owns the conversation: back to the queue for a moment, until the
            # owner fetches it (each fetch goes to any node) or its lease has lapsed.
            self.turns_deferred += 1
            log.debug("turn %s deferred: conversation %s is leased elsewhere", tid, cid)
            await msg.nak(delay=DEFER_S)
            return True
        self.turns_taken += 1
        self._inflight[tid] = [msg]
        self._turn_cids[tid] = cid
        conv = await self.conversation(cid)

        async def settle() -> None:
            await self._settle(tid)

        async def requeue() -> None:
            await self._requeue(tid)

        conv.tell(TurnJob(request, settle, requeue))
        return False

    async def _requeue(self, turn_id: str) -> None:
        """Hand a turn back to the queue at once (this node lost its conversation)."""
        self._turn_cids.pop(turn_id, None)
        for msg in self._inflight.pop(turn_id, []):
            with contextlib.suppress(nats.errors.Error):
                await msg.nak()
        self._room.set()

    async def _settle(self, turn_id: str) -> None:
        self._turn_cids.pop(turn_id, None)
        for msg in self._inflight.pop(turn_id, []):
            try:
                await msg.ack()
            except nats.errors.Error as exc:
                log.warning("ack of turn %s failed: %s", turn_id, exc)
        self.turns_settled += 1
        self._room.set()

    async def _heartbeat(self) -> None:
        period = max(self.settings.ack_wait_s / 3.0, 0.05)
        while True:
            await asyncio.sleep(period)
            for msgs in list(self._inflight.values()):
                for msg in msgs:
                    with contextlib.suppress(nats.errors.Error):
                        await msg.in_progress()

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        log.warning("undecodable turn request (%d bytes): %s", len(msg.data), reason)
        letter = DeadLetter(
            subject=msg.subject, reason=reason, raw=bytes(msg.data[:65536]), raw_size=len(msg.data)
        )
        with contextlib.suppress(BusError, nats.errors.Error):
            await self.bus.publish(self.bus.subjects.deadletter, letter)
        await msg.term()

    # -- conversations ----------------------------------------------------------------------------
    async def conversation(self, cid: str) -> ConversationActor:
        """The actor of ``cid``, loaded from this node's store on first use."""
        conv = self.conversations.get(cid)
        if conv is not None:
            return conv
        pending = self._loading.get(cid)
        if pending is not None:
            return await pending
        future: asyncio.Future[ConversationActor] = asyncio.get_running_loop().create_future()
        self._loading[cid] = future
        try:
            assert self.services is not None
            head = await self._sync_from_copy(cid)
            conv = await ConversationActor.load(cid, self.services)
            conv.head_revision = head
            conv.start()
            self.conversations[cid] = conv
            future.set_result(conv)
            return conv
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a waiter may not exist
            raise
        finally:
            self._loading.pop(cid, None)

    async def _sync_from_copy(self, cid: str) -> int | None:
        """Cluster mode: bring this node's LMDB to the durable copy before loading ``cid``.

        Fast path: the head was written by this node at the length stored here. Otherwise
        the rounds are read from JetStream and adopted (appended, or the local copy
        replaced). A conversation stored here but never copied is published whole.
        Returns the head's KV revision (None: no durable copy yet).
        """
        durable = self.durable
        if durable is None:
            return None
        store = self.store
        head = await durable.head(cid)
        _, stored = await asyncio.to_thread(store.cursor, cid)
        if head is None:
            if not stored:
                return None
            blocks = [Block.from_dict(b) for b in await asyncio.to_thread(_blocks, store, cid)]
            header = await asyncio.to_thread(store.header, cid)
            return await durable.publish_round(cid, blocks, [], dict(header or {}), expect=None)
        header, revision = head
        if header.get("writer") == self.node_id and int(header.get("stored_seq", -1)) == stored:
            return revision
        copy = await durable.read(cid)
        if copy is None:
            return None
        await asyncio.to_thread(adopt, store, cid, copy, index=index_rows)
        log.info("conversation %s taken over from the durable copy (head %d)", cid, revision)
        return copy.kv_revision

    def _lost(self, cid: str) -> None:
        """A conversation actor found it lost its conversation: drop it (in a task, since
        the actor calls this from its own mailbox)."""
        conv = self.conversations.pop(cid, None)
        if self.durable is not None:
            self.durable.forget(cid)
        if conv is not None:
            task = asyncio.get_running_loop().create_task(conv.stop())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _renew_leases(self) -> None:
        assert self.leases is not None
        period = max(self.settings.lease_ttl_s / 3.0, 0.05)
        while True:
            await asyncio.sleep(period)
            for cid in await self.leases.renew_all():
                log.warning("lease of %s lapsed: dropping it here", cid)
                conv = self.conversations.pop(cid, None)
                if conv is not None:
                    await conv.kill()
                if self.durable is not None:
                    self.durable.forget(cid)
                for tid in [t for t, c in self._turn_cids.items() if c == cid]:
                    await self._requeue(tid)

    async def _evict_idle(self) -> None:
        while True:
            await asyncio.sleep(min(max(self.settings.idle_evict_s / 4, 1.0), 60.0))
            assert self.services is not None
            now = self.services.clock()
            for cid, conv in list(self.conversations.items()):
                if not conv.busy and now - conv.last_active > self.settings.idle_evict_s:
                    del self.conversations[cid]
                    await conv.stop()
                    if self.leases is not None:
                        await self.leases.release(cid)
                    if self.durable is not None:
                        self.durable.forget(cid)

    # -- DONE, followups, feedback ----------------------------------------------------------------
    async def _on_done(self, msg: messages.Message, env: Envelope) -> messages.Message | None:
        if not isinstance(msg, DoneSignal):
            return ErrorReply(
                code="unexpected_message", message=f"expected agent.done, got {msg.kind}"
            )
        for attempt in range(3):
            try:
                verdict = await self._route_done(msg)
            except ActorStopped:  # the turn ended while the signal was on its way
                await asyncio.sleep(0.01 * (attempt + 1))
                continue
            except ConversationLost:
                return ErrorReply(
                    code="retry",
                    message="the conversation moved to another node; send the DONE again",
                )
            if self.leases is not None and isinstance(verdict, ErrorReply):
                if verdict.code in NOT_MINE:
                    return None  # every node hears the DONE: the one that runs the turn answers
            return verdict
        return ErrorReply(code="retry", message="the turn was ending; send the DONE again")

    async def _route_done(self, msg: DoneSignal) -> messages.Message:
        assert self.services is not None
        book = self.services.tasks
        cid: str | None = None
        signal = msg
        if msg.task_id is not None:
            entry = book.get(msg.task_id)
            if entry is not None:
                cid = entry.conversation_id
            else:
                cid = self._conversation_running(msg.turn_id)
            if cid is None:
                return ErrorReply(
                    code="unknown_task",
                    message=f"no task {msg.task_id} is known here; check the id, or send the "
                    f"DONE without ids to answer {msg.agent}'s oldest open task",
                )
        elif msg.turn_id is not None:
            cid = self._conversation_running(msg.turn_id)
            if cid is None:
                return ErrorReply(
                    code="unknown_turn",
                    message=f"turn {msg.turn_id} is not running here; nothing was applied",
                )
        else:
            open_tasks = book.open_tasks(msg.agent)
            turns = sorted({t.turn_id for t in open_tasks})
            if not open_tasks:
                return ErrorReply(
                    code="no_outstanding_task",
                    message=f"{msg.agent} has no outstanding task; nothing was applied",
                )
            if len(turns) > 1:
                ids = ", ".join(t.task_id for t in open_tasks)
                return ErrorReply(
                    code="ambiguous_done",
                    message=f"{msg.agent} has open tasks in {len(turns)} turns ({ids}); "
                    "name one with --task ID",
                )
            cid = open_tasks[0].conversation_id
            signal = msg.model_copy(update={"turn_id": open_tasks[0].turn_id})
        conv = await self.conversation(cid)
        verdict = await conv.ask(RouteDone(signal))
        if isinstance(verdict, asyncio.Future):
            verdict = await verdict
        assert isinstance(verdict, Ack | ErrorReply)
        return verdict

    def _conversation_running(self, turn_id: str | None) -> str | None:
        if turn_id is None:
            return None
        for cid, conv in self.conversations.items():
            if conv.running_turn == turn_id:
                return cid
        return None

    async def _on_input(self, msg: messages.Message, env: Envelope) -> messages.Message | None:
        if not isinstance(msg, Followup | Feedback):
            return ErrorReply(
                code="unexpected_message",
                message=f"expected turn.followup or turn.feedback, got {msg.kind}",
            )
        cid = env.subject.split(".")[-2]
        if cid != msg.conversation_id:
            return ErrorReply(
                code="wrong_subject",
                message=f"the message is for conversation {msg.conversation_id}, "
                f"sent on {env.subject}",
            )
        if self.leases is not None:  # cluster: every node hears it; the owner answers
            if isinstance(msg, Followup) and cid not in self.conversations:
                return None
            if isinstance(msg, Feedback) and not await self.leases.acquire(cid):
                return None
        if isinstance(msg, Followup) and cid not in self.conversations:
            return ErrorReply(
                code="turn_not_running",
                message=f"turn {msg.turn_id} is not running; send the text as a new turn.request",
            )
        conv = await self.conversation(cid)
        answer = await conv.ask(msg)
        assert isinstance(answer, Ack | ErrorReply)
        return answer

    def stats(self) -> dict[str, Any]:
        return {
            "node": self.node_id,
            "conversations": len(self.conversations),
            "active_turns": len(self._inflight),
            "turns_taken": self.turns_taken,
            "turns_settled": self.turns_settled,
        }


# --- python -m actors.node ----------------------------------------------------------------


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m actors.node", description=__doc__)
    parser.add_argument("--nats", default=None, help="NATS URL (default: NATS_URL)")
    parser.add_argument("--home", type=Path, default=None, help="LMDB folder (ACTLINE_HOME)")
    parser.add_argument("--docs", type=Path, default=None, help="knowledge space folder")
    parser.add_argument("--model", default=None, help="model name (default: extractive)")
    parser.add_argument("--model-delay", type=float, default=0.0, help="offline model delay")
    parser.add_argument("--node-id", default=None)
    parser.add_argument("--ack-wait", type=float, default=None)
    parser.add_argument("--grace", type=float, default=None, help="followup grace seconds")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {}
    for key, value in (
        ("home", args.home),
        ("knowledge_dir", args.docs),
        ("model", args.model),
        ("node_id", args.node_id),
        ("ack_wait_s", args.ack_wait),
        ("followup_grace_s", args.grace),
    ):
        if value is not None:
            overrides[key] = value
    settings = NodeSettings.from_env(**overrides)
    model: Model | None = None
    if settings.model == "extractive":
        from llm import ExtractiveModel

        model = ExtractiveModel(delay=args.model_delay)
    bus = await Bus.connect(args.nats, name=f"actline-node-{settings.node_id}")
    node = Node(bus, settings, model=model)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await node.start()
    print(f"node {settings.node_id} ready", flush=True)
    await stop.wait()
    await node.stop()
    await bus.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return asyncio.run(_serve(_parse(argv)))


if __name__ == "__main__":
    sys.exit(main())


def _blocks(store: Store, cid: str) -> list[dict[str, Any]]:
    return list(store.iter_blocks(cid))
