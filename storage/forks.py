"""Forking a stored conversation at a finished turn: a new conversation whose timeline is
the original's up to the end of that turn, the original untouched.

Design (measured, then chosen). A stored block holds no conversation id (its dict has
``id``, ``type``, ``turn_id``, ``seq``, text and data, never the conversation's id: 0 of
236 blocks of a sample store did), so a fork could read its first blocks from its parent
by reference. It does not: a turn on the fork hides and un-hides inherited blocks
(react.hide, TTL pruning, retention, react.read), and the round commit rewrites a hidden
block under the conversation's own key, refusing one it does not hold; every reader of
blocks, paths, turn logs and memsearch rows would also need the fall-through. So the fork
copies, in one write transaction, what is small and the conversation's own (the blocks
before the fork point under the new id, byte for byte but for the visibility below, their
path rows, the turn log and turn records of the kept turns, the memsearch rows of those
turns, the workspace version rows of those turns) and shares by reference what can be
large: every workspace file's bytes (``artifacts``) gain one reference per version row
copied, so a fork's files cost no bytes and a delete of either side keeps what the other
uses. The cost is a pass over the kept blocks: about their packed size written once
(``docs/conversations.md`` has the measurements).

The fork point. Turns run one after another, so the kept blocks are those below the first
seq of the first turn after the fork turn (``fork_seq``; the whole log when it is the last
turn). A block a later turn added to an earlier one (a late title, a compaction summary)
lies above it and is left out.

The state at the end of the fork turn, rebuilt from the kept blocks:

- the sources pool: the rows whose SID the kept blocks cite (a tool's sources are named
  by SID in its result block; SIDs are handed out in order, so the pool at that turn is
  every row up to the highest SID cited); a row's text is its latest merge;
- the plans: every ``react.plan`` snapshot of the kept blocks replayed in order;
- the memory facts: those stated in the kept turns, a fact superseded by a later turn
  active again;
- hidden blocks: each kept block's stored visibility, except blocks hidden by a later
  turn's react.hide, shown again (visibility changes by a later turn's TTL pruning or
  react.read leave no trace per block: those blocks keep their latest visibility);
- the header: notices and the prompt-cache state start empty (a fork's first turn starts
  a cold cache), the last kept block counts as seen.

A fork at the conversation's last finished turn, with nothing after it, copies the header
and every header row as they are: the state is exact.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import lmdb

from actline.timeline import Block, Timeline
from actline.timeline.blocks import PLAN, TOOL_CALL
from actline.timeline.facts import FACT_PREFIX
from actline.timeline.memory import Plan, PlanBook
from actline.timeline.snapshot import (
    PLAN_PREFIX,
    SOURCE_PREFIX,
    plan_rows,
    split,
)

from . import artifacts, quota
from .errors import NotStored, StorageError
from .layout import CURSOR_SUFFIX, block_key, check_id, pack, path_key, unpack
from .manage import management_row_txn, turn_order_txn
from .store import Store

__all__ = ["ForkPoint", "ForkRefused", "fork_conversation", "resolve_turn"]

_SID = re.compile(r"\[S:(\d+)\]")
_WS_SEP = b"\x00"


class ForkRefused(StorageError):
    """A fork that cannot be made: ``reason`` (``unknown_turn``, ``turn_running``,
    ``exists``) and what to do."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.reason, self.message))


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """What ``fork_conversation`` made."""

    conversation_id: str
    parent: str
    turn_id: str
    """The last turn kept."""
    turns: int
    fork_seq: int
    """The fork's first own seq: blocks below it are the parent's, copied."""
    blocks: int
    block_bytes: int
    files: int
    """Workspace version rows copied (each a new reference to shared bytes)."""
    index_rows: int
    exact: bool
    """The parent's header and rows were copied as they are (a fork at its last turn)."""


def resolve_turn(turns: list[str], at: str) -> int:
    """The index in ``turns`` of ``at``: a turn id, or a 1-based number written as digits
    (an id made of digits wins when it is one). ``ForkRefused("unknown_turn")`` otherwise."""
    if at in turns:
        return turns.index(at)
    if at.isdigit():
        n = int(at)
        if 1 <= n <= len(turns):
            return n - 1
        raise ForkRefused(
            "unknown_turn",
            f"turn {n} is out of range: the conversation has {len(turns)} turn(s) "
            f"(give 1..{len(turns)} or a turn id)",
        )
    raise ForkRefused(
        "unknown_turn",
        f"the conversation has no turn {at!r}: give a turn id or its number "
        f"(1..{len(turns)}; actline conversations show CID lists them)",
    )


