"""The running turn's workspace for a tool executor that does not hold the conversation.

A call whose conversation is held by another node (``ToolCall.owner``) gets a ``TurnFiles``
built here: a ``RemoteWorkspace`` (a copy of the running turn's ``files/`` and ``outputs/``,
fetched from the owner with ``workspace.fetch`` when a tool first touches it) and a
``RemoteTree`` in a temporary folder, so a tool runs exactly as on the owner:
``code.exec_python`` materialises the turn root there (the refs pulled on the owner too) and
runs in the same sandbox. Writes go through the same path checks (``WorkspaceBase``) and
quota counters (the owner's, sent with the files) and are kept as changes; when the tool
has finished, ``RemoteFiles.finish`` sends them with ``workspace.apply``, each with the
version it was based on, and the owner stores them all or refuses them all (``OwnerRefused``).

The workspace's methods are synchronous and the built-in tools call them in worker threads
(``asyncio.to_thread``); what is not in the copy (a large file's bytes, another turn's file)
is fetched from there through the event loop. Called on the event loop itself, such a
method cannot wait for the owner and raises ``OwnerRefused`` (``workspace_on_loop``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import shutil
import tempfile
import threading
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from actline.bus import Bus, BusError
from actline.messages import (
    Ack,
    ErrorReply,
    MessageError,
    SubjectError,
    ToolCall,
    WorkspaceApply,
    WorkspaceChange,
    WorkspaceFetch,
    WorkspaceFile,
    WorkspaceFiles,
)
from actline.storage import FileStat, NotStored, Quota, Usage
from actline.storage.workspace import WorkspaceBase
from actline.timeline.errors import PathError
from actline.timeline.paths import LogicalPath, fi_path, parse_path
from actline.tools.workspace.workspace import TURN_AREAS, LocalTree, Snapshot, TurnFiles

__all__ = ["OwnerRefused", "RemoteFiles", "RemoteTree", "RemoteWorkspace"]

log = logging.getLogger(__name__)

T = TypeVar("T")
REQUEST_TIMEOUT_S: Final = 30.0
"""How long one request to the owner may take."""
WAIT_S: Final = 300.0
"""How long a worker thread waits for what it asked of the owner (a large file takes several
requests)."""
CHANGE_OVERHEAD: Final = 256
"""Bytes a change's fields take besides its data, counted against a message's bound."""


class OwnerRefused(Exception):
    """The owner node refused a request, or could not be asked; ``code`` says why."""

    def __init__(self, code: str, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = {k: v for k, v in (detail or {}).items() if k not in ("code", "error")}
        """What programs read beside the code (a quota's figures, the conflicting paths)."""


class Owner:
    """The requests of one call to the node that holds its conversation."""

    def __init__(self, bus: Bus, call: ToolCall, *, limit: int) -> None:
        self.bus = bus
        self.call = call
        self.limit = max(1, limit)
        try:
            self.subject = bus.subjects.node_workspace(call.owner)
        except SubjectError as exc:
            raise OwnerRefused("workspace_unavailable", f"no owner node to ask: {exc}") from None

    async def _ask(self, msg: WorkspaceFetch | WorkspaceApply) -> WorkspaceFiles | Ack:
        owner = self.call.owner
        try:
            reply = await self.bus.request(
                self.subject, msg, timeout=REQUEST_TIMEOUT_S, raise_remote=False
            )
        except (BusError, MessageError) as exc:
            raise OwnerRefused(
                "workspace_unavailable",
                f"node {owner}, which holds conversation {self.call.conversation_id}, did not "
                f"answer for its workspace: {exc}",
                {"owner": owner},
            ) from None
        if isinstance(reply, ErrorReply):
            raise OwnerRefused(reply.code, reply.message, {**reply.detail, "owner": owner})
        if not isinstance(reply, WorkspaceFiles | Ack):
            raise OwnerRefused("unexpected_message", f"node {owner} answered {reply.kind}")
        return reply

    async def fetch(self, **fields: Any) -> WorkspaceFiles:
        msg = WorkspaceFetch(
            conversation_id=self.call.conversation_id,
            turn_id=self.call.turn_id,
            limit=self.limit,
            **fields,
        )
        reply = await self._ask(msg)
        assert isinstance(reply, WorkspaceFiles)
        return reply

    async def read(self, path: str) -> tuple[WorkspaceFile, bytes]:
        """The stat and the whole bytes of ``path``, chunk by chunk; ``NotStored`` if none."""
        parts: list[bytes] = []
        offset = 0
        while True:
            reply = await self.fetch(paths=[path], offset=offset)
            if not reply.read:
                raise NotStored("file", path)
            got = reply.read[0]
            data = got.data or b""
            if got.offset != offset or (not data and offset < got.size):
                raise OwnerRefused(
                    "workspace_unavailable",
                    f"node {self.call.owner} sent {len(data)} bytes of {path} at byte "
                    f"{got.offset}, asked from byte {offset} of {got.size}",
                    {"owner": self.call.owner},
                )
            parts.append(data)
            offset += len(data)
            if offset >= got.size:
                return got, b"".join(parts)

    async def apply(self, changes: Sequence[WorkspaceChange]) -> Ack:
        """Send ``changes`` in messages of at most ``limit`` bytes; the last one is final."""
        parts: list[list[WorkspaceChange]] = [[]]
        used = 0
        for change in changes:
            data = change.data
            if data is None:
                parts[-1].append(change)
                used += CHANGE_OVERHEAD
                continue
            offset = 0
            while True:
                room = self.limit - used - CHANGE_OVERHEAD
                if room <= 0 and parts[-1]:
                    parts.append([])
                    used, room = 0, self.limit - CHANGE_OVERHEAD
                chunk = data[offset : offset + max(room, 1)]
                parts[-1].append(change.model_copy(update={"data": chunk, "offset": offset}))
                used += len(chunk) + CHANGE_OVERHEAD
                offset += len(chunk)
                if offset >= len(data):
                    break
        reply: WorkspaceFiles | Ack | None = None
        for i, part in enumerate(parts):
            msg = WorkspaceApply(
                conversation_id=self.call.conversation_id,
                turn_id=self.call.turn_id,
                call_id=self.call.call_id,
                changes=part,
                final=i == len(parts) - 1,
            )
            reply = await self._ask(msg)
        assert isinstance(reply, Ack)
        return reply


@dataclass(slots=True)
class _Entry:
    """A live file of the copy: the owner's version, or one written here."""

    version: str
    turn_id: str
    sha: str
    size: int
    mime: str
    ts: float
    data: bytes | None
    """None: not fetched yet."""


@dataclass(slots=True)
class _Change:
    data: bytes | None
    mime: str
    ts: float


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entry(got: WorkspaceFile, data: bytes | None) -> _Entry:
    owner_turn = parse_path(got.version).turn_id if got.version else None
    return _Entry(got.version, owner_turn or "", got.sha, got.size, got.mime, got.ts, data)


def _stat(path: str, area: str, rel: str, entry: _Entry) -> FileStat:
    return FileStat(
        path=path,
        version=entry.version,
        turn_id=entry.turn_id,
        area=area,
        rel=rel,
        sha=entry.sha,
        size=entry.size,
        mime=entry.mime,
        ts=entry.ts,
        deleted=False,
    )


def _delta(area: str, size: int | None, same_turn: _Entry | None) -> Usage:
    """How the counters change when a version of ``size`` bytes (None: a tombstone) replaces
    the turn's own version (``storage.Workspace`` counts the same way)."""
    was = None if same_turn is None else same_turn.size
    grow = (size or 0) - (was or 0)
    if area == "files":
        return Usage(workspace_bytes=grow)
    return Usage(artifacts=(size is not None) - (was is not None), artifact_bytes=grow)


class RemoteWorkspace(WorkspaceBase):
    """A copy of the running turn's workspace fetched from the owner, kept with its changes."""

    slow = False

    def __init__(self, owner: Owner, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner
        self.loop = loop
        self.conversation_id = owner.call.conversation_id
        self.turn_id = owner.call.turn_id
        self.mode = "custom"
        self.pulled: list[str] = []
        self._lock = threading.RLock()
        self._loaded = False
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._base: dict[tuple[str, str], str] = {}
        self._changes: dict[tuple[str, str], _Change] = {}
        self._usage: Usage | None = None
        self._quota: Quota | None = None

    # -- the owner -----------------------------------------------------------------------
    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            raise OwnerRefused(
                "workspace_on_loop",
                f"the workspace of conversation {self.conversation_id} is held by node "
                f"{self.owner.call.owner}: read and write it off the event loop "
                "(asyncio.to_thread), as the built-in tools do",
            )
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=WAIT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise OwnerRefused(
                "workspace_unavailable",
                f"node {self.owner.call.owner} did not give the workspace of conversation "
                f"{self.conversation_id} within {WAIT_S:g}s",
                {"owner": self.owner.call.owner},
            ) from None

    def _ensure(self) -> None:
        if self._loaded:
            return
        got = self._wait(self.owner.fetch(areas=list(TURN_AREAS)))  # not under the lock:
        with self._lock:  # the event loop takes it too (``changes``)
            if self._loaded:
                return  # another thread fetched it meanwhile
            self.mode = got.mode
            self.pulled = list(got.pulled)
            for item in got.files:
                lp = parse_path(item.path)
                key = (lp.name, lp.rel)
                self._entries[key] = _entry(item, item.data)
                self._base[key] = item.sha
            if got.quota:
                self._usage = Usage.from_dict(got.usage)
                self._quota = Quota(**got.quota)
            self._loaded = True

    def _current(self, lp: LogicalPath) -> bool:
        return lp.turn_id == self.turn_id and lp.name in TURN_AREAS

    def changes(self) -> list[WorkspaceChange]:
        """What the tool changed, each with the version it was based on."""
        with self._lock:
            return [
                WorkspaceChange(
                    area=area,
                    rel=rel,
                    data=change.data,
                    size=0 if change.data is None else len(change.data),
                    base=self._base.get((area, rel), ""),
                    mime=change.mime,
                    ts=change.ts,
                )
                for (area, rel), change in self._changes.items()
            ]

    # -- the turn ------------------------------------------------------------------------
    def begin_turn(self, turn_id: str) -> int:
        self._ensure()
        return 0

    def end_turn(self, turn_id: str) -> str:
        return ""

    def turns(self) -> list[str]:
        return [self.turn_id]

    # -- writes --------------------------------------------------------------------------
    def _refuse_elsewhere(self, turn_id: str, area: str, path: str) -> None:
        if turn_id != self.turn_id or area not in TURN_AREAS:
            detail = f"a tool writes fi:{self.turn_id}.files/ or fi:{self.turn_id}.outputs/ only"
            raise PathError("bad_area", path, detail)

    def _count(self, area: str, size: int | None, key: tuple[str, str]) -> None:
        old = self._entries.get(key)
        same = old if old is not None and old.turn_id == self.turn_id else None
        delta = _delta(area, size, same)
        if self._quota is not None and self._usage is not None:
            self._quota.check(self.conversation_id, self._usage, delta)
            self._usage = (self._usage + delta).clamped()

    def _put(
        self, turn_id: str, area: str, rel: str, path: str, data: bytes, mime: str, when: float
    ) -> str:
        self._refuse_elsewhere(turn_id, area, path)
        self._ensure()
        key = (area, rel)
        with self._lock:
            self._count(area, len(data), key)
            self._entries[key] = _Entry(path, turn_id, _sha(data), len(data), mime, when, data)
            self._changes[key] = _Change(data, mime, when)
        return path

    def _remove(self, turn_id: str, area: str, rel: str, path: str, when: float) -> str:
        self._refuse_elsewhere(turn_id, area, path)
        self._ensure()
        key = (area, rel)
        with self._lock:
            if key not in self._entries:
                raise NotStored("file", path)
            self._count(area, None, key)
            del self._entries[key]
            self._changes[key] = _Change(None, "", when)
        return path

    def check_room(self, turn_id: str, changes: Iterable[tuple[str, str, int | None]]) -> Usage:
        """``QuotaExceeded`` unless every change fits at once (``storage.Workspace``'s rule)."""
        self._ensure()
        delta = Usage()
        with self._lock:
            for area, rel, size in changes:
                old = self._entries.get((area, rel))
                same = old if old is not None and old.turn_id == self.turn_id else None
                delta += _delta(area, size, same)
            if self._quota is not None and self._usage is not None:
                self._quota.check(self.conversation_id, self._usage, delta)
        return delta

    # -- reads ---------------------------------------------------------------------------
    def _bytes(self, key: tuple[str, str], entry: _Entry) -> bytes:
        if entry.data is None:
            path = fi_path(self.turn_id, *key)
            _, data = self._wait(self.owner.read(path))
            with self._lock:
                if self._entries.get(key) is entry:
                    entry.data = data
            return data
        return entry.data

    def read(self, path: str | LogicalPath) -> bytes:
        lp, text = self._parse(path)
        if lp.is_folder:
            raise NotStored("file", text)
        if self._current(lp):
            self._ensure()
            entry = self._entries.get((lp.name, lp.rel))
            if entry is None:
                raise NotStored("file", text)
            return self._bytes((lp.name, lp.rel), entry)
        return self._wait(self.owner.read(text))[1]

    def stat(self, path: str | LogicalPath) -> FileStat:
        lp, text = self._parse(path)
        if lp.is_folder:
            raise NotStored("file", text)
        if self._current(lp):
            self._ensure()
            entry = self._entries.get((lp.name, lp.rel))
            if entry is None:
                raise NotStored("file", text)
            return _stat(text, lp.name, lp.rel, entry)
        got = self._wait(self.owner.fetch(paths=[text], offset=0)).read
        if not got:
            raise NotStored("file", text)
        return _stat(text, lp.name, lp.rel, _entry(got[0], None))

    def listdir(self, path: str | LogicalPath) -> list[str]:
        lp, turn_id, under = self._folder(path)
        tree = self.tree(turn_id, lp.name)
        return [info["path"] for rel, info in tree.items() if rel.startswith(under)]

    def tree(self, turn_id: str, area: str = "files") -> dict[str, FileStat]:
        return self.trees(turn_id, (area,))[area]

    def trees(self, turn_id: str, areas: Sequence[str]) -> dict[str, dict[str, FileStat]]:
        if turn_id != self.turn_id:
            got = self._wait(self.owner.fetch(areas=list(areas), as_of=turn_id, contents=False))
            out: dict[str, dict[str, FileStat]] = {area: {} for area in areas}
            for item in got.files:
                lp = parse_path(item.path)
                out[lp.name][lp.rel] = _stat(item.path, lp.name, lp.rel, _entry(item, None))
            return out
        self._ensure()
        with self._lock:
            return {
                area: {
                    rel: _stat(fi_path(turn_id, area, rel), area, rel, entry)
                    for (a, rel), entry in sorted(self._entries.items())
                    if a == area
                }
                for area in areas
            }

    def versions(self, area: str, rel: str) -> list[FileStat]:
        """The versions this copy knows: the live one (the owner keeps the history)."""
        self._ensure()
        entry = self._entries.get((area, rel))
        if entry is None:
            return []
        return [_stat(entry.version, area, rel, entry)]


class RemoteTree(LocalTree):
    """The turn root of a remote call in a temporary folder: the refs pulled on the owner are
    pulled here too before the turn root is materialised."""

    workspace: RemoteWorkspace

    def __init__(self, workspace: RemoteWorkspace, root: str | Path) -> None:
        super().__init__(workspace, root)
        self.workspace = workspace

    def materialize(self, turn_id: str) -> Snapshot:
        self.workspace.begin_turn(turn_id)
        for ref in self.workspace.pulled:
            try:
                self.pull(parse_path(ref))
            except NotStored:
                continue  # deleted on the owner since: its pulled copy is stale there too
        return super().materialize(turn_id)


class RemoteFiles:
    """The workspace of one call whose conversation another node holds."""

    def __init__(
        self, bus: Bus, call: ToolCall, *, scratch: str | Path | None = None, limit: int
    ) -> None:
        self.call = call
        self.owner = Owner(bus, call, limit=limit)
        self.scratch = scratch
        self.root: Path | None = None
        self.workspace: RemoteWorkspace | None = None

    def turn_files(self) -> TurnFiles:
        """The ``TurnFiles`` the tool gets; nothing is fetched until it touches them."""
        if self.scratch is not None:
            Path(self.scratch).mkdir(parents=True, exist_ok=True)
        self.root = Path(tempfile.mkdtemp(prefix="actline-remote-", dir=self.scratch))
        self.workspace = RemoteWorkspace(self.owner, asyncio.get_running_loop())
        local = RemoteTree(self.workspace, self.root)
        return TurnFiles(self.workspace, local, self.call.turn_id, asyncio.Lock())

    async def finish(self) -> list[str]:
        """Send what the tool changed to the owner (``OwnerRefused``: nothing was stored);
        returns the paths stored."""
        changes = self.workspace.changes() if self.workspace is not None else []
        if not changes:
            return []
        ack = await self.owner.apply(changes)
        log.debug(
            "call %s: %d change(s) stored by node %s",
            self.call.call_id,
            len(changes),
            self.call.owner,
        )
        return ack.detail.split()

    async def close(self) -> None:
        """Remove the temporary folder."""
        root, self.root = self.root, None
        if root is not None:
            await asyncio.to_thread(_remove, root)


def _remove(root: Path) -> None:
    """Remove a folder that holds read-only pulled files."""
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o700)
    shutil.rmtree(root, ignore_errors=True)
