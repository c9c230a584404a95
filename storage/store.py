"""The per-node LMDB store: block log, snapshot headers, turn log, path index.

One LMDB environment per node with named databases (keys are bytes)::

    blocks     <cid>/<seq:012d>            -> msgpack block dict (append-only; hide/unhide
                                              rewrite the same key)
    paths      <cid>/<path>\\x00<seq:012d>  -> b""      (every block by logical path)
    snapshots  <cid>                       -> msgpack header: Timeline.snapshot() plus
                                              revision, stored_seq, boundary_seq (small:
                                              its size does not grow with the conversation)
               <cid>\\x00cursor            -> msgpack [revision, stored_seq] (what a commit
                                              reads; the header is only written)
    hrows      <cid>/<row_key>             -> msgpack header row: the state that grows
                                              (``src/<sid>`` pool rows, ``plan/<id>`` plans;
                                              see ``actline.timeline.snapshot``), written when
                                              changed
    turnlog    <cid>/<turn_id>             -> msgpack {turn_id, seqs, ts, end_ts, blocks_count,
                                              tokens}
    turns      <cid>/<turn_id>             -> msgpack record of the decision loop: its
                                              checkpoint while it runs, its result after
    index      <cid>/<revision>/<i:06d>    -> msgpack memsearch row, written with its blocks
    vectors    <model>:<sha256 of a text>  -> float16 embedding of that text (a cache shared
                                              by every conversation of the node)
    usage      <cid>                       -> msgpack per-conversation counters, written with
                                              what they count (see ``actline.storage.quota``)
    ufacts     <sha256(user_id)[:32]>/<row> -> msgpack memory fact row (``fact/<hash>``,
                                              ``actline.timeline.editing.facts``) shared by a user's
                                              conversations (memory scope ``user``)
    artifacts, artrefs, workspace: see their modules.

Persisting a turn (``append_turn``) is one write transaction that writes only
the new and changed blocks, their path rows, the turn log entry, the header
rows that changed and the small snapshot header: its cost grows with the turn,
never with the conversation (nor with its sources pool or plans). A
process killed mid-write leaves the last committed state: whole turns, a
sequence without gaps, a header that matches its blocks.

Locking: LMDB's lock file serialises writers across processes (one write
transaction at a time per environment) while readers run on MVCC snapshots and
are never blocked. Several processes on one node may open the same
environment; each opens it once (LMDB refuses a second open in one process)
and never uses it across ``fork()``. Stale reader slots of killed processes are
cleared on open (``reader_check``). A map grown by another process is adopted
on the next transaction.

Map growth: a write that hits ``MapFullError`` is aborted, the map doubles (up
to ``max_map_size``) and the transaction is retried from the start; past the
limit ``StoreFull`` is raised. ENOSPC from the file system becomes ``DiskFull``.
"""

from __future__ import annotations

import errno
import hashlib
import os
import resource
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import msgpack

from actline.messages.ids import is_valid_id
from actline.timeline import Block, Timeline
from actline.timeline.blocks import COMPLETION, USER_PROMPT
from actline.timeline.snapshot import split

from . import quota
from .errors import (
    DiskFull,
    NotStored,
    RevisionConflict,
    SequenceGap,
    StorageError,
    StoreFull,
)

T = TypeVar("T")
DATABASES = (
    "blocks",
    "paths",
    "snapshots",
    "turnlog",
    "artifacts",
    "artrefs",
    "workspace",
    "index",
    "hrows",
    "turns",
    "vectors",
    "usage",
    "ufacts",
)
DEFAULT_MAP_SIZE = 64 << 20
DEFAULT_MAX_MAP_SIZE = 1 << 40
SEQ_DIGITS = 12
MAX_PATH_KEY = 400
CURSOR_SUFFIX = b"\x00cursor"
"""Next to each header a tiny row (revision, stored_seq): a commit never reads the header."""


def check_id(cid: str) -> str:
    """Conversation ids go into keys: the id grammar keeps ``/`` and NUL out of them."""
    if not is_valid_id(cid):
        raise ValueError(f"not a valid conversation id: {cid!r}")
    return cid


LOW_DISK_BYTES = 64 << 20
"""An I/O error at commit with less than this free is reported as a full disk."""


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def block_key(cid: str, seq: int) -> bytes:
    return f"{cid}/{seq:0{SEQ_DIGITS}d}".encode()


