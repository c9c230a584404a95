"""JetStream for actline: a work queue, a KV bucket and an append-only event log.

Only this module, ``actline.bus.inbox`` and ``Bus.publish_stored`` talk to nats-py's JetStream API;
everything else uses these typed wrappers. Names of streams, buckets and
consumers come from ``messages.Subjects``.

- ``WorkQueue``: a WORK_QUEUE stream (one subject or several) with one durable pull
  consumer (explicit ack, unlimited redeliveries). ``pull`` hands out one ``QueueItem`` at a time;
  the item is settled with ``ack``/``nak``/``term`` and kept alive with
  ``in_progress``. An item neither acked nor naked is redelivered after the
  consumer's ack wait.
- ``KvBucket``: one value per key with check-and-set writes (and plain ``put``s).
  Missing, deleted and aged-out keys read as None; ``create`` succeeds over a delete
  marker (and over a key aged out by the bucket TTL, which leaves no marker).
- ``EventLog``: a LIMITS stream, one subject per conversation; ``append`` may
  dedupe by message id (within the server's duplicate window),
  ``next_after`` walks one subject and ``last`` reads its newest message, with
  direct gets.

Replicas: every stream and bucket is made with ``replicas`` (None: ``replicas_for(bus,
bus.js_replicas)``, which follows the cluster: 1 on one server, 3 on three or more, or
``ACTLINE_JS_REPLICAS``); an existing one with fewer is raised to it (logged), and a
replicated one just made or raised is waited for until it has a leader.

Errors: every method raises ``actline.bus.errors`` types only: ``JetStreamError``
subclasses, ``RequestTimeout`` (no answer within the timeout) or
``NotConnected`` (the connection is closed). Cancellation: each call is one
or a few requests; cancelling it propagates ``CancelledError``. A ``pull``
cancelled while waiting may leave a message in the subscription's buffer; the
next ``pull`` returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol, Self, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from .errors import (
    AckFailed,
    AlreadyAcked,
    BusError,
    JetStreamError,
    JetStreamUnavailable,
    KeyExists,
    NoStream,
    NotConnected,
    ReplicasUnavailable,
    RequestTimeout,
    StreamMissing,
    WrongRevision,
)


class Bus(Protocol):
    """What this module needs of ``bus.Bus`` (a protocol: ``actline.bus.bus`` imports this
    module)."""

    @property
    def nc(self) -> Client: ...

    url: str
    js_replicas: int | None


log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0
"""Seconds a JetStream API request may take (nats-py's default)."""
HEAL_CHECK_S = 1.0
"""How often a bucket or stream that seems gone is checked."""
HEAL_CONFIRM_S = 10.0
"""How long the server must say "not found" before a bucket or stream is made again (a
cluster failing over says so for seconds about ones that exist)."""
HEAL_WATCH_S = 120.0
"""How long one watch of a bucket or stream that seems gone lasts."""
SETUP_S = 30.0
"""On a replicated cluster, how long making or binding a stream, bucket or consumer is
tried again when a request gets no answer (a cluster just started or under load may still
be electing its meta leader or the stream's leader)."""

_WRONG_LAST_SEQUENCE = frozenset({10071, 10164})
_STREAM_NOT_FOUND = 10059


def translate(exc: Exception, operation: str, *, target: str, timeout: float) -> BusError:
    """The bus error for a nats-py exception raised by ``operation`` on ``target``."""
    if isinstance(exc, BusError):
        return exc
    if isinstance(exc, nats.errors.TimeoutError | TimeoutError):
        return RequestTimeout(target, timeout)
    if isinstance(
        exc,
        nats.errors.ConnectionClosedError
        | nats.errors.ConnectionDrainingError
        | nats.errors.StaleConnectionError,
    ):
        return NotConnected(f"{operation} on {target}: the connection is closed")
    if isinstance(exc, nats.js.errors.ServiceUnavailableError | nats.errors.NoRespondersError):
        return JetStreamUnavailable(operation)
    if isinstance(exc, nats.js.errors.APIError):
        if exc.err_code == _STREAM_NOT_FOUND:
            return StreamMissing(target)
        return JetStreamError(
            operation, exc.description or type(exc).__name__, int(exc.err_code or exc.code or 0)
        )
    return JetStreamError(operation, f"{type(exc).__name__}: {exc}")


def _context(bus: Bus, timeout: float) -> JetStreamContext:
    return bus.nc.jetstream(timeout=timeout)


# --- replicas ---------------------------------------------------------------------------------

MAX_REPLICAS = 5
"""The most replicas JetStream keeps of a stream."""


def cluster_size(bus: Bus) -> int:
    """How many servers the NATS cluster of ``bus`` has: 1 when its server is not in a
    cluster, else the larger of the servers the cluster announces now (INFO
    ``connect_urls``, the servers up) and the URLs ``bus`` was given (so a member that is
    down still counts when every member's URL was given)."""
    info: dict[str, object] = getattr(bus.nc, "_server_info", None) or {}
    if not info.get("cluster"):
        return 1
    announced = info.get("connect_urls")
    up = len(set(announced)) if isinstance(announced, list) else 1
    given = len({part.strip() for part in bus.url.split(",") if part.strip()})
    return max(up, given, 1)


def in_cluster(bus: Bus) -> bool:
    """Whether the server ``bus`` is connected to is a member of a NATS cluster (however
    many of its members are up now)."""
    info: dict[str, object] = getattr(bus.nc, "_server_info", None) or {}
    return bool(info.get("cluster"))


def replicas_for(bus: Bus, wanted: int | None) -> int:
    """The replica count of what ``bus`` creates: ``wanted`` (``ACTLINE_JS_REPLICAS``) when
    the cluster has that many servers (``ReplicasUnavailable`` naming both when not); None
    follows the cluster: 1 on one or two servers, 3 on three or more."""
    servers = cluster_size(bus)
    if wanted is None:
        return 3 if servers >= 3 else 1
    if isinstance(wanted, bool) or not 1 <= wanted <= MAX_REPLICAS or wanted > servers:
        raise ReplicasUnavailable(wanted, servers)
    return wanted


async def _set_up(step: Callable[[], Awaitable[T]], what: str, replicas: int) -> T:
    """``step()``, tried again for up to ``SETUP_S`` while a replicated cluster does not
    answer (each retry logged); on one replica (one server) a timeout is raised at once.
    Each step is idempotent: it finds what an earlier try made."""
    deadline = time.monotonic() + (SETUP_S if replicas > 1 else 0.0)
    pause = 0.25
    while True:
        try:
            return await step()
        except (
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.js.errors.APIError,
        ) as exc:
            if not _unavailable(exc) or time.monotonic() + pause >= deadline:
                raise
            log.warning(
                "%s: no answer from the JetStream cluster (%s); trying again (it may be "
                "electing a leader or missing servers)",
                what,
                getattr(exc, "description", None) or type(exc).__name__,
            )
            await asyncio.sleep(pause)  # backoff between tries of a setup request
            pause = min(pause * 2, 2.0)


_CLUSTER_UNAVAILABLE = frozenset({10005, 10008, 10009, 10023})
"""JetStream API errors of a cluster short of servers or leaders: no suitable peers,
temporarily unavailable, not the leader, insufficient resources."""


def _unavailable(exc: Exception) -> bool:
    """Whether ``exc`` says the cluster cannot answer now (rather than refusing the request)."""
    if isinstance(exc, nats.js.errors.ServiceUnavailableError):
        return True
    if isinstance(exc, nats.js.errors.APIError):
        return int(exc.err_code or 0) in _CLUSTER_UNAVAILABLE
    return True  # no answer, or no responders


async def _ensure_replicas(js: JetStreamContext, have: StreamConfig, wanted: int) -> None:
    """Raise an existing stream with fewer replicas than ``wanted`` to ``wanted`` (a log
    line); a stream with more keeps them. ``JetStreamError`` when the server refuses."""
    count = int(have.num_replicas or 1)
    if count >= wanted:
        return
    try:
        await js.update_stream(replace(have, num_replicas=wanted))
    except nats.js.errors.APIError as exc:
        raise JetStreamError(
            f"raise the replicas of {have.name} from {count} to {wanted}",
            exc.description or type(exc).__name__,
            int(exc.err_code or exc.code or 0),
        ) from None
    log.info("stream %s now has %d replicas (it had %d)", have.name, wanted, count)
    await _settled(js, str(have.name), wanted)


async def _settled(js: JetStreamContext, name: str, replicas: int, limit: float = 20.0) -> None:
    """Wait (up to ``limit`` seconds) until a replicated stream has a leader and ``replicas
    - 1`` current followers: a stream just made or scaled up answers no publish until it has
    (its leader is elected in a moment; a work queue scaled up with its consumer took ~10 s
    here). A stream of one replica is led at once."""
    if replicas <= 1:
        return
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(nats.errors.Error):
            info = await js.stream_info(name)
            cluster = info.cluster
            peers = [p for p in (cluster.replicas or []) if p.current] if cluster else []
            if cluster is not None and cluster.leader and len(peers) >= replicas - 1:
                return
        await asyncio.sleep(0.05)  # polling the stream's state: the server sends no event
    log.warning("stream %s has not settled on %d replicas within %gs", name, replicas, limit)


async def _ensure_stream(js: JetStreamContext, config: StreamConfig, timeout: float) -> None:
    """Create the stream unless it exists (a concurrent creator wins harmlessly). An existing
    stream keeps its limits but gains the subjects of ``config`` it lacks (made by an older
    version that captured fewer) and the replicas it lacks."""
    name = str(config.name)
    replicas = int(config.num_replicas or 1)

    async def step() -> None:
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            pass
        else:
            await _add_subjects(js, info.config, list(config.subjects or []))
            await _ensure_replicas(js, info.config, replicas)
            return
        try:
            await js.add_stream(config)
            log.info("created stream %s on %s", name, config.subjects)
        except nats.js.errors.APIError as exc:
            try:  # created meanwhile by another node, maybe with other limits
                await js.stream_info(name)
            except nats.js.errors.NotFoundError:
                raise exc from None
        await _settled(js, name, replicas)

    try:
        await _set_up(step, f"create stream {name}", replicas)
    except nats.errors.Error as exc:
        raise translate(exc, "create stream", target=name, timeout=timeout) from None


async def _add_subjects(js: JetStreamContext, have: StreamConfig, wanted: list[str]) -> None:
    missing = [x for x in wanted if x not in (have.subjects or [])]
    if not missing:
        return
    await js.update_stream(replace(have, subjects=[*(have.subjects or []), *missing]))
    have.subjects = [*(have.subjects or []), *missing]
    log.info("stream %s now also captures %s", have.name, ", ".join(missing))


# --- the work queue ---------------------------------------------------------------------------


async def fetch_one(
    psub: JetStreamContext.PullSubscription,
    timeout: float,
    error: Callable[[Exception], BusError],
) -> QueueItem | None:
    """One message of a pull subscription, or None within ``timeout``; ``error`` turns any
    other nats-py failure into the caller's ``BusError``."""
    try:
        # One at a time: a larger batch sometimes waits for the server's request
        # timeout to fill although a message is already delivered.
        batch = await psub.fetch(batch=1, timeout=timeout)
    except (nats.errors.TimeoutError, TimeoutError):
        return None
    except nats.errors.Error as exc:
        raise error(exc) from None
    for msg in batch:
        return QueueItem.of(msg)
    return None


@dataclass(frozen=True, slots=True)
class QueueItem:
    """One message of a work queue, pulled: settle it with ``ack``, ``nak`` or ``term``.

    ``deliveries`` is 1 on the first delivery and counts redeliveries after it;
    ``stream_seq`` is the message's sequence in the stream.
    """

    data: bytes
    subject: str
    deliveries: int
    stream_seq: int
    _msg: Msg = field(repr=False, compare=False)
    headers: dict[str, str] = field(default_factory=dict, compare=False)
    """The message's NATS headers (the JetStream ones included)."""
    stored_at: float = 0.0
    """When the stream stored the message (epoch seconds)."""

    @classmethod
    def of(cls, msg: Msg) -> QueueItem:
        """The item of a message pulled from a consumer."""
        meta = msg.metadata
        return cls(
            bytes(msg.data),
            msg.subject,
            int(meta.num_delivered),
            int(meta.sequence.stream),
            msg,
            dict(msg.headers or {}),
            meta.timestamp.timestamp() if meta.timestamp is not None else 0.0,
        )

    def rearmed(self) -> QueueItem:
        """The same delivery, usable again after a delayed ``nak`` (the server still holds
        the message; nats-py marks a message acked after a nak and this item would refuse
        every action on it)."""
        msg = copy.copy(self._msg)
        msg._ackd = False
        return replace(self, _msg=msg)

    async def _send(self, action: str, *, delay: float | None = None) -> None:
        if getattr(self._msg, "_ackd", False):
            raise AlreadyAcked(action, self.subject)
        try:
            if action == "ack":
                await self._msg.ack()
            elif action == "nak":
                await self._msg.nak(delay=delay)
            elif action == "in_progress":
                await self._msg.in_progress()
            else:
                await self._msg.term()
        except nats.errors.MsgAlreadyAckdError:
            raise AlreadyAcked(action, self.subject) from None
        except nats.errors.Error as exc:
            raise AckFailed(action, self.subject, f"{type(exc).__name__}: {exc}") from None

    async def ack(self, *, confirm: float | None = None) -> None:
        """Done with it: the queue forgets the message.

        With ``confirm`` (seconds), wait for the server to confirm the ack; else the
        ack is sent like a publish (buffered while reconnecting).
        """
        if confirm is None:
            await self._send("ack")
            return
        if getattr(self._msg, "_ackd", False):
            raise AlreadyAcked("ack", self.subject)
        try:
            await self._msg.ack_sync(timeout=confirm)
        except nats.errors.MsgAlreadyAckdError:
            raise AlreadyAcked("ack", self.subject) from None
        except (nats.errors.Error, TimeoutError) as exc:
            raise AckFailed("ack", self.subject, f"{type(exc).__name__}: {exc}") from None

    async def nak(self, delay: float | None = None) -> None:
        """Hand it back: redelivered (to any puller) at once, or after ``delay`` seconds."""
        await self._send("nak", delay=delay)

    async def in_progress(self) -> None:
        """Still working on it: restarts the ack wait (repeat within every ack wait)."""
        await self._send("in_progress")

    async def term(self) -> None:
        """Drop it for good (a poison message): never redelivered."""
        await self._send("term")


class WorkQueue:
    """A work-queue stream with one durable pull consumer shared by every puller.

    Several ``WorkQueue`` objects on one consumer (one per node) share its
    messages: each message goes to one of them at a time. ``ack_wait_s`` is the
    consumer's ack wait (an existing consumer keeps its own). The stream may capture
    several subjects (``subject`` a tuple); the consumer takes them all.
    """

    def __init__(
        self,
        name: str,
        subject: str,
        consumer: str,
        psub: JetStreamContext.PullSubscription,
        ack_wait_s: float,
        timeout: float,
        js: JetStreamContext | None = None,
    ) -> None:
        self.name = name
        self.subject = subject
        self.consumer = consumer
        self.ack_wait_s = ack_wait_s
        self._psub = psub
        self._timeout = timeout
        self._js = js

    @classmethod
    async def open(
        cls,
        bus: Bus,
        *,
        name: str,
        subject: str | tuple[str, ...],
        consumer: str,
        ack_wait_s: float,
        max_msg_size: int,
        replicas: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> WorkQueue:
        """Create the stream (file storage, WORK_QUEUE retention) if missing and bind the
        durable pull consumer (explicit ack, ``max_deliver`` and ``max_ack_pending``
        unlimited), creating it if missing. An existing stream or consumer that takes
        fewer subjects is widened to ``subject``. ``replicas``: None is the bus's
        (``replicas_for(bus, bus.js_replicas)``); an existing stream with fewer is raised."""
        wanted = [subject] if isinstance(subject, str) else list(subject)
        js = _context(bus, timeout)
        await _ensure_stream(
            js,
            StreamConfig(
                name=name,
                subjects=wanted,
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                max_msg_size=max_msg_size,
                num_replicas=replicas or replicas_for(bus, bus.js_replicas),
            ),
            timeout,
        )
        config = ConsumerConfig(
            durable_name=consumer,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ack_wait_s,
            max_deliver=-1,
            max_ack_pending=-1,
            filter_subjects=wanted if len(wanted) > 1 else None,
        )

        async def bind() -> JetStreamContext.PullSubscription:
            return await js.pull_subscribe(wanted[0], durable=consumer, stream=name, config=config)

        try:
            replicas = int(replicas or replicas_for(bus, bus.js_replicas))
            psub = await _set_up(bind, f"bind consumer {consumer} on {name}", replicas)
            info = await psub.consumer_info()
            have = info.config.filter_subjects or [info.config.filter_subject or ">"]
            if set(have) != set(wanted) and ">" not in have:  # made by an older version
                widened = replace(info.config, filter_subject=None, filter_subjects=wanted)
                info = await js.add_consumer(name, widened)
                log.info("consumer %s on %s now takes %s", consumer, name, ", ".join(wanted))
            # A replicated consumer just made serves no pull until its leader is elected.
            deadline = time.monotonic() + 20.0
            while info.cluster is not None and not info.cluster.leader:
                if time.monotonic() > deadline:
                    log.warning("consumer %s on %s has no leader after 20s", consumer, name)
                    break
                await asyncio.sleep(0.05)  # polling: the server sends no event
                info = await psub.consumer_info()
        except nats.errors.Error as exc:
            raise translate(exc, "bind consumer", target=name, timeout=timeout) from None
        actual = float(info.config.ack_wait or ack_wait_s)
        if abs(actual - ack_wait_s) > 1e-3:
            log.warning(
                "consumer %s on %s has ack wait %.3fs, not %.3fs",
                consumer,
                name,
                actual,
                ack_wait_s,
            )
        return cls(name, ", ".join(wanted), consumer, psub, actual, timeout, js)

    async def healthy(self) -> bool:
        """False when the stream or the consumer is gone (deleted by someone): reopen it."""
        try:
            await self._psub.consumer_info()
        except nats.js.errors.NotFoundError:
            return False
        except nats.errors.Error as exc:
            raise translate(exc, "consumer info", target=self.name, timeout=self._timeout) from None
        return True

    async def first_seq(self) -> int:
        """The lowest stream sequence still held: every message below it was acked (or
        terminated); messages from it on are unsettled or already settled out of order."""
        js = self._js
        assert js is not None
        try:
            info = await js.stream_info(self.name)
        except nats.errors.Error as exc:
            raise translate(exc, "stream info", target=self.name, timeout=self._timeout) from None
        return int(info.state.first_seq or 0)

    async def get(self, seq: int) -> tuple[str, bytes] | None:
        """The message at stream sequence ``seq`` as ``(subject, data)`` (None: settled)."""
        js = self._js
        assert js is not None
        try:
            msg = await js.get_msg(self.name, seq=seq)
        except nats.js.errors.NotFoundError:
            return None
        except nats.errors.Error as exc:
            what = f"read seq {seq}"
            raise translate(exc, what, target=self.name, timeout=self._timeout) from None
        return str(msg.subject), bytes(msg.data or b"")

    async def pull(self, timeout: float = 1.0) -> QueueItem | None:
        """The next message, or None when none came within ``timeout`` seconds."""

        def error(exc: Exception) -> BusError:
            return translate(exc, "pull", target=self.name, timeout=timeout)

        return await fetch_one(self._psub, timeout, error)

    async def close(self) -> None:
        """Stop pulling. Messages pulled and not settled are redelivered after the ack wait."""
        try:
            await self._psub.unsubscribe()
        except (nats.errors.Error, ValueError) as exc:  # already closed with the connection
            log.debug("closing the pull subscription of %s: %s", self.name, exc)


# --- key-value --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KvEntry:
    """The live value of a key and its revision (the ``last`` of the next update)."""

    value: bytes
    revision: int


async def _there(js: JetStreamContext, stream: str) -> bool | None:
    """Whether ``stream`` exists: True, False (the server says it does not), None (no
    answer)."""
    try:
        await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return False
    except nats.errors.Error:
        return None
    return True


class _Healer:
    """Makes a bucket or stream again once it is gone for good, in the background.

    ``suspect`` (an operation found it missing) starts one watch: it asks every
    ``HEAL_CHECK_S`` whether it exists and makes it again, with a warning, only once the
    server has said "not found" for ``HEAL_CONFIRM_S`` (a cluster failing over says so for
    seconds about streams that exist). No caller waits on it: their errors stand until it
    is back. A watch that gets no answer gives up after ``HEAL_WATCH_S``."""

    def __init__(
        self,
        what: str,
        there: Callable[[], Awaitable[bool | None]],
        remake: Callable[[], Awaitable[None]],
    ) -> None:
        self.what = what
        self._there = there
        self._remake = remake
        self.healed = 0
        self.on_healed: list[Callable[[], None]] = []
        self._watch: asyncio.Task[None] | None = None

    def suspect(self) -> None:
        if self._watch is None or self._watch.done():
            self._watch = asyncio.create_task(self._watching(), name=f"heal:{self.what}")

    async def _watching(self) -> None:
        started = time.monotonic()
        missing_since: float | None = None
        while time.monotonic() - started < HEAL_WATCH_S:
            there = await self._there()
            if there:
                return
            now = time.monotonic()
            if there is None:
                missing_since = None
            elif missing_since is None:
                missing_since = now
            elif now - missing_since >= HEAL_CONFIRM_S:
                log.warning(
                    "%s is gone (deleted?): making it again, what it held is lost", self.what
                )
                try:
                    await self._remake()
                except (BusError, nats.errors.Error) as exc:
                    log.warning("%s could not be made again: %s", self.what, exc)
                    return
                self.healed += 1
                for callback in self.on_healed:
                    callback()
                return
            await asyncio.sleep(HEAL_CHECK_S)  # polling: the server sends no event


class KvBucket:
    """A JetStream KV bucket; ``ttl_s`` is the bucket's TTL (None: keys never age out)."""

    def __init__(
        self,
        name: str,
        kv: KeyValue,
        ttl_s: float | None,
        timeout: float,
        js: JetStreamContext | None = None,
    ) -> None:
        self.name = name
        self.ttl_s = ttl_s
        self._kv = kv
        self._timeout = timeout
        self._js = js
        self._reopen: Callable[[], Awaitable[KvBucket]] | None = None
        """Makes the bucket again as ``open`` did (set by ``open``)."""
        self._healer: _Healer | None = None

    @classmethod
    async def open(
        cls,
        bus: Bus,
        *,
        name: str,
        ttl_s: float | None = None,
        history: int = 1,
        replicas: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> KvBucket:
        """Bind the bucket, creating it when missing (direct gets, file storage).

        A concurrent creator wins harmlessly; an existing bucket keeps its limits (but
        for replicas: one with fewer than ``replicas`` is raised), so read ``ttl_s``
        after opening. ``replicas``: None is the bus's (``replicas_for``).
        """
        js = _context(bus, timeout)
        count = replicas or replicas_for(bus, bus.js_replicas)

        async def step() -> KvBucket:
            try:
                kv = await js.key_value(name)
            except nats.js.errors.BucketNotFoundError:
                config = KeyValueConfig(
                    bucket=name,
                    ttl=ttl_s or None,
                    history=history,
                    direct=True,
                    storage=StorageType.FILE,
                    replicas=count,
                )
                try:
                    kv = await js.create_key_value(config)
                    log.info("created KV bucket %s (ttl %s)", name, ttl_s)
                except nats.js.errors.APIError as exc:
                    try:  # created meanwhile by another node
                        kv = await js.key_value(name)
                    except nats.js.errors.BucketNotFoundError:
                        raise exc from None
                await _settled(js, f"KV_{name}", count)
            else:
                await _ensure_replicas(js, (await js.stream_info(f"KV_{name}")).config, count)
            bucket = cls(name, kv, None, timeout, js)
            bucket.ttl_s = await bucket.status_ttl()
            return bucket

        try:
            bucket = await _set_up(step, f"open bucket {name}", count)
            bucket._reopen = lambda: cls.open(
                bus, name=name, ttl_s=ttl_s, history=history, replicas=replicas, timeout=timeout
            )
            bucket._healer = _Healer(f"KV bucket {name}", bucket._stream_there, bucket._remake)
        except nats.js.errors.BucketNotFoundError:
            raise StreamMissing(name) from None
        except nats.errors.Error as exc:
            raise translate(exc, "open bucket", target=name, timeout=timeout) from None
        if ttl_s and bucket.ttl_s != ttl_s:
            log.warning("KV bucket %s has ttl %ss, not %.3fs", name, bucket.ttl_s, ttl_s)
        return bucket

    def _error(self, exc: Exception, operation: str, key: str) -> BusError:
        if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
            return StreamMissing(self.name)
        if isinstance(exc, nats.js.errors.InvalidKeyError):
            return JetStreamError(f"kv {operation} {key}", "not a valid key")
        return translate(exc, f"kv {operation} {key}", target=self.name, timeout=self._timeout)

    async def status_ttl(self) -> float | None:
        """The bucket's TTL in seconds as the server has it (None: no TTL)."""
        try:
            ttl = (await self._kv.status()).ttl
        except nats.errors.Error as exc:
            raise translate(exc, "kv status", target=self.name, timeout=self._timeout) from None
        return float(ttl) if ttl else None

    async def drop_ttl(self) -> None:
        """Keys of this bucket no longer age out (a bucket made with a TTL by an older
        version); ``JetStreamError`` when the server refuses."""
        stream = f"KV_{self.name}"
        if self._js is None:
            raise JetStreamError(f"kv drop ttl {self.name}", "bucket opened without a context")
        try:
            have = (await self._js.stream_info(stream)).config
            if have.max_age:
                await self._js.update_stream(replace(have, max_age=0))
                log.info(
                    "KV bucket %s: keys no longer age out (they did after %ss)",
                    self.name,
                    have.max_age,
                )
        except nats.errors.Error as exc:
            raise translate(exc, "kv drop ttl", target=self.name, timeout=self._timeout) from None
        self.ttl_s = None

    async def _get(self, key: str) -> KvEntry | None:
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.NotFoundError:  # KeyNotFoundError, KeyDeletedError
            return None
        except nats.errors.Error as exc:
            raise self._error(exc, "get", key) from None
        return KvEntry(bytes(entry.value or b""), int(entry.revision or 0))

    async def _put(self, key: str, value: bytes) -> int:
        try:
            return int(await self._kv.put(key, value))
        except nats.errors.Error as exc:
            raise self._error(exc, "put", key) from None

    async def _keys(self) -> list[str]:
        """The keys that hold a live value now (none deleted or aged out), sorted.

        The bucket's stream is read with direct gets, one per message it holds (nats-py's
        own ``keys`` watches with a consumer and may answer none while keys exist)."""
        stream, head = f"KV_{self.name}", f"$KV.{self.name}."
        live: dict[str, bool] = {}
        seq = 1
        js = self._js
        assert js is not None  # set by open()
        while True:
            try:
                msg = await js.get_msg(stream, seq=seq, subject=f"{head}>", next=True, direct=True)
            except nats.js.errors.NotFoundError:
                break
            except nats.errors.Error as exc:
                raise self._error(exc, "keys", "*") from None
            headers = msg.headers or {}
            removed = headers.get("KV-Operation") in ("DEL", "PURGE")
            live[str(msg.subject)[len(head) :]] = not (removed or "Nats-Marker-Reason" in headers)
            seq = int(msg.seq or seq) + 1
        return sorted(key for key, alive in live.items() if alive)

    async def _create(self, key: str, value: bytes) -> int:
        for _ in range(3):
            try:
                return int(await self._kv.create(key, value))
            except nats.js.errors.KeyWrongLastSequenceError:
                live = await self._get(key)
                if live is not None:
                    raise KeyExists(key, live.revision) from None
            except nats.js.errors.NotFoundError:
                pass  # the marker create wanted to step over aged out meanwhile
            except nats.errors.Error as exc:
                raise self._error(exc, "create", key) from None
        raise KeyExists(key, 0)

    async def _update(self, key: str, value: bytes, *, last: int) -> int:
        try:
            return int(await self._kv.update(key, value, last=last))
        except nats.js.errors.KeyWrongLastSequenceError:
            raise WrongRevision(key, last) from None
        except nats.errors.Error as exc:
            raise self._error(exc, "update", key) from None

    async def _delete(self, key: str, *, last: int | None = None) -> None:
        try:
            await self._kv.delete(key, last=last)
        except nats.js.errors.APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                raise WrongRevision(key, last or 0) from None
            raise self._error(exc, "delete", key) from None
        except nats.errors.Error as exc:
            raise self._error(exc, "delete", key) from None

    # --- the event log ----------------------------------------------------------------------------

    # -- self-healing: a bucket deleted under a running node is made again -------------------

    @property
    def healed(self) -> int:
        """Times the bucket was found gone and made again."""
        return self._healer.healed if self._healer is not None else 0

    @property
    def on_healed(self) -> list[Callable[[], None]]:
        """Called after the bucket was made again (its keys are gone)."""
        if self._healer is None:
            raise JetStreamError(f"kv {self.name}", "a bucket only bound is not made again")
        return self._healer.on_healed

    async def _stream_there(self) -> bool | None:
        assert self._js is not None  # set with _reopen by open()
        return await _there(self._js, f"KV_{self.name}")

    async def _remake(self) -> None:
        assert self._reopen is not None
        fresh = await self._reopen()
        self._kv, self.ttl_s = fresh._kv, fresh.ttl_s

    async def _healed(self, step: Callable[[], Awaitable[T]]) -> T:
        try:
            return await step()
        except StreamMissing:
            if self._healer is not None:
                self._healer.suspect()
            raise

    async def get(self, key: str) -> KvEntry | None:
        """The live value of ``key``; None when it is missing, deleted or aged out."""
        return await self._healed(lambda: self._get(key))

    async def put(self, key: str, value: bytes) -> int:
        """Write ``key`` whatever it holds (the last writer wins); returns the new revision.
        The write restarts the key's age under the bucket's TTL."""
        return await self._healed(lambda: self._put(key, value))

    async def keys(self) -> list[str]:
        """The keys that hold a live value now (none deleted or aged out), sorted."""
        return await self._healed(self._keys)

    async def create(self, key: str, value: bytes) -> int:
        """Write ``key`` only if it holds no live value; returns the new revision.

        Raises ``KeyExists(key, revision)`` when it does. A delete marker or a key
        aged out does not count as live.
        """
        return await self._healed(lambda: self._create(key, value))

    async def update(self, key: str, value: bytes, *, last: int) -> int:
        """Write ``key`` if its revision is still ``last``; returns the new revision.

        Raises ``WrongRevision(key, last)`` when another write (or delete, or the TTL)
        came first (or the bucket was made again: the key is gone).
        """
        return await self._healed(lambda: self._update(key, value, last=last))

    async def delete(self, key: str, *, last: int | None = None) -> None:
        """Delete ``key`` (a delete marker); with ``last``, only if it is at that revision.

        Raises ``WrongRevision(key, last)`` on a stale ``last``.
        """
        await self._healed(lambda: self._delete(key, last=last))


class EventLog:
    """An append-only stream (LIMITS retention), read one subject at a time."""

    def __init__(self, name: str, js: JetStreamContext, timeout: float) -> None:
        self.name = name
        self._js = js
        self._timeout = timeout
        self._healer: _Healer | None = None
        """Makes the stream again when it is gone (set by ``open``; None: only bound)."""

    @classmethod
    async def open(
        cls,
        bus: Bus,
        *,
        name: str,
        subjects: str,
        max_msg_size: int,
        replicas: int | None = None,
        max_age_s: float | None = None,
        max_bytes: int | None = None,
        max_msgs_per_subject: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Self:
        """Create the stream on ``subjects`` (file storage, direct gets) if missing.

        ``max_age_s``, ``max_bytes`` and ``max_msgs_per_subject`` are LIMITS retention's
        limits (None: none); the oldest messages go first. The server reserves
        ``max_bytes`` of its JetStream storage for the stream. An existing stream keeps
        its own limits, but for fewer replicas than ``replicas`` (None: the bus's,
        ``replicas_for``), which are raised.
        """
        js = _context(bus, timeout)
        config = StreamConfig(
            name=name,
            subjects=[subjects],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            max_msg_size=max_msg_size,
            allow_direct=True,
            num_replicas=replicas or replicas_for(bus, bus.js_replicas),
            max_age=max_age_s,
            max_bytes=max_bytes,
            max_msgs_per_subject=max_msgs_per_subject or -1,
            # The duplicate window may not be longer than the age limit (0: 2 min).
            duplicate_window=min(120.0, max_age_s) if max_age_s else 0,
        )
        await _ensure_stream(js, config, timeout)
        made = cls(name, js, timeout)

        async def there() -> bool | None:
            return await _there(js, name)

        async def remake() -> None:
            await _ensure_stream(js, config, timeout)

        made._healer = _Healer(f"stream {name}", there, remake)
        return made

    @property
    def healed(self) -> int:
        """Times the stream was found gone and made again (what it held is lost)."""
        return self._healer.healed if self._healer is not None else 0

    @classmethod
    def bind(cls, bus: Bus, *, name: str, timeout: float = DEFAULT_TIMEOUT) -> Self:
        """A reader of the stream ``name`` that never creates it: reads of a stream that
        does not exist raise ``StreamMissing``."""
        return cls(name, _context(bus, timeout), timeout)

    def _error(self, exc: Exception, operation: str) -> BusError:
        if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
            return StreamMissing(self.name)
        return translate(exc, operation, target=self.name, timeout=self._timeout)

    async def append(self, subject: str, data: bytes, *, msg_id: str | None = None) -> int:
        """Store ``data`` on ``subject``; returns its stream sequence.

        With ``msg_id``, a second append of the same id within the server's
        duplicate window stores nothing and returns the first one's sequence.
        Raises ``NoStream`` when the stream does not capture ``subject`` (or is gone).
        """
        headers = {"Nats-Msg-Id": msg_id} if msg_id else None
        try:
            ack = await self._js.publish(subject, data, stream=self.name, headers=headers)
        except nats.js.errors.NoStreamResponseError:  # not the stream's subject, or gone
            if self._healer is not None:
                self._healer.suspect()
            raise NoStream(subject) from None
        except nats.errors.Error as exc:
            raise self._error(exc, f"append to {subject}") from None
        return int(ack.seq)

    async def next_after(self, subject: str, seq: int) -> tuple[int, bytes] | None:
        """The first message on ``subject`` at stream sequence ``seq`` or later, as
        ``(seq, data)``; None when there is none (one direct get)."""
        start = max(1, seq)
        try:
            msg = await self._js.get_msg(
                self.name, seq=start, subject=subject, next=True, direct=True
            )
        except nats.js.errors.NotFoundError:
            return None
        except nats.errors.Error as exc:
            raise self._error(exc, f"read {subject}") from None
        at = int(msg.seq or 0)
        if at < start:
            return None
        return at, bytes(msg.data or b"")

    async def last(self, subject: str) -> tuple[int, bytes] | None:
        """The last message on ``subject`` as ``(seq, data)``; None when there is none
        (one direct get)."""
        try:
            msg = await self._js.get_msg(self.name, subject=subject, direct=True)
        except nats.js.errors.NotFoundError:
            return None
        except nats.errors.Error as exc:
            raise self._error(exc, f"read last of {subject}") from None
        return int(msg.seq or 0), bytes(msg.data or b"")

    async def get(self, seq: int) -> tuple[str, bytes] | None:
        """The message at stream sequence ``seq`` as ``(subject, data)``; None when absent."""
        try:
            msg = await self._js.get_msg(self.name, seq=seq, direct=True)
        except nats.js.errors.NotFoundError:
            return None
        except nats.errors.Error as exc:
            raise self._error(exc, f"read seq {seq}") from None
        return str(msg.subject), bytes(msg.data or b"")

    async def count(self) -> int:
        """How many messages the stream holds."""
        try:
            info = await self._js.stream_info(self.name)
        except nats.errors.Error as exc:
            raise self._error(exc, "stream info") from None
        return int(info.state.messages)

    async def purge(self, subject: str | None = None) -> None:
        """Remove every message (of ``subject`` only, when given)."""
        try:
            await self._js.purge_stream(self.name, subject=subject)
        except nats.errors.Error as exc:
            raise self._error(exc, "purge") from None


# --- the account ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JetStreamAccount:
    """What the connection's account holds in JetStream."""

    streams: int
    consumers: int
    memory: int
    storage: int


async def account(bus: Bus, *, timeout: float = 2.0) -> JetStreamAccount:
    """The JetStream account of ``bus``; ``JetStreamUnavailable`` when the server has none."""
    try:
        info = await _context(bus, timeout).account_info()
    except nats.errors.Error as exc:
        raise translate(exc, "account info", target=bus.url, timeout=timeout) from None
    return JetStreamAccount(
        int(info.streams), int(info.consumers), int(info.memory), int(info.storage)
    )
