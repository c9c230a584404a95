"""Conversations across nodes: leases and the durable copy in JetStream (DESIGN.md §6, §8).

Several nodes share one NATS. A conversation is worked on by one node at a time
(``KvLeases``) and survives that node's death because every persisted round also
goes to JetStream (``JetStreamCopy``); a node's LMDB is its local cache.

Leases: one key per conversation in the KV bucket ``<PREFIX>_LEASES`` whose
bucket-level TTL (``max_age``) is the lease TTL, history 1. ``acquire`` is
``kv.create``; ``renew`` is ``kv.update(last=<our revision>)``, which also restarts
the key's age; ``release`` deletes with ``last=``. A dead owner's key ages out on
its own. Observed with nats-server 2.15.1 here: a key goes 0.25-0.26 s after
its TTL (ttl 0.5/1.5/3/6 s gave 0.76/1.76/3.26/6.26 s); no marker is left, so a
plain ``kv.create`` succeeds afterwards, while a released key leaves a delete
marker that nats-py's ``create`` steps over (it re-publishes with ``last=`` the
marker's revision). A lease that lapsed is lost even when nobody took it yet:
``renew`` then returns False, because another node may have owned and written
the conversation in between.

Durable copy: the stream ``<PREFIX>_BLOCKS`` on ``<prefix>.blocks.<cid>`` holds
one message per persisted round, msgpack::

    {"cid", "revision", "round", "prev_seq", "part", "parts",
     "blocks": [new block dicts], "updated": [rewritten block dicts],
     "records": {turn_id: record}, "boundary_seq"}

A round too large for one message is packed once and cut into ``parts`` messages
carrying ``"body"`` (bytes of that msgpack body) instead of the four body fields.
The KV bucket ``<PREFIX>_HEADS`` holds one key per conversation: the snapshot
header plus ``revision`` (rounds of the durable copy, counted by this module and
independent of any node's LMDB revision), ``stream_seq`` (the last stream
sequence of the round), ``round``, ``prev_seq`` and ``writer``. The header is
written with check-and-set on its KV revision; a lost race raises
``HeadConflict`` and never overwrites. Rounds form a chain: each round names the
``stream_seq`` of the head it was based on (``prev_seq``), so ``rebuild`` walks
back from the head and skips every round whose CAS lost, even one that reused
the winner's revision number. ``read``/``rebuild`` fetch the subject's messages
one direct get each (next by subject), so a takeover costs one request per round;
``adopt`` then writes the result into the taking node's LMDB.

Errors (each keeps its fields and pickles)::

    ClusterError
    ├── HeadConflict       the head moved since ``expected`` (conversation_id, expected,
    │                      actual, owner)
    └── CopyBroken         a round the head chain needs is missing (conversation_id,
                           stream_seq, reason)

Cancellation: every method is a short sequence of requests; cancelling one
propagates ``CancelledError``. A ``publish_round`` cancelled before its CAS leaves
stream messages that no head points at: ``rebuild`` ignores them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from msgpack.exceptions import UnpackException
from nats.js.api import KeyValueConfig, RetentionPolicy, StorageType, StreamConfig
from nats.js.client import JetStreamContext
from nats.js.errors import (
    APIError,
    BucketNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
)
from nats.js.kv import KeyValue

import messages
from bus import Bus
from messages.ids import is_valid_id, new_id
from storage import Store
from storage.store import PersistedRound, pack, unpack
from timeline import Block

log = logging.getLogger(__name__)

HEADROOM = 16 * 1024
"""Bytes of a message kept for NATS headers and the part envelope."""

TRANSPORT_FIELDS = ("revision", "stream_seq", "round", "prev_seq", "writer")
"""Fields of a durable head that describe the copy, not the timeline."""


# --- errors ---------------------------------------------------------------------------------


class ClusterError(Exception):
    """Base of the errors of this module; each keeps its fields and pickles."""


class HeadConflict(ClusterError):
    """Another writer moved the conversation's head since ``expected`` (a KV revision).

    ``actual`` is the head's KV revision now (0 when there is none) and ``owner`` the
    writer of that head. Nothing was overwritten: re-read the head, rebase, retry.
    """

    def __init__(
        self, conversation_id: str, expected: int, actual: int, owner: str | None = None
    ) -> None:
        self.conversation_id = conversation_id
        self.expected = expected
        self.actual = actual
        self.owner = owner
        by = f" (written by {owner})" if owner else ""
        super().__init__(
            f"conversation {conversation_id}: expected head revision {expected}, "
            f"found {actual}{by}; re-read the head and retry"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.expected, self.actual, self.owner))


class ConversationLost(ClusterError):
    """This node no longer owns the conversation (its lease lapsed, another node wrote):
    the running turn goes back to the queue instead of ending here."""

    def __init__(self, conversation_id: str, reason: str) -> None:
        self.conversation_id = conversation_id
        self.reason = reason
        super().__init__(f"conversation {conversation_id} was lost: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.reason))


class CopyBroken(ClusterError):
    """The durable copy lacks a round that the head chain points at (stream messages lost)."""

    def __init__(self, conversation_id: str, stream_seq: int, reason: str) -> None:
        self.conversation_id = conversation_id
        self.stream_seq = stream_seq
        self.reason = reason
        super().__init__(
            f"conversation {conversation_id}: durable copy broken at stream seq {stream_seq}: "
            f"{reason}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.stream_seq, self.reason))


# --- names ----------------------------------------------------------------------------------


def resource_name(prefix: str, suffix: str) -> str:
    """A stream or bucket name of a deployment (``al`` + ``LEASES`` -> ``AL_LEASES``)."""
    return "".join(c if c.isalnum() else "_" for c in prefix).upper() + "_" + suffix


def _key(cid: str) -> str:
    """The KV key of a conversation: ids may hold ``:``, KV keys may not, ``=`` is free."""
    if not is_valid_id(cid):
        raise ValueError(f"not a valid conversation id: {cid!r}")
    return cid.replace(":", "=")


def blocks_subject(prefix: str, cid: str) -> str:
    """``<prefix>.blocks.<cid>``: one conversation's rounds in the blocks stream.

    Belongs in ``messages.subjects`` (``Subjects.blocks``); kept here until it moves.
    """
    if not is_valid_id(cid):
        raise ValueError(f"not a valid conversation id: {cid!r}")
    return f"{prefix}.blocks.{cid}"


async def _bind_or_create(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """Bind the bucket, creating it when missing (a concurrent creator wins harmlessly)."""
    try:
        return await js.key_value(config.bucket)
    except BucketNotFoundError:
        pass
    try:
        return await js.create_key_value(config)
    except APIError:  # created meanwhile by another node, maybe with other limits
        return await js.key_value(config.bucket)


# --- leases ---------------------------------------------------------------------------------


class KvLeases:
    """Which node works on which conversation, in a KV bucket with a bucket-level TTL.

    ``held`` are the conversations this node holds (as far as it knows: a lease
    whose renewal fails is dropped from it). Renew every held lease well within
    ``ttl_s`` (``renew_all`` every ttl/3); the server removes a key about 0.25 s
    after its TTL.
    """

    def __init__(self, bus: Bus, node_id: str, *, ttl_s: float = 15.0) -> None:
        self.bus = bus
        self.node_id = node_id
        self.ttl_s = ttl_s
        self.bucket = resource_name(bus.subjects.prefix, "LEASES")
        self._kv: KeyValue | None = None
        self._revisions: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        """One operation at a time per conversation (a release racing a renewal)."""

    def _lock(self, cid: str) -> asyncio.Lock:
        return self._locks.setdefault(cid, asyncio.Lock())

    @property
    def held(self) -> set[str]:
        """The conversations whose lease this node holds (a copy)."""
        return set(self._revisions)

    def _bucket(self) -> KeyValue:
        if self._kv is None:
            raise RuntimeError("KvLeases.start() first")
        return self._kv

    def _value(self) -> bytes:
        return pack({"node": self.node_id, "ts": time.time()})

    async def start(self) -> None:
        """Create or bind the bucket; an existing bucket's TTL wins over ``ttl_s``."""
        config = KeyValueConfig(
            bucket=self.bucket, ttl=self.ttl_s, history=1, direct=True, storage=StorageType.FILE
        )
        self._kv = await _bind_or_create(self.bus.nc.jetstream(), config)
        ttl = (await self._kv.status()).ttl
        if ttl and abs(ttl - self.ttl_s) > 1e-3:
            log.warning("lease bucket %s has ttl %.3fs, not %.3fs", self.bucket, ttl, self.ttl_s)
            self.ttl_s = ttl

    async def _entry(self, cid: str) -> tuple[str, int] | None:
        """(owner, KV revision) of the live lease, or None."""
        try:
            entry = await self._bucket().get(_key(cid))
        except NotFoundError:  # KeyNotFoundError and KeyDeletedError
            return None
        raw = unpack(entry.value or b"\xc0")
        owner = str(raw.get("node", "")) if isinstance(raw, dict) else ""
        return owner, int(entry.revision or 0)

    async def acquire(self, cid: str) -> bool:
        """Take the lease: True when this node holds it now, False when another node does.

        A lease this node already holds is renewed (False when it lapsed meanwhile:
        see ``renew``). A live key naming this node (a restart under the same node
        id) is taken over.
        """
        async with self._lock(cid):
            if cid in self._revisions:
                return await self._renew(cid)
            return await self._acquire(cid)

    async def _acquire(self, cid: str) -> bool:
        kv = self._bucket()
        key = _key(cid)
        for _ in range(3):
            try:
                self._revisions[cid] = await kv.create(key, self._value())
                return True
            except (KeyWrongLastSequenceError, NotFoundError):  # NotFound: marker aged out
                current = await self._entry(cid)
            if current is None:
                continue  # expired or released between create and get
            owner, revision = current
            if owner != self.node_id:
                return False
            try:
                self._revisions[cid] = await kv.update(key, self._value(), last=revision)
                return True
            except KeyWrongLastSequenceError:
                continue
        return False

    async def owner(self, cid: str) -> str | None:
        """The node holding the lease on ``cid``, or None when nobody does."""
        current = await self._entry(cid)
        return None if current is None else current[0] or None

    async def renew(self, cid: str) -> bool:
        """Extend our lease; False when it lapsed (taken by another node or not).

        A lapsed lease is dropped from ``held``: the caller's in-memory state of the
        conversation may be stale, so it stops working on it (``acquire`` again and
        reload from the durable copy if it still wants it). Connection errors
        propagate and leave the lease held.
        """
        async with self._lock(cid):
            return await self._renew(cid)

    async def _renew(self, cid: str) -> bool:
        revision = self._revisions.get(cid)
        if revision is None:
            return False
        try:
            self._revisions[cid] = await self._bucket().update(
                _key(cid), self._value(), last=revision
            )
        except KeyWrongLastSequenceError:
            self._revisions.pop(cid, None)
            log.info("lease on %s lost by %s", cid, self.node_id)
            return False
        return True

    async def release(self, cid: str) -> None:
        """Give the lease up (a delete with ``last=``, so a lease taken since is untouched)."""
        async with self._lock(cid):
            revision = self._revisions.pop(cid, None)
            if revision is not None:
                try:
                    await self._bucket().delete(_key(cid), last=revision)
                except APIError as exc:  # 10071 wrong last sequence: no longer ours
                    log.info("lease on %s was not ours any more at release: %s", cid, exc)
            self._locks.pop(cid, None)

    async def renew_all(self) -> list[str]:
        """Renew every held lease at once; returns the conversations lost.

        A renewal that fails on the connection is logged and kept (it is retried on
        the next call and lapses only if the outage outlasts the TTL).
        """
        cids = sorted(self._revisions)
        lost: list[str] = []

        async def one(cid: str) -> None:
            try:
                if not await self.renew(cid):
                    lost.append(cid)
            except (nats.errors.Error, TimeoutError) as exc:
                log.warning("lease renewal of %s failed: %s", cid, exc)

        async with asyncio.TaskGroup() as group:
            for cid in cids:
                group.create_task(one(cid))
        return sorted(lost)


