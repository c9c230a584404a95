"""The versioned workspace of a conversation, its two modes, and its files on disk.

Two modes keep the same ``fi:`` semantics (``actline.storage.workspace`` defines them) and give the
tools the same behaviour:

- ``custom``: every version lives in the node's LMDB store (``storage.Workspace``); a turn's
  files exist on disk only while a tool needs them (``LocalTree.materialize``).
- ``git``: the conversation's history is a bare git repository; the open turn's root is a git
  work tree and each ended turn is one commit (``actline.tools.workspace.git.GitWorkspace``).

``LocalTree`` is the on-disk side shared by both modes. Under ``<root>`` (one folder per
conversation) the open turn's root ``<root>/<turn>/`` holds ``files/`` (the active workspace) and
``outputs/``; it is the working directory of ``code.exec_python``. ``react.pull`` materialises
historical refs read-only under their own turn roots ``<root>/<old turn>/...``, so they never
change the active workspace; a file is "pulled" exactly when its read-only copy is on disk.
``end_turn`` clears the folders of the turn (in custom mode the store holds everything).

Quotas: in custom mode what ``collect`` would store is sized on disk and checked against the
conversation's quotas (``check_room``) before one byte is read: a run over a quota stores
nothing and raises ``QuotaExceeded``. Git mode keeps its history in a repository on disk,
outside the store's counters.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat as statmod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from actline.storage import FileStat, NotStored, Quota, Store, Workspace
from actline.timeline.errors import PathError
from actline.timeline.paths import FI_AREAS, FOLLOWUP_AREA, LogicalPath, fi_path, parse_path

__all__ = [
    "EXEC_OUTPUTS",
    "WORKSPACE_MODES",
    "CustomWorkspace",
    "LocalTree",
    "Pulled",
    "Snapshot",
    "TurnFiles",
    "WorkspaceBackend",
    "check_room",
    "open_workspace",
    "workspace_lines",
]

WORKSPACE_MODES: Final = ("custom", "git")
TURN_AREAS: Final = ("files", "outputs")
"""The areas a tool changes on disk (attachments are read through the workspace)."""
ATTACHMENT_AREAS: Final = tuple(a for a in FI_AREAS if a not in TURN_AREAS)
EXEC_OUTPUTS: Final = "outputs/exec"
"""Where files written elsewhere in a turn root are kept (``fi:<turn>.outputs/exec/<rel>``)."""
HIDDEN_NAMES: Final = frozenset({".git", ".actline", "__pycache__"})
ANNOUNCE_FILES: Final = 12


class WorkspaceBackend(Protocol):
    """What the tools need of a workspace (``storage.Workspace`` is the reference)."""

    mode: str
    slow: bool
    """Its calls run a process or touch many files (git): run them off the event loop."""
    conversation_id: str

    def begin_turn(self, turn_id: str) -> int: ...
    def end_turn(self, turn_id: str) -> str: ...
    def turns(self) -> list[str]: ...
    def write(
        self,
        turn_id: str,
        area: str,
        rel: str,
        data: bytes,
        *,
        mime: str = "",
        ts: float | None = None,
    ) -> str: ...
    def write_followup_attachment(
        self,
        turn_id: str,
        message_id: str,
        name: str,
        data: bytes,
        *,
        mime: str = "",
        ts: float | None = None,
    ) -> str: ...
    def delete(self, turn_id: str, area: str, rel: str, *, ts: float | None = None) -> str: ...
    def read(self, path: str | LogicalPath) -> bytes: ...
    def stat(self, path: str | LogicalPath) -> FileStat: ...
    def listdir(self, path: str | LogicalPath) -> list[str]: ...
    def tree(self, turn_id: str, area: str = "files") -> dict[str, FileStat]: ...
    def trees(self, turn_id: str, areas: Sequence[str]) -> dict[str, dict[str, FileStat]]: ...
    def versions(self, area: str, rel: str) -> list[FileStat]: ...


class CustomWorkspace(Workspace):
    """The custom mode: versions in the LMDB store; a turn needs no closing."""

    mode = "custom"
    slow = False

    def end_turn(self, turn_id: str) -> str:
        """Nothing to commit: every write was its own LMDB transaction."""
        return ""


def open_workspace(
    mode: str,
    *,
    store: Store,
    root: str | os.PathLike[str],
    conversation_id: str,
    quota: Quota | None = None,
) -> WorkspaceBackend:
    """The workspace of ``conversation_id`` in ``mode`` (``custom`` or ``git``).

    ``root`` is the conversation's folder on disk (git mode keeps its repository there).
    ``quota`` limits what the conversation stores (custom mode; ``Quota()`` by default).
    """
    if mode == "custom":
        return CustomWorkspace(store, conversation_id, quota=quota)
    if mode == "git":
        from .git import GitWorkspace  # runs git; not needed in custom mode

        return GitWorkspace(root, conversation_id)
    raise ValueError(f"workspace mode {mode!r} is unknown; use one of {', '.join(WORKSPACE_MODES)}")


def check_room(
    workspace: WorkspaceBackend, turn_id: str, changes: list[tuple[str, str, int | None]]
) -> None:
    """``QuotaExceeded`` unless the changes fit the conversation's quotas all at once
    (``storage.Workspace.check_room``, or the ``check_room`` of another backend that counts,
    such as a copy of a workspace held by another node); git mode stores outside the store
    and is not counted."""
    room = getattr(workspace, "check_room", None)
    if changes and callable(room):
        room(turn_id, changes)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_sha(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(base: Path) -> Iterator[Path]:
    """Regular files under ``base`` (symlinks and git's and our own entries skipped), sorted."""
    if not base.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in HIDDEN_NAMES)
        for name in sorted(filenames):
            if name in HIDDEN_NAMES:
                continue  # a git work tree's .git file
            path = Path(dirpath, name)
            if path.is_file() and not path.is_symlink():
                yield path


