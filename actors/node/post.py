"""The node's post office: the mail between its conversation and decision actors over NATS.

With the local shortcut on (``ACTLINE_LOCAL_SHORTCUT``, the default) a conversation and the
decision of its turn pass mailbox messages as values (``actline.actors.services.shared``
``LocalRefs``). With it off, ``PostOffice`` hands out references that send every one of them
as an ``actor.mail`` on ``<prefix>.actor.<node>.<conversation|turn>.<id>`` (the same named
messages of ``actline.actors.turn.mailbox``, encoded by ``MailCodec``), and delivers what
arrives on ``<prefix>.actor.<node>.>`` to the local actor: so a tap on the bus sees every
exchange of a round, and nothing of a round is hidden in a process.

Order: what one reference sends is published in the order it was sent (one outbox and one
sender task per office; an ask is published from the outbox too, its answer awaited apart),
and the office delivers in arrival order (one handler at a time; an ask is put in the
actor's mailbox at once and answered by a task of its own, so a slow answer holds nothing
up). A tell to an actor that has stopped is dropped (logged); an ask gets the error the
actor raised, rebuilt from ``actline.actors.errors`` when it is one of them (a lost
conversation stays ``ConversationLost``), else ``MailError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import weakref
from collections import deque
from typing import Any, TypeVar

from actline.actors import errors
from actline.actors.base import Actor, Request
from actline.actors.configuration import turn_settings
from actline.actors.turn import events, mailbox
from actline.actors.turn import watchdog as watch
from actline.actors.turn.state import record
from actline.bus import Bus, BusError, Envelope, Subscription
from actline.messages import (
    ActorAnswer,
    ActorKind,
    ActorMail,
    DecodeError,
    EncodeError,
    ErrorReply,
    Message,
)
from actline.timeline.rendering import announce
from actline.tools.react import base as react_base

from .mail import MailCodec

log = logging.getLogger(__name__)

R = TypeVar("R")

CODEC = MailCodec([mailbox, events, record, turn_settings, watch, announce, react_base])
"""Every type a mailbox message of a turn holds."""
ANSWER_HORIZON_S = 600.0
"""The longest an asked actor's answer is awaited here (its asker gave up long before)."""


class PostOffice:
    """Addresses this node's conversation and decision actors over NATS (``Refs``)."""

    def __init__(self, bus: Bus, node_id: str) -> None:
        self.bus = bus
        self.node_id = node_id
        self._actors: dict[ActorKind, weakref.WeakValueDictionary[str, Actor]] = {
            "conversation": weakref.WeakValueDictionary(),
            "turn": weakref.WeakValueDictionary(),
        }
        self._outbox: deque[tuple[str, ActorMail, str | None]] = deque()
        self._wake = asyncio.Event()
        self._answers: dict[str, asyncio.Future[Message]] = {}
        self._numbers = itertools.count(1)
        self._inbox = ""
        self._tasks: set[asyncio.Task[None]] = set()
        self._subs: list[Subscription] = []
        self.sent = 0
        self.delivered = 0
        self.dropped = 0
        """Mail for an actor that was not here (stopped, or never was)."""

    # -- Refs ----------------------------------------------------------------------------------
    def conversation(self, actor: Actor, conversation_id: str) -> MailRef:
        self._actors["conversation"][conversation_id] = actor
        return MailRef(self, "conversation", conversation_id, actor.name)

    def turn(self, actor: Actor, turn_id: str) -> MailRef:
        self._actors["turn"][turn_id] = actor
        return MailRef(self, "turn", turn_id, actor.name)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        subjects = self.bus.subjects
        self._inbox = self.bus.new_inbox()
        self._subs.append(
            await self.bus.subscribe(subjects.actor_mail_all(self.node_id), self._on_mail)
        )
        self._subs.append(await self.bus.subscribe(f"{self._inbox}.*", self._on_answer))
        self._spawn(self._send_forever())

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(BusError):
                await sub.unsubscribe()
        self._subs.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for future in self._answers.values():
            if not future.done():
                future.set_exception(errors.ActorStopped(f"the post office of {self.node_id}"))
        self._answers.clear()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- sending -------------------------------------------------------------------------------
    def mail(self, actor: ActorKind, target: str, message: object, *, ask: bool) -> ActorMail:
        return ActorMail(
            node=self.node_id,
            actor=actor,
            target=target,
            name=type(message).__name__,
            body=CODEC.body(message),
            ask=ask,
        )

    def post(self, subject: str, mail: ActorMail) -> None:
        """Queue a told mail (sent in order by the office's sender)."""
        self._outbox.append((subject, mail, None))
        self._wake.set()

    def post_ask(self, subject: str, mail: ActorMail) -> asyncio.Future[Message]:
        """Queue an asked mail; the future gets its answer (``actor.answer`` or
        ``error.reply``)."""
        reply = f"{self._inbox}.{next(self._numbers)}"
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._answers[reply] = future
        self._outbox.append((subject, mail, reply))
        self._wake.set()
        return future

    def forget(self, future: asyncio.Future[Message]) -> None:
        for reply, waiting in list(self._answers.items()):
            if waiting is future:
                del self._answers[reply]

    async def _send_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                subject, mail, reply = self._outbox.popleft()
                try:
                    await self.bus.publish(subject, mail, reply=reply)
                    self.sent += 1
                except (BusError, EncodeError) as exc:
                    log.warning(
                        "%s for %s %s not sent: %s", mail.name, mail.actor, mail.target, exc
                    )
                    waiting = self._answers.pop(reply, None) if reply else None
                    if waiting is not None and not waiting.done():
                        waiting.set_exception(exc)

    async def _on_answer(self, msg: Message, env: Envelope) -> None:
        future = self._answers.pop(env.subject, None)
        if future is not None and not future.done():
            future.set_result(msg)

    # -- delivering ----------------------------------------------------------------------------
    async def _on_mail(self, msg: Message, env: Envelope) -> Message | None:
        if not isinstance(msg, ActorMail):
            return ErrorReply(
                code="unexpected_message", message=f"expected actor.mail, got {msg.kind}"
            )
        actor = self._actors[msg.actor].get(msg.target)
        try:
            message = CODEC.message(msg.body)
        except DecodeError as exc:
            log.warning("%s for %s %s could not be read: %s", msg.name, msg.actor, msg.target, exc)
            return ErrorReply(code="decode_error", message=f"{msg.name}: {exc.reason}")
        if actor is None or not actor.accepting:
            self.dropped += 1
            log.debug("%s for %s %s: not here any more", msg.name, msg.actor, msg.target)
            stopped = errors.ActorStopped(f"{msg.actor} {msg.target}")
            return failure(stopped) if msg.ask else None
        self.delivered += 1
        if not msg.ask:
            actor.tell(message)
            return None
        if not isinstance(message, Request):
            return ErrorReply(code="not_a_request", message=f"{msg.name} is told, not asked")
        self._spawn(self._answer(actor.post_ask(message), env, msg.name))
        return None

    async def _answer(self, future: asyncio.Future[Any], env: Envelope, name: str) -> None:
        try:
            async with asyncio.timeout(ANSWER_HORIZON_S):
                answer = await future
        except Exception as exc:
            reply: Message = failure(exc)
        else:
            try:
                reply = ActorAnswer(name=name, body=CODEC.body(answer))
            except EncodeError as exc:
                reply = failure(exc)
        with contextlib.suppress(BusError):
            await self.bus.reply(env, reply)