# --- the durable copy -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Head:
    kv_revision: int
    revision: int
    stream_seq: int
    stored_seq: int


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """A conversation as rebuilt from JetStream.

    ``blocks``: every block dict in seq order with rewrites applied; ``records``: the
    turn records (turn id -> latest record); ``kv_revision``: the head's KV
    revision, the ``expect`` of the next ``publish_round``.
    """

    header: dict[str, Any]
    blocks: list[dict[str, Any]]
    records: dict[str, dict[str, Any]]
    kv_revision: int

    @property
    def snapshot(self) -> dict[str, Any]:
        """The header without the fields that describe the durable copy."""
        return {k: v for k, v in self.header.items() if k not in TRANSPORT_FIELDS}


@dataclass(slots=True)
class _Round:
    revision: int
    prev_seq: int
    parts: int
    last_seq: int = 0
    got: dict[int, dict[str, Any]] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        if self.parts == 1:
            return self.got[0]
        raw = b"".join(bytes(self.got[i]["body"]) for i in range(self.parts))
        return dict(unpack(raw))


def _part(data: bytes | None) -> dict[str, Any] | None:
    """One stream message of a round, or None when it is not one of ours."""
    try:
        part = unpack(data or b"")
        if isinstance(part, dict) and all(
            isinstance(part.get(k), int) for k in ("revision", "prev_seq", "part", "parts")
        ):
            return part if isinstance(part.get("round"), str) else None
    except (ValueError, TypeError, UnpackException):
        pass
    return None


