"""The actor primitive: an asyncio object with a mailbox and one task.

An actor handles one message at a time, in arrival order, in its own task; nothing
outside it touches its state. ``tell`` enqueues and returns; ``ask`` enqueues and
awaits the handler's answer (or its exception). Long work (a model call, a tool
round) runs in a child task that posts its outcome back to the mailbox, so no
``await`` on slow I/O holds the mailbox.

Messages are named, typed values (frozen dataclasses), never closures or actor objects.
A message that is asked subclasses ``Request[R]``: ``ask(msg, timeout=...)`` returns its
``R`` or raises ``AskTimeout``; a message told is any value the actor's ``receive`` takes.

A handler that raises is logged and, for an ask, the exception goes to the asker;
the actor keeps serving. ``stop()`` ends the task after the messages already queued;
asks still queued when an actor stops or is killed fail with ``ActorStopped``.

Memory (a node keeps 10,000 turns waiting, each with two actors): the mailbox is
a ``Mailbox`` (a deque and one waiter; ``asyncio.Queue`` keeps four deques and an Event),
and ``later`` is a timer in the event loop's heap, not a task sleeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from .errors import ActorStopped, AskTimeout

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class Request(Generic[R]):
    """Base of a message that is asked; ``R`` is the type of its answer."""

    __slots__ = ()


@dataclass(eq=False)
class Ask(Generic[T]):
    """A message whose handler's return value goes back to the asker."""

    body: object
    reply: asyncio.Future[T] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class _Stop:
    """Ends the actor's task once the messages before it are handled."""


class Mailbox:
    """A FIFO with one consumer (the actor's task): a deque and that consumer's waiter."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: deque[object] = deque()
        self._waiter: asyncio.Future[None] | None = None

    def put_nowait(self, item: object) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self) -> object:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    def get_nowait(self) -> object:
        return self._items.popleft()

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)


_STOP = _Stop()


class Ref(Protocol):
    """What a sender holds of an actor, wherever it lives: ``ActorRef`` in the same process,
    or a reference that sends over NATS (``actline.actors.node.post``)."""

    @property
    def name(self) -> str: ...

    def tell(self, message: object) -> None: ...

    async def ask(self, body: Request[R], *, timeout: float) -> R: ...


class ActorRef:
    """What others hold of an actor: its name, ``tell`` and ``ask``; never its state."""

    __slots__ = ("_actor",)

    def __init__(self, actor: Actor) -> None:
        self._actor = actor

    @property
    def name(self) -> str:
        return self._actor.name

    def tell(self, message: object) -> None:
        """Enqueue ``message`` (raises ``ActorStopped`` once the actor stops)."""
        self._actor.tell(message)

    async def ask(self, body: Request[R], *, timeout: float) -> R:
        """The actor's answer to ``body`` (``AskTimeout``, ``ActorStopped``, or its error)."""
        return await self._actor.ask(body, timeout=timeout)


