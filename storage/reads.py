"""Reading a conversation back: its header and rows, its blocks, turn records, index rows.

Every read is one MVCC snapshot (``Environment.read``): a ``load`` sees the header, the
header rows and the blocks of one revision while writers go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lmdb

from actline.timeline import Block, Timeline

from . import quota
from .environment import Environment
from .errors import NotStored
from .layout import block_key, check_id, path_key, unpack


@dataclass(frozen=True, slots=True)
class Loaded:
    """A conversation as loaded: its timeline (visible view) and its header."""

    timeline: Timeline
    header: dict[str, Any]

    @property
    def revision(self) -> int:
        return int(self.header.get("revision", 0))


class ConversationReader(Environment):
    """What a conversation holds, read without writing."""

    def header(self, cid: str) -> dict[str, Any] | None:
        """The snapshot header of a conversation, or None when it was never stored."""
        raw = self.read(lambda txn: txn.get(cid.encode(), db=self.db["snapshots"]))
        return None if raw is None else dict(unpack(raw))

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

    def turn_record(self, cid: str, turn_id: str) -> dict[str, Any] | None:
        """The decision-loop record of a turn (checkpoint or result), or None."""
        key = f"{check_id(cid)}/{check_id(turn_id)}".encode()
        raw = self.read(lambda txn: txn.get(key, db=self.db["turns"]))
        return None if raw is None else dict(unpack(raw))

    def turn_records(self, cid: str) -> dict[str, dict[str, Any]]:
        """Every turn record of a conversation, by turn id."""
        prefix = f"{check_id(cid)}/".encode()

        def fn(txn: lmdb.Transaction) -> dict[str, dict[str, Any]]:
            out: dict[str, dict[str, Any]] = {}
            cursor = txn.cursor(db=self.db["turns"])
            if cursor.set_range(prefix):
                for key, raw in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    out[bytes(key)[len(prefix) :].decode()] = dict(unpack(raw))
            return out

        return self.read(fn)

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
