"""Stored conversations read straight from a node's LMDB, with no NATS: the list of
conversations and their blocks as text. ``actline timeline`` and the web console read them.

The store at ``ACTLINE_HOME`` is opened read-mostly next to any node using it (LMDB
readers never block the writer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lmdb

from actline.config import ConfigError
from actline.storage import StorageError, Store
from actline.storage.layout import unpack
from actline.timeline import Block

TEXT_WIDTH = 60


def open_existing(home: Path) -> Store:
    """The store at ``home``; ``ConfigError`` when there is none or it cannot be opened."""
    if not (home / "data.mdb").is_file():
        existing = next((p for p in (home, *home.parents) if p.exists()), None)
        if existing is not None and not existing.is_dir():
            raise ConfigError(
                f"ACTLINE_HOME={home} is not writable: {existing} is a file, not a folder; "
                "point ACTLINE_HOME or --home at the node's folder"
            )
        raise ConfigError(
            f"no actline store in {home}: it does not exist yet; point ACTLINE_HOME or --home "
            "at the folder a node ran with (actline serve / actline ask create it)"
        )
    try:
        return Store(home, sync=False)
    except (StorageError, OSError, lmdb.Error) as exc:
        raise ConfigError(
            f"ACTLINE_HOME={home} cannot be opened ({exc}); it is not writable or not a store"
        ) from None


def stored_conversations(store: Store) -> list[dict[str, Any]]:
    """Each stored conversation's id and header summary, from the ``snapshots`` database."""

    def scan(txn: lmdb.Transaction) -> list[tuple[bytes, bytes]]:
        cursor = txn.cursor(db=store.db["snapshots"])
        return [(bytes(k), bytes(v)) for k, v in cursor if b"\x00" not in bytes(k)]

    rows: list[dict[str, Any]] = []
    for key, value in store.read(scan):
        header: dict[str, Any] = dict(unpack(value))
        cache = header.get("cache") or {}
        rows.append(
            {
                "conversation_id": key.decode(errors="replace"),
                "revision": int(header.get("revision", 0)),
                "blocks": int(header.get("next_seq") or header.get("stored_seq") or 0),
                "last_active": cache.get("last_touch_at"),
            }
        )
    return rows


def first_line(text: str, width: int = TEXT_WIDTH) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= width else line[: width - 1] + "…"


def block_text(block: Block) -> str:
    """A block's text, or its data as JSON (a data block)."""
    if block.text:
        return block.text
    if block.data is not None:
        return json.dumps(block.data, ensure_ascii=False, default=str)
    return ""