def _cited_sids(blocks: Iterable[Mapping[str, Any]]) -> int:
    """The highest SID the blocks cite (0 when none)."""
    top = 0
    for raw in blocks:
        for holder in (raw.get("data"), raw.get("meta")):
            if isinstance(holder, Mapping):
                for row in holder.get("sources") or ():
                    if isinstance(row, Mapping) and isinstance(row.get("sid"), int):
                        top = max(top, int(row["sid"]))
        for text in (raw.get("text"), _content(raw.get("data"))):
            if isinstance(text, str) and "[S:" in text:
                top = max([top, *(int(m) for m in _SID.findall(text))])
    return top


def _content(data: Any) -> str:
    return str(data.get("content") or "") if isinstance(data, Mapping) else ""


def _later_hides(blocks: Iterable[Mapping[str, Any]]) -> set[str]:
    """Paths a react.hide call of the given (later) blocks named."""
    paths: set[str] = set()
    for raw in blocks:
        data = raw.get("data")
        if raw.get("type") == TOOL_CALL and isinstance(data, Mapping):
            params = data.get("params")
            if data.get("tool") == "react.hide" and isinstance(params, Mapping):
                if isinstance(params.get("path"), str):
                    paths.add(params["path"])
    return paths


def _state_rows(
    rows: Mapping[str, Any], kept: list[dict[str, Any]], turns: set[str], end_ts: float
) -> dict[str, Any]:
    """The header rows at the end of the fork turn (module docstring)."""
    out: dict[str, Any] = {}
    top = _cited_sids(kept)
    for key, value in rows.items():
        if key.startswith(SOURCE_PREFIX) and isinstance(value, Mapping):
            if int(value.get("sid") or 0) <= top:
                out[key] = value
        elif key.startswith(FACT_PREFIX) and isinstance(value, Mapping):
            if str(value.get("turn_id") or "") in turns or float(value.get("ts") or 0) <= end_ts:
                fact = dict(value)
                if fact.get("status") == "obsolete" and fact.get("superseded_by") not in turns:
                    fact.update(status="active", superseded_by="")
                out[key] = fact
        elif not key.startswith(PLAN_PREFIX):
            out[key] = value
    book = PlanBook()
    for raw in kept:
        if raw.get("type") == PLAN and isinstance(raw.get("data"), Mapping):
            book.load(Plan.from_dict(raw["data"]))
    out.update(plan_rows(book.take_dirty()))
    return out


def _header(
    parent: Mapping[str, Any], new_cid: str, kept: list[dict[str, Any]], rows: Mapping[str, Any]
) -> tuple[dict[str, Any], int]:
    """The fork's snapshot header (the parent's fields, made the state at the fork point)
    and its boundary seq, from a timeline restored over the kept blocks."""
    base = dict(parent)
    last = max(kept, key=lambda b: int(b["seq"])) if kept else None
    top_sid = max(
        (int(v.get("sid") or 0) for k, v in rows.items() if k.startswith(SOURCE_PREFIX)),
        default=0,
    )
    base.update(
        conversation_id=new_cid,
        next_seq=0 if last is None else int(last["seq"]) + 1,
        current_turn_id=None if last is None else str(last["turn_id"]),
        suppress_prev_turn_cache=False,
        rendered_block=None if last is None else str(last.get("id") or "") or None,
        cache={"last_touch_at": None, "last_ttl_seconds": None},
        notices={"current": [], "next": [], "once": []},
        sources_next_sid=top_sid + 1,
    )
    for name in ("sources", "plans", "revision", "stored_seq", "boundary_seq"):
        base.pop(name, None)
    tl = Timeline.restore(base, kept, rows=rows)
    header = tl.snapshot()
    header["sources_next_sid"] = max(int(header.get("sources_next_sid", 1)), top_sid + 1)
    return header, tl.boundary_seq


