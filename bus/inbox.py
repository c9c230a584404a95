"""Durable agent inboxes in JetStream: the task stream (node side) and one agent's pull.

Node side, ``TaskStream``: a LIMITS stream on every agent's inbox subject
(``Subjects.tasks_stream`` capturing ``agent_inbox_any``). A node stores a task in it
with ``Bus.publish_stored`` and removes it (``delete``) once nobody waits for it any more,
so the stream holds the open tasks; ``held`` lists those of one agent (or of all). Each
agent pulls from its own durable consumer, which only nodes make (``ensure_consumer``:
explicit ack, deliver all, filtered on the agent's inbox); ``reset=True`` deletes and
recreates it, so every task still held is delivered again.

Agent side, ``AgentPull``: binds to that consumer by name (no JetStream request) and pulls
one task at a time. It uses only ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>`` (the
pull), ``$JS.API.CONSUMER.INFO.<stream>.<consumer>`` (``check``), the acks
``$JS.ACK.<stream>.<consumer>.>`` and its own reply inbox: what the ``agent NAME`` role
may use.

Errors: ``actline.bus.errors`` types only. A consumer (or stream) that is gone is
``StreamMissing``; an agent says hello again and the node makes it anew.
Cancellation: every call is one or a few requests; cancelling one propagates
``CancelledError`` (a pull cancelled while waiting may leave its message in the
subscription, where the next pull finds it) except when nats-py swallows it: its
publish drops a ``CancelledError`` that lands while it flushes its buffer. A loop that
must end when cancelled calls ``raise_lost_cancel`` before it waits again.
"""

from __future__ import annotations

import asyncio
import logging

import nats.errors
import nats.js.errors
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.client import JetStreamContext

from .errors import BusError, StreamMissing
from .jetstream.api import DEFAULT_TIMEOUT, Bus, translate
from .jetstream.events import EventLog
from .jetstream.queue import QueueItem, fetch_one

log = logging.getLogger(__name__)

_NOT_FOUND = frozenset({10014, 10059, 10043, 10057})
"""Consumer not found, stream not found, sequence not found, no message found."""


