"""Per-conversation quotas: what a conversation holds in the store and the limits on it.

Four counters per conversation live in the ``usage`` database of the ``Store``::

    usage  <cid>  -> msgpack {workspace_bytes, block_bytes, artifacts, artifact_bytes}

- ``block_bytes``: the packed size of every stored block, hidden and compacted ones too.
  ``Store.append_fn`` adds new blocks and the size change of rewritten ones (hide, unhide);
  ``Store.replace_conversation`` counts again from 0.
- ``workspace_bytes``: the bytes of every stored version in the ``files/`` area (history
  included: every version is kept).
- ``artifacts``, ``artifact_bytes``: the number and bytes of the stored versions in every other
  area (``outputs/``, user and followup attachments).

A version replaced within its own turn gives its bytes back; a tombstone holds none. Bytes are
logical sizes: identical content shared through ``actline.storage.artifacts`` is counted by each
version.

Each counter changes in the write transaction that changes what it counts, so a crash never
leaves them out of step with the store, and reading them is one ``get`` (``Store.usage``),
never a scan. ``recount`` scans a conversation: to check the counters, or to count a
conversation stored before they existed (its counters start at 0 until then).

Enforcement happens before a write. The workspace refuses a ``files/`` or ``outputs/`` write
that would take a counter past its limit with ``QuotaExceeded``, checked in the same write
transaction (nothing is written), and tools that write several files check the whole batch
first (``Workspace.check_room``) so a run is stored whole or not at all. Attachments are
counted but never refused (the input limits bound them). The block quota bounds tool results:
a result that would take the stored blocks past the limit is replaced by a short error
(``actline.actors.turn.tool_round``); the user's text and the model's replies are always stored, so
a conversation at its limit still answers. A limit of 0 is no limit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Protocol, TypeVar

import lmdb
import msgpack

from .errors import QuotaExceeded

T = TypeVar("T")


class Store(Protocol):
    """What this module needs of ``storage.Store`` (which imports it)."""

    @property
    def db(self) -> Mapping[str, Any]: ...

    def read(self, fn: Callable[[lmdb.Transaction], T]) -> T: ...
    def write(self, fn: Callable[[lmdb.Transaction], T]) -> T: ...


__all__ = [
    "COUNTERS",
    "Quota",
    "Usage",
    "add_txn",
    "recount",
    "set_txn",
    "summary",
    "usage_txn",
]

COUNTERS = ("workspace_bytes", "block_bytes", "artifacts", "artifact_bytes")
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class Usage:
    """What a conversation holds (or what a write adds, when used as a delta)."""

    workspace_bytes: int = 0
    block_bytes: int = 0
    artifacts: int = 0
    artifact_bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(a + b for a, b in zip(self._values(), other._values(), strict=True)))

    def _values(self) -> tuple[int, int, int, int]:
        return (self.workspace_bytes, self.block_bytes, self.artifacts, self.artifact_bytes)

    def clamped(self) -> Usage:
        """Never below 0 (a counter that predates a conversation's counting may undercount)."""
        return Usage(*(max(0, v) for v in self._values()))

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> Usage:
        if not isinstance(raw, dict):
            return cls()
        return cls(**{f.name: int(raw.get(f.name, 0)) for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class Quota:
    """Per-conversation limits, one per ``Usage`` counter; 0 is no limit."""

    workspace_bytes: int = 256 * MIB
    block_bytes: int = 256 * MIB
    artifacts: int = 10_000
    artifact_bytes: int = 1024 * MIB

    def __post_init__(self) -> None:
        for name in COUNTERS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"quota {name} must be a whole number >= 0 (0: none), got {value!r}"
                )

    @classmethod
    def unlimited(cls) -> Quota:
        return cls(0, 0, 0, 0)

    def limit(self, name: str) -> int:
        return int(getattr(self, name))

    def room(self, name: str, usage: Usage) -> int | None:
        """How much more of ``name`` fits (may be negative); None when there is no limit."""
        limit = self.limit(name)
        return None if limit == 0 else limit - int(getattr(usage, name))

    def check(self, conversation_id: str, usage: Usage, delta: Usage) -> None:
        """``QuotaExceeded`` for the first counter that ``delta`` grows past its limit.

        A write that shrinks a counter, or leaves it as it is, always passes (a conversation
        over its quota may still delete and shrink files).
        """
        for name in COUNTERS:
            grow = int(getattr(delta, name))
            room = self.room(name, usage)
            if grow > 0 and room is not None and grow > room:
                used = int(getattr(usage, name))
                raise QuotaExceeded(conversation_id, name, used, self.limit(name), grow)


def summary(usage: Usage, quota: Quota) -> str:
    """One line for people: each counter and its limit (``actline timeline``)."""

    def of(used: int, limit: int, unit: str = " B") -> str:
        return f"{used:,}{unit} of " + (f"{limit:,}{unit}" if limit else "no limit")

    return (
        f"blocks {of(usage.block_bytes, quota.block_bytes)} · "
        f"workspace {of(usage.workspace_bytes, quota.workspace_bytes)} · "
        f"artifacts {of(usage.artifacts, quota.artifacts, '')}, "
        f"{of(usage.artifact_bytes, quota.artifact_bytes)}"
    )


# -- in a transaction ------------------------------------------------------------------------


def usage_txn(store: Store, txn: lmdb.Transaction, cid: str) -> Usage:
    """The counters of ``cid`` (all 0 when none are stored)."""
    raw = txn.get(cid.encode(), db=store.db["usage"])
    if raw is None:
        return Usage()
    return Usage.from_dict(msgpack.unpackb(raw, raw=False))


def set_txn(store: Store, txn: lmdb.Transaction, cid: str, usage: Usage) -> None:
    data = msgpack.packb(usage.clamped().as_dict(), use_bin_type=True)
    txn.put(cid.encode(), data, db=store.db["usage"])


def add_txn(store: Store, txn: lmdb.Transaction, cid: str, delta: Usage) -> Usage:
    """Add ``delta`` to the counters of ``cid`` in the caller's write transaction."""
    if delta == Usage():
        return usage_txn(store, txn, cid)
    usage = (usage_txn(store, txn, cid) + delta).clamped()
    set_txn(store, txn, cid, usage)
    return usage


# -- a full count ----------------------------------------------------------------------------


def _recount_txn(store: Store, txn: lmdb.Transaction, cid: str) -> Usage:
    block_bytes = 0
    prefix = f"{cid}/".encode()
    cursor = txn.cursor(db=store.db["blocks"])
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not bytes(key).startswith(prefix):
                break
            block_bytes += len(value)
    workspace_bytes = artifacts = artifact_bytes = 0
    for kind in (b"f", b"h"):
        start = b"\x00".join((cid.encode(), kind, b""))
        cursor = txn.cursor(db=store.db["workspace"])
        if not cursor.set_range(start):
            continue
        for key, value in cursor:
            if not bytes(key).startswith(start):
                break
            row = msgpack.unpackb(value, raw=False)
            if row.get("deleted"):
                continue
            size = int(row.get("size", 0))
            area = bytes(key)[len(start) :].split(b"\x00", 1)[0]
            if area == b"files":
                workspace_bytes += size
            else:
                artifacts += 1
                artifact_bytes += size
    return Usage(workspace_bytes, block_bytes, artifacts, artifact_bytes)


def recount(store: Store, cid: str, *, save: bool = False) -> Usage:
    """Count what ``cid`` holds by scanning it (its blocks and its workspace rows).

    With ``save`` the count replaces the stored counters in the same write transaction: for a
    conversation stored before counting began. Costs a pass over the conversation.
    """
    if not save:
        return store.read(lambda txn: _recount_txn(store, txn, cid))

    def fn(txn: lmdb.Transaction) -> Usage:
        usage = _recount_txn(store, txn, cid)
        set_txn(store, txn, cid, usage)
        return usage

    return store.write(fn)
