"""An outside agent's side of its durable inbox: hello, pull, beat, answer.

``AgentInbox`` is the loop every actline agent runs (``actline agent NAME -- CMD``,
``examples/reviewer.py``):

1. **Hello.** A request ``agent.hello`` (``first=True``) on ``<prefix>.agent.<name>.hello``;
   a node answers ``agent.welcome``: the task stream and the agent's durable consumer
   (``agent_<name>``), made (or, on a first hello, recreated) by the node, so every task
   still open is delivered, again if the agent restarted mid-task. No node yet: the
   hello is repeated with backoff.
2. **Pull.** One task at a time from that consumer, acked on receipt: while connected the
   agent receives each task once.
3. **Beat.** The hello again (``first=False``) every ``welcome.beat_s`` seconds
   (``ACTLINE_AGENT_BEAT`` of the nodes, 2 s): an agent not heard for three beats is not
   connected, and a turn that sends it a task says so. A consumer found missing is made
   again by the next hello.
4. **DONE** (``done`` / ``send_done``): ``agent.done`` stored on the agent's own subject
   ``<prefix>.agent.<name>.done`` (the task's ``done_subject``), then the node's verdict.

The agent needs only what the ``agent NAME`` role grants: publish on its hello and DONE
subjects, ``$JS.API.CONSUMER.MSG.NEXT.<TASKS>.agent_<name>``,
``$JS.API.CONSUMER.INFO.<TASKS>.agent_<name>``, ``$JS.ACK.<TASKS>.agent_<name>.>``, and
replies on its own inbox. It never creates streams or consumers.

A plain nats-py agent does the same without actline (``msgpack`` maps with a ``kind``)::

    nc = await nats.connect(url, user_credentials=creds,   # the agent's credentials and
                            inbox_prefix=f"_INBOX.{public_key}")   # its reply inbox
    hello = {"kind": "agent.hello", "agent": name, "first": True}
    reply = await nc.request(f"al.agent.{name}.hello", msgpack.packb(hello), timeout=5)
    welcome = msgpack.unpackb(reply.data)         # kind agent.welcome (or error.reply)
    js = nc.jetstream()
    pull = await js.pull_subscribe_bind(durable=welcome["consumer"], stream=welcome["stream"])
    while True:                                   # and every welcome["beat_s"] s: hello,
        try:                                      # "first": False
            [msg] = await pull.fetch(1, timeout=5)
        except nats.errors.TimeoutError:
            continue
        await msg.ack()
        task = msgpack.unpackb(msg.data)          # kind agent.task
        done = {"kind": "agent.done", "agent": name, "turn_id": task["turn_id"],
                "task_id": task["task_id"], "summary": "..."}
        await js.publish(task["done_subject"], msgpack.packb(done))   # stored: AL_DONES

(``tests/actors/agent_process.py`` is such an agent.) To hear the node's verdict, put an
inbox in the ``Actline-Reply`` header of the DONE and subscribe to it.

Cancellation: ``close`` stops the beat and the pull; a task pulled and not answered stays
open and is delivered again after the agent's next first hello.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence

from actline import messages
from actline.actors.errors import AgentNotWelcome, DoneNotStored
from actline.bus import (
    AgentPull,
    Bus,
    BusError,
    Envelope,
    JetStreamUnavailable,
    NoStream,
    NotConnected,
    RequestTimeout,
    StreamMissing,
    raise_lost_cancel,
)
from actline.messages import (
    Ack,
    AgentHello,
    AgentTask,
    AgentWelcome,
    ArtifactRef,
    DecodeError,
    DoneSignal,
    ErrorReply,
    new_id,
)

log = logging.getLogger(__name__)

REPLY_HEADER = "Actline-Reply"
"""The header naming the inbox where the sender of a DONE waits for its verdict."""


STORED = "stored;"
"""How the detail of an ``Ack`` starts when the DONE is stored but not applied yet."""
HELLO_TIMEOUT_S = 5.0
"""How long one hello waits for a node's answer."""
RETRY_MAX_S = 2.0
"""The longest pause between two tries of a hello or a pull that failed."""


