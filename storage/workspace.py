"""The versioned workspace of a conversation: every version of every ``fi:`` file, by turn.

A ``Workspace`` is bound to ``(store, conversation_id)`` and holds nothing else: each call is
one LMDB transaction, so workspaces in several threads or processes over one store agree.
File bytes live in ``actline.storage.artifacts`` (identical content is stored once); a version row
holds their sha256 and one reference to them.

Areas and resolution. ``files/<scope>/...`` is durable project state: ``fi:<turn>.files/<rel>``
resolves to the version written in that turn if there is one, otherwise to the newest version
written in an earlier turn, i.e. the workspace as of that turn. ``outputs/<scope>/...``,
``user.attachments/<name>`` and ``external.followup.attachments/<message_id>/<name>`` belong to
the turn that produced them: their paths resolve only to the version written in that very turn.
Writing a rel again in the same turn replaces that turn's version (the old bytes lose their
reference). ``delete`` writes a tombstone version: later turns no longer see the file, earlier
paths still resolve. History is never rewritten otherwise.

Turn order is a per-conversation ordinal given to a turn when it first writes (or at
``begin_turn``). A path naming a turn without an ordinal raises ``NotStored("workspace turn",
"<cid>/<turn>")``; a path with no live version raises ``NotStored("file", path)``, as does a
folder path given to ``read`` or ``stat``. Paths are checked by ``actline.timeline.paths``, which
raises
``PathError`` naming the rule (``dot_segment``, ``absolute_path``, ``bad_area``, ...); a path
of another prefix (``ar:``, ``ks:``, ...) is refused with ``PathError("unknown_prefix", ...)``.
A rel given to ``write``/``delete`` that starts with ``/``, ``~`` or a drive letter is refused
as ``absolute_path`` and one ending with ``/`` (a folder) as ``bad_segment``.
Nothing here returns a filesystem path: results hold logical paths, sizes, mime types, digests.

Layout of the ``workspace`` database (``\\x00`` separates parts; logical paths never hold it)::

    <cid>\\x00t\\x00<turn_id>                         -> msgpack ordinal (1, 2, ...)
    <cid>\\x00o\\x00<ordinal:08d>                     -> turn_id (utf-8); the last key is the newest
    <cid>\\x00f\\x00<area>\\x00<rel>\\x00<ordinal:08d>   -> msgpack version row
    <cid>\\x00h\\x00<area>\\x00<sha256(rel)>\\x00<ord>   -> the same, for a rel too long for a key

A version row is ``{rel, turn_id, sha, size, mime, ts}``, or ``{rel, turn_id, deleted, ts}``
for a tombstone. Resolving one file is one cursor seek to ``<rel>\\x00<ordinal>``; the versions
of a rel are contiguous and in turn order; a folder is a key range. LMDB keys hold at most 511
bytes, so a rel whose key would be longer (rels reach 1024 characters) is keyed by its digest
under ``h`` and found by scanning that (rarely used) range.

Quotas (``actline.storage.quota``): every write and delete updates the conversation's counters in
its own transaction; a ``files/`` or ``outputs/`` write that would take a counter past the
workspace's ``Quota`` raises ``QuotaExceeded`` before anything is put (attachments are counted,
never refused). ``check_room`` checks a batch of writes at once, so a tool stores it whole or
not at all.

Who owns what of the workspace: this module the ``fi:`` semantics, the path checks and the one
write path of both modes (``WorkspaceBase``) and the custom mode's LMDB storage
(``Workspace``); ``actline.tools.workspace.workspace`` the choice of mode (``open_workspace``)
and the files on disk (``LocalTree``); ``actline.tools.workspace.git`` the git mode; the
react.* tools that use it are ``actline.tools.react.files`` and ``actline.tools.react.write``.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypedDict, TypeVar

import lmdb

from actline.timeline.errors import PathError
from actline.timeline.paths import (
    FI_AREAS,
    FOLLOWUP_AREA,
    LogicalPath,
    fi_path,
    format_path,
    parse_path,
)

from . import artifacts
from .errors import NotStored
from .layout import pack, unpack
from .quota import Quota, Usage, add_txn, usage_txn
from .store import Store

__all__ = ["DURABLE_AREAS", "FileStat", "Workspace", "WorkspaceBase"]

T = TypeVar("T")
DURABLE_AREAS = ("files",)
ENFORCED_AREAS = ("files", "outputs")
"""Areas whose writes a quota may refuse (the ones tools write); attachments are only counted."""
ORD_DIGITS = 8
_SEP = b"\x00"
_DRIVE_RE = re.compile(r"[A-Za-z]:[\\/]")


class FileStat(TypedDict):
    """One version of a file as the workspace reports it (no physical location)."""

    path: str  # the logical path asked about (for versions(): the version's own path)
    version: str  # fi:<turn that wrote it>.<area>/<rel>, which resolves to this version forever
    turn_id: str  # the turn that wrote this version
    area: str
    rel: str
    sha: str  # sha256 of the bytes; "" for a tombstone
    size: int
    mime: str
    ts: float
    deleted: bool


def _stat(path: str, area: str, row: dict[str, Any]) -> FileStat:
    rel, turn = str(row["rel"]), str(row["turn_id"])
    deleted = bool(row.get("deleted", False))
    return FileStat(
        path=path,
        version=_logical(turn, area, rel),
        turn_id=turn,
        area=area,
        rel=rel,
        sha="" if deleted else str(row["sha"]),
        size=int(row.get("size", 0)),
        mime=str(row.get("mime", "")),
        ts=float(row.get("ts", 0.0)),
        deleted=deleted,
    )


def _logical(turn_id: str, area: str, rel: str) -> str:
    """The canonical ``fi:`` path of any area (``PathError`` when it breaks the grammar)."""
    if area not in FI_AREAS:
        detail = f"write fi:{turn_id}.<area>/..., area one of {', '.join(FI_AREAS)}"
        raise PathError("bad_area", f"fi:{turn_id}.{area}/{rel}", detail)
    return format_path(LogicalPath("fi", turn_id, area, rel=rel))


def _check_turn_and_area(turn_id: str, area: str) -> None:
    """``PathError`` (path: the turn id) for a malformed turn id or an unknown area."""
    try:
        _logical(turn_id, area, "m/x" if area == FOLLOWUP_AREA else "x")
    except PathError as exc:
        where = turn_id if exc.rule == "bad_turn_id" else f"{turn_id}.{area}"
        raise PathError(exc.rule, where, exc.detail) from None


def _refuse_absolute(turn_id: str, area: str, rel: str) -> None:
    """A rel written as an absolute or home path names the rule (the grammar says bad_segment)."""
    if rel.startswith(("/", "~")) or _DRIVE_RE.match(rel):
        detail = f"write the path relative to the area: fi:{turn_id}.{area}/<scope>/<name>"
        raise PathError("absolute_path", f"fi:{turn_id}.{area}/{rel}", detail)


def _delta(area: str, size: int | None, old: dict[str, Any] | None) -> Usage:
    """How the counters change when a version of ``size`` bytes (None: a tombstone) replaces
    ``old``, the version of the same turn (None when there is none)."""
    was = None if old is None or old.get("deleted") else int(old.get("size", 0))
    grow = (size or 0) - (was or 0)
    if area == "files":
        return Usage(workspace_bytes=grow)
    return Usage(artifacts=(size is not None) - (was is not None), artifact_bytes=grow)


def _refuse_folder(path: str, rel: str) -> None:
    if rel.endswith("/"):
        raise PathError("bad_segment", path, "a folder is not a file; end the path with a name")


class WorkspaceBase:
    """What both workspace modes share: the one write path and the checks of every path.

    ``write``, ``write_followup_attachment`` and ``delete`` check a rel (absolute or folder
    paths, the grammar, names the mode cannot keep) and date the change once for both modes,
    then hand it to the mode: ``_put`` stores one version, ``_remove`` writes a tombstone.
    ``Workspace`` (below) keeps the versions in LMDB; the git mode
    (``actline.tools.workspace.git.GitWorkspace``) keeps them as commits of a git history.
    """

    conversation_id: str

    def write(
        self,
        turn_id: str,
        area: str,
        rel: str,
        data: bytes,
        *,
        mime: str = "",
        ts: float | None = None,
    ) -> str:
        """Write a version of ``<area>/<rel>`` in ``turn_id``; returns ``fi:<turn>.<area>/<rel>``.

        ``area`` is ``files``, ``outputs`` or ``user.attachments`` (see
        ``write_followup_attachment`` for the fourth).
        """
        _refuse_absolute(turn_id, area, rel)
        path = fi_path(turn_id, area, rel)
        _refuse_folder(path, rel)
        self._refuse_unstorable(path, rel)
        return self._put(turn_id, area, rel, path, data, mime, _when(ts))

    def write_followup_attachment(
        self,
        turn_id: str,
        message_id: str,
        name: str,
        data: bytes,
        *,
        mime: str = "",
        ts: float | None = None,
    ) -> str:
        """Store a file attached to a followup message; returns its ``fi:`` path."""
        _refuse_absolute(turn_id, FOLLOWUP_AREA, name)
        rel = f"{message_id}/{name}"
        path = _logical(turn_id, FOLLOWUP_AREA, rel)
        self._refuse_unstorable(path, rel)
        return self._put(turn_id, FOLLOWUP_AREA, rel, path, data, mime, _when(ts))

    def delete(self, turn_id: str, area: str, rel: str, *, ts: float | None = None) -> str:
        """Write a tombstone for ``<area>/<rel>`` in ``turn_id``; returns the deleted path.

        ``NotStored("file", path)`` when the file is not live as of that turn.
        """
        _refuse_absolute(turn_id, area, rel)
        path = _logical(turn_id, area, rel)
        _refuse_folder(path, rel)
        return self._remove(turn_id, area, rel, path, _when(ts))

    # -- what a mode implements ------------------------------------------------------------------

    def _refuse_unstorable(self, path: str, rel: str) -> None:
        """``PathError`` for a written name this mode cannot keep (every name fits LMDB)."""

    def _put(
        self, turn_id: str, area: str, rel: str, path: str, data: bytes, mime: str, when: float
    ) -> str:
        """Store ``data`` as the version of ``<area>/<rel>`` in ``turn_id``; returns ``path``."""
        raise NotImplementedError

    def _remove(self, turn_id: str, area: str, rel: str, path: str, when: float) -> str:
        """Write the tombstone of ``<area>/<rel>`` in ``turn_id``; returns ``path``."""
        raise NotImplementedError

    # -- path checks of the reads ----------------------------------------------------------------

    def _parse(self, path: str | LogicalPath) -> tuple[LogicalPath, str]:
        """A ``fi:`` path parsed, and as text; ``PathError`` for any other path."""
        lp = parse_path(path) if isinstance(path, str) else path
        text = path if isinstance(path, str) else str(path)
        if lp.prefix != "fi" or lp.turn_id is None:
            detail = "the workspace holds fi: paths only; write fi:<turn>.files/<rel>"
            raise PathError("unknown_prefix", text, detail)
        return lp, text

    def _folder(self, path: str | LogicalPath) -> tuple[LogicalPath, str, str]:
        """A ``listdir`` path: the parsed path, its turn and the rel prefix it lists
        (``fi:t3.files/bundle`` reads as the folder ``fi:t3.files/bundle/``)."""
        lp, text = self._parse(path)
        turn_id = lp.turn_id
        assert turn_id is not None
        if lp.name not in ("files", "outputs"):
            detail = f"only files/ and outputs/ hold folders; use tree({turn_id!r}, {lp.name!r})"
            raise PathError("bad_area", text, detail)
        return lp, turn_id, lp.rel if lp.is_folder else lp.rel + "/"


def _check_rel(area: str, rel: str) -> None:
    """``PathError`` (path: ``<area>/<rel>``) unless ``versions`` may be asked about the rel."""
    try:
        _logical("_", area, rel)
    except PathError as exc:
        raise PathError(exc.rule, f"{area}/{rel}", exc.detail) from None
    _refuse_folder(f"{area}/{rel}", rel)


def _when(ts: float | None) -> float:
    return time.time() if ts is None else ts


class Workspace(WorkspaceBase):
    """The ``fi:`` files of one conversation, every version kept, addressed by turn."""

    def __init__(self, store: Store, conversation_id: str, *, quota: Quota | None = None) -> None:
        if not conversation_id or "\x00" in conversation_id:
            raise ValueError(f"conversation id must be non-empty without NUL: {conversation_id!r}")
        self.store = store
        self.conversation_id = conversation_id
        self.quota = quota if quota is not None else Quota()
        """The conversation's limits (``Quota()``: the documented defaults)."""
        self._db = store.db["workspace"]
        self._cid = conversation_id.encode()
        self._max_key = store.env.max_key_size()

    # -- keys ------------------------------------------------------------------------------------

    def _key(self, *parts: bytes) -> bytes:
        return _SEP.join((self._cid, *parts))

    def _file_prefix(self, area: str, rel: str) -> bytes:
        """The key prefix of every version of ``rel`` (ends with the separator)."""
        prefix = self._key(b"f", area.encode(), rel.encode(), b"")
        if len(prefix) + ORD_DIGITS <= self._max_key:
            return prefix
        return self._key(
            b"h", area.encode(), hashlib.sha256(rel.encode()).hexdigest().encode(), b""
        )

    @staticmethod
    def _ord(ordinal: int) -> bytes:
        return f"{ordinal:0{ORD_DIGITS}d}".encode()

    # -- turns -----------------------------------------------------------------------------------

    def _ordinal_txn(self, txn: lmdb.Transaction, turn_id: str, *, create: bool) -> int | None:
        key = self._key(b"t", turn_id.encode())
        raw = txn.get(key, db=self._db)
        if raw is not None:
            return int(unpack(raw))
        if not create:
            return None
        prefix = self._key(b"o", b"")
        cursor = txn.cursor(db=self._db)
        moved = cursor.prev() if cursor.set_range(self._key(b"o\x01")) else cursor.last()
        last = bytes(cursor.key()) if moved else b""
        ordinal = int(last[len(prefix) :]) + 1 if last.startswith(prefix) else 1
        txn.put(key, pack(ordinal), db=self._db)
        txn.put(self._key(b"o", self._ord(ordinal)), turn_id.encode(), db=self._db)
        return ordinal

    def begin_turn(self, turn_id: str) -> int:
        """Give ``turn_id`` its ordinal now (idempotent), so its paths resolve before it writes."""
        return self.store.write(self.begin_turn_write(turn_id))

    def begin_turn_write(self, turn_id: str) -> Callable[[lmdb.Transaction], int]:
        """``begin_turn`` as a write function, for a group commit (``storage.Committer``)."""
        _check_turn_and_area(turn_id, "files")

        def write(txn: lmdb.Transaction) -> int:
            ordinal = self._ordinal_txn(txn, turn_id, create=True)
            assert ordinal is not None
            return ordinal

        return write

    def turns(self) -> list[str]:
        """The turns the workspace knows, oldest first."""

        def fn(txn: lmdb.Transaction) -> list[str]:
            prefix = self._key(b"o", b"")
            cursor = txn.cursor(db=self._db)
            out: list[str] = []
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    out.append(bytes(value).decode())
            return out

        return self.store.read(fn)

    # -- versions --------------------------------------------------------------------------------

    def _version_txn(
        self, txn: lmdb.Transaction, area: str, rel: str, ordinal: int
    ) -> dict[str, Any] | None:
        """The version of ``rel`` seen at ``ordinal`` (tombstones included), or None."""
        prefix = self._file_prefix(area, rel)
        target = prefix + self._ord(ordinal)
        if area not in DURABLE_AREAS:
            raw = txn.get(target, db=self._db)
            return None if raw is None else dict(unpack(raw))
        cursor = txn.cursor(db=self._db)
        if cursor.set_range(target):
            if bytes(cursor.key()) != target and not cursor.prev():
                return None
        elif not cursor.last():
            return None
        if not bytes(cursor.key()).startswith(prefix):
            return None
        return dict(unpack(cursor.value()))

    def _replace_txn(
        self, txn: lmdb.Transaction, area: str, rel: str, ordinal: int, row: dict[str, Any]
    ) -> None:
        key = self._file_prefix(area, rel) + self._ord(ordinal)
        old = txn.get(key, db=self._db)
        if old is not None:
            sha = unpack(old).get("sha")
            if sha:
                artifacts.ref_txn(self.store, txn, str(sha), -1)
        txn.put(key, pack(row), db=self._db)

    def _scan_txn(
        self, txn: lmdb.Transaction, area: str, under: str, ordinal: int
    ) -> dict[str, dict[str, Any]]:
        """The live files of ``area`` whose rel starts with ``under``, as seen at ``ordinal``."""
        exact = area not in DURABLE_AREAS
        out: dict[str, dict[str, Any]] = {}
        ranges = (
            self._key(b"f", area.encode(), under.encode()),
            self._key(b"h", area.encode(), b""),
        )
        for start in ranges:
            chosen: dict[bytes, bytes] = {}  # one row per rel: the version seen at ordinal
            cursor = txn.cursor(db=self._db)
            if not cursor.set_range(start):
                continue
            for raw_key, value in cursor:
                key = bytes(raw_key)
                if not key.startswith(start):
                    break
                group, _, digits = key.rpartition(_SEP)
                n = int(digits)
                if n == ordinal or (not exact and n < ordinal):
                    chosen[group] = bytes(value)  # keys ascend: the newest qualifying one wins
            for raw in chosen.values():
                row = dict(unpack(raw))
                if not row.get("deleted") and str(row["rel"]).startswith(under):
                    out[str(row["rel"])] = row
        return dict(sorted(out.items()))

    # -- writing ---------------------------------------------------------------------------------

    def _put(
        self, turn_id: str, area: str, rel: str, path: str, data: bytes, mime: str, when: float
    ) -> str:
        row = {"rel": rel, "turn_id": turn_id, "size": len(data), "mime": mime, "ts": when}
        return self._commit(turn_id, area, rel, path, row, data)

    def _remove(self, turn_id: str, area: str, rel: str, path: str, when: float) -> str:
        row = {"rel": rel, "turn_id": turn_id, "deleted": True, "ts": when}
        return self._commit(turn_id, area, rel, path, row, None)

    def _commit(
        self, turn_id: str, area: str, rel: str, path: str, row: dict[str, Any], data: bytes | None
    ) -> str:
        """Put ``row`` (``data``: its bytes; None: a tombstone) in one write transaction."""

        def fn(txn: lmdb.Transaction) -> str:
            ordinal = self._ordinal_txn(txn, turn_id, create=True)
            assert ordinal is not None
            full = dict(row)
            if data is None:
                current = self._version_txn(txn, area, rel, ordinal)
                if current is None or current.get("deleted"):
                    raise NotStored("file", path)
            delta = _delta(
                area, None if data is None else len(data), self._same_turn(txn, area, rel, ordinal)
            )
            if area in ENFORCED_AREAS:  # before the bytes are put: a refused write costs nothing
                self.quota.check(self.conversation_id, self._usage_txn(txn), delta)
            if data is not None:
                full["sha"] = artifacts.put_txn(self.store, txn, data)
            self._replace_txn(txn, area, rel, ordinal, full)
            add_txn(self.store, txn, self.conversation_id, delta)
            return path

        return self.store.write(fn)

    def _same_turn(
        self, txn: lmdb.Transaction, area: str, rel: str, ordinal: int
    ) -> dict[str, Any] | None:
        """The version of ``rel`` written in the turn of ``ordinal`` itself, or None."""
        raw = txn.get(self._file_prefix(area, rel) + self._ord(ordinal), db=self._db)
        return None if raw is None else dict(unpack(raw))

    def _usage_txn(self, txn: lmdb.Transaction) -> Usage:
        return usage_txn(self.store, txn, self.conversation_id)

    def usage(self) -> Usage:
        """What the conversation holds against its quotas (``Store.usage``)."""
        return self.store.read(self._usage_txn)

    def check_room(self, turn_id: str, changes: Iterable[tuple[str, str, int | None]]) -> Usage:
        """``QuotaExceeded`` unless every change fits at once: ``(area, rel, size)`` writes
        a version of ``size`` bytes in ``turn_id``, ``(area, rel, None)`` deletes one.

        Returns what the changes would add. A check, not a reservation: the writes that
        follow are each checked again (serialise them with the conversation's file lock).
        """
        items = list(changes)

        def fn(txn: lmdb.Transaction) -> Usage:
            ordinal = self._ordinal_txn(txn, turn_id, create=False)
            delta = Usage()
            for area, rel, size in items:
                old = None if ordinal is None else self._same_turn(txn, area, rel, ordinal)
                delta += _delta(area, size, old)
            self.quota.check(self.conversation_id, self._usage_txn(txn), delta)
            return delta

        return self.store.read(fn)

    # -- reading ---------------------------------------------------------------------------------

    def _as_of(self, txn: lmdb.Transaction, turn_id: str) -> int:
        ordinal = self._ordinal_txn(txn, turn_id, create=False)
        if ordinal is None:
            raise NotStored("workspace turn", f"{self.conversation_id}/{turn_id}")
        return ordinal

    def _resolve(
        self,
        path: str | LogicalPath,
        fn: Callable[[lmdb.Transaction, LogicalPath, dict[str, Any]], T],
    ) -> T:
        lp, text = self._parse(path)
        if lp.is_folder:
            raise NotStored("file", text)
        turn_id = lp.turn_id
        assert turn_id is not None

        def txn_fn(txn: lmdb.Transaction) -> T:
            row = self._version_txn(txn, lp.name, lp.rel, self._as_of(txn, turn_id))
            if row is None or row.get("deleted"):
                raise NotStored("file", text)
            return fn(txn, lp, row)

        return self.store.read(txn_fn)

    def read(self, path: str | LogicalPath) -> bytes:
        """The bytes a ``fi:`` file path resolves to (see the module docstring)."""
        return self._resolve(
            path, lambda txn, _, row: artifacts.get_txn(self.store, txn, str(row["sha"]))
        )

    def stat(self, path: str | LogicalPath) -> FileStat:
        """What a ``fi:`` file path resolves to: its version, digest, size, mime and time."""
        return self._resolve(path, lambda _, lp, row: _stat(str(lp), lp.name, row))

    def listdir(self, path: str | LogicalPath) -> list[str]:
        """The logical paths of every live file under a ``files/`` or ``outputs/`` folder.

        Recursive, sorted, as of the path's turn; ``fi:t3.files/bundle`` reads as the folder
        ``fi:t3.files/bundle/``. An unknown folder lists nothing.
        """
        lp, turn_id, under = self._folder(path)

        def fn(txn: lmdb.Transaction) -> list[str]:
            rows = self._scan_txn(txn, lp.name, under, self._as_of(txn, turn_id))
            return [_logical(turn_id, lp.name, rel) for rel in rows]

        return self.store.read(fn)

    def tree(self, turn_id: str, area: str = "files") -> dict[str, FileStat]:
        """The whole ``area`` as of ``turn_id``: rel -> stat of the live version, sorted by rel."""
        return self.trees(turn_id, (area,))[area]

    def trees(self, turn_id: str, areas: Sequence[str]) -> dict[str, dict[str, FileStat]]:
        """``tree`` of each of ``areas`` as of ``turn_id``, in one read transaction."""
        for area in areas:
            _check_turn_and_area(turn_id, area)

        def fn(txn: lmdb.Transaction) -> dict[str, dict[str, FileStat]]:
            ordinal = self._as_of(txn, turn_id)
            return {
                area: {
                    rel: _stat(_logical(turn_id, area, rel), area, row)
                    for rel, row in self._scan_txn(txn, area, "", ordinal).items()
                }
                for area in areas
            }

        return self.store.read(fn)

    def versions(self, area: str, rel: str) -> list[FileStat]:
        """Every version of ``<area>/<rel>`` ever written, tombstones included, oldest first."""
        _check_rel(area, rel)
        prefix = self._file_prefix(area, rel)

        def fn(txn: lmdb.Transaction) -> list[FileStat]:
            cursor = txn.cursor(db=self._db)
            out: list[FileStat] = []
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not bytes(key).startswith(prefix):
                        break
                    row = dict(unpack(value))
                    version = _logical(str(row["turn_id"]), area, rel)
                    out.append(_stat(version, area, row))
            return out

        return self.store.read(fn)
