"""Persisting a conversation's rounds: new and rewritten blocks, the turn log, the header.

Persisting a turn (``append_turn``) is one write transaction that writes only
the new and changed blocks, their path rows, the turn log entry, the header
rows that changed and the small snapshot header: its cost grows with the turn,
never with the conversation (nor with its sources pool or plans). A
process killed mid-write leaves the last committed state: whole turns, a
sequence without gaps, a header that matches its blocks. ``prepare_round`` packs a
round for a group commit (``actline.storage.committer``); ``replace_conversation`` takes
a conversation over from its durable copy elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import lmdb

from actline.timeline import Block, Timeline
from actline.timeline.snapshot import split

from . import quota
from .environment import Environment
from .errors import NotStored, RevisionConflict, SequenceGap
from .layout import CURSOR_SUFFIX, SEQ_DIGITS, block_key, check_id, pack, path_key, unpack

INDEX_FIELDS = {"turn_id": str, "role": str, "ts": float, "text": str}


def check_index_row(row: dict[str, Any]) -> dict[str, Any]:
    """A memsearch row: turn_id, role (user|assistant|attachment|notes|summary|...), ts,
    text, optional path and vector (a list of floats, or little-endian float16 bytes).
    Raises ValueError naming the field."""
    for name, kind in INDEX_FIELDS.items():
        value = row.get(name)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, kind):
            raise ValueError(f"index row field {name!r} must be {kind.__name__}")
    vector = row.get("vector")
    if vector is not None and not (
        (isinstance(vector, bytes) and len(vector) % 2 == 0)
        or (isinstance(vector, list) and all(isinstance(v, float | int) for v in vector))
    ):
        raise ValueError("index row field 'vector' must be a list of numbers or float16 bytes")
    return row


@dataclass(frozen=True, slots=True)
class PersistedRound:
    """What one ``persist_round`` wrote: the new revision, the new and rewritten blocks, the
    snapshot header (without the store's own fields), the boundary, the turn records and
    the header rows that changed (a copy elsewhere merges them, later rounds winning)."""

    revision: int
    blocks: list[Block]
    updated: list[Block]
    snapshot: dict[str, Any]
    boundary_seq: int
    turn_records: Mapping[str, Mapping[str, Any]] | None = None
    rows: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PreparedRound:
    """A round packed for one write transaction (``Store.prepare_round``)."""

    write: Callable[[lmdb.Transaction], int]
    """Puts the round; returns the new revision. Raises ``SequenceGap`` when the store moved."""
    round: PersistedRound
    """What it writes (``revision`` 0 until ``done``)."""
    undo: Callable[[], None]
    """Gives the timeline back its row and restyle changes after a failed write."""
    stored: Callable[[], None]
    """Tells the timeline how far its blocks are stored, once the write is durable."""

    def done(self, revision: int) -> PersistedRound:
        """The round as written at ``revision``."""
        self.stored()
        return replace(self.round, revision=revision)


class TurnWriter(Environment):
    """The write side of a conversation: its cursor row, rounds and a replacement."""

    def _cursor(self, txn: lmdb.Transaction, cid: str) -> tuple[int, int]:
        raw = txn.get(cid.encode() + CURSOR_SUFFIX, db=self.db["snapshots"])
        if raw is None:
            return 0, 0
        revision, stored = unpack(raw)
        return int(revision), int(stored)

    def cursor(self, cid: str) -> tuple[int, int]:
        """(revision, stored_seq) of a conversation from its small cursor row; (0, 0) when new."""
        return self.read(lambda txn: self._cursor(txn, cid))

    def append_turn(
        self,
        cid: str,
        blocks: Sequence[Block],
        snapshot: dict[str, Any],
        *,
        updated: Sequence[Block] = (),
        boundary_seq: int = 0,
        index_rows: Sequence[dict[str, Any]] = (),
        expect_revision: int | None = None,
        turn_records: Mapping[str, Mapping[str, Any]] | None = None,
        rows: Mapping[str, Any] | None = None,
    ) -> int:
        """Persist new ``blocks`` (continuing the sequence), ``updated`` ones and the header.

        All in one transaction; returns the new revision. Each block is added to
        the turn log of its own turn. ``boundary_seq`` is the
        lowest seq of the visible view (``load`` starts there). ``expect_revision``
        makes the write a check-and-set against a concurrent writer.
        ``turn_records`` (turn id -> record) are written in the same transaction, so a
        turn's checkpoint or result never disagrees with its blocks. ``rows`` are the
        header rows that changed (``Timeline.take_row_changes``); other stored rows stay.
        A ``snapshot`` with the pool and plans inline (``Timeline.full_snapshot``) is
        stored as a small header plus rows (``rows`` win over its own).
        """
        return self.write(
            self.append_fn(
                cid,
                blocks,
                snapshot,
                updated=updated,
                boundary_seq=boundary_seq,
                index_rows=index_rows,
                expect_revision=expect_revision,
                turn_records=turn_records,
                rows=rows,
            )
        )

    def append_fn(
        self,
        cid: str,
        blocks: Sequence[Block],
        snapshot: dict[str, Any],
        *,
        updated: Sequence[Block] = (),
        boundary_seq: int = 0,
        index_rows: Sequence[dict[str, Any]] = (),
        expect_revision: int | None = None,
        turn_records: Mapping[str, Mapping[str, Any]] | None = None,
        rows: Mapping[str, Any] | None = None,
    ) -> Callable[[lmdb.Transaction], int]:
        """``append_turn`` as a function of a write transaction: everything is packed now,
        the transaction only puts bytes (a group commit runs many in one transaction)."""
        check_id(cid)
        snapshot, inline = split(snapshot)
        changed = self._row_items(cid, {**inline, **(rows or {})})
        seqs = [b.seq for b in blocks]
        payloads = [(b.seq, b.path, pack(b.to_dict())) for b in blocks]
        updates = [(b.seq, pack(b.to_dict())) for b in updated]
        memsearch = [pack(check_index_row(r)) for r in index_rows]
        records = [
            (f"{cid}/{check_id(turn)}".encode(), pack(dict(record)))
            for turn, record in (turn_records or {}).items()
        ]
        by_turn: dict[str, list[Block]] = {}
        for block in blocks:
            by_turn.setdefault(block.turn_id, []).append(block)

        def txn_fn(txn: lmdb.Transaction) -> int:
            revision, next_seq = self._cursor(txn, cid)
            if expect_revision is not None and expect_revision != revision:
                raise RevisionConflict(cid, expect_revision, revision)
            for i, seq in enumerate(seqs):
                if seq != next_seq + i:
                    raise SequenceGap(cid, next_seq + i, seq)
            grown = 0  # the conversation's stored block bytes, counted with the blocks
            for seq, path, data in payloads:
                txn.put(block_key(cid, seq), data, db=self.db["blocks"], overwrite=False)
                grown += len(data)
                if path:
                    txn.put(path_key(cid, path, seq), b"", db=self.db["paths"])
            for seq, data in updates:
                key = block_key(cid, seq)
                old = txn.get(key, db=self.db["blocks"])
                if old is None:
                    raise NotStored("block", key.decode())
                grown += len(data) - len(old)
                txn.put(key, data, db=self.db["blocks"])
            quota.add_txn(self, txn, cid, quota.Usage(block_bytes=grown))
            for turn, of_turn in by_turn.items():
                self._log_turn(txn, cid, turn, of_turn)
            for i, row in enumerate(memsearch):
                key = f"{cid}/{revision + 1:0{SEQ_DIGITS}d}/{i:06d}".encode()
                txn.put(key, row, db=self.db["index"])
            for key, data in records:
                txn.put(key, data, db=self.db["turns"])
            for key, data in changed:
                txn.put(key, data, db=self.db["hrows"])
            header = dict(snapshot)
            header["revision"] = revision + 1
            header["stored_seq"] = next_seq + len(seqs)
            header["boundary_seq"] = boundary_seq
            txn.put(cid.encode(), pack(header), db=self.db["snapshots"])
            cursor = pack([revision + 1, next_seq + len(seqs)])
            txn.put(cid.encode() + CURSOR_SUFFIX, cursor, db=self.db["snapshots"])
            return revision + 1

        return txn_fn

    def _row_items(self, cid: str, rows: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
        """Keys and packed values of header rows; a key must fit in an LMDB key."""
        limit = self.env.max_key_size()
        out: list[tuple[bytes, bytes]] = []
        for name, value in rows.items():
            key = f"{cid}/{name}".encode()
            if not name or "\x00" in name or len(key) > limit:
                raise ValueError(f"not a header row key: {name!r}")
            out.append((key, pack(value)))
        return out

    def _log_turn(
        self, txn: lmdb.Transaction, cid: str, turn_id: str, blocks: Sequence[Block]
    ) -> None:
        key = f"{cid}/{turn_id}".encode()
        raw = txn.get(key, db=self.db["turnlog"])
        entry: dict[str, Any] = (
            dict(unpack(raw)) if raw is not None else {"turn_id": turn_id, "seqs": []}
        )
        entry["seqs"] = [*entry["seqs"], *(b.seq for b in blocks)]
        starts = [b.start for b in blocks]
        entry["ts"] = min([entry.get("ts", starts[0]), *starts])
        entry["end_ts"] = max([entry.get("end_ts", 0.0), *(b.ts for b in blocks)])
        entry["blocks_count"] = len(entry["seqs"])
        entry["tokens"] = int(entry.get("tokens", 0)) + sum(max(0, b.tokens) for b in blocks)
        txn.put(key, pack(entry), db=self.db["turnlog"])

    def persist(
        self,
        tl: Timeline,
        *,
        turn_records: Mapping[str, Mapping[str, Any]] | None = None,
        index: Callable[[Sequence[Block]], Sequence[dict[str, Any]]] | None = None,
    ) -> int:
        """Persist what ``tl`` holds beyond what is stored (the usual call after a round).

        New blocks are found from the stored sequence end; blocks hidden or un-hidden
        since the last persist are rewritten in the same transaction, and so are
        ``turn_records`` (see ``append_turn``). ``index`` maps the new blocks to the memsearch
        rows written with them. Returns the new revision (``persist_round`` returns the round).
        """
        return self.persist_round(tl, turn_records=turn_records, index=index).revision

    def persist_round(
        self,
        tl: Timeline,
        *,
        turn_records: Mapping[str, Mapping[str, Any]] | None = None,
        index: Callable[[Sequence[Block]], Sequence[dict[str, Any]]] | None = None,
    ) -> PersistedRound:
        """``persist``, returning what it wrote (for a copy elsewhere, e.g. JetStream).

        Writes the small header and only the header rows that changed since the last
        persist of ``tl``; when the write fails they are given back to ``tl``, so the
        next persist writes them.
        """
        prepared = self.prepare_round(tl, turn_records=turn_records, index=index)
        try:
            revision = self.write(prepared.write)
        except BaseException:
            prepared.undo()
            raise
        return prepared.done(revision)

    def prepare_round(
        self,
        tl: Timeline,
        *,
        turn_records: Mapping[str, Mapping[str, Any]] | None = None,
        index: Callable[[Sequence[Block]], Sequence[dict[str, Any]]] | None = None,
    ) -> PreparedRound:
        """What ``persist_round`` would write, packed, as a function of a write transaction
        (``Committer.submit`` takes it). Takes the timeline's pending row and restyle
        changes: call ``undo()`` when the write fails, so the next round writes them.

        How far the blocks are stored comes from the timeline's own last commit
        (``Timeline.stored_seq``), else from the store's cursor row: a commit reads nothing.
        A write that finds the store moved on raises ``SequenceGap`` and the next round
        asks the store again."""
        stored = tl.stored_seq
        if stored is None:
            _, stored = self.cursor(tl.conversation_id)
        new = tl.blocks_since(stored)
        restyled = tl.take_restyled()
        updated = [b for b in restyled if 0 <= b.seq < stored]
        boundary = tl.boundary_seq
        rows = tl.take_row_changes()
        snapshot = tl.snapshot()
        try:
            write = self.append_fn(
                tl.conversation_id,
                new,
                snapshot,
                updated=updated,
                boundary_seq=boundary,
                index_rows=index(new) if index is not None and new else (),
                turn_records=turn_records,
                rows=rows,
            )
        except BaseException:
            tl.requeue_restyled(restyled)
            tl.requeue_row_changes(rows)
            raise

        def undo() -> None:
            tl.requeue_restyled(restyled)
            tl.requeue_row_changes(rows)
            tl.stored_seq = None

        def stored_to() -> None:
            tl.stored_seq = stored + len(new)

        persisted = PersistedRound(0, list(new), updated, snapshot, boundary, turn_records, rows)
        return PreparedRound(write, persisted, undo, stored_to)

    def replace_conversation(
        self,
        cid: str,
        snapshot: dict[str, Any],
        blocks: Sequence[Block],
        *,
        boundary_seq: int = 0,
        index_rows: Sequence[dict[str, Any]] = (),
        turn_records: Mapping[str, Mapping[str, Any]] | None = None,
        rows: Mapping[str, Any] | None = None,
    ) -> int:
        """Drop this store's copy of a conversation and write ``blocks`` (seq 0..n-1) instead.

        For a node that takes a conversation over from its durable copy elsewhere: blocks,
        path rows, turn log, memsearch rows, header rows and the header are replaced
        (workspace files and final turn records of other turns stay; the record of a
        turn left running whose rounds the copy lacks is dropped, so the turn starts
        again from its prompt); ``rows`` are every header row of the copy. Returns the
        new revision.
        """
        check_id(cid)
        prefix = f"{cid}/".encode()
        kept = set(turn_records or {})

        def wipe(txn: lmdb.Transaction) -> None:
            for name in ("blocks", "paths", "turnlog", "index", "hrows"):
                cursor = txn.cursor(db=self.db[name])
                if not cursor.set_range(prefix):
                    continue
                while bytes(cursor.key()).startswith(prefix):
                    if not cursor.delete():
                        break
            txn.delete(cid.encode(), db=self.db["snapshots"])
            txn.delete(cid.encode() + CURSOR_SUFFIX, db=self.db["snapshots"])
            # A turn this store saw running whose rounds the copy does not hold starts
            # again from its prompt: its checkpoint here is ahead of the blocks now.
            cursor = txn.cursor(db=self.db["turns"])
            stale: list[bytes] = []
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    tid = bytes(key)[len(prefix) :].decode()
                    record = unpack(value)
                    if tid not in kept and isinstance(record, dict):
                        if record.get("status") == "running":
                            stale.append(bytes(key))
            for key in stale:
                txn.delete(key, db=self.db["turns"])
            held = quota.usage_txn(self, txn, cid)
            quota.set_txn(self, txn, cid, replace(held, block_bytes=0))

        self.write(wipe)
        return self.append_turn(
            cid,
            blocks,
            snapshot,
            boundary_seq=boundary_seq,
            index_rows=index_rows,
            turn_records=turn_records,
            rows=rows,
        )
