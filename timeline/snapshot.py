"""The persisted form of a timeline's state outside its blocks: a small header and rows.

The header (``Timeline.snapshot()``, version 2) holds a few scalars and stays the
same size however long the conversation runs. What grows, the sources pool and
the plans, is kept as rows that a round adds to or changes::

    src/<sid:06d>     -> SourceRow.to_dict()
    plan/<plan_id>    -> Plan.to_dict() plus "order" (its creation position)

``Timeline.take_row_changes()`` returns the rows changed since the last call, so a
round writes the header plus only those. Version 1 headers (``full_snapshot()``, the
format before rows) carry the pool and plans inline as ``sources`` and ``plans``;
they are still read, and ``split`` turns one into a version 2 header and rows.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .errors import BlockError
from .memory import Plan, PlanBook
from .sources import SourceRow, SourcesPool

__all__ = [
    "FULL_VERSION",
    "PLAN_PREFIX",
    "SNAPSHOT_VERSION",
    "SOURCE_PREFIX",
    "VERSIONS",
    "check_version",
    "plan_key",
    "plan_row",
    "restore_plans",
    "restore_pool",
    "source_key",
    "split",
]

SNAPSHOT_VERSION: Final = 2
"""A small header; the pool and plans are rows."""
FULL_VERSION: Final = 1
"""The pool and plans inline in the header (``sources``, ``plans``)."""
VERSIONS: Final = (FULL_VERSION, SNAPSHOT_VERSION)
SOURCE_PREFIX: Final = "src/"
PLAN_PREFIX: Final = "plan/"
NEXT_SID: Final = "sources_next_sid"
"""The header field that keeps the pool's next SID (SIDs are never reused)."""
INLINE: Final = ("sources", "plans")


def source_key(sid: int) -> str:
    return f"{SOURCE_PREFIX}{sid:06d}"


def plan_key(plan_id: str) -> str:
    return f"{PLAN_PREFIX}{plan_id}"


def plan_row(order: int, plan: Plan) -> dict[str, Any]:
    """A plan's row: its snapshot and its creation position among the book's plans."""
    return {**plan.to_dict(), "order": order}


def source_rows(rows: Iterable[SourceRow]) -> dict[str, Any]:
    return {source_key(row.sid): row.to_dict() for row in rows}


def plan_rows(plans: Iterable[tuple[int, Plan]]) -> dict[str, Any]:
    return {plan_key(plan.plan_id): plan_row(order, plan) for order, plan in plans}


def check_version(snapshot: Mapping[str, Any]) -> int:
    version = snapshot.get("version")
    if version not in VERSIONS:
        raise BlockError(f"unknown snapshot version {version!r}", "version")
    return int(version)


def split(snapshot: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A header with the pool and plans inline -> (version 2 header, their rows).

    A header without them comes back as a copy with no rows.
    """
    header = {k: v for k, v in snapshot.items() if k not in INLINE}
    if not any(k in snapshot for k in INLINE):
        return header, {}
    pool = SourcesPool.from_dict(snapshot.get("sources") or {})
    book = PlanBook.from_dict(snapshot.get("plans") or {"current": None, "plans": []})
    header["version"] = SNAPSHOT_VERSION
    header[NEXT_SID] = max(pool.next_sid, int(snapshot.get(NEXT_SID, 1)))
    rows = source_rows(pool.rows())
    rows.update(plan_rows(enumerate(book.plans())))
    return header, rows


def restore_pool(snapshot: Mapping[str, Any], rows: Mapping[str, Any]) -> tuple[SourcesPool, bool]:
    """The pool from inline ``sources`` and ``src/`` rows (a row wins for its SID).

    Also returns whether inline rows were read: those are not stored as rows yet.
    """
    inline = snapshot.get("sources") or {}
    base = SourcesPool.from_dict(inline)
    by_sid = {row.sid: row for row in base.rows()}
    for key, value in rows.items():
        if key.startswith(SOURCE_PREFIX):
            row = SourceRow.from_dict(value)
            by_sid[row.sid] = row
    next_sid = max(base.next_sid, int(snapshot.get(NEXT_SID, 1)))
    pool = SourcesPool((by_sid[s] for s in sorted(by_sid)), next_sid)
    return pool, bool(inline)


def restore_plans(snapshot: Mapping[str, Any], rows: Mapping[str, Any]) -> tuple[PlanBook, bool]:
    """The plan book from inline ``plans`` and ``plan/`` rows (a row wins for its plan).

    Also returns whether inline plans were read (not stored as rows yet).
    """
    inline = snapshot.get("plans") or {}
    by_id: dict[str, tuple[int, Mapping[str, Any]]] = {}
    if inline:
        book = PlanBook.from_dict(inline)
        by_id = {p.plan_id: (i, p.to_dict()) for i, p in enumerate(book.plans())}
    for key, value in rows.items():
        if key.startswith(PLAN_PREFIX):
            order = value.get("order", len(by_id)) if isinstance(value, Mapping) else 0
            by_id[key[len(PLAN_PREFIX) :]] = (int(order), value)
    return PlanBook.from_rows(by_id.values()), bool(inline)
