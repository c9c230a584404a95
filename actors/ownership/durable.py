"""The durable copy of every conversation's timeline in JetStream.

Durable copy: the stream ``Subjects.blocks_stream`` on ``Subjects.blocks(cid)`` holds
one message per persisted round, msgpack::

    {"cid", "revision", "round", "prev_seq", "part", "parts",
     "blocks": [new block dicts], "updated": [rewritten block dicts],
     "records": {turn_id: record}, "boundary_seq", "rows": {row key: row}}

A round too large for one message is packed once and cut into ``parts`` messages
carrying ``"body"`` (bytes of that msgpack body) instead of the four body fields.
The KV bucket ``Subjects.heads_bucket`` holds one key per conversation: the snapshot
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

Header rows (the sources pool, plans: ``Store.header_rows``) travel in each round's
body as ``"rows"`` (only the rows that round changed); ``read`` merges them along
the chain, so a head stays small however large the pool grows.

Errors: ``HeadConflict`` (the head moved since ``expected``) and ``CopyBroken`` (a
round of the chain is missing), from ``actline.actors.errors``.

Cancellation: every method is a short sequence of requests; cancelling one
propagates ``CancelledError``. A ``publish_round`` cancelled before its CAS leaves
stream messages that no head points at: ``read`` ignores them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from msgpack.exceptions import UnpackException

from actline import messages
from actline.actors.errors import CopyBroken, HeadConflict, NodeNotStarted
from actline.bus import Bus, EventLog, KeyExists, KvBucket, WrongRevision
from actline.messages.ids import new_id
from actline.storage import Store
from actline.storage.layout import pack, unpack
from actline.storage.rounds import PersistedRound
from actline.timeline import Block

log = logging.getLogger(__name__)

HEADROOM = 16 * 1024
"""Bytes of a message kept for NATS headers and the part envelope."""

TRANSPORT_FIELDS = ("revision", "stream_seq", "round", "prev_seq", "writer")
"""Fields of a durable head that describe the copy, not the timeline."""


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
    rows: dict[str, Any] = field(default_factory=dict)
    """The header rows (sources pool, plans) as of the head."""

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

    ``writer`` (the node id) is recorded in each head and reported by ``HeadConflict``;
    ``replicas`` (None: the bus's, ``actline.bus.jetstream.replicas_for``) those of both.
    """

    def __init__(self, bus: Bus, *, writer: str = "", replicas: int | None = None) -> None:
        self.bus = bus
        self.writer = writer
        self.stream = bus.subjects.blocks_stream
        self.bucket = bus.subjects.heads_bucket
        self.replicas = replicas
        self._log: EventLog | None = None
        self._kv: KvBucket | None = None
        self._heads: dict[str, _Head] = {}

    def subject(self, cid: str) -> str:
        """The stream subject of one conversation's rounds."""
        return self.bus.subjects.blocks(cid)

    @property
    def part_size(self) -> int:
        """The largest message this copy publishes (the server's max payload, less headroom)."""
        return min(self.bus.max_payload, messages.MAX_PAYLOAD) - HEADROOM

    def _bucket(self) -> KvBucket:
        if self._kv is None:
            raise NodeNotStarted("the durable copy (JetStreamCopy.start())")
        return self._kv

    def _stream(self) -> EventLog:
        if self._log is None:
            raise NodeNotStarted("the durable copy (JetStreamCopy.start())")
        return self._log

    async def start(self) -> None:
        """Create or bind the blocks stream and the heads bucket."""
        self._log = await EventLog.open(
            self.bus,
            name=self.stream,
            subjects=self.bus.subjects.blocks_all,
            max_msg_size=messages.MAX_PAYLOAD,
            replicas=self.replicas,
        )
        self._kv = await KvBucket.open(
            self.bus, name=self.bucket, history=1, replicas=self.replicas
        )
        self._kv.on_healed.append(self._heads.clear)  # made again: every head is gone

    # -- heads -----------------------------------------------------------------------------------

    async def head(self, cid: str) -> tuple[dict[str, Any], int] | None:
        """The conversation's durable header and its KV revision, or None when never written."""
        entry = await self._bucket().get(self.bus.subjects.kv_key(cid))
        if entry is None:
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
        rows: Mapping[str, Any] | None = None,
    ) -> int:
        """Append one persisted round, then move the head to it with check-and-set.

        ``blocks`` are the round's new blocks, ``updated`` earlier blocks rewritten
        (hide/unhide), ``header`` the snapshot header (``Timeline.snapshot()`` plus
        ``boundary_seq``; ``stored_seq``, when missing, is the seq after the last new
        block), ``records`` turn records written with the round, ``rows`` the header rows
        it changed (``Store.header_rows``). ``expect`` is the
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
            "rows": dict(rows or {}),
        }
        parts = self._encode(envelope, body, self.part_size)
        subject = self.subject(cid)
        last_seq = 0
        for i, data in enumerate(parts):
            last_seq = await self._stream().append(subject, data, msg_id=f"{round_id}.{i}")
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
        key = self.bus.subjects.kv_key(cid)
        try:
            if expect:
                kv_revision = await kv.update(key, pack(value), last=expect)
            else:
                kv_revision = await kv.create(key, pack(value))
        except (WrongRevision, KeyExists):
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
            rows=persisted.rows,
        )

    async def _rounds(self, cid: str, until: int) -> dict[int, _Round]:
        """Every round of ``cid`` up to stream seq ``until``, by the seq of its last part."""
        subject = self.subject(cid)
        rounds: dict[str, _Round] = {}
        seq = 1
        while seq <= until:
            found = await self._stream().next_after(subject, seq)
            if found is None:
                break
            at, raw = found
            if at > until or at < seq:
                break
            seq = at + 1
            data = _part(raw)
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
        rows: dict[str, Any] = {}
        for one in reversed(chain):
            body = one.body()
            for block in body.get("blocks", ()):
                by_seq[int(block["seq"])] = block
            for block in body.get("updated", ()):
                by_seq[int(block["seq"])] = block
            for turn_id, record in (body.get("records") or {}).items():
                records[str(turn_id)] = dict(record)
            rows.update(body.get("rows") or {})
        blocks = [by_seq[s] for s in sorted(by_seq)]
        return Rebuilt(header, blocks, records, kv_revision, rows)

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
    rows: dict[str, Any] = {}
    for one in rounds:
        for block in one.blocks:
            new[block.seq] = block
        for block in one.updated:
            (new if block.seq in new else updated)[block.seq] = block
        records.update(one.turn_records or {})
        rows.update(one.rows or {})
    last = rounds[-1]
    return PersistedRound(
        last.revision,
        list(new.values()),
        [updated[s] for s in sorted(updated)],
        last.snapshot,
        last.boundary_seq,
        records or None,
        rows=rows,
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
            rows=copy.rows,
        )
    return store.append_turn(
        cid,
        new,
        copy.snapshot,
        updated=updated,
        boundary_seq=boundary,
        index_rows=index(new) if index is not None and new else (),
        turn_records=copy.records,
        rows=copy.rows,
    )
