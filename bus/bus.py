"""The typed NATS bus: publish, request/reply and subscriptions of decoded messages.

Two verbs, never blurred: ``publish`` (tell: fire and forget) and ``request``
(ask: a decoded reply, or ``RequestTimeout`` / ``NoResponders`` / ``RemoteError``).
``publish_stored`` is a tell confirmed by JetStream: it returns once a stream
has stored the message (or raises ``NoStream`` when none captures the subject).

A subscription handler is ``async def handler(msg, envelope) -> Message | None``.
Handlers of one subscription run one message at a time, in arrival order. When
the incoming message was a request, the handler's return value is the reply.

Bad input never reaches a handler: a payload that does not decode is
republished to ``<prefix>.deadletter`` as a ``bus.deadletter`` message (subject,
reason, raw bytes) and, if it was a request, answered with an ``ErrorReply``
(``decode_error``); the subscription keeps serving. A handler that raises is
logged with ids and, for a request, answered with ``ErrorReply``
(``handler_error``). ``CancelledError`` always propagates.

The connection (URLs, TLS, credentials, reconnecting) is ``actline.bus.connection``'s.
With credentials the bus refuses, with ``PermissionDenied``, a publish, request or
subscription its role may not make: the server would drop it silently (it only tells the
connection's error callback, counted as ``counters["permission_violations"]``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

import nats
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from actline.messages import (
    DeadLetter,
    DecodeError,
    EncodeError,
    ErrorReply,
    Message,
    SubjectError,
    decode,
    diag,
    encode,
    subjects,
)

from .connection import Connection
from .errors import (
    JetStreamError,
    JetStreamUnavailable,
    NoResponders,
    NoStream,
    NotConnected,
    PermissionDenied,
    RemoteError,
    RequestTimeout,
)
from .jetstream import in_cluster, translate

log = logging.getLogger(__name__)

_MSG_ID_IN_PROCESS = 10158
"""JetStream's err_code for "duplicate message id is in process": a publish with the same
msg id reached the stream leader and waits for its replicas (a failover in progress)."""

_DEADLETTER_HEADROOM = 4096
_VERDICTS = 4096
"""Permission verdicts one Bus keeps (by action and subject)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """Routing facts of a received message, kept apart from its payload."""

    subject: str
    reply: str | None
    headers: Mapping[str, str] = field(default_factory=dict)
    size: int = 0


Handler = Callable[[Message, Envelope], Awaitable[Message | None]]


class Subscription:
    """A live subscription; ``unsubscribe()`` stops it at once, ``drain()`` after pending ones."""

    def __init__(
        self,
        sub: NatsSubscription,
        subject: str,
        queue: str | None,
        running: set[asyncio.Task[None]] | None = None,
    ) -> None:
        self._sub = sub
        self.subject = subject
        self.queue = queue
        self._running = running if running is not None else set()

    @property
    def in_flight(self) -> int:
        """Handlers running now (a concurrent subscription may have several)."""
        return len(self._running)

    async def unsubscribe(self) -> None:
        """Stop receiving; queued messages are dropped and running handlers cancelled."""
        await self._sub.unsubscribe()
        tasks = list(self._running)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def drain(self) -> None:
        """Stop receiving after the handlers have processed what is already queued."""
        await self._sub.drain()  # type: ignore[no-untyped-call]
        tasks = list(self._running)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _label(msg: Message) -> str:
    """Ids of a message for logs (never its body)."""
    parts: list[str] = [msg.kind]
    for name in ("conversation_id", "turn_id", "task_id", "call_id"):
        value = getattr(msg, name, None)
        if value:
            parts.append(f"{name}={value}")
    return " ".join(parts)