@dataclass(slots=True)
class Snapshot:
    """What a turn root held on disk (``area/rel`` -> sha256) when a tool started."""

    turn_id: str
    files: dict[str, str] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)
    """``area/rel`` -> size: a file whose size changed changed, without reading it."""


@dataclass(frozen=True, slots=True)
class Pulled:
    """One file ``react.pull`` put on disk: its logical path and where exec code finds it."""

    logical_path: str
    local_path: str
    """Relative to the open turn's root (the exec working directory): ``../<turn>/files/...``."""


@dataclass(frozen=True, slots=True)
class TurnFiles:
    """What a tool of the running turn may touch: the workspace, its disk side, a lock.

    ``lock`` serialises the tools that materialise and collect the turn root (one
    ``code.exec_python`` at a time per conversation).
    """

    workspace: WorkspaceBackend
    local: LocalTree
    turn_id: str
    lock: asyncio.Lock


class LocalTree:
    """The files of one conversation on disk: the open turn's root and pulled refs."""

    def __init__(self, workspace: WorkspaceBackend, root: str | os.PathLike[str]) -> None:
        self.workspace = workspace
        self.root = Path(root)

    def turn_root(self, turn_id: str) -> Path:
        return self.root / turn_id

    # -- the open turn -------------------------------------------------------------------------
    def materialize(self, turn_id: str) -> Snapshot:
        """Make ``<root>/<turn>/`` hold exactly the turn's files/ and outputs/ as stored.

        Files that match are left alone; files the workspace no longer has are removed.
        Returns the snapshot that ``collect`` compares against.
        """
        base = self.turn_root(turn_id)
        snapshot = Snapshot(turn_id)
        self.workspace.begin_turn(turn_id)
        for area in ATTACHMENT_AREAS:  # git keeps them in the work tree: read-only for tools
            for path in _walk(base / area):
                path.chmod(statmod.S_IRUSR | statmod.S_IRGRP | statmod.S_IROTH)
        for area in TURN_AREAS:
            wanted = self.workspace.tree(turn_id, area)
            folder = base / area
            folder.mkdir(parents=True, exist_ok=True)
            on_disk = {p.relative_to(folder).as_posix(): p for p in _walk(folder)}
            for rel, path in on_disk.items():
                if rel not in wanted:
                    path.unlink()
            for rel, info in wanted.items():
                path = folder / rel
                if rel not in on_disk or _file_sha(path) != info["sha"]:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(self.workspace.read(info["path"]))
                snapshot.files[f"{area}/{rel}"] = info["sha"]
                snapshot.sizes[f"{area}/{rel}"] = info["size"]
        return snapshot

    def collect(self, snapshot: Snapshot, *, ts: float | None = None) -> list[str]:
        """Store what changed on disk since ``snapshot``; returns the ``fi:`` paths written.

        New and changed files under files/ and outputs/ become versions of the turn, removed
        ones tombstones. Files written elsewhere in the turn root move to ``outputs/exec/``.
        Sizes are checked against the quotas first: ``QuotaExceeded`` stores nothing.
        """
        turn_id = snapshot.turn_id
        base = self.turn_root(turn_id)
        for path in _walk(base):
            rel = path.relative_to(base).as_posix()
            if rel.split("/", 1)[0] in FI_AREAS:
                continue
            target = base / EXEC_OUTPUTS / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            path.replace(target)
        for entry in sorted(base.iterdir()) if base.is_dir() else ():
            if entry.is_dir() and entry.name not in (*FI_AREAS, *HIDDEN_NAMES):
                shutil.rmtree(entry, ignore_errors=True)
        changed: list[tuple[str, str, Path]] = []
        seen: set[str] = set()
        for area in TURN_AREAS:
            folder = base / area
            for path in _walk(folder):
                key = f"{area}/{path.relative_to(folder).as_posix()}"
                seen.add(key)
                if key in snapshot.files and snapshot.sizes.get(key) == path.stat().st_size:
                    if snapshot.files[key] == _file_sha(path):
                        continue
                rel = key.split("/", 1)[1]
                try:
                    fi_path(turn_id, area, rel)
                except PathError:
                    continue  # a name the path grammar refuses stays on disk only
                changed.append((area, rel, path))
        gone = [key.split("/", 1) for key in sorted(set(snapshot.files) - seen)]
        plan: list[tuple[str, str, int | None]] = [
            (area, rel, path.stat().st_size) for area, rel, path in changed
        ]
        check_room(self.workspace, turn_id, plan + [(area, rel, None) for area, rel in gone])
        written: list[str] = []
        for area, rel, path in changed:
            data = path.read_bytes()
            try:
                written.append(self.workspace.write(turn_id, area, rel, data, ts=ts))
            except PathError:
                continue
        for area, rel in gone:
            try:
                self.workspace.delete(turn_id, area, rel, ts=ts)
            except NotStored:
                pass  # git mode: the work tree is the store, the file is gone already
        return written

    # -- pulled refs -----------------------------------------------------------------------------
    def local_path(self, lp: LogicalPath) -> Path:
        """Where a ``fi:`` ref of an earlier turn is (or would be) pulled."""
        assert lp.turn_id is not None
        return self.root / lp.turn_id / lp.name / lp.rel

    def pull(self, lp: LogicalPath) -> list[Pulled]:
        """Materialise one ``fi:`` file, or a ``files/``/``outputs/`` folder, read-only.

        ``NotStored`` when nothing lives there.
        """
        turn_id = lp.turn_id
        assert turn_id is not None
        if lp.rel == "":  # the whole area as of that turn
            paths = [info["path"] for info in self.workspace.tree(turn_id, lp.name).values()]
            if not paths:
                raise NotStored("folder", f"fi:{turn_id}.{lp.name}/")
        elif lp.is_folder:
            paths = self.workspace.listdir(lp)
            if not paths:
                raise NotStored("folder", str(lp))
        else:
            self.workspace.stat(lp)  # NotStored when missing
            paths = [str(lp)]
        out: list[Pulled] = []
        for path in paths:
            target = parse_path(path)
            local = self.local_path(target)
            data = self.workspace.read(path)
            if not (local.is_file() and _file_sha(local) == _sha(data)):
                local.parent.mkdir(parents=True, exist_ok=True)
                if local.exists():
                    local.chmod(statmod.S_IWUSR | statmod.S_IRUSR)
                local.write_bytes(data)
                local.chmod(statmod.S_IRUSR | statmod.S_IRGRP | statmod.S_IROTH)
            rel = local.relative_to(self.root).as_posix()
            out.append(Pulled(path, f"../{rel}"))
        return out

    def is_pulled(self, lp: LogicalPath) -> bool:
        """True when the file's read-only copy from ``react.pull`` is on disk."""
        return lp.turn_id is not None and self.local_path(lp).is_file()

    def pulled_refs(self, current_turn: str) -> list[str]:
        """The ``fi:`` paths pulled so far (every turn root but the open one)."""
        refs: list[str] = []
        if not self.root.is_dir():
            return refs
        for turn_dir in sorted(self.root.iterdir()):
            if not turn_dir.is_dir() or turn_dir.name in (current_turn, *HIDDEN_NAMES):
                continue
            if turn_dir.name.startswith("."):
                continue
            for area in (*TURN_AREAS, "user.attachments", FOLLOWUP_AREA):
                folder = turn_dir / area
                for path in _walk(folder):
                    refs.append(f"fi:{turn_dir.name}.{area}/{path.relative_to(folder).as_posix()}")
        return refs

    # -- end of a turn ---------------------------------------------------------------------------
    def clear(self, keep: str | None = None) -> None:
        """Remove every turn folder on disk except ``keep`` (git's repository stays)."""
        if not self.root.is_dir():
            return
        for entry in self.root.iterdir():
            if entry.name.startswith(".") or entry.name == keep or not entry.is_dir():
                continue
            _rmtree(entry)


