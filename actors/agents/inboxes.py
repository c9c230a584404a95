"""The node's side of outside agents: durable inboxes, presence, the agent list.

**Inboxes.** ``send`` stores an ``agent.task`` in the task stream (``Subjects.tasks_stream``,
LIMITS retention, kept ``TASK_MAX_AGE_S``) on the agent's inbox subject, confirmed by
JetStream, and says whether the agent is connected. A task leaves the stream when no turn
awaits it any more: its DONE applied, a skip or wait timeout, its turn ended (the
``TaskBook`` hands those to ``withdrawn``). So the stream holds the open tasks, and an
agent that (re)starts gets exactly those.

**Hello.** An agent asks on ``<prefix>.agent.<name>.hello`` (``agent.hello``); nodes answer
in the queue group ``agents`` with ``agent.welcome``: the stream and the agent's durable
consumer ``agent_<name>``, and the beat (``ACTLINE_AGENT_BEAT``) at which to say hello
again. Each hello makes sure the consumer exists; a ``first`` hello (the agent started)
first drops tasks of turns this node stored as finished, then recreates the consumer, so
every task still open is delivered again. Only nodes create consumers: an agent needs no
JetStream management rights (``actline.bus.inbox``).

**Presence.** Each hello is recorded in the KV bucket ``Subjects.agents_bucket`` whose TTL
is three beats: an agent not heard for that long is not connected. ``send`` reads it, and
the model is told when a task waits for an agent that is not there.

**Listing.** ``agents.list`` on ``<prefix>.agents.list`` is answered with
``agents.listed``: every agent that is connected or has open tasks, with its last hello
and its open tasks (read from the task stream, so the answer covers every node).

Cancellation: ``stop`` unsubscribes and cancels the withdrawing loop; a task not withdrawn
yet stays in the stream (a later ``first`` hello of its agent drops it when its turn is
stored as finished here, else it ages out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from datetime import UTC, datetime
from typing import Any, get_args

from actline import messages
from actline.actors.configuration.settings import NodeSettings
from actline.actors.services.task_book import StoredTask, TaskBook, TaskEntry
from actline.bus import (
    Bus,
    BusError,
    Envelope,
    KvBucket,
    NoStream,
    StreamMissing,
    Subscription,
    raise_lost_cancel,
)
from actline.bus import TaskStream as TaskStreamLog
from actline.messages import (
    AgentHello,
    AgentsList,
    AgentsListed,
    AgentStatus,
    AgentTask,
    AgentWelcome,
    DecodeError,
    ErrorReply,
    OpenTask,
    SubjectError,
    TurnStatus,
)
from actline.storage import Store
from actline.storage.layout import pack, unpack

log = logging.getLogger(__name__)

TASK_MAX_AGE_S = 7 * 24 * 3600.0
"""How long the task stream keeps a task nobody withdrew (and an unused consumer lives)."""
TASK_ACK_WAIT_S = 30.0
"""An agent's consumer redelivers a task not acked this long (agents ack on receipt)."""
BEATS = 3
"""An agent not heard for this many beats is not connected (the presence bucket's TTL)."""
QUEUE = "agents"
"""The queue group in which nodes answer hellos and lists."""
HELLO_CONCURRENCY = 8
FINAL = frozenset(get_args(TurnStatus))