def fork_txn(
    store: Store,
    txn: lmdb.Transaction,
    cid: str,
    new_cid: str,
    at: str,
    *,
    title: str,
    ts: float,
) -> ForkPoint:
    """``fork_conversation`` in the caller's write transaction."""
    check_id(cid)
    check_id(new_cid)
    db = store.db
    raw_header = txn.get(cid.encode(), db=db["snapshots"])
    if raw_header is None:
        raise NotStored("conversation", cid)
    if txn.get(new_cid.encode(), db=db["snapshots"]) is not None:
        raise ForkRefused("exists", f"conversation {new_cid!r} exists already: choose a new id")
    parent_header, inline = split(dict(unpack(raw_header)))
    order = turn_order_txn(store, txn, cid)
    turn_ids = [tid for tid, _ in order]
    if not turn_ids:
        raise ForkRefused("unknown_turn", f"conversation {cid!r} has no turn to fork at yet")
    n = resolve_turn(turn_ids, at)
    turn_id = turn_ids[n]
    record_raw = txn.get(f"{cid}/{turn_id}".encode(), db=db["turns"])
    record = unpack(record_raw) if record_raw is not None else None
    if isinstance(record, Mapping) and record.get("status") == "running":
        raise ForkRefused(
            "turn_running",
            f"turn {turn_id} of {cid} is still running: fork at an earlier turn, or when it "
            "has ended",
        )
    kept_turns = set(turn_ids[: n + 1])
    raw_cursor = txn.get(cid.encode() + CURSOR_SUFFIX, db=db["snapshots"])
    stored = int(unpack(raw_cursor)[1]) if raw_cursor is not None else 0
    later = [min(entry["seqs"]) for _, entry in order[n + 1 :]]
    fork_seq = min([stored, *later])

    prefix = f"{cid}/".encode()
    kept: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    cursor = txn.cursor(db=db["blocks"])
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not bytes(key).startswith(prefix):
                break
            raw = dict(unpack(value))
            (kept if int(raw["seq"]) < fork_seq else after).append(raw)
    rows: dict[str, Any] = {}
    cursor = txn.cursor(db=db["hrows"])
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not bytes(key).startswith(prefix):
                break
            rows[bytes(key)[len(prefix) :].decode()] = unpack(value)
    rows = {**inline, **rows}
    running = any(
        isinstance(r, Mapping) and r.get("status") == "running"
        for r in _records(txn, store, prefix).values()
    )
    exact = not after and fork_seq == stored and not running
    if exact:
        header, boundary = dict(parent_header), int(parent_header.get("boundary_seq", 0))
        header["conversation_id"] = new_cid
        for name in ("revision", "stored_seq", "boundary_seq"):
            header.pop(name, None)
    else:
        hides = _later_hides(after)
        for raw in kept:
            if raw.get("hidden") and raw.get("path") in hides:
                raw.pop("hidden", None)
                raw.pop("replacement", None)
        end_ts = max((float(b.get("ts") or 0) for b in kept), default=0.0)
        rows = _state_rows(rows, kept, kept_turns, end_ts)
        header, boundary = _header(parent_header, new_cid, kept, rows)

    new_prefix = f"{new_cid}/"
    block_bytes = 0
    for raw in kept:
        data = pack(raw)
        block_bytes += len(data)
        txn.put(block_key(new_cid, int(raw["seq"])), data, db=db["blocks"])
        if raw.get("path"):
            txn.put(path_key(new_cid, str(raw["path"]), int(raw["seq"])), b"", db=db["paths"])
    by_turn: dict[str, list[dict[str, Any]]] = {}
    for raw in kept:
        by_turn.setdefault(str(raw["turn_id"]), []).append(raw)
    for tid, blocks in by_turn.items():
        txn.put(f"{new_prefix}{tid}".encode(), pack(_log_entry(tid, blocks)), db=db["turnlog"])
    for tid, record in _records(txn, store, prefix).items():
        if tid in kept_turns and isinstance(record, Mapping):
            txn.put(
                f"{new_prefix}{tid}".encode(),
                pack(_inherited(record, cid, new_cid)),
                db=db["turns"],
            )
    index_rows = 0
    cursor = txn.cursor(db=db["index"])
    if cursor.set_range(prefix):
        copied: list[tuple[bytes, bytes]] = []
        for key, value in cursor:
            if not bytes(key).startswith(prefix):
                break
            row = unpack(value)
            if isinstance(row, Mapping) and row.get("turn_id") in kept_turns:
                copied.append((new_prefix.encode() + bytes(key)[len(prefix) :], bytes(value)))
        for key, value in copied:
            txn.put(key, value, db=db["index"])
        index_rows = len(copied)
    for name, value in rows.items():
        txn.put(f"{new_prefix}{name}".encode(), pack(value), db=db["hrows"])
    files = _fork_workspace(store, txn, cid, new_cid, kept_turns)
    revision = int(parent_header.get("revision", 0))
    header.update(revision=revision, stored_seq=fork_seq, boundary_seq=boundary)
    header["next_seq"] = max(int(header.get("next_seq", 0)), fork_seq)
    txn.put(new_cid.encode(), pack(header), db=db["snapshots"])
    txn.put(new_cid.encode() + CURSOR_SUFFIX, pack([revision, fork_seq]), db=db["snapshots"])
    quota.set_txn(store, txn, new_cid, quota._recount_txn(store, txn, new_cid))
    meta = management_row_txn(store, txn, cid)
    row = {
        "title": title or str(meta.get("title") or ""),
        "forked_from": [cid, turn_id],
        "fork_seq": fork_seq,
        "created": ts,
    }
    if not row["title"]:
        del row["title"]
    txn.put(new_cid.encode(), pack(row), db=db["convmeta"])
    return ForkPoint(
        new_cid,
        cid,
        turn_id,
        n + 1,
        fork_seq,
        len(kept),
        block_bytes,
        files,
        index_rows,
        exact,
    )


