"""Stored conversations read straight from a node's LMDB, with no NATS: the list of
conversations, their blocks as text, and what their turns cost (the final turn records,
each holding its ``turn.result``: its usage and, since turns are priced, its cost; an
older record's usage is priced when read). ``actline timeline`` and the web console read
them.

The store at ``ACTLINE_HOME`` is opened read-mostly next to any node using it (LMDB
readers never block the writer). A Ray job's home holds one node home per node actor,
``<home>/<node id>`` (``node_homes``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import lmdb

from actline.config import ConfigError
from actline.llm.pricing import result_cost
from actline.messages import Cost, Usage
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


def is_node_home(path: Path) -> bool:
    """Whether ``path`` is a node's home: it holds a store or a traces folder."""
    return (path / "data.mdb").is_file() or (path / "traces").is_dir()


def node_homes(home: Path) -> list[Path]:
    """The node homes under ``home``: ``home`` itself when it is one, else each folder
    directly beneath it that is one (a Ray job's ``<home>/<node id>``), by name; ``[home]``
    when there is none, so that opening it names what is missing."""
    if is_node_home(home) or not home.is_dir():
        return [home]
    found = sorted(p for p in home.iterdir() if p.is_dir() and is_node_home(p))
    return found or [home]


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


@dataclass(frozen=True, slots=True)
class TurnCost:
    """What one finished turn used and cost, from its stored result."""

    turn_id: str
    status: str
    rounds: int
    usage: Usage
    cost: Cost
    ts: str
    """When the result was made (ISO 8601, UTC)."""

    def as_json(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "status": self.status,
            "rounds": self.rounds,
            "usage": self.usage.model_dump(mode="json", exclude={"context"}),
            "cost": self.cost.model_dump(mode="json"),
            "saved_usd": self.cost.saved_usd,
            "ts": self.ts,
        }


def turn_cost(turn_id: str, record: Any) -> TurnCost | None:
    """The cost of a stored turn record; None for a turn still running (a checkpoint) or a
    record that does not read as a result."""
    result = record.get("result") if isinstance(record, dict) else None
    if not isinstance(result, dict):
        return None
    found = result_cost(result)
    if found is None:
        return None
    usage, cost = found
    ts = result.get("ts")
    return TurnCost(
        turn_id=str(result.get("turn_id") or turn_id),
        status=str(result.get("status") or record.get("status") or ""),
        rounds=int(result.get("rounds") or 0),
        usage=usage,
        cost=cost,
        ts=ts.isoformat() if isinstance(ts, datetime) else str(ts or ""),
    )


def _records(store: Store, prefix: bytes = b"") -> list[tuple[str, str, Any]]:
    """``(conversation id, turn id, record)`` of the turn records under ``prefix``."""

    def scan(txn: lmdb.Transaction) -> list[tuple[str, str, Any]]:
        cursor = txn.cursor(db=store.db["turns"])
        out: list[tuple[str, str, Any]] = []
        if not cursor.set_range(prefix):
            return out
        for key, raw in cursor:
            name = bytes(key)
            if not name.startswith(prefix):
                break
            cid, _, tid = name.decode(errors="replace").rpartition("/")
            out.append((cid, tid, unpack(raw)))
        return out

    return store.read(scan)


def turn_costs(store: Store, cid: str) -> list[TurnCost]:
    """The finished turns of ``cid`` with their usage and cost, oldest first."""
    found = [turn_cost(tid, record) for _, tid, record in _records(store, f"{cid}/".encode())]
    return sorted((t for t in found if t is not None), key=lambda t: t.ts)


def _inherited(record: Any) -> bool:
    """A fork's copy of a turn its parent ran (``actline.storage.forks``): its cost is the
    parent's, counted there once."""
    return isinstance(record, dict) and bool(record.get("inherited_from"))


def conversation_costs(store: Store) -> dict[str, tuple[Cost, int]]:
    """Conversation id -> what its finished turns cost together, and how many there are (a
    fork's turns copied from its parent are the parent's)."""
    totals: dict[str, tuple[Cost, int]] = {}
    for cid, tid, record in _records(store):
        if _inherited(record):
            continue
        turn = turn_cost(tid, record)
        if turn is not None:
            cost, n = totals.get(cid, (Cost(), 0))
            totals[cid] = (cost + turn.cost, n + 1)
    return totals


def finished_turns(store: Store) -> list[tuple[str, TurnCost]]:
    """``(conversation id, turn)`` of every finished turn in the store (each once: not a
    fork's copy of its parent's)."""
    out: list[tuple[str, TurnCost]] = []
    for cid, tid, record in _records(store):
        if _inherited(record):
            continue
        turn = turn_cost(tid, record)
        if turn is not None:
            out.append((cid, turn))
    return out


def costs_by_day(turns: Iterable[TurnCost]) -> list[tuple[str, Cost, int]]:
    """``(day, cost, turns)`` of ``turns``, by the UTC day each result was made
    (``YYYY-MM-DD``), oldest day first."""
    days: dict[str, tuple[Cost, int]] = {}
    for turn in turns:
        day = turn.ts[:10] or "unknown"
        cost, n = days.get(day, (Cost(), 0))
        days[day] = (cost + turn.cost, n + 1)
    return [(day, cost, n) for day, (cost, n) in sorted(days.items())]


def daily_costs(store: Store) -> list[tuple[str, Cost, int]]:
    """``(day, cost, turns)`` of every finished turn in the store, by the UTC day its result
    was made (``YYYY-MM-DD``), oldest day first."""
    return costs_by_day(turn for _, turn in finished_turns(store))


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
