"""The owner's side of a workspace reached from another node: ``workspace.fetch`` and
``workspace.apply`` on ``<prefix>.node.<node>.workspace`` (``Subjects.node_workspace``).

A tool executor without the conversation's files (a tool pool, another node's executor) asks
the node holding the conversation. A request is served only while the conversation is held
here and its turn is the running one; anything else is an ``error.reply`` saying which.

- ``workspace.fetch``: the running turn's trees (or an earlier turn's, ``as_of``) with the
  files' bytes inline up to a bound, the bytes of named ``fi:`` paths (one chunk each from
  ``offset``), the refs pulled here, and the quota counters the executor checks its own
  writes against.
- ``workspace.apply``: the changes of one call, staged part by part until the ``final`` one,
  then checked and stored through the conversation's workspace under its file lock (off the
  event loop), all or nothing: only ``files/`` and ``outputs/`` of the running turn, the path
  grammar, no file changed here since it was fetched (``workspace_conflict``, never
  overwritten), the quotas for the whole batch (``quota_exceeded``). Each stored change is a
  version of the turn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from actline.bus import Bus, Envelope, Subscription
from actline.messages import (
    Ack,
    ErrorReply,
    Message,
    WorkspaceApply,
    WorkspaceChange,
    WorkspaceFetch,
    WorkspaceFile,
    WorkspaceFiles,
)
from actline.storage import FileStat, NotStored, QuotaExceeded, Workspace
from actline.timeline.errors import PathError
from actline.timeline.paths import fi_path
from actline.tools.workspace.workspace import TURN_AREAS, check_room

from .files import ConversationFiles

__all__ = ["WorkspaceServer"]

log = logging.getLogger(__name__)

STAGED_MAX_BYTES = 1 << 30
"""The bytes of unfinished applies this node keeps at most, every call together."""
STAGED_TTL_S = 600.0
"""An apply whose final part has not come for this long is dropped."""


class Holder(Protocol):
    """What the server needs of a held conversation (``ConversationActor``)."""

    files: ConversationFiles

    @property
    def running_turn(self) -> str | None: ...


class Refused(Exception):
    """A request the server answers with an ``error.reply``."""

    def __init__(self, code: str, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = {k: v for k, v in (detail or {}).items() if k != "code"}

    def reply(self, subject: str) -> ErrorReply:
        return ErrorReply(code=self.code, message=self.message, subject=subject, detail=self.detail)


@dataclass(slots=True)
class _File:
    """One change of a staged apply, its bytes gathered part by part."""

    change: WorkspaceChange
    data: bytearray | None
    """None: a deletion."""


@dataclass(slots=True)
class _Staged:
    started: float
    files: dict[tuple[str, str], _File] = field(default_factory=dict)
    size: int = 0


class WorkspaceServer:
    """Serves the workspaces of the conversations ``holder`` finds held on this node."""

    def __init__(
        self,
        bus: Bus,
        node_id: str,
        holder: Callable[[str], Holder | None],
        *,
        limit: int | None = None,
    ) -> None:
        self.bus = bus
        self.node_id = node_id
        self.holder = holder
        self.limit = limit if limit is not None else bus.max_payload // 2
        """Bytes of content in one answer at most."""
        self._staged: dict[tuple[str, str, str], _Staged] = {}
        self._sub: Subscription | None = None

    async def start(self) -> Subscription:
        """Subscribe on this node's workspace subject."""
        subject = self.bus.subjects.node_workspace(self.node_id)
        self._sub = await self.bus.subscribe(subject, self.handle, concurrency=8)
        return self._sub

    async def handle(self, msg: Message, env: Envelope) -> Message:
        try:
            if isinstance(msg, WorkspaceFetch):
                return await self._fetch(msg)
            if isinstance(msg, WorkspaceApply):
                return await self._apply(msg)
            raise Refused(
                "unexpected_message",
                f"{env.subject} serves workspace.fetch and workspace.apply; got {msg.kind}",
            )
        except Refused as exc:
            return exc.reply(env.subject)

    def _files(self, cid: str, turn_id: str) -> ConversationFiles:
        conv = self.holder(cid)
        if conv is None:
            raise Refused(
                "not_held",
                f"conversation {cid} is not held by node {self.node_id}; its workspace is "
                "served by the node that holds it",
                {"node": self.node_id},
            )
        running = conv.running_turn
        if running != turn_id:
            now = f"turn {running} runs now" if running else "no turn runs now"
            raise Refused(
                "turn_not_running",
                f"turn {turn_id} of conversation {cid} is not running on node {self.node_id} "
                f"({now}); a tool reaches only the running turn's workspace",
                {"running": running or ""},
            )
        return conv.files

    # -- fetch ---------------------------------------------------------------------------
    async def _fetch(self, msg: WorkspaceFetch) -> WorkspaceFiles:
        files = self._files(msg.conversation_id, msg.turn_id)
        limit = min(msg.limit or self.limit, self.limit)
        async with files.lock:
            self._files(msg.conversation_id, msg.turn_id)  # still running once the lock is held
            try:
                return await asyncio.to_thread(_snapshot, files, msg, max(1, limit))
            except PathError as exc:
                raise Refused("bad_path", f"{exc.path} ({exc.rule}): {exc.detail}") from None

    # -- apply ---------------------------------------------------------------------------
    async def _apply(self, msg: WorkspaceApply) -> Message:
        key = (msg.conversation_id, msg.turn_id, msg.call_id)
        try:
            files = self._files(msg.conversation_id, msg.turn_id)
            staged = self._stage(key, msg.changes)
        except Refused:
            self._drop(key)
            raise
        if not msg.final:
            return Ack(ref=msg.call_id, detail=f"{len(staged.files)} change(s) staged")
        self._drop(key)
        async with files.lock:
            self._files(msg.conversation_id, msg.turn_id)  # still running once the lock is held
            try:
                changes = list(staged.files.values())
                written = await asyncio.to_thread(_store, files, msg.turn_id, changes)
            finally:
                files.changed()
        log.debug(
            "applied %d change(s) of call %s to turn %s of %s",
            len(written),
            msg.call_id,
            msg.turn_id,
            msg.conversation_id,
        )
        return Ack(ref=msg.call_id, detail=" ".join(written))

    def _stage(self, key: tuple[str, str, str], changes: list[WorkspaceChange]) -> _Staged:
        now = time.monotonic()
        for old in [k for k, s in self._staged.items() if now - s.started > STAGED_TTL_S]:
            self._drop(old)
        staged = self._staged.setdefault(key, _Staged(now))
        for change in changes:
            name = (change.area, change.rel)
            entry = staged.files.get(name)
            if change.data is None:
                staged.files[name] = _File(change, None)
                continue
            if entry is None or entry.data is None or change.offset == 0:
                entry = staged.files[name] = _File(change, bytearray())
            assert entry.data is not None
            if change.offset != len(entry.data):
                raise Refused(
                    "incomplete_apply",
                    f"the part of {change.area}/{change.rel} at byte {change.offset} does not "
                    f"follow the {len(entry.data)} bytes received",
                )
            if len(entry.data) + len(change.data) > change.size:
                raise Refused(
                    "incomplete_apply",
                    f"{change.area}/{change.rel} sent more than its {change.size} bytes",
                )
            total = sum(s.size for s in self._staged.values()) + len(change.data)
            if total > STAGED_MAX_BYTES:
                raise Refused(
                    "too_large",
                    f"node {self.node_id} holds {STAGED_MAX_BYTES:,} bytes of unfinished "
                    "workspace changes at most; send smaller changes",
                )
            entry.data += change.data
            staged.size += len(change.data)
        return staged

    def _drop(self, key: tuple[str, str, str]) -> None:
        self._staged.pop(key, None)