class AgentInbox:
    """The tasks of the outside agent ``name``: ``start``, then ``next`` (or ``async for``),
    ``done`` for each, and ``close``."""

    def __init__(self, bus: Bus, name: str, *, pull_s: float = 1.0) -> None:
        self.bus = bus
        self.name = name
        self.pull_s = pull_s
        self.welcome: AgentWelcome | None = None
        self.counters: Counter[str] = Counter()
        """``hellos`` answered, ``tasks`` received, ``skipped`` (not a task), ``rebound``."""
        self._pull: AgentPull | None = None
        self._beat: asyncio.Task[None] | None = None

    async def start(
        self, *, within: float | None = None, waiting: Callable[[str], None] | None = None
    ) -> AgentWelcome:
        """Say the first hello and bind the consumer; then beat until ``close``.

        While no node answers, the hello is repeated (with backoff) for ``within`` seconds
        (None: until one does), ``waiting`` told why after each failure; then
        ``AgentNotWelcome``.
        """
        loop = asyncio.get_running_loop()
        deadline = None if within is None else loop.time() + within
        delay = 0.1
        while True:
            try:
                welcome = await self._hello(first=True)
                break
            except AgentNotWelcome as exc:
                if deadline is not None and loop.time() + delay > deadline:
                    raise
                if waiting is not None:
                    waiting(exc.reason)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        self._pull = await AgentPull.bind(
            self.bus, stream=welcome.stream, consumer=welcome.consumer
        )
        self._beat = loop.create_task(self._beat_forever(), name=f"agent:{self.name}:beat")
        return welcome

    async def _hello(self, *, first: bool) -> AgentWelcome:
        hello = AgentHello(agent=self.name, first=first)
        subject = self.bus.subjects.agent_hello(self.name)
        try:
            reply = await self.bus.request(
                subject, hello, timeout=HELLO_TIMEOUT_S, raise_remote=False
            )
        except BusError as exc:
            raise AgentNotWelcome(self.name, f"no node answered on {subject}: {exc}") from None
        if isinstance(reply, ErrorReply):
            raise AgentNotWelcome(self.name, f"{reply.code}: {reply.message}")
        if not isinstance(reply, AgentWelcome):
            raise AgentNotWelcome(self.name, f"expected agent.welcome, got {reply.kind}")
        self.welcome = reply
        self.counters["hellos"] += 1
        return reply

    async def _beat_forever(self) -> None:
        while True:
            raise_lost_cancel()
            await asyncio.sleep(self.welcome.beat_s if self.welcome is not None else 2.0)
            try:
                await self._hello(first=False)
            except AgentNotWelcome as exc:
                log.info("hello of %s not answered: %s", self.name, exc.reason)

    async def next(self, timeout: float | None = None) -> AgentTask | None:
        """The next task (acked: it is not delivered again while connected); None when none
        came within ``timeout`` seconds (None: wait for one)."""
        pull = self._pull
        if pull is None:
            raise AgentNotWelcome(self.name, "start() first")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        delay = 0.1
        while deadline is None or (left := deadline - loop.time()) > 0:
            raise_lost_cancel()
            wait = self.pull_s if deadline is None else max(0.01, min(self.pull_s, left))
            try:
                item = await pull.pull(wait)
            except StreamMissing:  # the node makes the consumer again when told hello
                self.counters["rebound"] += 1
                with contextlib.suppress(AgentNotWelcome):
                    await self._hello(first=False)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            except BusError as exc:  # reconnecting, a slow server: try again
                log.info("pull of %s failed: %s", self.name, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            if item is None:
                continue
            with contextlib.suppress(BusError):
                await item.ack()
            try:
                task = messages.decode(item.data)
            except DecodeError as exc:
                task = None
                log.warning("an undecodable task for %s skipped: %s", self.name, exc.reason)
            if not isinstance(task, AgentTask):
                self.counters["skipped"] += 1
                continue
            self.counters["tasks"] += 1
            return task
        return None

    def __aiter__(self) -> AgentInbox:
        return self

    async def __anext__(self) -> AgentTask:
        task = await self.next()
        assert task is not None  # no timeout: next() returns a task
        return task

    async def done(
        self,
        task: AgentTask,
        summary: str,
        *,
        artifacts: Sequence[ArtifactRef] = (),
        signal_id: str | None = None,
        timeout: float = 5.0,
        store_within: float = 30.0,
    ) -> Ack | ErrorReply:
        """Answer ``task``: its DONE stored on this agent's own subject, then the verdict
        (``send_done``)."""
        signal = DoneSignal(
            agent=self.name,
            turn_id=task.turn_id,
            task_id=task.task_id,
            signal_id=signal_id or new_id("sig-"),
            summary=summary,
            artifacts=list(artifacts),
        )
        return await send_done(self.bus, signal, timeout=timeout, store_within=store_within)

    async def close(self) -> None:
        """Stop beating and pulling (a task not answered stays open)."""
        if self._beat is not None:
            self._beat.cancel()
            await asyncio.gather(self._beat, return_exceptions=True)
            self._beat = None
        if self._pull is not None:
            await self._pull.close()
            self._pull = None


async def send_done(
    bus: Bus, msg: DoneSignal, *, timeout: float = 5.0, store_within: float = 30.0
) -> Ack | ErrorReply:
    """Store ``msg`` on its agent's own DONE subject and wait for the node's verdict.

    The signal is stored in the DONE stream first (retried with backoff for up to
    ``store_within`` seconds while nothing stores it: NATS restarting, no node ever
    started); then the verdict is awaited for ``timeout`` seconds: an ``Ack`` when a node
    applied it, an ``ErrorReply`` when it refused it, or an ``Ack`` whose detail starts
    with ``stored`` when no node has applied it yet (it will be, when a node runs its
    turn). Raises ``DoneNotStored`` when the signal could not be stored.
    """
    verdicts: asyncio.Queue[Ack | ErrorReply] = asyncio.Queue()

    async def on_verdict(reply: messages.Message, env: Envelope) -> None:
        if isinstance(reply, Ack | ErrorReply):
            verdicts.put_nowait(reply)

    inbox = bus.nc.new_inbox()
    sub = await bus.subscribe(inbox, on_verdict)
    try:
        await _store_done(bus, msg, inbox, store_within)
        pending = Ack(
            ref=msg.signal_id,
            detail=f"stored; no node answered within {timeout:g} s: it is applied when "
            "a node runs its turn",
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            try:
                verdict = await asyncio.wait_for(verdicts.get(), left)
            except TimeoutError:
                break
            if isinstance(verdict, Ack) and verdict.detail.startswith(STORED):
                pending = verdict  # held by a node: the final word may still come
                continue
            return verdict
        return pending
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _store_done(bus: Bus, msg: DoneSignal, inbox: str, within: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    delay = 0.1
    while True:
        try:
            await bus.publish_stored(
                bus.subjects.agent_done_of(msg.agent),
                msg,
                msg_id=msg.signal_id,
                headers={REPLY_HEADER: inbox},
            )
            return
        except (NoStream, RequestTimeout, NotConnected, JetStreamUnavailable) as exc:
            if loop.time() + delay > deadline:
                raise DoneNotStored(msg.agent, within, str(exc)) from None
            log.info("DONE of %s not stored yet (%s); retrying in %.1f s", msg.agent, exc, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