class Bus(Connection):
    """A NATS connection that speaks actline messages. Create with ``await Bus.connect()``."""

    # -- tell / ask ----------------------------------------------------------
    def _may(self, action: str, subject: str) -> None:
        """``PermissionDenied`` when this connection's role may not use ``subject``.

        On the publish path: one dict lookup per subject seen lately (the verdicts of at most
        ``_VERDICTS`` subjects are kept; the patterns are matched again after that)."""
        identity = self.identity
        if identity is None:
            return
        key = (action, subject)
        allowed = self._verdicts.get(key)
        if allowed is None:
            granted = identity.permissions
            allowed = (
                granted.may_subscribe(subject)
                if action.startswith("subscribe")
                else granted.may_publish(subject)
            )
            if len(self._verdicts) >= _VERDICTS:
                self._verdicts.clear()
            self._verdicts[key] = allowed
        if not allowed:
            raise PermissionDenied(action, subject, identity.label)

    def _encode(self, msg: Message) -> bytes:
        return encode(msg, max_size=self.max_payload)

    async def publish(
        self,
        subject: str,
        msg: Message,
        *,
        reply: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Send ``msg`` on ``subject`` without waiting for anything (tell)."""
        self._may("publish to", subject)
        data = self._encode(msg)
        if self._nc.is_closed:
            raise NotConnected("publish after close()")
        await self._nc.publish(subject, data, reply=reply or "", headers=headers)
        diag.debug(diag.BUS, op="publish", subject=subject, kind=msg.kind, bytes=len(data))

    async def publish_stored(
        self,
        subject: str,
        msg: Message,
        *,
        timeout: float = 2.0,
        msg_id: str | None = None,
        headers: dict[str, str] | None = None,
        failover_s: float = 0.0,
    ) -> int:
        """Publish ``msg`` to the stream that captures ``subject`` and wait until it is
        stored; returns its stream sequence.

        Raises ``NoStream`` when no stream captures the subject, ``RequestTimeout``,
        ``NotConnected`` or another ``JetStreamError``. With ``msg_id``, a repeat within
        the stream's duplicate window is stored once (the first sequence is returned).
        ``headers`` are stored with the message. ``failover_s`` (with ``msg_id``): on a
        NATS cluster, a publish that finds no stream leader (``NoStream``: the stream's
        leader is being elected after a server died) or no answer is tried again for up
        to that long, logged; the msg id keeps a retried publish that was stored once. So is
        one that finds the stream leaderless (``JetStreamUnavailable``) or the same msg id
        still being stored by an earlier try (err_code 10158).
        """
        data = self._encode(msg)
        deadline = time.monotonic() + failover_s
        pause = 0.25
        where = f"publish to {subject}"
        while True:
            try:
                seq = await self.publish_stored_bytes(
                    subject, data, timeout=timeout, msg_id=msg_id, headers=headers
                )
            except (RequestTimeout, JetStreamError) as exc:
                failing_over = isinstance(
                    exc, NoStream | RequestTimeout | JetStreamUnavailable
                ) or (isinstance(exc, JetStreamError) and exc.code == _MSG_ID_IN_PROCESS)
                retry = failing_over and failover_s > 0 and msg_id is not None and in_cluster(self)
                if not retry or time.monotonic() + pause >= deadline:
                    raise
                if not self.conditions.failed(where, exc):  # else logged once per outage
                    log.warning("%s: %s; trying again (NATS failing over?)", where, exc)
                await asyncio.sleep(pause)  # backoff while the cluster elects a leader
                pause = min(pause * 2, 2.0)
                continue
            self.conditions.succeeded(where)
            return seq

    async def publish_stored_bytes(
        self,
        subject: str,
        data: bytes,
        *,
        timeout: float = 2.0,
        msg_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> int:
        """``publish_stored`` of bytes already encoded (or deliberately malformed, in tests)."""
        self._may("publish to", subject)
        if self._nc.is_closed:
            raise NotConnected("publish after close()")
        sent = dict(headers or {})
        if msg_id:
            sent["Nats-Msg-Id"] = msg_id
        try:
            ack = await self._nc.jetstream(timeout=timeout).publish(
                subject, data, timeout=timeout, headers=sent or None
            )
        except nats.js.errors.NoStreamResponseError:
            raise NoStream(subject) from None
        except nats.errors.Error as exc:
            raise translate(exc, f"publish to {subject}", target=subject, timeout=timeout) from None
        return int(ack.seq)

    async def request(
        self,
        subject: str,
        msg: Message,
        *,
        timeout: float = 5.0,
        headers: dict[str, str] | None = None,
        raise_remote: bool = True,
    ) -> Message:
        """Send ``msg`` and return the decoded reply (ask).

        Raises ``RequestTimeout``, ``NoResponders``, ``RemoteError`` (the reply
        was an ``ErrorReply``, unless ``raise_remote=False``) or ``DecodeError``.
        """
        self._may("publish to", subject)
        data = self._encode(msg)
        if self._nc.is_closed:
            raise NotConnected("request after close()")
        started = time.monotonic()
        try:
            resp = await self._nc.request(subject, data, timeout=timeout, headers=headers)
        except nats.errors.NoRespondersError:
            raise NoResponders(subject) from None
        except (nats.errors.TimeoutError, TimeoutError):
            raise RequestTimeout(subject, timeout) from None
        reply = decode(resp.data, max_size=self.max_payload)
        diag.debug(
            diag.BUS,
            op="request",
            subject=subject,
            kind=msg.kind,
            bytes=len(data),
            reply=reply.kind,
            reply_bytes=len(resp.data),
            ms=diag.ms_since(started),
        )
        if raise_remote and isinstance(reply, ErrorReply):
            raise RemoteError(subject, reply.code, reply.message)
        return reply

    # -- subscriptions -------------------------------------------------------
    async def subscribe(
        self,
        subject: str,
        handler: Handler,
        *,
        queue: str | None = None,
        concurrency: int = 1,
        confirm: bool = True,
    ) -> Subscription:
        """Deliver decoded messages on ``subject`` to ``handler`` (queue group if given).

        With ``concurrency`` 1 (the default) the handler sees one message at a time,
        in arrival order. A pool (model calls, tool calls) passes more: up to that
        many handlers run at once, each in its own task, and further messages wait
        in the client until one finishes. ``unsubscribe`` cancels the ones running.

        Returns once the server has registered the interest, so a request sent
        from any connection after this returns finds the subscriber. With
        ``confirm=False`` it returns at once: enough when what the subscriber waits for
        is caused by a message sent afterwards on this same connection (the server
        handles one connection's commands in order), and one round trip cheaper.
        """
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self._may("subscribe to", subject)
        running: set[asyncio.Task[None]] = set()
        slots = asyncio.Semaphore(concurrency)

        async def on_msg(raw: Msg) -> None:
            if concurrency == 1:
                await self._dispatch(raw, handler)
                return
            await slots.acquire()
            task = asyncio.create_task(self._dispatch(raw, handler))
            running.add(task)

            def finished(done: asyncio.Task[None]) -> None:
                running.discard(done)
                slots.release()

            task.add_done_callback(finished)

        sub = await self._nc.subscribe(subject, queue=queue or "", cb=on_msg)
        if confirm and self._nc.is_connected:
            await self.flush()
        return Subscription(sub, subject, queue, running)

    async def _dispatch(self, raw: Msg, handler: Handler) -> None:
        size = len(raw.data)
        try:
            msg = decode(raw.data, max_size=self.max_payload)
        except DecodeError as exc:
            await self._dead_letter(raw, exc)
            return
        env = Envelope(raw.subject, raw.reply or None, dict(raw.headers or {}), size)
        try:
            answer = await handler(msg, env)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.counters["handler_error"] += 1
            log.exception("handler failed on %s (%s, %d bytes)", raw.subject, _label(msg), size)
            if raw.reply:
                await self._respond(
                    raw.reply,
                    ErrorReply(
                        code="handler_error",
                        message=f"{type(exc).__name__}: {exc}",
                        subject=raw.subject,
                    ),
                )
            return
        if raw.reply and answer is not None:
            await self._respond(raw.reply, answer)

    def new_inbox(self) -> str:
        """A fresh reply subject under this connection's inbox prefix (one it may subscribe
        to): the sender of a message with a reply names it, and subscribes to it."""
        return str(self._nc.new_inbox())

    async def reply(self, env: Envelope, answer: Message) -> None:
        """Answer a received request later than its handler returned (the handler returned
        None and kept ``env``); nothing when it named no reply subject."""
        if env.reply:
            await self._respond(env.reply, answer)

    async def _respond(self, reply: str, answer: Message) -> None:
        try:
            subjects.reply_inbox(reply)
        except SubjectError as exc:
            self.counters["reply_refused"] += 1
            log.warning("reply %s not sent: %s", _label(answer), exc)
            return
        try:
            data = self._encode(answer)
        except EncodeError as exc:
            log.warning("reply %s cannot be encoded: %s", _label(answer), exc)
            data = self._encode(ErrorReply(code="reply_unencodable", message=str(exc)))
        try:
            await self._nc.publish(reply, data)
        except nats.errors.Error as exc:
            log.warning("reply to %s lost: %s", reply, exc)

    async def _dead_letter(self, raw: Msg, exc: DecodeError) -> None:
        self.counters["dead_letter"] += 1
        raw_bytes = bytes(raw.data)
        log.warning(
            "undecodable payload on %s (%d bytes): %s", raw.subject, len(raw_bytes), exc.reason
        )
        if raw.reply:
            await self._respond(
                raw.reply,
                ErrorReply(
                    code="decode_error",
                    message=f"the request could not be decoded: {exc.reason}",
                    subject=raw.subject,
                ),
            )
        if raw.subject == self.subjects.deadletter:
            return
        limit = self.max_payload - _DEADLETTER_HEADROOM
        letter = DeadLetter(
            subject=raw.subject,
            reason=exc.reason,
            raw=raw_bytes[:limit],
            raw_size=len(raw_bytes),
            truncated=len(raw_bytes) > limit,
        )
        try:
            await self._nc.publish(self.subjects.deadletter, self._encode(letter))
        except nats.errors.Error as err:
            log.error("dead letter from %s lost: %s", raw.subject, err)
