"""Rows a node keeps beyond one conversation: the embedding cache and users' memory facts.

``vectors`` caches embeddings by model and text hash for every conversation of the node;
``ufacts`` holds the memory fact rows of a user, shared by their conversations (memory
scope ``user``). Keys are in ``actline.storage.layout``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import lmdb

from .environment import Environment
from .layout import pack, unpack


class NodeRows(Environment):
    """The embedding cache and the user fact rows."""

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
