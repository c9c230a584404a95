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

The connection reconnects forever after the server goes away (buffering
publishes meanwhile) and re-subscribes everything when it comes back.

Credentials (issue 19): ``connect(creds=FILE)``, else ``ACTLINE_NATS_CREDS``, else the
admin credentials of an ``EmbeddedNats`` this process started at that URL (the process
that started a server holds its keys). With credentials the bus knows its ``identity``
and refuses, with ``PermissionDenied``, a publish, request or subscription its role may
not make: the server would drop it silently (it only tells the connection's error
callback, counted here as ``counters["permission_violations"]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from actline.messages import (
    DeadLetter,
    DecodeError,
    EncodeError,
    ErrorReply,
    Message,
    Subjects,
    decode,
    diag,
    encode,
    subjects,
)

from .auth import Identity, read_identity
from .embedded import running_authority
from .errors import (
    AuthRefused,
    ConnectFailed,
    JetStreamError,
    JetStreamUnavailable,
    NoResponders,
    NoStream,
    NotConnected,
    PermissionDenied,
    RemoteError,
    RequestTimeout,
)
from .jetstream import JetStreamAccount, account, in_cluster, translate

log = logging.getLogger(__name__)

_MSG_ID_IN_PROCESS = 10158
"""JetStream's err_code for "duplicate message id is in process": a publish with the same
msg id reached the stream leader and waits for its replicas (a failover in progress)."""

DEFAULT_URL = "nats://127.0.0.1:4222"
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


async def _abandon(nc: Client) -> None:
    """Close a client whose first connect failed (nats-py's close can hang after a failed
    TLS handshake: bounded)."""
    with contextlib.suppress(TimeoutError, nats.errors.Error, OSError):
        await asyncio.wait_for(nc.close(), 1.0)


def _tls_context(ca: str | None) -> ssl.SSLContext:
    """TLS that verifies the server with ``ca`` (``ACTLINE_NATS_CA``), else the system's CAs."""
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConnectFailed(f"ACTLINE_NATS_CA={ca}", f"cannot load the CA: {exc}") from None


def _embedded_creds(servers: list[str]) -> str | None:
    """Admin credentials of an embedded server this process runs at one of ``servers``."""
    for url in servers:
        authority = running_authority(url)
        if authority is not None:
            return str(authority.creds_path("admin"))
    return None


def server_urls(target: str) -> list[str]:
    """The servers of a URL list (``nats://h1:4222,nats://h2:4222``); ``ConnectFailed``
    names an entry that is empty or has no port."""
    servers = [part.strip() for part in target.split(",")]
    for part in servers:
        try:
            port = urlsplit(part if "://" in part else f"nats://{part}").port
        except ValueError:
            port = None
        if not part or port is None:
            raise ConnectFailed(
                target,
                f"{part!r} is not a server URL: give scheme://host:port, several "
                "comma-separated (NATS_URL or --nats)",
            )
    return servers


def _label(msg: Message) -> str:
    """Ids of a message for logs (never its body)."""
    parts: list[str] = [msg.kind]
    for name in ("conversation_id", "turn_id", "task_id", "call_id"):
        value = getattr(msg, name, None)
        if value:
            parts.append(f"{name}={value}")
    return " ".join(parts)


class Bus:
    """A NATS connection that speaks actline messages. Create with ``await Bus.connect()``."""

    def __init__(self, nc: Client, subject_names: Subjects, url: str) -> None:
        self._nc = nc
        self.subjects = subject_names
        self.url = url
        self.counters: Counter[str] = Counter()
        self.authenticated = False
        """True when connected with credentials: the server enforces roles (issue 19)."""
        self.identity: Identity | None = None
        """Who the credentials say this connection is (None without credentials)."""
        self._verdicts: dict[tuple[str, str], bool] = {}
        self.js_replicas: int | None = None
        """The replica count of the streams and buckets made through this connection (None:
        follow the cluster, ``actline.bus.jetstream.replicas_for``); a node sets
        ACTLINE_JS_REPLICAS."""
        self.violations: list[str] = []
        """The server's last permission-violation errors on this connection (at most 20)."""
        self._connected = asyncio.Event()
        self._reconnected = asyncio.Condition()
        self._reconnect_hooks: list[Callable[[], None]] = []
        self._disconnect_hooks: list[Callable[[], None]] = []
        if nc.is_connected:
            self._connected.set()

    # -- lifecycle ---------------------------------------------------------
    @classmethod
    async def connect(
        cls,
        url: str | None = None,
        *,
        name: str = "actline",
        subject_names: Subjects | None = None,
        connect_timeout: float = 2.0,
        connect_attempts: int = 3,
        reconnect_wait: float = 0.25,
        creds: str | os.PathLike[str] | None = None,
    ) -> Bus:
        """Connect to ``url`` (default ``NATS_URL``, else ``nats://127.0.0.1:4222``).

        ``url`` may list the servers of a cluster, comma-separated: the client connects to
        one of them (in random order, spreading clients over the cluster) and, once
        connected, fails over to the others (and to those the servers announce) when its
        server goes away. TLS verifies every server under the first URL's host name
        (``python -m actline.bus.certs`` puts every host in the one server certificate).

        The first connection is tried ``connect_attempts`` times, then
        ``ConnectFailed`` says what to do (``AuthRefused`` when the server refused the
        credentials or wants some); once connected, the client reconnects forever.
        ``creds``: see the module docstring.
        """
        target = url or os.environ.get("NATS_URL") or DEFAULT_URL
        servers = server_urls(target)
        nc = Client()
        bus = cls(nc, subject_names or subjects.current(), target)
        path = creds or os.environ.get("ACTLINE_NATS_CREDS") or _embedded_creds(servers)
        auth: dict[str, Any] = {}
        ca = os.environ.get("ACTLINE_NATS_CA")
        if ca or target.startswith("tls://"):
            auth["tls"] = _tls_context(ca)
            auth["tls_hostname"] = urlsplit(target.split(",")[0]).hostname
        if path:
            bus.identity = read_identity(path)
            bus.authenticated = True
            auth |= {"user_credentials": str(path), "inbox_prefix": bus.identity.inbox_prefix}
        for attempt in range(max(1, connect_attempts)):
            try:
                # Tried without nats-py's own retries: with them, a TLS handshake that fails
                # (an unknown CA) retries forever instead of raising.
                await nc.connect(
                    **auth,
                    servers=servers,
                    name=name,
                    connect_timeout=int(max(1, connect_timeout)),
                    reconnect_time_wait=reconnect_wait,  # type: ignore[arg-type]
                    allow_reconnect=False,
                    # each server tried twice per attempt (nats-py's default, 60 tries with a
                    # pause each, took 45 s to say that nothing listens)
                    max_reconnect_attempts=1,
                    error_cb=bus._on_error,
                    disconnected_cb=bus._on_disconnect,
                    reconnected_cb=bus._on_reconnect,
                )
                break
            except nats.errors.AuthorizationError:
                await _abandon(nc)
                raise AuthRefused(
                    target, f"authorization violation with {path or 'no credentials'}"
                ) from None
            except ssl.SSLError as exc:
                await _abandon(nc)
                raise ConnectFailed(
                    target,
                    f"TLS: {exc.reason or exc}; set ACTLINE_NATS_CA to the CA file that signed "
                    "the server's certificate",
                ) from None
            except (OSError, nats.errors.Error, TimeoutError) as exc:
                await _abandon(nc)
                if "authorization violation" in str(exc).lower():
                    raise AuthRefused(
                        target, f"authorization violation with {path or 'no credentials'}"
                    ) from None
                if attempt + 1 >= max(1, connect_attempts):
                    raise ConnectFailed(target, f"{type(exc).__name__}: {exc}") from None
                await asyncio.sleep(reconnect_wait)  # a server starting up: try again shortly
                nc = bus._nc = Client()
        # Connected: from now on never give up reconnecting (nats-py reads these options live).
        nc.options["allow_reconnect"] = True
        nc.options["max_reconnect_attempts"] = -1
        bus._connected.set()
        return bus

    async def _on_error(self, exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            self.counters["permission_violations"] += 1
            self.violations = [*self.violations[-19:], str(exc)]
            who = self.identity.label if self.identity else "this connection"
            log.warning("the server refused %s: %s", who, exc)
            return
        level = logging.DEBUG if isinstance(exc, ConnectionRefusedError) else logging.WARNING
        log.log(level, "nats error on %s: %s: %s", self.url, type(exc).__name__, exc)

    async def _on_disconnect(self) -> None:
        log.info("nats disconnected from %s; reconnecting", self.url)
        self._connected.clear()
        _run_hooks(self._disconnect_hooks, "disconnect")

    async def _on_reconnect(self) -> None:
        log.info("nats reconnected to %s", self.server)
        self.counters["reconnects"] += 1
        self._connected.set()
        async with self._reconnected:
            self._reconnected.notify_all()
        _run_hooks(self._reconnect_hooks, "reconnect")

    def on_reconnect(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook()`` after each reconnect (subscriptions are back by then); returns
        the function that removes it. A hook must not block: it starts a task if it
        has work to do (what was published while disconnected, say)."""
        return _add_hook(self._reconnect_hooks, hook)

    def on_disconnect(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook()`` when the connection drops (the client is reconnecting by then);
        returns the function that removes it. A hook must not block."""
        return _add_hook(self._disconnect_hooks, hook)

    async def close(self) -> None:
        """Drain subscriptions and close the connection."""
        if self._nc.is_closed:
            return
        try:
            await self._nc.drain()
        except (nats.errors.Error, TimeoutError):
            await self._nc.close()

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def nc(self) -> Client:
        """The underlying nats-py client, for raw bytes (benchmarks, tests of bad input).

        JetStream goes through ``actline.bus.jetstream`` and ``publish_stored`` instead.
        """
        return self._nc

    @property
    def server(self) -> str:
        """The server this connection is on now (one of a cluster's), "" while it is not."""
        now = self._nc.connected_url
        return f"{now.scheme}://{now.netloc}" if now is not None else ""

    @property
    def is_connected(self) -> bool:
        """True while connected (False while reconnecting or after close)."""
        return bool(self._nc.is_connected)

    @property
    def max_payload(self) -> int:
        """The server's ``max_payload``."""
        return int(self._nc.max_payload or 1024 * 1024)

    async def wait_connected(self, timeout: float = 10.0, *, reconnects: int = 0) -> None:
        """Return once connected and at least ``reconnects`` reconnects have happened.

        Raises ``RequestTimeout`` when that does not happen within ``timeout``.
        """
        try:
            async with asyncio.timeout(timeout):
                async with self._reconnected:
                    await self._reconnected.wait_for(
                        lambda: self.counters["reconnects"] >= reconnects
                    )
                await self._connected.wait()
        except TimeoutError:
            raise RequestTimeout(self.url, timeout) from None

    async def jetstream_account(self, *, timeout: float = 2.0) -> JetStreamAccount:
        """What this account holds in JetStream; ``JetStreamUnavailable`` when it has none."""
        return await account(self, timeout=timeout)

    async def flush(self, timeout: float = 2.0) -> None:
        """Wait until the server has processed everything sent so far.

        nats-py 2.16 writes the flush PING straight to the socket, ahead of
        commands still in its pending buffer (a SUB, say), so the PONG alone
        proves nothing; the pending buffer is pushed out first.
        """
        push = getattr(self._nc, "_flush_pending", None)
        if push is not None and self._nc.is_connected:
            await push(force_flush=True)
        await self._nc.flush(timeout=int(max(1, timeout)))

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
        while True:
            try:
                return await self.publish_stored_bytes(
                    subject, data, timeout=timeout, msg_id=msg_id, headers=headers
                )
            except (RequestTimeout, JetStreamError) as exc:
                failing_over = isinstance(
                    exc, NoStream | RequestTimeout | JetStreamUnavailable
                ) or (isinstance(exc, JetStreamError) and exc.code == _MSG_ID_IN_PROCESS)
                retry = failing_over and failover_s > 0 and msg_id is not None and in_cluster(self)
                if not retry or time.monotonic() + pause >= deadline:
                    raise
                log.warning("publish to %s: %s; trying again (NATS failing over?)", subject, exc)
                await asyncio.sleep(pause)  # backoff while the cluster elects a leader
                pause = min(pause * 2, 2.0)

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

    async def _respond(self, reply: str, answer: Message) -> None:
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


def _add_hook(hooks: list[Callable[[], None]], hook: Callable[[], None]) -> Callable[[], None]:
    hooks.append(hook)

    def remove() -> None:
        with contextlib.suppress(ValueError):
            hooks.remove(hook)

    return remove


def _run_hooks(hooks: list[Callable[[], None]], what: str) -> None:
    for hook in list(hooks):
        try:
            hook()
        except Exception:
            log.exception("a %s hook failed", what)