def _wire(stat: FileStat, data: bytes | None = None, offset: int = 0) -> WorkspaceFile:
    return WorkspaceFile(
        path=stat["path"],
        version=stat["version"],
        sha=stat["sha"],
        size=stat["size"],
        mime=stat["mime"],
        ts=stat["ts"],
        data=data,
        offset=offset,
    )


def _snapshot(files: ConversationFiles, msg: WorkspaceFetch, limit: int) -> WorkspaceFiles:
    """What ``msg`` asks for, with at most ``limit`` bytes of content."""
    workspace = files.workspace
    budget = limit
    listed: list[WorkspaceFile] = []
    pulled: list[str] = []
    if msg.areas:
        as_of = msg.as_of or msg.turn_id
        for area in msg.areas:
            if area not in TURN_AREAS:
                raise PathError("bad_area", f"fi:{as_of}.{area}/", "list files/ or outputs/")
        try:
            trees = workspace.trees(as_of, msg.areas)
        except NotStored:  # the turn never began in the workspace
            trees = {area: {} for area in msg.areas}
        for area in msg.areas:
            for stat in trees[area].values():
                data = None
                if msg.contents and stat["size"] <= budget:
                    data = workspace.read(stat["path"])
                    budget -= len(data)
                listed.append(_wire(stat, data))
        if not msg.as_of:
            pulled = files.local.pulled_refs(msg.turn_id)
    read: list[WorkspaceFile] = []
    missing: list[str] = []
    for path in msg.paths:
        try:
            stat = workspace.stat(path)
            data = workspace.read(path)
        except (NotStored, PathError):
            missing.append(path)
            continue
        chunk = data[msg.offset : msg.offset + max(budget, 0)]
        budget -= len(chunk)
        read.append(_wire(stat, chunk, msg.offset))
    usage: dict[str, int] = {}
    quota: dict[str, int] = {}
    if isinstance(workspace, Workspace):  # the custom mode counts; git keeps its own history
        usage = workspace.usage().as_dict()
        quota = asdict(workspace.quota)
    return WorkspaceFiles(
        conversation_id=msg.conversation_id,
        turn_id=msg.turn_id,
        mode=workspace.mode,
        files=listed,
        read=read,
        missing=missing,
        pulled=pulled,
        usage=usage,
        quota=quota,
    )