def _as_dict(block: Block | Mapping[str, Any]) -> dict[str, Any]:
    return block.to_dict() if isinstance(block, Block) else dict(block)


class JetStreamCopy:
    """The durable copy of every conversation's timeline: a blocks stream and a heads bucket.

    ``writer`` (the node id) is recorded in each head and reported by ``HeadConflict``.
    """

    def __init__(self, bus: Bus, *, writer: str = "") -> None:
        self.bus = bus
        self.writer = writer
        prefix = bus.subjects.prefix
        self.stream = resource_name(prefix, "BLOCKS")
        self.bucket = resource_name(prefix, "HEADS")
        self._js: JetStreamContext = bus.nc.jetstream()
        self._kv: KeyValue | None = None
        self._heads: dict[str, _Head] = {}

    def subject(self, cid: str) -> str:
        """The stream subject of one conversation's rounds."""
        return blocks_subject(self.bus.subjects.prefix, cid)

    @property
    def part_size(self) -> int:
        """The largest message this copy publishes (the server's max payload, less headroom)."""
        return min(self.bus.max_payload, messages.MAX_PAYLOAD) - HEADROOM

    def _bucket(self) -> KeyValue:
        if self._kv is None:
            raise RuntimeError("JetStreamCopy.start() first")
        return self._kv

    async def start(self) -> None:
        """Create or bind the blocks stream and the heads bucket."""
        try:
            await self._js.stream_info(self.stream)
        except NotFoundError:
            stream = StreamConfig(
                name=self.stream,
                subjects=[f"{self.bus.subjects.prefix}.blocks.>"],
                retention=RetentionPolicy.LIMITS,
                storage=StorageType.FILE,
                max_msg_size=messages.MAX_PAYLOAD,
                allow_direct=True,
            )
            try:
                await self._js.add_stream(stream)
            except APIError:  # created meanwhile by another node
                await self._js.stream_info(self.stream)
        config = KeyValueConfig(
            bucket=self.bucket, history=1, direct=True, storage=StorageType.FILE
        )
        self._kv = await _bind_or_create(self._js, config)

    # -- heads -----------------------------------------------------------------------------------

    async def head(self, cid: str) -> tuple[dict[str, Any], int] | None:
        """The conversation's durable header and its KV revision, or None when never written."""
        try:
            entry = await self._bucket().get(_key(cid))
        except NotFoundError:
            return None
        header = dict(unpack(entry.value or b"\x80"))
        kv_revision = int(entry.revision or 0)
        self._heads[cid] = _Head(
            kv_revision,
            int(header.get("revision", 0)),
            int(header.get("stream_seq", 0)),
            int(header.get("stored_seq", 0)),
        )
        return header, kv_revision

    async def _conflict(self, cid: str, expected: int) -> HeadConflict:
        current = await self.head(cid)
        if current is None:
            return HeadConflict(cid, expected, 0, None)
        header, kv_revision = current
        return HeadConflict(cid, expected, kv_revision, header.get("writer") or None)

    async def _base(self, cid: str, expect: int) -> _Head:
        """The head at ``expect`` (cached when this copy wrote or read it last)."""
        if not expect:
            return _Head(0, 0, 0, 0)
        cached = self._heads.get(cid)
        if cached is not None and cached.kv_revision == expect:
            return cached
        current = await self.head(cid)
        if current is None:
            raise HeadConflict(cid, expect, 0, None)
        header, kv_revision = current
        if kv_revision != expect:
            raise HeadConflict(cid, expect, kv_revision, header.get("writer") or None)
        return self._heads[cid]

    def forget(self, cid: str) -> None:
        """Drop what this copy remembers of ``cid``'s head (when the node evicts it)."""
        self._heads.pop(cid, None)

    # -- rounds ----------------------------------------------------------------------------------

    def _encode(self, envelope: dict[str, Any], body: dict[str, Any], limit: int) -> list[bytes]:
        whole = pack({**envelope, "part": 0, "parts": 1, **body})
        if len(whole) <= limit:
            return [whole]
        raw = pack(body)
        size = limit - 1024  # the envelope of a part is a few hundred bytes
        chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
        return [
            pack({**envelope, "part": i, "parts": len(chunks), "body": chunk})
            for i, chunk in enumerate(chunks)
        ]

    async def publish_round(
        self,
        cid: str,
        blocks: Sequence[Block | Mapping[str, Any]],
        updated: Sequence[Block | Mapping[str, Any]],
        header: Mapping[str, Any],
        *,
        expect: int | None,
        records: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> int:
        """Append one persisted round, then move the head to it with check-and-set.

        ``blocks`` are the round's new blocks, ``updated`` earlier blocks rewritten
        (hide/unhide), ``header`` the snapshot header (``Timeline.snapshot()`` plus
        ``boundary_seq``; ``stored_seq``, when missing, is the seq after the last new
        block), ``records`` turn records written with the round. ``expect`` is the
        head's KV revision this round builds on (None or 0 for the first round).
        Returns the new KV revision. Raises ``HeadConflict`` when the head is not at
        ``expect``: before publishing when that is already known, else after (those
        messages are then ignored by ``rebuild``).
        """
        base = await self._base(cid, expect or 0)
        boundary = int(header.get("boundary_seq", 0))
        stored = int(header.get("stored_seq", 0)) or max(
            [base.stored_seq, *(int(_as_dict(b)["seq"]) + 1 for b in blocks)]
        )
        round_id = new_id()
        envelope = {
            "cid": cid,
            "revision": base.revision + 1,
            "round": round_id,
            "prev_seq": base.stream_seq,
        }
        body = {
            "blocks": [_as_dict(b) for b in blocks],
            "updated": [_as_dict(b) for b in updated],
            "records": {str(k): dict(v) for k, v in (records or {}).items()},
            "boundary_seq": boundary,
        }
        parts = self._encode(envelope, body, self.part_size)
        subject = self.subject(cid)
        last_seq = 0
        for i, data in enumerate(parts):
            ack = await self._js.publish(
                subject, data, stream=self.stream, headers={"Nats-Msg-Id": f"{round_id}.{i}"}
            )
            last_seq = ack.seq
        value = {
            **header,
            "stored_seq": stored,
            "boundary_seq": boundary,
            "revision": base.revision + 1,
            "stream_seq": last_seq,
            "round": round_id,
            "prev_seq": base.stream_seq,
            "writer": self.writer,
        }
        kv = self._bucket()
        try:
            if expect:
                kv_revision = await kv.update(_key(cid), pack(value), last=expect)
            else:
                kv_revision = await kv.create(_key(cid), pack(value))
        except KeyWrongLastSequenceError:
            self._heads.pop(cid, None)
            raise await self._conflict(cid, expect or 0) from None
        self._heads[cid] = _Head(kv_revision, base.revision + 1, last_seq, stored)
        log.debug(
            "round %s of %s: %d blocks, %d updated, %d parts, head %d",
            base.revision + 1,
            cid,
            len(blocks),
            len(updated),
            len(parts),
            kv_revision,
        )
        return kv_revision

    async def publish_persisted(
        self, cid: str, persisted: PersistedRound, *, expect: int | None
    ) -> int:
        """``publish_round`` of what ``Store.persist_round`` just wrote to the local store."""
        header = {**persisted.snapshot, "boundary_seq": persisted.boundary_seq}
        return await self.publish_round(
            cid,
            persisted.blocks,
            persisted.updated,
            header,
            expect=expect,
            records=persisted.turn_records,
        )

    async def _rounds(self, cid: str, until: int) -> dict[int, _Round]:
        """Every round of ``cid`` up to stream seq ``until``, by the seq of its last part."""
        subject = self.subject(cid)
        rounds: dict[str, _Round] = {}
        seq = 1
        while seq <= until:
            try:
                msg = await self._js.get_msg(
                    self.stream, seq=seq, subject=subject, next=True, direct=True
                )
            except NotFoundError:
                break
            at = int(msg.seq or 0)
            if at > until or at < seq:
                break
            seq = at + 1
            data = _part(msg.data)
            if data is None:
                log.warning("undecodable message %d on %s skipped", at, subject)
                continue
            one = rounds.get(data["round"])
            if one is None:
                one = _Round(int(data["revision"]), int(data["prev_seq"]), int(data["parts"]))
                rounds[data["round"]] = one
            one.got[int(data["part"])] = data
            one.last_seq = at
        return {r.last_seq: r for r in rounds.values() if len(r.got) == r.parts}

    async def read(self, cid: str) -> Rebuilt | None:
        """The conversation rebuilt from the stream along the head's chain, or None.

        Reads only this conversation's subject (direct gets, next by subject), up to
        the head's ``stream_seq``. Raises ``CopyBroken`` when a round of the chain is
        missing or incomplete.
        """
        current = await self.head(cid)
        if current is None:
            return None
        header, kv_revision = current
        revision = int(header.get("revision", 0))
        at = int(header.get("stream_seq", 0))
        complete = await self._rounds(cid, at)
        chain: list[_Round] = []
        while at:
            one = complete.get(at)
            if one is None:
                raise CopyBroken(cid, at, "no complete round ends there")
            if one.prev_seq >= at or one.revision > revision:
                raise CopyBroken(cid, at, "the round does not continue the chain")
            chain.append(one)
            at = one.prev_seq
        by_seq: dict[int, dict[str, Any]] = {}
        records: dict[str, dict[str, Any]] = {}
        for one in reversed(chain):
            body = one.body()
            for block in body.get("blocks", ()):
                by_seq[int(block["seq"])] = block
            for block in body.get("updated", ()):
                by_seq[int(block["seq"])] = block
            for turn_id, record in (body.get("records") or {}).items():
                records[str(turn_id)] = dict(record)
        blocks = [by_seq[s] for s in sorted(by_seq)]
        return Rebuilt(header, blocks, records, kv_revision)

    async def rebuild(self, cid: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The header and every block dict in seq order, from the stream; None when unknown."""
        copy = await self.read(cid)
        return None if copy is None else (copy.header, copy.blocks)


def merge_rounds(rounds: Sequence[PersistedRound]) -> PersistedRound:
    """Local rounds whose publish failed (NATS away), as one round to publish next.

    New blocks keep their order; a later rewrite of a block replaces it wherever it
    is; turn records and the snapshot are the latest ones.
    """
    if not rounds:
        raise ValueError("merge_rounds needs at least one round")
    new: dict[int, Block] = {}
    updated: dict[int, Block] = {}
    records: dict[str, Mapping[str, Any]] = {}
    for one in rounds:
        for block in one.blocks:
            new[block.seq] = block
        for block in one.updated:
            (new if block.seq in new else updated)[block.seq] = block
        records.update(one.turn_records or {})
    last = rounds[-1]
    return PersistedRound(
        last.revision,
        list(new.values()),
        [updated[s] for s in sorted(updated)],
        last.snapshot,
        last.boundary_seq,
        records or None,
    )


# --- into a node's store --------------------------------------------------------------------


def adopt(
    store: Store,
    cid: str,
    copy: Rebuilt,
    *,
    index: Callable[[Sequence[Block]], Sequence[dict[str, Any]]] | None = None,
) -> int:
    """Bring this node's store to the durable copy; returns the local revision.

    When the store holds nothing of ``cid`` or an older prefix of the copy (the same
    block ids at the same seqs), the missing blocks are appended and the changed ones
    rewritten; otherwise (the store has a round the copy lacks: its publish lost) the
    local conversation is replaced whole. Either way one transaction, turn records
    included; ``index`` gives the memsearch rows of the blocks written. Blocking
    (LMDB): run it in a thread.
    """
    _, stored = store.cursor(cid)
    local = {int(b["seq"]): b for b in store.iter_blocks(cid)} if stored else {}
    new: list[Block] = []
    updated: list[Block] = []
    diverged = stored > int(copy.header.get("stored_seq", len(copy.blocks)))
    for raw in copy.blocks:
        seq = int(raw["seq"])
        mine = local.get(seq)
        if seq >= stored:
            new.append(Block.from_dict(raw))
        elif mine is None or mine.get("id") != raw.get("id"):
            diverged = True
        elif mine != raw:
            updated.append(Block.from_dict(raw))
    boundary = int(copy.header.get("boundary_seq", 0))
    if diverged:
        log.info("local copy of %s diverged from the durable copy: replaced", cid)
        blocks = [Block.from_dict(raw) for raw in copy.blocks]
        return store.replace_conversation(
            cid,
            copy.snapshot,
            blocks,
            boundary_seq=boundary,
            index_rows=index(blocks) if index is not None and blocks else (),
            turn_records=copy.records,
        )
    return store.append_turn(
        cid,
        new,
        copy.snapshot,
        updated=updated,
        boundary_seq=boundary,
        index_rows=index(new) if index is not None and new else (),
        turn_records=copy.records,
    )
