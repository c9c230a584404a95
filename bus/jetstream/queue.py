"""The work queue: a WORK_QUEUE stream with one durable pull consumer, and its items.

``WorkQueue`` binds a stream (one subject or several) and a durable pull consumer (explicit
ack, unlimited redeliveries). ``pull`` hands out one ``QueueItem`` at a time; the item is
settled with ``ack``/``nak``/``term`` and kept alive with ``in_progress``. An item neither
acked nor naked is redelivered after the consumer's ack wait. A ``pull`` cancelled while
waiting may leave a message in the subscription's buffer; the next ``pull`` returns it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    ConsumerInfo,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.client import JetStreamContext

from ..errors import AckFailed, AlreadyAcked, BusError
from .api import DEFAULT_TIMEOUT, Bus, context, translate
from .streams import ensure_stream, replicas_for, set_up

log = logging.getLogger(__name__)


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

    @property
    def ack_subject(self) -> str:
        """Where this delivery is settled (its JetStream reply subject): another client of the
        stream's consumer can settle it there (``WorkQueue.adopt``)."""
        return str(self._msg.reply or "")

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
        self.adopted = 0
        """Deliveries pulled by another client of the consumer and settled from here."""

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
        (``replicas_for(bus, bus.js_replicas)``); an existing stream with fewer is raised.
        Nodes opening the queue at once share one stream and consumer: each finds what
        another made, tried again within ``SETUP_S`` while the cluster has not caught up."""
        wanted = [subject] if isinstance(subject, str) else list(subject)
        js = context(bus, timeout)
        await ensure_stream(
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

        async def widen(psub: JetStreamContext.PullSubscription) -> ConsumerInfo:
            info = await psub.consumer_info()
            have = info.config.filter_subjects or [info.config.filter_subject or ">"]
            if set(have) != set(wanted) and ">" not in have:  # made by an older version
                widened = replace(info.config, filter_subject=None, filter_subjects=wanted)
                info = await js.add_consumer(name, widened)
                log.info("consumer %s on %s now takes %s", consumer, name, ", ".join(wanted))
            return info

        what = f"bind consumer {consumer} on {name}"
        try:
            replicas = int(replicas or replicas_for(bus, bus.js_replicas))
            psub = await set_up(bind, what, replicas)
            info = await set_up(lambda: widen(psub), what, replicas)
            # A replicated consumer just made serves no pull until its leader is elected.
            deadline = time.monotonic() + 20.0
            while info.cluster is not None and not info.cluster.leader:
                if time.monotonic() > deadline:
                    log.warning("consumer %s on %s has no leader after 20s", consumer, name)
                    break
                await asyncio.sleep(0.05)  # polling: the server sends no event
                with contextlib.suppress(nats.errors.TimeoutError, nats.js.errors.APIError):
                    info = await psub.consumer_info()  # an answer may be lost while it elects
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

    def adopt(self, ack_subject: str, data: bytes) -> QueueItem:
        """A delivery another client pulled from this consumer, settled from here: its ack,
        nak and in-progress go to ``ack_subject`` as if this client had pulled it.
        ``AckFailed`` when the subject is not a delivery of this stream's consumer."""
        try:
            meta = Msg.Metadata._from_reply(ack_subject)
        except (nats.errors.Error, ValueError, IndexError) as exc:
            raise AckFailed("adopt", ack_subject, f"not a JetStream ack subject: {exc}") from None
        if (meta.stream, meta.consumer) != (self.name, self.consumer):
            raise AckFailed(
                "adopt",
                ack_subject,
                f"a delivery of {meta.stream}/{meta.consumer}, not of {self.name}/{self.consumer}",
            )
        js = self._js
        assert js is not None
        msg = Msg(js._nc, subject=self.subject, reply=ack_subject, data=data)
        self.adopted += 1
        return QueueItem.of(msg)

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
