"""The KV bucket: one value per key, with check-and-set writes (and plain ``put``s).

Missing, deleted and aged-out keys read as None; ``create`` succeeds over a delete marker
(and over a key aged out by the bucket TTL, which leaves no marker). A bucket made by
``open`` is made again when it is found gone (``actline.bus.jetstream.healer``). Until its
first operation is answered, within ``SETUP_S`` of ``open`` on a replicated cluster, one
that finds the bucket missing or gets no answer is tried again (``FirstAnswer``): nodes
started together make the bucket together, and its leader may still be being elected.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.js.api import KeyValueConfig, StorageType
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from ..errors import BusError, JetStreamError, KeyExists, StreamMissing, WrongRevision
from .api import DEFAULT_TIMEOUT, Bus, context, translate
from .healer import Healer, exists
from .streams import FirstAnswer, ensure_replicas, replicas_for, set_up, settled

log = logging.getLogger(__name__)
T = TypeVar("T")

_WRONG_LAST_SEQUENCE = frozenset({10071, 10164})


@dataclass(frozen=True, slots=True)
class KvEntry:
    """The live value of a key and its revision (the ``last`` of the next update)."""

    value: bytes
    revision: int


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
        self._healer: Healer | None = None
        self._first = FirstAnswer(f"KV bucket {name}", 1)
        """Tries the first operations again while the bucket cannot answer (set by ``open``)."""

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
        js = context(bus, timeout)
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
                await settled(js, f"KV_{name}", count)
            else:
                have = (await js.stream_info(f"KV_{name}")).config
                raised = await ensure_replicas(js, have, count)
                await settled(js, f"KV_{name}", count, followers=raised)
            ttl = (await kv.status()).ttl  # raw: a request with no answer is tried again
            bucket = cls(name, kv, float(ttl) if ttl else None, timeout, js)
            bucket._first = FirstAnswer(f"KV bucket {name}", count)
            return bucket

        try:
            bucket = await set_up(step, f"open bucket {name}", count)
            bucket._reopen = lambda: cls.open(
                bus, name=name, ttl_s=ttl_s, history=history, replicas=replicas, timeout=timeout
            )
            bucket._healer = Healer(f"KV bucket {name}", bucket._stream_there, bucket._remake)
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

    async def _leader_get(self, key: str) -> KvEntry | None:
        js = self._js
        assert js is not None  # set by open()
        try:
            msg = await js.get_msg(
                f"KV_{self.name}", subject=f"$KV.{self.name}.{key}", direct=False
            )
        except nats.js.errors.NotFoundError:
            return None
        except nats.errors.Error as exc:
            raise self._error(exc, "get", key) from None
        headers = msg.headers or {}
        if headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers:
            return None
        return KvEntry(bytes(msg.data or b""), int(msg.seq or 0))

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
        return await exists(self._js, f"KV_{self.name}")

    async def _remake(self) -> None:
        assert self._reopen is not None
        fresh = await self._reopen()
        self._kv, self.ttl_s, self._first = fresh._kv, fresh.ttl_s, fresh._first

    async def _healed(self, step: Callable[[], Awaitable[T]]) -> T:
        try:
            return await self._first.run(step)
        except StreamMissing:
            if self._healer is not None:
                self._healer.suspect()
            raise

    async def get(self, key: str) -> KvEntry | None:
        """The live value of ``key``; None when it is missing, deleted or aged out."""
        return await self._healed(lambda: self._get(key))

    async def leader_get(self, key: str) -> KvEntry | None:
        """``get`` answered by the bucket's stream leader. A ``get`` is a direct get, which
        any replica may answer, and a replica that lags (one back from a pause, catching
        up) shows a key written meanwhile as missing or old; the leader has every write
        it confirmed. One request to the leader: for a read that decides something."""
        return await self._healed(lambda: self._leader_get(key))

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