def _rmtree(path: Path) -> None:
    """Remove a folder that holds read-only pulled files."""
    for dirpath, _dirs, filenames in os.walk(path):
        os.chmod(dirpath, statmod.S_IRWXU)
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.chmod(full, statmod.S_IRUSR | statmod.S_IWUSR)
    shutil.rmtree(path, ignore_errors=True)


def workspace_lines(
    workspace: WorkspaceBackend, turn_id: str, local: LocalTree | None = None
) -> list[str]:
    """The workspace state for ANNOUNCE: mode, the active files, outputs, pulled refs."""
    try:
        trees = workspace.trees(turn_id, ("files", "outputs"))
        files, outputs = trees["files"], trees["outputs"]
    except NotStored:  # the turn never began in the workspace
        files, outputs = {}, {}
    pulled = local.pulled_refs(turn_id) if local is not None else []
    if not (files or outputs or pulled):
        return []
    lines = [f"mode: {workspace.mode} · current turn root fi:{turn_id}.files/"]
    if files:
        scopes: dict[str, int] = {}
        for rel in files:
            scope = rel.split("/", 1)[0]
            scopes[scope] = scopes.get(scope, 0) + 1
        scope_text = ", ".join(f"{s}/ ({n})" for s, n in sorted(scopes.items()))
        total = sum(info["size"] for info in files.values())
        lines.append(f"active files: {len(files)} ({total:,} bytes) in {scope_text}")
        inherited = [r for r, info in files.items() if info["turn_id"] != turn_id]
        if inherited:
            lines.append(
                f"  {len(inherited)} carried over from earlier turns; "
                "react.checkout(mode='replace') to start from other versions"
            )
        for rel, info in list(files.items())[:ANNOUNCE_FILES]:
            lines.append(f"  files/{rel} ({info['size']:,} B, from {info['turn_id']})")
        if len(files) > ANNOUNCE_FILES:
            more = len(files) - ANNOUNCE_FILES
            lines.append(f"  … {more} more: react.search_files(root='files')")
    else:
        lines.append(
            "active files: none; react.checkout(paths=['fi:<turn>.files/<scope>/'], "
            "mode='replace') seeds them from an earlier turn"
        )
    if outputs:
        lines.append(f"outputs this turn: {len(outputs)}")
    if pulled:
        lines.append(f"pulled read-only: {len(pulled)} file(s)")
        lines.extend(f"  {ref}" for ref in pulled[:ANNOUNCE_FILES])
    return lines
