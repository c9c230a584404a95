"""Managing stored conversations: their management row, the list of ids, turn order, delete.

A conversation's management row (``convmeta <cid>``) holds what the user or a fork set on
it, never what its turns wrote: ``title`` (a rename: lists and outlines prefer it to the
title gate's), ``renamed`` (when), and for a fork ``forked_from`` (``[cid, turn_id]``),
``fork_seq`` (its first seq of its own) and ``created`` (when it was forked). Renaming
writes this row only: no block is rewritten.

``delete`` removes every row of a conversation, in every database, in one write
transaction: blocks, path rows, turn log, turn records, memsearch rows, header rows, the
header and its cursor, the usage counters, the workspace rows and the management row. Each
workspace version gives its reference to its bytes back; bytes no reference holds any more
are removed in the same transaction (bytes a fork shares keep their count and stay).
Rows shared by every conversation of the node (the embedding cache, users' memory facts)
stay. Its cost grows with the conversation (every key is visited once).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lmdb

from . import artifacts
from .errors import NotStored
from .layout import CURSOR_SUFFIX, check_id, pack, unpack
from .store import Store

__all__ = [
    "Removed",
    "conversation_ids",
    "delete_conversation",
    "management_row",
    "set_title",
    "turn_order",
]

PER_CID_DATABASES = ("blocks", "paths", "turnlog", "turns", "index", "hrows")
"""Databases whose keys start with ``<cid>/``."""


@dataclass(frozen=True, slots=True)
class Removed:
    """What ``delete_conversation`` removed."""

    conversation_id: str
    blocks: int
    turns: int
    """Turns with a turn log entry or a turn record."""
    files: int
    """Workspace file versions (tombstones included)."""
    artifacts: int
    """Stored bytes removed because no reference held them any more."""
    artifact_bytes: int
    rows: int
    """Every key removed, in every database."""


def management_row(store: Store, cid: str) -> dict[str, Any]:
    """The management row of ``cid`` (``{}`` when nothing was set)."""
    key = check_id(cid).encode()
    raw = store.read(lambda txn: txn.get(key, db=store.db["convmeta"]))
    return {} if raw is None else dict(unpack(raw))


def management_row_txn(store: Store, txn: lmdb.Transaction, cid: str) -> dict[str, Any]:
    raw = txn.get(cid.encode(), db=store.db["convmeta"])
    return {} if raw is None else dict(unpack(raw))


def set_title(store: Store, cid: str, title: str, *, ts: float | None = None) -> dict[str, Any]:
    """Store ``title`` as the conversation's own; ``NotStored`` when it has no header.
    Returns the management row written."""
    return store.write(title_write(store, cid, title, ts=ts))


def title_write(
    store: Store, cid: str, title: str, *, ts: float | None = None
) -> Callable[[lmdb.Transaction], dict[str, Any]]:
    """``set_title`` as a function of a write transaction."""
    key = check_id(cid).encode()
    when = time.time() if ts is None else ts

    def fn(txn: lmdb.Transaction) -> dict[str, Any]:
        if txn.get(key, db=store.db["snapshots"]) is None:
            raise NotStored("conversation", cid)
        row = management_row_txn(store, txn, cid)
        row.update(title=title, renamed=when)
        txn.put(key, pack(row), db=store.db["convmeta"])
        return row

    return fn


def conversation_ids(store: Store) -> list[str]:
    """Every stored conversation (those with a header), in key order."""

    def fn(txn: lmdb.Transaction) -> list[str]:
        cursor = txn.cursor(db=store.db["snapshots"])
        return [
            bytes(key).decode()
            for key in cursor.iternext(values=False)
            if b"\x00" not in bytes(key)
        ]

    return store.read(fn)


def turn_order_txn(
    store: Store, txn: lmdb.Transaction, cid: str
) -> list[tuple[str, dict[str, Any]]]:
    """``(turn id, turn log entry)`` of every turn with blocks, in the order the turns
    started (their first seq)."""
    prefix = f"{cid}/".encode()
    found: list[tuple[int, str, dict[str, Any]]] = []
    cursor = txn.cursor(db=store.db["turnlog"])
    if cursor.set_range(prefix):
        for key, raw in cursor:
            if not bytes(key).startswith(prefix):
                break
            entry = dict(unpack(raw))
            seqs = entry.get("seqs") or []
            if seqs:
                found.append((min(seqs), bytes(key)[len(prefix) :].decode(), entry))
    return [(tid, entry) for _, tid, entry in sorted(found, key=lambda t: t[0])]


def turn_order(store: Store, cid: str) -> list[tuple[str, dict[str, Any]]]:
    """``turn_order_txn`` in a read transaction of its own."""
    check_id(cid)
    return store.read(lambda txn: turn_order_txn(store, txn, cid))


def _drop_prefix(txn: lmdb.Transaction, db: Any, prefix: bytes) -> list[bytes]:
    """Delete every key under ``prefix``; the values deleted."""
    cursor = txn.cursor(db=db)
    values: list[bytes] = []
    if not cursor.set_range(prefix):
        return values
    while bytes(cursor.key()).startswith(prefix):
        values.append(bytes(cursor.value()))
        if not cursor.delete():
            break
        if not cursor.key():  # past the last key
            break
    return values


def delete_txn(store: Store, txn: lmdb.Transaction, cid: str) -> Removed:
    """Remove ``cid`` in the caller's write transaction (module docstring)."""
    key = check_id(cid).encode()
    if txn.get(key, db=store.db["snapshots"]) is None:
        raise NotStored("conversation", cid)
    prefix = key + b"/"
    counts: dict[str, int] = {}
    turn_ids: set[bytes] = set()
    for name in PER_CID_DATABASES:
        cursor = txn.cursor(db=store.db[name])
        if name in ("turnlog", "turns") and cursor.set_range(prefix):
            for k in cursor.iternext(values=False):
                if not bytes(k).startswith(prefix):
                    break
                turn_ids.add(bytes(k)[len(prefix) :])
        counts[name] = len(_drop_prefix(txn, store.db[name], prefix))
    rows = sum(counts.values())
    files = 0
    freed = freed_bytes = 0
    for value_key, value in _workspace_rows(txn, store, key):
        row = unpack(value) if value_key == b"f" else None
        if isinstance(row, dict):
            files += 1
            sha = row.get("sha")
            if sha and artifacts.refcount_txn(store, txn, str(sha)) > 0:
                if artifacts.ref_txn(store, txn, str(sha), -1) == 0:
                    data = txn.pop(str(sha).encode("ascii"), db=store.db["artifacts"])
                    txn.delete(str(sha).encode("ascii"), db=store.db["artrefs"])
                    freed += 1
                    freed_bytes += 0 if data is None else len(data)
    rows += len(_drop_prefix(txn, store.db["workspace"], key + b"\x00"))
    for name, k in (
        ("snapshots", key),
        ("snapshots", key + CURSOR_SUFFIX),
        ("usage", key),
        ("convmeta", key),
    ):
        rows += bool(txn.delete(k, db=store.db[name]))
    return Removed(cid, counts["blocks"], len(turn_ids), files, freed, freed_bytes, rows)


def _workspace_rows(txn: lmdb.Transaction, store: Store, key: bytes) -> list[tuple[bytes, bytes]]:
    """The version rows of a conversation's workspace (``f`` and ``h`` keys), tagged ``f``."""
    out: list[tuple[bytes, bytes]] = []
    for kind in (b"f", b"h"):
        start = b"\x00".join((key, kind, b""))
        cursor = txn.cursor(db=store.db["workspace"])
        if not cursor.set_range(start):
            continue
        for k, value in cursor:
            if not bytes(k).startswith(start):
                break
            out.append((b"f", bytes(value)))
    return out


def delete_conversation(store: Store, cid: str) -> Removed:
    """Remove every row of ``cid`` in one write transaction; ``NotStored`` when it has no
    header."""
    return store.write(lambda txn: delete_txn(store, txn, cid))