def _records(txn: lmdb.Transaction, store: Store, prefix: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cursor = txn.cursor(db=store.db["turns"])
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not bytes(key).startswith(prefix):
                break
            out[bytes(key)[len(prefix) :].decode()] = unpack(value)
    return out


def _inherited(record: Mapping[str, Any], parent: str, new_cid: str) -> dict[str, Any]:
    """A kept turn's record as the fork holds it: its result names the fork, and it says it
    was inherited (so a cost total of the node counts the turn once)."""
    out = dict(record)
    result = out.get("result")
    if isinstance(result, Mapping):
        out["result"] = {**result, "conversation_id": new_cid}
    out["inherited_from"] = parent
    return out


def _log_entry(turn_id: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The turn log entry of the kept blocks of one turn (as ``Store._log_turn`` makes)."""
    parsed = [Block.from_dict(b) for b in blocks]
    seqs = [b.seq for b in parsed]
    return {
        "turn_id": turn_id,
        "seqs": seqs,
        "ts": min(b.start for b in parsed),
        "end_ts": max(b.ts for b in parsed),
        "blocks_count": len(seqs),
        "tokens": sum(max(0, b.tokens) for b in parsed),
    }


def _fork_workspace(
    store: Store, txn: lmdb.Transaction, cid: str, new_cid: str, turns: set[str]
) -> int:
    """Copy the workspace rows of the kept turns (their ordinals kept); each version's bytes
    gain a reference. Returns the version rows copied."""
    db = store.db["workspace"]
    old, new = cid.encode(), new_cid.encode()
    ordinals: set[bytes] = set()
    cursor = txn.cursor(db=db)
    start = old + _WS_SEP + b"t" + _WS_SEP
    turn_rows: list[tuple[str, bytes]] = []
    if cursor.set_range(start):
        for key, value in cursor:
            if not bytes(key).startswith(start):
                break
            tid = bytes(key)[len(start) :].decode()
            if tid in turns:
                turn_rows.append((tid, bytes(value)))
    for tid, value in turn_rows:
        ordinal = f"{int(unpack(value)):08d}".encode()
        ordinals.add(ordinal)
        txn.put(_WS_SEP.join((new, b"t", tid.encode())), value, db=db)
        txn.put(_WS_SEP.join((new, b"o", ordinal)), tid.encode(), db=db)
    versions: list[tuple[bytes, bytes]] = []
    for kind in (b"f", b"h"):
        start = old + _WS_SEP + kind + _WS_SEP
        if not cursor.set_range(start):
            continue
        for key, value in cursor:
            if not bytes(key).startswith(start):
                break
            if bytes(key).rpartition(_WS_SEP)[2] in ordinals:
                versions.append((new + bytes(key)[len(old) :], bytes(value)))
    for key, value in versions:
        txn.put(key, value, db=db)
        sha = unpack(value).get("sha")
        if sha:
            artifacts.ref_txn(store, txn, str(sha), 1)
    return len(versions)


def fork_conversation(
    store: Store,
    cid: str,
    new_cid: str,
    at: str,
    *,
    title: str = "",
    ts: float | None = None,
) -> ForkPoint:
    """Fork ``cid`` at its turn ``at`` (an id or a 1-based number) as ``new_cid``, in one
    write transaction (module docstring). ``title``: the fork's own (default: the parent's
    own title, if it was renamed). Raises ``NotStored`` (no such conversation) or
    ``ForkRefused``."""
    when = time.time() if ts is None else ts
    return store.write(lambda txn: fork_txn(store, txn, cid, new_cid, at, title=title, ts=when))
