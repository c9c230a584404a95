"""The event log: an append-only LIMITS stream, read one subject at a time.

``append`` may dedupe by message id (within the server's duplicate window), ``next_after``
walks one subject and ``last`` reads its newest message, with direct gets. Until its first
operation is answered, within ``SETUP_S`` of ``open`` on a replicated cluster, one that
finds no stream is tried again (``FirstAnswer``; a timeout is not: an append may have
been stored).
"""

from __future__ import annotations

from typing import Self

import nats.errors
import nats.js.errors
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext

from ..errors import BusError, NoStream, StreamMissing
from .api import DEFAULT_TIMEOUT, Bus, context, translate
from .healer import Healer, exists
from .streams import UNWRITTEN, FirstAnswer, ensure_stream, replicas_for


class EventLog:
    """An append-only stream (LIMITS retention), read one subject at a time."""

    def __init__(self, name: str, js: JetStreamContext, timeout: float) -> None:
        self.name = name
        self._js = js
        self._timeout = timeout
        self._healer: Healer | None = None
        """Makes the stream again when it is gone (set by ``open``; None: only bound)."""
        self._first = FirstAnswer(f"stream {name}", 1, UNWRITTEN)
        """Tries the first operations again while the stream cannot answer (set by ``open``)."""

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
        js = context(bus, timeout)
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
        await ensure_stream(js, config, timeout)
        made = cls(name, js, timeout)
        replicas = int(config.num_replicas or 1)
        made._first = FirstAnswer(f"stream {name}", replicas, UNWRITTEN)

        async def there() -> bool | None:
            return await exists(js, name)

        async def remake() -> None:
            await ensure_stream(js, config, timeout)
            made._first = FirstAnswer(f"stream {name}", replicas, UNWRITTEN)

        made._healer = Healer(f"stream {name}", there, remake)
        return made

    @property
    def healed(self) -> int:
        """Times the stream was found gone and made again (what it held is lost)."""
        return self._healer.healed if self._healer is not None else 0

    @classmethod
    def bind(cls, bus: Bus, *, name: str, timeout: float = DEFAULT_TIMEOUT) -> Self:
        """A reader of the stream ``name`` that never creates it: reads of a stream that
        does not exist raise ``StreamMissing``."""
        return cls(name, context(bus, timeout), timeout)

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

        async def append() -> int:
            try:
                ack = await self._js.publish(subject, data, stream=self.name, headers=headers)
            except nats.js.errors.NoStreamResponseError:  # not the stream's subject, or gone
                raise NoStream(subject) from None
            except nats.errors.Error as exc:
                raise self._error(exc, f"append to {subject}") from None
            return int(ack.seq)

        try:
            return await self._first.run(append)
        except NoStream:
            if self._healer is not None:
                self._healer.suspect()
            raise

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
