"""Errors of the storage package.

Hierarchy::

    StorageError
    ├── StoreFull          the map reached its limit and may not grow (map_size, limit)
    ├── DiskFull           the file system has no room left (path)
    ├── SequenceGap        blocks that would leave a gap or overlap (expected, got)
    ├── RevisionConflict   a check-and-set write against a newer revision (expected, actual)
    ├── NotStored          nothing stored under a key or path (kind, key)
    └── QuotaExceeded      a write would take a conversation past a quota
                           (conversation_id, quota, usage, limit, needed)

Every error keeps its fields and pickles. A failed write transaction commits
nothing: what was committed before it is intact.
"""

from __future__ import annotations

from typing import Any


class StorageError(Exception):
    """Base of every error raised by the storage package."""


class StoreFull(StorageError):
    """The LMDB map is full and may not grow past ``limit`` bytes."""

    def __init__(self, map_size: int, limit: int) -> None:
        self.map_size = map_size
        self.limit = limit
        super().__init__(
            f"store full: map is {map_size:,} bytes and may not grow past {limit:,}; "
            "raise max_map_size or run Store.gc(); nothing committed was lost"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.map_size, self.limit))


class DiskFull(StorageError):
    """The disk holding the store has no space left."""

    def __init__(self, path: str, detail: str = "") -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"disk full at {path}: free space on that file system and retry; "
            f"nothing committed was lost{f' ({detail})' if detail else ''}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.detail))


class SequenceGap(StorageError):
    """New blocks must continue a conversation's sequence exactly."""

    def __init__(self, conversation_id: str, expected: int, got: int) -> None:
        self.conversation_id = conversation_id
        self.expected = expected
        self.got = got
        super().__init__(
            f"conversation {conversation_id}: next block must have seq {expected}, got {got}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.expected, self.got))


class RevisionConflict(StorageError):
    """Another writer committed since the revision this write was based on."""

    def __init__(self, conversation_id: str, expected: int, actual: int) -> None:
        self.conversation_id = conversation_id
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"conversation {conversation_id}: expected revision {expected}, store has {actual}; "
            "reload and retry"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.expected, self.actual))


class NotStored(StorageError):
    """Nothing is stored under this key (``kind`` says which table)."""

    def __init__(self, kind: str, key: str) -> None:
        self.kind = kind
        self.key = key
        super().__init__(f"no {kind} stored for {key!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kind, self.key))


class QuotaExceeded(StorageError):
    """A write would take conversation ``conversation_id`` past its quota ``quota``.

    ``quota`` names the counter (``workspace_bytes``, ``block_bytes``, ``artifacts``,
    ``artifact_bytes``; the setting is ``quota_<name>``), ``usage`` is what the conversation
    holds, ``limit`` the quota and ``needed`` what the write would add. Nothing was written.
    """

    def __init__(
        self, conversation_id: str, quota: str, usage: int, limit: int, needed: int
    ) -> None:
        self.conversation_id = conversation_id
        self.quota = quota
        self.usage = usage
        self.limit = limit
        self.needed = needed
        unit = "" if quota == "artifacts" else " bytes"
        super().__init__(
            f"quota_{quota} exceeded in conversation {conversation_id}: this write needs "
            f"{needed:,}{unit} more, {usage:,} of {limit:,}{unit} are used; nothing was written "
            "(make the output smaller, or delete files to make room)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            type(self),
            (self.conversation_id, self.quota, self.usage, self.limit, self.needed),
        )

    def as_dict(self) -> dict[str, Any]:
        """The fields, for a tool result the model and programs read."""
        return {
            "code": "quota_exceeded",
            "quota": f"quota_{self.quota}",
            "usage": self.usage,
            "limit": self.limit,
            "needed": self.needed,
        }