def raise_lost_cancel() -> None:
    """Raise ``CancelledError`` when the running task was cancelled but the error never
    reached it (nats-py's publish swallows one that lands while it flushes)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class TaskStream(EventLog):
    """The stream of open agent tasks, and the agents' durable consumers on it.

    ``open`` (inherited) creates the stream: pass ``max_age_s`` (a task nobody answers is
    dropped after it) and the subjects of every agent's inbox.
    """

    def _gone(self, exc: Exception) -> bool:
        return isinstance(exc, nats.js.errors.NotFoundError) or (
            isinstance(exc, nats.js.errors.APIError) and exc.err_code in _NOT_FOUND
        )

    async def held(self, subject: str) -> list[tuple[int, bytes]]:
        """Every message on ``subject`` (a wildcard allowed), oldest first, as ``(seq, data)``.

        One direct get per message: the stream is meant to hold only open tasks.
        """
        found: list[tuple[int, bytes]] = []
        seq = 1
        while (item := await self.next_after(subject, seq)) is not None:
            found.append(item)
            seq = item[0] + 1
        return found

    async def delete(self, seq: int) -> bool:
        """Remove the message at ``seq``; False when there was none (or no stream)."""
        try:
            await self._js.delete_msg(self.name, seq)
        except nats.errors.Error as exc:
            if self._gone(exc):
                return False
            raise self._error(exc, f"delete seq {seq}") from None
        return True

    async def ensure_consumer(
        self,
        consumer: str,
        subject: str,
        *,
        reset: bool = False,
        ack_wait_s: float = 30.0,
        inactive_s: float | None = None,
    ) -> bool:
        """Make sure the durable pull consumer ``consumer`` on ``subject`` exists (explicit
        ack, deliver all, unlimited deliveries); returns True when it was (re)created.

        ``reset`` deletes it first: a new consumer delivers every message still held, from
        the oldest. ``inactive_s``: the server removes a consumer nobody pulled from for
        that long (None: never).
        """
        js = self._js
        try:
            if reset:
                try:
                    await js.delete_consumer(self.name, consumer)
                except nats.js.errors.NotFoundError:
                    pass
            else:
                try:
                    await js.consumer_info(self.name, consumer)
                    return False
                except nats.js.errors.NotFoundError:
                    pass
            config = ConsumerConfig(
                name=consumer,
                durable_name=consumer,
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=ack_wait_s,
                max_deliver=-1,
                filter_subject=subject,
                inactive_threshold=inactive_s,
            )
            await js.add_consumer(self.name, config)
        except nats.errors.Error as exc:
            if self._gone(exc):
                raise StreamMissing(self.name) from None
            raise self._error(exc, f"consumer {consumer}") from None
        log.info("consumer %s on %s %s", consumer, self.name, "reset" if reset else "created")
        return True

    async def delete_consumer(self, consumer: str) -> bool:
        """Delete the consumer ``consumer``; False when there was none."""
        try:
            await self._js.delete_consumer(self.name, consumer)
        except nats.errors.Error as exc:
            if self._gone(exc):
                return False
            raise self._error(exc, f"delete consumer {consumer}") from None
        return True


class AgentPull:
    """One agent's pull from its durable consumer, made by a node (``TaskStream``).

    Pulled tasks are settled with ``QueueItem.ack`` (an unacked one comes again after the
    consumer's ack wait).
    """

    def __init__(
        self, stream: str, consumer: str, psub: JetStreamContext.PullSubscription, timeout: float
    ) -> None:
        self.stream = stream
        self.consumer = consumer
        self._psub = psub
        self._timeout = timeout

    @classmethod
    async def bind(
        cls, bus: Bus, *, stream: str, consumer: str, timeout: float = DEFAULT_TIMEOUT
    ) -> AgentPull:
        """Bind to the consumer by name: only a subscription on a reply inbox, no request
        (a consumer that does not exist shows at the first ``pull``)."""
        js = bus.nc.jetstream(timeout=timeout)
        try:
            psub = await js.pull_subscribe_bind(durable=consumer, stream=stream)
        except nats.errors.Error as exc:
            raise translate(exc, "bind", target=f"{stream}/{consumer}", timeout=timeout) from None
        return cls(stream, consumer, psub, timeout)

    def _error(self, exc: Exception, operation: str, timeout: float) -> BusError:
        gone = isinstance(
            exc,
            nats.js.errors.NotFoundError
            | nats.js.errors.ServiceUnavailableError  # nobody serves the consumer's pulls
            | nats.errors.NoRespondersError,
        ) or (isinstance(exc, nats.js.errors.APIError) and exc.code in (404, 409))
        if gone:
            return StreamMissing(f"{self.stream}/{self.consumer}")
        return translate(exc, operation, target=f"{self.stream}/{self.consumer}", timeout=timeout)

    async def pull(self, timeout: float = 1.0) -> QueueItem | None:
        """The next task, or None when none came within ``timeout`` seconds;
        ``StreamMissing`` when the consumer is gone."""
        return await fetch_one(self._psub, timeout, lambda exc: self._error(exc, "pull", timeout))

    async def check(self) -> bool:
        """True when the consumer exists (one consumer-info request)."""
        try:
            await self._psub.consumer_info()
        except nats.errors.Error as exc:
            error = self._error(exc, "consumer info", self._timeout)
            if isinstance(error, StreamMissing):
                return False
            raise error from None
        return True

    async def close(self) -> None:
        """Stop pulling; tasks pulled and not acked come again after the ack wait."""
        try:
            await self._psub.unsubscribe()
        except (nats.errors.Error, ValueError) as exc:  # already closed with the connection
            log.debug("closing the pull of %s: %s", self.consumer, exc)