def path_key(cid: str, path: str, seq: int | None = None) -> bytes:
    """The path-index key; paths too long for an LMDB key (511 bytes) go by their sha256."""
    head = f"{cid}/{path}\x00".encode()
    if len(head) > MAX_PATH_KEY:
        head = f"{cid}/#{hashlib.sha256(path.encode()).hexdigest()}\x00".encode()
    return head if seq is None else head + f"{seq:0{SEQ_DIGITS}d}".encode()


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


class Gate:
    """Shared for transactions, exclusive for a map resize; per process.

    A thread that needs a resize while it holds a shared slot itself (it writes
    from inside an ``iter_blocks`` loop) gets a ``StorageError`` instead of a
    deadlock.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._holders: dict[int, int] = {}
        """Shared slots per thread that took them (an iteration may end on another thread)."""

    def _hold(self, ident: int, delta: int) -> None:
        count = self._holders.get(ident, 0) + delta
        if count:
            self._holders[ident] = count
        else:
            self._holders.pop(ident, None)

    @contextmanager
    def shared(self) -> Iterator[None]:
        ident = threading.get_ident()
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._shared += 1
            self._hold(ident, 1)
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._hold(ident, -1)
                self._cond.notify_all()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give this thread's shared slot up for a moment (to resize before a read)."""
        ident = threading.get_ident()
        with self._cond:
            self._shared -= 1
            self._hold(ident, -1)
            self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                while self._exclusive:
                    self._cond.wait()
                self._shared += 1
                self._hold(ident, 1)

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            mine = self._holders.get(threading.get_ident(), 0)
        if mine:
            raise StorageError(
                "the map must grow but this thread is iterating the store; "
                "finish the iteration (or list() it) before writing"
            )
        with self._cond:
            while self._exclusive or self._shared:
                self._cond.wait()
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


@dataclass(frozen=True, slots=True)
class Outline:
    """What a list of conversations shows of one, read without loading it (``Store.outline``)."""

    title: str
    """The first line of the first user block with text, among the first ``OUTLINE_HEAD``."""
    turns: int
    """Its turns that have a decision-loop record (every turn that ran a round)."""
    last_turn: str
    """The turn of its last block."""
    last_status: str
    """That turn's record status (``running``, ``completed``, …); "" without a record."""
    last_ts: float
    """Its last block's time."""


@dataclass(frozen=True, slots=True)
class TurnBrief:
    """What the console shows of one stored turn (``Store.turn_briefs``)."""

    turn_id: str
    prompt: str
    """The text of its first ``user.prompt`` block with text ("" without one)."""
    answer: str
    """The text of its last ``assistant.completion`` block with text ("" without one)."""