class Actor:
    """Subclasses implement ``receive(message) -> answer``; ``start()`` runs the mailbox."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._mailbox = Mailbox()
        self._runner: asyncio.Task[None] | None = None
        """The loop that reads the mailbox (``_run``)."""
        self._children: set[asyncio.Task[Any]] = set()
        self._timers: list[asyncio.TimerHandle] = []
        self._stopping = False
        self._killed = False
        """Set by ``kill``: the loop ends after the message at hand even if a handler
        swallowed the cancellation (``asyncio.wait_for`` in Python 3.11 can)."""

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._runner is None:
            self._runner = asyncio.create_task(self._run(), name=f"actor:{self.name}")

    def ref(self) -> ActorRef:
        """A handle that can only send to this actor."""
        return ActorRef(self)

    @property
    def running(self) -> bool:
        return self._runner is not None and not self._runner.done()

    @property
    def accepting(self) -> bool:
        """Messages told now are handled (the actor is not stopping)."""
        return not self._stopping

    @property
    def unread(self) -> int:
        """Messages in the mailbox not handled yet."""
        return self._mailbox.qsize()

    async def stop(self) -> None:
        """Handle what is queued, then end; child tasks are cancelled."""
        if self._runner is None or self._runner.done():
            await self._cancel_children()
            return
        self._stopping = True
        self._mailbox.put_nowait(_STOP)
        await asyncio.shield(self._runner)

    def request_stop(self) -> None:
        """Stop after the messages already queued; safe to call from the actor's own task."""
        if not self._stopping:
            self._stopping = True
            self._mailbox.put_nowait(_STOP)

    async def kill(self) -> None:
        """End now: queued messages are dropped (asks fail with ``ActorStopped``)."""
        self._stopping = True
        self._killed = True
        if self._runner is not None and not self._runner.done():
            self._runner.cancel()
            try:
                await self._runner
            except asyncio.CancelledError:
                pass
        await self._cancel_children()
        self._fail_queued()

    # -- sending ---------------------------------------------------------------------------
    def tell(self, message: object) -> None:
        """Enqueue ``message``; never blocks."""
        if self._stopping:
            raise ActorStopped(self.name)
        self._mailbox.put_nowait(message)

    async def ask(self, body: Request[R], *, timeout: float) -> R:
        """Enqueue ``body`` and wait for the handler's answer, at most ``timeout`` seconds.

        Raises ``AskTimeout`` (the message is dropped if not handled yet) or
        ``ActorStopped``; the handler's own exception is raised here as it is.
        """
        if self._stopping:
            raise ActorStopped(self.name)
        message: Ask[R] = Ask(body)
        self._mailbox.put_nowait(message)
        try:
            async with asyncio.timeout(timeout):
                return await message.reply
        except TimeoutError:
            raise AskTimeout(self.name, type(body).__name__, timeout) from None

    def post_ask(self, body: Request[R]) -> asyncio.Future[R]:
        """Enqueue ``body`` as an ask now and return the future of its answer (for a
        sender that must keep the order of what it enqueues and awaits the answer apart)."""
        if self._stopping:
            raise ActorStopped(self.name)
        message: Ask[R] = Ask(body)
        self._mailbox.put_nowait(message)
        return message.reply

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """A child task (cancelled when the actor stops); its failure is logged."""
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        self._children.add(task)
        task.add_done_callback(self._child_done)
        return task

    def later(self, seconds: float, message: object) -> asyncio.TimerHandle:
        """Tell this actor ``message`` in ``seconds`` (dropped once it stops); cancel the
        handle to call it off. A timer in the loop's heap, cancelled when the actor stops."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._timers = [t for t in self._timers if t.when() > now and not t.cancelled()]
        timer = loop.call_later(seconds, self._tell_later, message)
        self._timers.append(timer)
        return timer

    def _tell_later(self, message: object) -> None:
        if not self._stopping:
            self._mailbox.put_nowait(message)

    # -- the mailbox -------------------------------------------------------------------------
    async def receive(self, message: object) -> object:
        raise NotImplementedError

    async def _run(self) -> None:
        try:
            while True:
                message = await self._mailbox.get()
                if message is _STOP:
                    break
                await self._handle(message)
                if self._killed:
                    break
        finally:
            await self._cancel_children()
            self._fail_queued()

    async def _handle(self, message: object) -> None:
        if isinstance(message, Ask):
            if message.reply.done():  # the asker gave up
                return
            try:
                answer = await self.receive(message.body)
            except asyncio.CancelledError:  # killed while handling it: the asker is told so
                if not message.reply.done():
                    message.reply.set_exception(ActorStopped(self.name))
                raise
            except Exception as exc:
                if not message.reply.done():
                    message.reply.set_exception(exc)
                return
            if not message.reply.done():
                message.reply.set_result(answer)
            return
        try:
            await self.receive(message)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("actor %s failed on %s", self.name, type(message).__name__)

    def _child_done(self, task: asyncio.Task[Any]) -> None:
        self._children.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("task %s failed", task.get_name(), exc_info=task.exception())

    async def _cancel_children(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        children = [t for t in self._children if not t.done()]
        for task in children:
            task.cancel()
        if children:
            await asyncio.gather(*children, return_exceptions=True)

    def _fail_queued(self) -> None:
        while not self._mailbox.empty():
            message = self._mailbox.get_nowait()
            if isinstance(message, Ask) and not message.reply.done():
                message.reply.set_exception(ActorStopped(self.name))
