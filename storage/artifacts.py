"""Content-addressed artifacts: bytes stored once under their sha256, with reference counts.

Two named databases of the ``Store``::

    artifacts  <sha256 hex, ascii>  -> the bytes, stored once however often they are put
    artrefs    <sha256 hex, ascii>  -> reference count, 8-byte big-endian unsigned

Rules. ``put`` stores bytes not stored yet and adds ``refs`` to their count in one write
transaction, so content and count never disagree. A count never goes below 0. Content whose
count is 0 stays readable until ``gc`` removes it; ``gc`` is one write transaction, so a
concurrent ``put`` of the same bytes either commits first (and the content stays) or after
(and stores it again). Large values are fine: LMDB keeps them on overflow pages and the
``Store`` grows its map when a write needs room.

The ``*_txn`` forms run inside a caller's transaction (the workspace writes a file's bytes and
its version row together). Every function given to ``Store.write`` here depends on nothing but
its transaction, so the store may retry it after growing the map.
"""

from __future__ import annotations

import hashlib
import re
import struct

import lmdb

from .errors import NotStored
from .store import Store

__all__ = [
    "gc",
    "get",
    "get_txn",
    "put",
    "put_txn",
    "ref",
    "ref_txn",
    "refcount",
    "refcount_txn",
]

_SHA_RE = re.compile(r"[0-9a-f]{64}")
_COUNT = struct.Struct(">Q")
_MAX_COUNT = (1 << 64) - 1


def _key(sha: str) -> bytes:
    if _SHA_RE.fullmatch(sha) is None:
        raise NotStored("artifact", sha)
    return sha.encode("ascii")


def _count(raw: bytes | memoryview | None) -> int:
    return 0 if raw is None else int(_COUNT.unpack(bytes(raw))[0])


def put_txn(store: Store, txn: lmdb.Transaction, data: bytes, refs: int = 1) -> str:
    """Store ``data`` unless stored and add ``refs`` to its count, in the caller's write txn."""
    if refs < 0:
        raise ValueError(f"refs is a count of new references, at least 0; got {refs}")
    sha = hashlib.sha256(data).hexdigest()
    key = sha.encode("ascii")
    txn.put(key, data, db=store.db["artifacts"], overwrite=False)
    count = _count(txn.get(key, db=store.db["artrefs"]))
    txn.put(key, _COUNT.pack(min(_MAX_COUNT, count + refs)), db=store.db["artrefs"])
    return sha


def put(store: Store, data: bytes, *, refs: int = 1) -> str:
    """Store ``data`` once (identical bytes share one copy); return its sha256 hex digest."""
    return store.write(lambda txn: put_txn(store, txn, data, refs))


def get_txn(store: Store, txn: lmdb.Transaction, sha: str) -> bytes:
    """The bytes stored under ``sha``; ``NotStored("artifact", sha)`` when there are none."""
    raw = txn.get(_key(sha), db=store.db["artifacts"])
    if raw is None:
        raise NotStored("artifact", sha)
    return bytes(raw)


def get(store: Store, sha: str) -> bytes:
    """The bytes stored under ``sha``; ``NotStored("artifact", sha)`` when there are none."""
    return store.read(lambda txn: get_txn(store, txn, sha))


def ref_txn(store: Store, txn: lmdb.Transaction, sha: str, delta: int) -> int:
    """Add ``delta`` (may be negative) to the count of ``sha``; the new count, never below 0."""
    key = _key(sha)
    if txn.get(key, db=store.db["artifacts"]) is None:
        raise NotStored("artifact", sha)
    count = max(0, min(_MAX_COUNT, _count(txn.get(key, db=store.db["artrefs"])) + delta))
    txn.put(key, _COUNT.pack(count), db=store.db["artrefs"])
    return count


def ref(store: Store, sha: str, delta: int) -> int:
    """Add ``delta`` to the reference count of ``sha``; returns the new count (at least 0)."""
    return store.write(lambda txn: ref_txn(store, txn, sha, delta))


def refcount_txn(store: Store, txn: lmdb.Transaction, sha: str) -> int:
    """The reference count of ``sha``; 0 when it has none or is not stored."""
    if _SHA_RE.fullmatch(sha) is None:
        return 0
    return _count(txn.get(sha.encode("ascii"), db=store.db["artrefs"]))


def refcount(store: Store, sha: str) -> int:
    """The reference count of ``sha``; 0 when it has none or is not stored."""
    return store.read(lambda txn: refcount_txn(store, txn, sha))


def _gc_txn(store: Store, txn: lmdb.Transaction) -> tuple[int, int]:
    artifacts, artrefs = store.db["artifacts"], store.db["artrefs"]
    doomed = [
        bytes(key)
        for key in txn.cursor(db=artifacts).iternext(values=False)
        if _count(txn.get(key, db=artrefs)) == 0
    ]
    freed = 0
    for key in doomed:
        raw = txn.pop(key, db=artifacts)
        freed += 0 if raw is None else len(raw)
        txn.delete(key, db=artrefs)
    return len(doomed), freed


def gc(store: Store) -> tuple[int, int]:
    """Remove content whose reference count is 0: ``(artifacts removed, bytes freed)``."""
    return store.write(lambda txn: _gc_txn(store, txn))