class MailRef:
    """A reference to one actor of this node that sends over NATS (``Ref``)."""

    __slots__ = ("_actor", "_name", "_office", "_subject", "_target")

    def __init__(self, office: PostOffice, actor: ActorKind, target: str, name: str) -> None:
        self._office = office
        self._actor: ActorKind = actor
        self._target = target
        self._name = name
        self._subject = office.bus.subjects.actor_mail(office.node_id, actor, target)

    @property
    def name(self) -> str:
        return self._name

    def tell(self, message: object) -> None:
        self._office.post(
            self._subject, self._office.mail(self._actor, self._target, message, ask=False)
        )

    async def ask(self, body: Request[R], *, timeout: float) -> R:
        office = self._office
        future = office.post_ask(
            self._subject, office.mail(self._actor, self._target, body, ask=True)
        )
        try:
            async with asyncio.timeout(timeout):
                answer = await future
        except TimeoutError:
            office.forget(future)
            raise errors.AskTimeout(self._name, type(body).__name__, timeout) from None
        if isinstance(answer, ErrorReply):
            raise rebuilt(answer)
        if not isinstance(answer, ActorAnswer):
            raise MailError(f"{type(body).__name__}: the answer was a {answer.kind}")
        value: R = CODEC.message(answer.body)  # type: ignore[assignment]
        return value


class MailError(errors.ActorError):
    """An asked actor failed with an error that is not one of ``actline.actors.errors``
    (its type and text kept in the message)."""


def failure(exc: BaseException) -> ErrorReply:
    """The ``error.reply`` of an ask whose actor raised ``exc``."""
    detail: dict[str, Any] = {"error": type(exc).__name__}
    if isinstance(exc, errors.ActorError) and type(exc).__module__ == errors.__name__:
        with contextlib.suppress(TypeError, ValueError):
            args = exc.__reduce__()[1]
            detail["args"] = [
                a for a in args if isinstance(a, str | int | float | bool) or a is None
            ]
    return ErrorReply(code="actor_error", message=f"{type(exc).__name__}: {exc}", detail=detail)


def rebuilt(reply: ErrorReply) -> Exception:
    """The error an asked actor raised, as this process can raise it."""
    name = str(reply.detail.get("error", ""))
    cls = getattr(errors, name, None)
    args = reply.detail.get("args")
    if isinstance(cls, type) and issubclass(cls, errors.ActorError) and isinstance(args, list):
        with contextlib.suppress(TypeError, ValueError):
            return cls(*args)
    return MailError(reply.message)