def _store(files: ConversationFiles, turn_id: str, changes: list[_File]) -> list[str]:
    """Check every change, then store them all; ``Refused`` stores nothing."""
    workspace = files.workspace
    for item in changes:
        change = item.change
        if change.area not in TURN_AREAS:
            raise Refused(
                "bad_path",
                f"{change.area}/{change.rel}: a tool writes files/ or outputs/ of the running "
                "turn only",
            )
        try:
            fi_path(turn_id, change.area, change.rel)
        except PathError as exc:
            raise Refused("bad_path", f"{exc.path} ({exc.rule}): {exc.detail}") from None
        if item.data is not None and len(item.data) != change.size:
            raise Refused(
                "incomplete_apply",
                f"{change.area}/{change.rel}: {len(item.data)} of its {change.size} bytes came",
            )
    areas = sorted({item.change.area for item in changes})
    try:
        trees = workspace.trees(turn_id, areas) if areas else {}
    except NotStored:
        trees = {area: {} for area in areas}
    conflicts = []
    for item in changes:
        change = item.change
        now = trees.get(change.area, {}).get(change.rel)
        if (now["sha"] if now is not None else "") != change.base:
            conflicts.append(f"{change.area}/{change.rel}")
    if conflicts:
        raise Refused(
            "workspace_conflict",
            f"{', '.join(conflicts)} changed in turn {turn_id} since this call read "
            "them; nothing of the call was stored (read the files again and redo the change)",
            {"paths": conflicts},
        )
    plan = [(i.change.area, i.change.rel, None if i.data is None else len(i.data)) for i in changes]
    try:
        check_room(workspace, turn_id, plan)
    except QuotaExceeded as exc:
        raise Refused("quota_exceeded", str(exc), exc.as_dict()) from None
    written: list[str] = []
    for item in changes:
        change = item.change
        ts = change.ts or None
        try:
            if item.data is None:
                workspace.delete(turn_id, change.area, change.rel, ts=ts)
            else:
                data = bytes(item.data)
                mime = change.mime
                written.append(
                    workspace.write(turn_id, change.area, change.rel, data, mime=mime, ts=ts)
                )
        except NotStored:
            continue  # git mode: the work tree is the store, the file is gone already
        except PathError as exc:
            raise Refused(
                "bad_path",
                f"{exc.path} ({exc.rule}): {exc.detail}; stored before it: {written}",
            ) from None
        except QuotaExceeded as exc:
            raise Refused("quota_exceeded", str(exc), exc.as_dict()) from None
    return written