class AgentTasks:
    """The agents' durable inboxes and presence, served by one node (``start``/``stop``)."""

    def __init__(self, bus: Bus, settings: NodeSettings, book: TaskBook, store: Store) -> None:
        self.bus = bus
        self.settings = settings
        self.book = book
        self.store = store
        self.beat_s = settings.agent_beat_s
        self._stream: TaskStreamLog | None = None
        self._presence: KvBucket | None = None
        self._subs: list[Subscription] = []
        self._withdrawing: asyncio.Task[None] | None = None
        self._last_seen: dict[str, tuple[float, str]] = {}
        """Hellos this node saw or read (agent -> when, by which node), for the list."""
        self.withdrawn = 0
        """Tasks this node removed from the stream."""

    async def start(self) -> None:
        subjects = self.bus.subjects
        await self._open()
        self._presence = await KvBucket.open(
            self.bus, name=subjects.agents_bucket, ttl_s=round(BEATS * self.beat_s, 3), history=1
        )
        self._subs.append(
            await self.bus.subscribe(
                subjects.agent_hello_any,
                self._on_hello,
                queue=QUEUE,
                concurrency=HELLO_CONCURRENCY,
            )
        )
        self._subs.append(
            await self.bus.subscribe(subjects.agents_list, self._on_list, queue=QUEUE)
        )
        self._withdrawing = asyncio.create_task(self._withdraw_forever(), name="agents:withdraw")

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()
        if self._withdrawing is not None:
            self._withdrawing.cancel()
            await asyncio.gather(self._withdrawing, return_exceptions=True)
            self._withdrawing = None

    async def _open(self) -> TaskStreamLog:
        subjects = self.bus.subjects
        self._stream = await TaskStreamLog.open(
            self.bus,
            name=subjects.tasks_stream,
            subjects=subjects.agent_inbox_any,
            max_msg_size=messages.MAX_PAYLOAD,
            max_age_s=TASK_MAX_AGE_S,
        )
        return self._stream

    async def stream(self) -> TaskStreamLog:
        """The task stream (opened again, so recreated, after it was found missing)."""
        return self._stream if self._stream is not None else await self._open()

    # -- tasks -----------------------------------------------------------------------------------
    async def send(self, task: AgentTask) -> StoredTask:
        """Store ``task`` in its agent's inbox (a stream missing is recreated once); the
        sequence and whether the agent is connected. Raises ``BusError``."""
        subject = self.bus.subjects.agent_inbox(task.agent)
        try:
            seq = await self.bus.publish_stored(subject, task, msg_id=task.task_id)
        except (NoStream, StreamMissing):
            log.warning("the task stream was missing; recreating it")
            await self._open()
            seq = await self.bus.publish_stored(subject, task, msg_id=task.task_id)
        return StoredTask(seq, await self.present(task.agent))

    async def present(self, agent: str) -> bool:
        """Whether ``agent`` said hello within the last three beats (True when unknown)."""
        presence = self._presence
        if presence is None:
            return True
        try:
            return await presence.get(agent) is not None
        except BusError as exc:
            log.info("presence of %s unknown: %s", agent, exc)
            return True

    async def _withdraw_forever(self) -> None:
        while True:
            raise_lost_cancel()
            for entry in await self.book.withdrawn():
                raise_lost_cancel()
                try:
                    self.withdrawn += await self.withdraw(entry)
                except BusError as exc:
                    log.warning(
                        "task %s of %s stays in its inbox: %s", entry.task_id, entry.agent, exc
                    )

    async def withdraw(self, entry: TaskEntry) -> int:
        """Remove ``entry``'s task from its agent's inbox; how many messages went."""
        stream = await self.stream()
        if entry.seq:
            found = await stream.get(entry.seq)
            held = [] if found is None else [(entry.seq, found[1])]
        else:
            held = await stream.held(self.bus.subjects.agent_inbox(entry.agent))
        gone = 0
        for seq, data in held:
            if _task_id(data) == entry.task_id and await stream.delete(seq):
                gone += 1
        return gone

    async def _prune(self, stream: TaskStreamLog, agent: str) -> None:
        """Drop the agent's tasks that no turn awaits any more as far as this node knows:
        answered, or of a turn stored finished (a node that stopped before withdrawing)."""
        for seq, data in await stream.held(self.bus.subjects.agent_inbox(agent)):
            try:
                task = messages.decode(data)
            except DecodeError:
                task = None
            if not isinstance(task, AgentTask) or self._finished(task):
                await stream.delete(seq)

    def _finished(self, task: AgentTask) -> bool:
        entry = self.book.get(task.task_id)
        if entry is not None and entry.answered:
            return True
        record = self.store.turn_record(task.conversation_id, task.turn_id)
        return record is not None and record.get("status") in FINAL

    # -- hello -----------------------------------------------------------------------------------
    async def _on_hello(self, msg: messages.Message, env: Envelope) -> messages.Message:
        if not isinstance(msg, AgentHello):
            return ErrorReply(
                code="unexpected_message", message=f"expected agent.hello, got {msg.kind}"
            )
        subjects = self.bus.subjects
        try:
            name = subjects.agent_of(env.subject, "hello")
        except SubjectError:
            name = ""
        if name != msg.agent:
            return ErrorReply(
                code="agent_mismatch",
                message=f"a hello from {msg.agent} arrived on {env.subject}; "
                f"say hello on {subjects.agent_hello(msg.agent)}",
            )
        try:
            await self._welcome(name, first=msg.first)
        except BusError as exc:
            log.warning("hello of %s not served: %s", name, exc)
            return ErrorReply(
                code="inbox_unavailable", message=f"the inbox of {name} is not ready: {exc}"
            )
        self.book.seen(name)
        return AgentWelcome(
            agent=name,
            stream=subjects.tasks_stream,
            consumer=subjects.agent_consumer(name),
            beat_s=self.beat_s,
            node=self.settings.node_id,
        )

    async def _welcome(self, name: str, *, first: bool) -> None:
        """Prepare ``name``'s consumer (recreated on a first hello) and record it present."""
        subjects = self.bus.subjects
        stream = await self.stream()
        consumer = subjects.agent_consumer(name)
        inbox = subjects.agent_inbox(name)
        if first:
            await self._prune(stream, name)
        try:
            made = await stream.ensure_consumer(
                consumer, inbox, reset=first, ack_wait_s=TASK_ACK_WAIT_S, inactive_s=TASK_MAX_AGE_S
            )
        except StreamMissing:
            log.warning("the task stream was missing; recreating it")
            stream = await self._open()
            made = await stream.ensure_consumer(
                consumer, inbox, ack_wait_s=TASK_ACK_WAIT_S, inactive_s=TASK_MAX_AGE_S
            )
        if made:
            log.info("agent %s: consumer %s %s", name, consumer, "reset" if first else "made")
        now = time.time()
        self._last_seen[name] = (now, self.settings.node_id)
        if self._presence is not None:
            value = {"agent": name, "node": self.settings.node_id, "seen": now, "first": first}
            await self._presence.put(name, pack(value))

    # -- the list --------------------------------------------------------------------------------
    async def _on_list(self, msg: messages.Message, env: Envelope) -> messages.Message:
        if not isinstance(msg, AgentsList):
            return ErrorReply(
                code="unexpected_message", message=f"expected agents.list, got {msg.kind}"
            )
        try:
            return await self.listing()
        except BusError as exc:
            return ErrorReply(
                code="agents_unavailable", message=f"the agents could not be read: {exc}"
            )

    async def listing(self) -> AgentsListed:
        """Every agent connected or with open tasks, by name."""
        present: set[str] = set()
        if self._presence is not None:
            for key in await self._presence.keys():
                entry = await self._presence.get(key)
                if entry is None:
                    continue
                value: dict[str, Any] = unpack(entry.value)
                present.add(key)
                self._last_seen[key] = (float(value.get("seen", 0.0)), str(value.get("node", "")))
        tasks: dict[str, list[OpenTask]] = {}
        stream = await self.stream()
        for _, data in await stream.held(self.bus.subjects.agent_inbox_any):
            with contextlib.suppress(DecodeError):
                task = messages.decode(data)
                if isinstance(task, AgentTask):
                    tasks.setdefault(task.agent, []).append(
                        OpenTask(
                            task_id=task.task_id,
                            turn_id=task.turn_id,
                            conversation_id=task.conversation_id,
                            sent_at=task.ts,
                        )
                    )
        rows = []
        for name in sorted(present | set(tasks)):
            seen = self._last_seen.get(name)
            rows.append(
                AgentStatus(
                    agent=name,
                    present=name in present,
                    last_seen=None if seen is None else datetime.fromtimestamp(seen[0], UTC),
                    node="" if seen is None else seen[1],
                    open_tasks=tasks.get(name, []),
                )
            )
        return AgentsListed(agents=rows)


def _task_id(data: bytes) -> str | None:
    try:
        task = messages.decode(data)
    except DecodeError:
        return None
    return task.task_id if isinstance(task, AgentTask) else None
