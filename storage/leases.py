"""Conversation leases between the processes of one node.

A lease says which owner (a node process, an actor) works on a conversation
until ``expires_at``; the owner renews it while it works, and it lapses on its
own when the owner dies. Each operation is one LMDB write transaction, and
LMDB serialises writers across processes, so acquire is a true check-and-set.
Times are passed in (epoch seconds), so tests need no clock. Leases across
nodes live in a JetStream KV bucket (the Ray cluster issue); these are the
node-local ones.

Layout: ``leases`` db, key ``<cid>`` -> msgpack ``{owner, expires_at, acquired_at, renewals}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lmdb

from .store import Store, pack, unpack


@dataclass(frozen=True, slots=True)
class Lease:
    conversation_id: str
    owner: str
    expires_at: float
    acquired_at: float
    renewals: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "owner": self.owner,
            "expires_at": self.expires_at,
            "acquired_at": self.acquired_at,
            "renewals": self.renewals,
        }


def _get(store: Store, txn: lmdb.Transaction, cid: str) -> Lease | None:
    raw = txn.get(cid.encode(), db=store.db["leases"])
    if raw is None:
        return None
    d = unpack(raw)
    return Lease(
        cid,
        str(d["owner"]),
        float(d["expires_at"]),
        float(d["acquired_at"]),
        int(d.get("renewals", 0)),
    )


def holder(store: Store, cid: str, *, now: float) -> Lease | None:
    """The live lease on ``cid`` (None when free or lapsed)."""
    lease = store.read(lambda txn: _get(store, txn, cid))
    return lease if lease is not None and lease.expires_at > now else None


def acquire(store: Store, cid: str, owner: str, *, ttl: float, now: float) -> Lease | None:
    """Take the lease when it is free, lapsed or already ours (then it is renewed).

    Returns the lease, or None when another owner holds a live one.
    """

    def fn(txn: lmdb.Transaction) -> Lease | None:
        current = _get(store, txn, cid)
        if current is not None and current.owner != owner and current.expires_at > now:
            return None
        if current is not None and current.owner == owner and current.expires_at > now:
            lease = Lease(cid, owner, now + ttl, current.acquired_at, current.renewals + 1)
        else:
            lease = Lease(cid, owner, now + ttl, now)
        txn.put(cid.encode(), pack(lease.to_dict()), db=store.db["leases"])
        return lease

    return store.write(fn)


def renew(store: Store, cid: str, owner: str, *, ttl: float, now: float) -> Lease | None:
    """Extend our live lease; None when it lapsed or someone else holds the conversation."""

    def fn(txn: lmdb.Transaction) -> Lease | None:
        current = _get(store, txn, cid)
        if current is None or current.owner != owner or current.expires_at <= now:
            return None
        lease = Lease(cid, owner, now + ttl, current.acquired_at, current.renewals + 1)
        txn.put(cid.encode(), pack(lease.to_dict()), db=store.db["leases"])
        return lease

    return store.write(fn)


def release(store: Store, cid: str, owner: str) -> bool:
    """Give the lease up; False when we did not hold it."""

    def fn(txn: lmdb.Transaction) -> bool:
        current = _get(store, txn, cid)
        if current is None or current.owner != owner:
            return False
        return bool(txn.delete(cid.encode(), db=store.db["leases"]))

    return store.write(fn)