OUTLINE_HEAD = 20
"""Blocks from a conversation's start that ``Store.outline`` looks through for its title."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """A conversation as loaded: its timeline (visible view) and its header."""

    timeline: Timeline
    header: dict[str, Any]

    @property
    def revision(self) -> int:
        return int(self.header.get("revision", 0))


class Store:
    """One LMDB environment; thread-safe; open once per process."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        map_size: int = DEFAULT_MAP_SIZE,
        max_map_size: int = DEFAULT_MAX_MAP_SIZE,
        sync: bool = True,
    ) -> None:
        self.path = Path(path)
        self.synced = sync
        """Commits are fsync-ed (``sync=False`` risks the last commits on an OS crash)."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.max_map_size = max(max_map_size, map_size)
        try:
            self.env = lmdb.open(
                str(self.path),
                map_size=map_size,
                max_dbs=len(DATABASES) + 2,
                sync=sync,
                metasync=sync,
                readahead=False,
                max_readers=256,
            )
        except lmdb.Error as exc:
            raise self._translate(exc) from exc
        self.env.reader_check()
        # Inside an explicit transaction: a bare open_db() waits for the writer lock
        # while holding the GIL, freezing every thread of this process meanwhile.
        try:
            with self.env.begin(write=True) as txn:
                self.db = {name: self.env.open_db(name.encode(), txn=txn) for name in DATABASES}
        except lmdb.Error as exc:
            raise self._translate(exc) from exc
        self._gate = Gate()

    # -- plumbing --------------------------------------------------------------------------------

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def map_size(self) -> int:
        return int(self.env.info()["map_size"])

    def _translate(self, exc: lmdb.Error) -> Exception:
        """ENOSPC, or the EIO LMDB reports for a short write, on a full disk -> DiskFull."""
        text = str(exc)
        code = getattr(exc, "errno", None)
        short_write = code == errno.EIO or "Input/output error" in text
        if code == errno.ENOSPC or "No space left" in text:
            return DiskFull(str(self.path), text)
        if short_write:
            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
            if limit != resource.RLIM_INFINITY:
                return DiskFull(str(self.path), f"{text}; file size limit {limit:,} bytes")
            free = shutil.disk_usage(self.path).free
            if free < LOW_DISK_BYTES:
                return DiskFull(str(self.path), f"{text}; {free:,} bytes free")
        return exc

    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn`` in one write transaction, growing the map and retrying when full."""
        while True:
            try:
                with self._gate.shared(), self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._resize(0)
            except lmdb.MapFullError:
                self._grow()
            except lmdb.Error as exc:
                raise self._translate(exc) from exc

    def read(self, fn: Callable[[lmdb.Transaction], T]) -> T:
        """Run ``fn`` in a read transaction (an MVCC snapshot; never blocked by writers)."""
        while True:
            try:
                with self._gate.shared(), self.env.begin(buffers=False) as txn:
                    return fn(txn)
            except lmdb.MapResizedError:
                self._resize(0)

    def _grow(self) -> None:
        current = self.map_size
        if current >= self.max_map_size:
            raise StoreFull(current, self.max_map_size)
        self._resize(min(self.max_map_size, current * 2))

    def _resize(self, size: int) -> None:
        """``set_mapsize`` (0 = adopt another process's size) with no transaction open here.

        py-lmdb invalidates every open transaction of the process on a resize, so it
        waits for this process's readers and writers to finish (the gate).
        """
        with self._gate.exclusive():
            if size and self.map_size >= size:
                return  # another thread grew it meanwhile
            try:
                self.env.set_mapsize(size)
            except lmdb.Error as exc:
                raise self._translate(exc) from exc

    # -- conversations --------------------------------------------------------------------------

    def _cursor(self, txn: lmdb.Transaction, cid: str) -> tuple[int, int]:
        raw = txn.get(cid.encode() + CURSOR_SUFFIX, db=self.db["snapshots"])
        if raw is None:
            return 0, 0
        revision, stored = unpack(raw)
        return int(revision), int(stored)

    def cursor(self, cid: str) -> tuple[int, int]:
        """(revision, stored_seq) of a conversation from its small cursor row; (0, 0) when new."""
        return self.read(lambda txn: self._cursor(txn, cid))

    def header(self, cid: str) -> dict[str, Any] | None:
        """The snapshot header of a conversation, or None when it was never stored."""
        raw = self.read(lambda txn: txn.get(cid.encode(), db=self.db["snapshots"]))
        return None if raw is None else dict(unpack(raw))

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

    def iter_blocks(self, cid: str, start: int = 0) -> Iterator[dict[str, Any]]:
        """Stored block dicts of a conversation from ``start`` on, in seq order (one snapshot).

        While the iteration is open, a map resize in this process waits for it: do not
        wait on a writer from inside the loop, and do not write from the same thread
        (that raises ``StorageError``); ``list()`` it first.
        """
        check_id(cid)
        with self._gate.shared():
            while True:
                try:
                    txn = self.env.begin(buffers=True)
                    break
                except lmdb.MapResizedError:
                    with self._gate.released():
                        self._resize(0)
            with txn:
                cursor = txn.cursor(db=self.db["blocks"])
                prefix = f"{cid}/".encode()
                if not cursor.set_range(block_key(cid, start)):
                    return
                for key, value in cursor:
                    if not bytes(key).startswith(prefix):
                        return
                    yield dict(unpack(value))

    def _rows(self, txn: lmdb.Transaction, cid: str) -> dict[str, Any]:
        prefix = f"{cid}/".encode()
        cursor = txn.cursor(db=self.db["hrows"])
        out: dict[str, Any] = {}
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not bytes(key).startswith(prefix):
                    break
                out[bytes(key)[len(prefix) :].decode()] = unpack(value)
        return out

    def header_rows(self, cid: str) -> dict[str, Any]:
        """Every stored header row of a conversation (row key -> row), e.g. to publish it whole."""
        check_id(cid)
        return self.read(lambda txn: self._rows(txn, cid))

    def load(self, cid: str) -> Loaded:
        """The visible view (from the latest summary boundary), pool, plans and cursors."""
        check_id(cid)

        def fn(txn: lmdb.Transaction) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
            # Header, rows and blocks from one MVCC snapshot, so they are of one revision.
            raw = txn.get(cid.encode(), db=self.db["snapshots"])
            if raw is None:
                raise NotStored("conversation", cid)
            header = dict(unpack(raw))
            rows = self._rows(txn, cid)
            prefix = f"{cid}/".encode()
            cursor = txn.cursor(db=self.db["blocks"])
            blocks: list[Any] = []
            if cursor.set_range(block_key(cid, int(header.get("boundary_seq", 0)))):
                for key, value in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    blocks.append(unpack(value))
            return header, rows, blocks

        header, rows, blocks = self.read(fn)
        return Loaded(Timeline.restore(header, blocks, rows=rows), header)

    def usage(self, cid: str) -> quota.Usage:
        """What ``cid`` holds against its quotas: block, workspace and artifact counters
        (one read; ``actline.storage.quota`` says what each counts)."""
        check_id(cid)
        return self.read(lambda txn: quota.usage_txn(self, txn, cid))

    def turn_log(self, cid: str, turn_id: str) -> dict[str, Any]:
        raw = self.read(lambda txn: txn.get(f"{cid}/{turn_id}".encode(), db=self.db["turnlog"]))
        if raw is None:
            raise NotStored("turn log", f"{cid}/{turn_id}")
        return dict(unpack(raw))

    def read_path(self, cid: str, path: str) -> list[Block]:
        """Every block stored at a logical path, hidden and compacted ones included.

        Only blocks: workspace files (``fi:``) are read through ``storage.Workspace``.
        """
        return self._read_blocks(cid, path)

    def _read_blocks(self, cid: str, path: str) -> list[Block]:

        def fn(txn: lmdb.Transaction) -> list[Block]:
            prefix = path_key(cid, path)
            cursor = txn.cursor(db=self.db["paths"])
            out: list[Block] = []
            if cursor.set_range(prefix):
                for key in cursor.iternext(values=False):
                    if not bytes(key).startswith(prefix):
                        break
                    seq = int(key[len(prefix) :])
                    raw = txn.get(block_key(cid, seq), db=self.db["blocks"])
                    if raw is not None:
                        out.append(Block.from_dict(unpack(raw)))
            return out

        return self.read(fn)

    def outline(self, cid: str) -> Outline:
        """A conversation's title, turns and last turn in one read, whatever its length: the
        first ``OUTLINE_HEAD`` blocks at most, its last block, and its turn records' keys."""
        check_id(cid)
        prefix = f"{cid}/".encode()

        def fn(txn: lmdb.Transaction) -> Outline:
            blocks = txn.cursor(db=self.db["blocks"])
            title = ""
            if blocks.set_range(prefix):
                for n, (key, raw) in enumerate(blocks):
                    if n >= OUTLINE_HEAD or not bytes(key).startswith(prefix):
                        break
                    block = unpack(raw)
                    text = str(block.get("text") or "").strip()
                    if str(block.get("type", "")).startswith("user") and text:
                        title = text.split("\n", 1)[0]
                        break
            last: dict[str, Any] = {}
            # '0' follows '/': the first key past every "<cid>/<seq>" is at or after "<cid>0"
            at_end = blocks.prev() if blocks.set_range(f"{cid}0".encode()) else blocks.last()
            if at_end and bytes(blocks.key()).startswith(prefix):
                last = dict(unpack(blocks.value()))
            turns = 0
            records = txn.cursor(db=self.db["turns"])
            if records.set_range(prefix):
                for key in records.iternext(values=False):
                    if not bytes(key).startswith(prefix):
                        break
                    turns += 1
            last_turn = str(last.get("turn_id") or "")
            found = txn.get(prefix + last_turn.encode(), db=self.db["turns"]) if last_turn else None
            record = unpack(found) if found is not None else {}
            status = str(record.get("status") or "") if isinstance(record, dict) else ""
            return Outline(title, turns, last_turn, status, float(last.get("ts") or 0.0))

        return self.read(fn)

    def turn_briefs(self, cid: str) -> list[TurnBrief]:
        """Each stored turn's prompt and answer, in the order the turns first appear, in one
        read: the turn log, then the blocks at each turn's prompt and completion paths (its
        cost grows with the turns, never with the other blocks: tool results stay unread)."""
        prefix = f"{check_id(cid)}/".encode()

        def texts(txn: lmdb.Transaction, paths: lmdb.Cursor, turn_id: str, kind: str) -> list[str]:
            """The texts of the turn's ``kind`` blocks at their path ``ar:<turn>.<kind>``
            (``ar_path``'s text, built here: the turn ids are the store's own)."""
            at = path_key(cid, f"ar:{turn_id}.{kind}")
            out: list[str] = []
            if paths.set_range(at):
                for key in paths.iternext(values=False):
                    if not bytes(key).startswith(at):
                        break
                    raw = txn.get(block_key(cid, int(key[len(at) :])), db=self.db["blocks"])
                    block = unpack(raw) if raw is not None else {}
                    same = block.get("type") == kind and block.get("turn_id") == turn_id
                    if same and block.get("text"):
                        out.append(str(block["text"]))
            return out

        def fn(txn: lmdb.Transaction) -> list[TurnBrief]:
            first: list[tuple[int, str]] = []
            log = txn.cursor(db=self.db["turnlog"])
            if log.set_range(prefix):
                for key, raw in log:
                    if not bytes(key).startswith(prefix):
                        break
                    entry = unpack(raw)
                    if entry.get("seqs"):
                        first.append((min(entry["seqs"]), str(entry["turn_id"])))
            briefs = []
            paths = txn.cursor(db=self.db["paths"])
            for _, tid in sorted(first):
                prompts = texts(txn, paths, tid, USER_PROMPT)
                answers = texts(txn, paths, tid, COMPLETION)
                prompt, answer = prompts[0] if prompts else "", answers[-1] if answers else ""
                briefs.append(TurnBrief(tid, prompt, answer))
            return briefs

        return self.read(fn)

    def turn_record(self, cid: str, turn_id: str) -> dict[str, Any] | None:
        """The decision-loop record of a turn (checkpoint or result), or None."""
        key = f"{check_id(cid)}/{check_id(turn_id)}".encode()
        raw = self.read(lambda txn: txn.get(key, db=self.db["turns"]))
        return None if raw is None else dict(unpack(raw))

    def unfinished_turns(self) -> list[tuple[str, dict[str, Any]]]:
        """``(conversation id, checkpoint)`` of every turn whose record says ``running``:
        turns a killed node left mid-way (their open agent tasks are in the checkpoint)."""

        def fn(txn: lmdb.Transaction) -> list[tuple[str, dict[str, Any]]]:
            out: list[tuple[str, dict[str, Any]]] = []
            for key, raw in txn.cursor(db=self.db["turns"]):
                record = unpack(raw)
                if isinstance(record, dict) and record.get("status") == "running":
                    cid = bytes(key).decode().rsplit("/", 1)[0]
                    out.append((cid, dict(record)))
            return out

        return self.read(fn)

    def get_vectors(self, keys: Sequence[str]) -> dict[str, bytes]:
        """Cached embeddings by key (``<model>:<sha256 of the text>``); absent keys left out."""

        def fn(txn: lmdb.Transaction) -> dict[str, bytes]:
            out: dict[str, bytes] = {}
            for key in keys:
                raw = txn.get(key.encode(), db=self.db["vectors"])
                if raw is not None:
                    out[key] = bytes(raw)
            return out

        return self.read(fn)

    def put_vectors(self, items: Mapping[str, bytes]) -> None:
        """Cache embeddings (one transaction); keys longer than an LMDB key are refused."""
        rows = [(key.encode(), value) for key, value in items.items()]
        limit = self.env.max_key_size()
        for key, _ in rows:
            if not key or len(key) > limit:
                raise ValueError(f"vector key must be 1-{limit} bytes, got {len(key)}")

        def fn(txn: lmdb.Transaction) -> None:
            for key, value in rows:
                txn.put(key, value, db=self.db["vectors"])

        self.write(fn)

    @staticmethod
    def _user_prefix(user_id: str) -> bytes:
        if not user_id:
            raise ValueError("user facts need a user id")
        return hashlib.sha256(user_id.encode()).hexdigest()[:32].encode() + b"/"

    def user_facts(self, user_id: str) -> dict[str, Any]:
        """The memory fact rows of a user (row key -> row), shared by their conversations."""
        prefix = self._user_prefix(user_id)

        def fn(txn: lmdb.Transaction) -> dict[str, Any]:
            out: dict[str, Any] = {}
            cursor = txn.cursor(db=self.db["ufacts"])
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    out[bytes(key)[len(prefix) :].decode()] = unpack(value)
            return out

        return self.read(fn)

    def put_user_facts(self, user_id: str, rows: Mapping[str, Any]) -> None:
        """Write a user's changed fact rows (one transaction; other rows stay)."""
        prefix = self._user_prefix(user_id)
        items = [(prefix + key.encode(), pack(value)) for key, value in rows.items()]

        def fn(txn: lmdb.Transaction) -> None:
            for key, value in items:
                txn.put(key, value, db=self.db["ufacts"])

        if items:
            self.write(fn)

    def index_rows(self, cid: str) -> list[dict[str, Any]]:
        """The memsearch rows of a conversation in the order they were written."""

        def fn(txn: lmdb.Transaction) -> list[dict[str, Any]]:
            prefix = f"{cid}/".encode()
            cursor = txn.cursor(db=self.db["index"])
            out: list[dict[str, Any]] = []
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    out.append(dict(unpack(value)))
            return out

        return self.read(fn)
