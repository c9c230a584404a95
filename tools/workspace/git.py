"""The ``git`` workspace mode: a conversation's ``fi:`` files as a git history, one commit a turn.

``GitWorkspace`` answers exactly like ``storage.Workspace`` (its module docstring defines the
areas, the resolution by turn and the errors); only the storage differs. Under ``root`` (the
conversation's folder)::

    root/.history.git/                  bare repository; HEAD -> refs/heads/main
        refs/heads/main                 the newest ended turn
        refs/turns/<turn id>            one ref per ended turn (``:`` written ``%3A``)
        info/attributes                 ``* -text -eol -filter -ident -working-tree-encoding``
        actline/<turn id>.jsonl         journal of the open turn (removed when it ends)
    root/<turn id>/                     the open turn: a ``git worktree`` (it has a ``.git`` file)
        files/ outputs/ user.attachments/ external.followup.attachments/
        .actline/meta.json              committed: "<area>/<rel>" -> writer turn, sha256, size,
                                        mime, ts and git blob id of every live file, and the
                                        tombstones written in the turn
        .actline/tmp/                   not committed: writes land here, then are renamed

Turns. Each ended turn is one commit whose parent is the previous turn's commit and whose message
carries ``Turn-Id:`` and ``Turn-Ordinal:`` trailers. At most one turn is open: the newest.
``begin_turn`` of a new turn ends the open one first, then adds the work tree at the previous
commit (an empty tree for the first turn) and removes the three one-turn areas from it, so
``files/`` is inherited. ``end_turn`` stages the four areas with ``git add -A -f`` into a private
index (``.gitignore`` files written by the agent hide nothing; the attributes file above keeps
``.gitattributes`` from converting bytes), writes ``meta.json``, commits, moves both refs in one
``update-ref`` transaction and removes the work tree. Reads of an ended turn come from its commit
(one long-running ``git cat-file --batch``); reads of the open turn come from the disk, so files
that tools change in the turn root count as written in that turn (mime ``""``, ts their mtime).

Writing. Only the open turn is written. Writing or deleting in a turn that was never begun begins
it (it becomes the newest, as the custom backend would give it the next ordinal); writing an
ended turn raises ``PathError("turn_ended", path)``. The disk cannot hold what LMDB can: a rel
under a live file (``a/b`` while ``a`` is a file) raises ``PathError("path_conflict", path)``, a
segment named ``.git`` (any case) raises ``bad_segment`` and one longer than 255 bytes of UTF-8
raises ``too_long``. Symlinks, and files inside a nested git repository, are not files of the
workspace. Every ``NotStored`` and every other ``PathError`` is the custom backend's.

Crash safety. The journal is written before the work tree is made (``begin``), after it is ready
(``ready``) and after every write or delete, so a new ``GitWorkspace`` on the same root finds the
open turn with its files and their mime types; a half-made work tree is made again, a turn whose
refs moved before its work tree was removed is cleaned up. One process owns a root at a time;
calls are serialised by a lock. Git failures raise ``GitError``.

Where it lives: this module owns the turns (begin, end, the commits and their cached
``meta.json``), the scan of the open turn and the reads; the checks of every write and delete
are the ones both modes share (``actline.storage.workspace.WorkspaceBase``), and only storing
them is here. The open turn's work tree, journal and meta entries are
``actline.tools.workspace.gitturn``; running git is ``actline.tools.workspace.gitcmd``.

Cost (rough, 200 small files, local disk): a write, read or stat of the open turn runs no git
(a file write plus a journal line, or a file read and a hash); ``tree``/``listdir`` of the open
turn run 2 (``add -A`` into the private index, ``ls-files -s``); reads of an ended turn ask the
``cat-file --batch`` process (meta.json once per commit, then one round trip per read) and
``tree``/``stat``/``versions`` of ended turns answer from the cached meta; ``begin_turn`` runs 1
(``worktree add``; 2 for the first turn) and ``end_turn`` 7; opening a root runs 2.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from actline.storage.errors import NotStored
from actline.storage.workspace import (
    DURABLE_AREAS,
    FileStat,
    WorkspaceBase,
    _check_rel,
    _check_turn_and_area,
    _logical,
)
from actline.timeline.errors import PathError
from actline.timeline.paths import FI_AREAS, LogicalPath

from .gitcmd import Git, GitError
from .gitturn import (
    Entry,
    OpenTurn,
    blob_id,
    file_stat,
    read_journal,
    refuse_unstorable,
    tombstone,
)

__all__ = ["GIT_RULES", "GitWorkspace"]

GIT_RULES: Final = ("turn_ended", "path_conflict")
"""The ``PathError`` rules only the git mode raises (see the module docstring)."""
HISTORY: Final = ".history.git"
META: Final = ".actline/meta.json"
INDEX: Final = "actline-index"  # in the work tree's admin folder, removed with it
EMPTY_TREE: Final = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
ONE_TURN_AREAS: Final = tuple(a for a in FI_AREAS if a not in DURABLE_AREAS)
_ZERO: Final = "0" * 40
_REGULAR: Final = ("100644", "100755")
_ATTRIBUTES: Final = "* -text -eol -filter -ident -working-tree-encoding\n"


def _ref(turn_id: str) -> str:
    return "refs/turns/" + turn_id.replace(":", "%3A")


class GitWorkspace(WorkspaceBase):
    """The ``fi:`` files of one conversation as a git history; the open turn is a work tree."""

    mode = "git"
    slow = True

    def __init__(self, root: str | os.PathLike[str], conversation_id: str) -> None:
        if not conversation_id or "\x00" in conversation_id:
            raise ValueError(f"conversation id must be non-empty without NUL: {conversation_id!r}")
        self.conversation_id = conversation_id
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self._git_dir = self.root / HISTORY
        self._git = Git(self._git_dir)
        self._closer = weakref.finalize(self, self._git.close)
        self._lock = threading.RLock()
        self._ended: list[tuple[str, str]] = []  # (turn id, commit), oldest first
        self._ordinals: dict[str, int] = {}
        self._open: OpenTurn | None = None
        self._metas: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._init_repo()
        self._load()

    def close(self) -> None:
        """Stop the ``cat-file`` process (the repository and an open turn stay on disk)."""
        self._closer()

    def __enter__(self) -> GitWorkspace:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- repository and turns --------------------------------------------------------------------

    def _init_repo(self) -> None:
        if not (self._git_dir / "HEAD").exists():
            self._git.init()
        info = self._git_dir / "info" / "attributes"
        if not info.is_file() or info.read_text() != _ATTRIBUTES:
            info.parent.mkdir(exist_ok=True)
            info.write_text(_ATTRIBUTES)
        (self._git_dir / "actline").mkdir(exist_ok=True)

    def _load(self) -> None:
        """Read the ended turns from ``main`` and find (and repair) the open turn's journal."""
        if self._git.run("for-each-ref", "--format=%(objectname)", "refs/heads/main").strip():
            fmt = "--format=%H %(trailers:key=Turn-Id,valueonly,separator=)"
            log = self._git.run("log", "--first-parent", "--reverse", fmt, "refs/heads/main")
            for line in log.splitlines():
                commit, _, turn_id = line.partition(" ")
                self._ended.append((turn_id.strip(), commit))
        self._ordinals = {turn: i for i, (turn, _) in enumerate(self._ended, 1)}
        head = self._ended[-1][1] if self._ended else ""
        for journal in sorted((self._git_dir / "actline").glob("*.jsonl")):
            turn_id = journal.stem
            if turn_id in self._ordinals:  # its refs moved before the work tree was removed
                self._discard_tree(self.root / turn_id)
                journal.unlink()
                continue
            records = read_journal(journal)
            begin = records[0] if records and records[0].get("op") == "begin" else {}
            if self._open is not None or begin.get("parent", head) != head:
                raise GitError("load", 0, f"{journal}: an open turn that does not follow main")
            turn = OpenTurn(turn_id, len(self._ended) + 1, head, self.root / turn_id, journal)
            self._open = turn
            if not any(r.get("op") == "ready" for r in records):
                self._setup_tree(turn)  # died while beginning: begin again
                continue
            for record in records:
                if record.get("op") in ("w", "d"):
                    turn.ops[str(record["key"])] = record
            if (turn.tree / ".git").is_file():
                (turn.admin() / f"{INDEX}.lock").unlink(missing_ok=True)
            else:
                self._setup_tree(turn)

    def _setup_tree(self, turn: OpenTurn) -> None:
        """Make the turn's work tree at its parent commit, without the one-turn areas."""
        begin = {"op": "begin", "turn": turn.turn_id, "parent": turn.parent}
        turn.journal.write_text(json.dumps(begin) + "\n", encoding="utf-8")
        turn.ops = {}
        self._discard_tree(turn.tree)
        start = turn.parent or self._git.run("commit-tree", EMPTY_TREE, stdin="empty\n").strip()
        self._git.run("worktree", "add", "-f", "-q", "--detach", str(turn.tree), start)
        for area in ONE_TURN_AREAS:
            shutil.rmtree(turn.tree / area, ignore_errors=True)
        for area in FI_AREAS:
            (turn.tree / area).mkdir(exist_ok=True)
        (turn.tree / ".actline" / "tmp").mkdir(parents=True, exist_ok=True)
        turn.log({"op": "ready"})

    def _discard_tree(self, tree: Path) -> None:
        if not tree.exists():
            return
        try:
            self._git.run("worktree", "remove", "--force", "--force", str(tree))
        except GitError:
            shutil.rmtree(tree, ignore_errors=True)
            self._git.run("worktree", "prune")

    def _begin_new(self, turn_id: str) -> OpenTurn:
        if self._open is not None:
            self._end(self._open)
        parent = self._ended[-1][1] if self._ended else ""
        journal = self._git_dir / "actline" / f"{turn_id}.jsonl"
        turn = OpenTurn(turn_id, len(self._ended) + 1, parent, self.root / turn_id, journal)
        self._open = turn
        self._setup_tree(turn)
        return turn

    def begin_turn(self, turn_id: str) -> int:
        """Open ``turn_id`` (idempotent) and return its ordinal; ends the open turn if another.

        An ended turn keeps its commit and ordinal; the open turn keeps its files.
        """
        _check_turn_and_area(turn_id, "files")
        with self._lock:
            if turn_id in self._ordinals:
                return self._ordinals[turn_id]
            if self._open is not None and self._open.turn_id == turn_id:
                self._ensure_tree(self._open)
                return self._open.ordinal
            return self._begin_new(turn_id).ordinal

    def end_turn(self, turn_id: str) -> str:
        """Commit the open turn and remove its work tree; returns the commit (idempotent)."""
        _check_turn_and_area(turn_id, "files")
        with self._lock:
            if turn_id in self._ordinals:
                return self._ended[self._ordinals[turn_id] - 1][1]
            if self._open is None or self._open.turn_id != turn_id:
                raise NotStored("workspace turn", f"{self.conversation_id}/{turn_id}")
            return self._end(self._open)

    def _end(self, turn: OpenTurn) -> str:
        self._ensure_tree(turn)
        live, deleted = self._scan(turn, FI_AREAS)
        meta = {"turn": turn.turn_id, "ordinal": turn.ordinal, "live": live, "deleted": deleted}
        path = turn.tree / META
        path.write_text(json.dumps(meta, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        self._in_tree(turn, "add", "-f", "--", META)
        tree = self._in_tree(turn, "write-tree")
        parents = ["-p", turn.parent] if turn.parent else []
        message = f"turn {turn.turn_id}\n\nTurn-Id: {turn.turn_id}\nTurn-Ordinal: {turn.ordinal}\n"
        commit = self._git.run("commit-tree", tree.strip(), *parents, stdin=message).strip()
        self._git.run(
            "update-ref", "--stdin",
            stdin=f"start\ncreate {_ref(turn.turn_id)} {commit}\n"
            f"update refs/heads/main {commit} {turn.parent or _ZERO}\nprepare\ncommit\n",
        )  # fmt: skip
        self._ended.append((turn.turn_id, commit))
        self._ordinals[turn.turn_id] = turn.ordinal
        self._open = None
        self._remember(commit, meta)
        self._discard_tree(turn.tree)
        turn.journal.unlink(missing_ok=True)
        return commit

    def _ensure_tree(self, turn: OpenTurn) -> None:
        if not (turn.tree / ".git").is_file():
            self._setup_tree(turn)  # the work tree vanished: start the turn again from its parent

    def turn_root(self, turn_id: str) -> Path:
        """``root/<turn_id>``, the open turn's git work tree (``turn_ended`` once committed)."""
        _check_turn_and_area(turn_id, "files")
        with self._lock:
            if self._open is not None and self._open.turn_id == turn_id:
                self._ensure_tree(self._open)
                return self._open.tree
            if turn_id in self._ordinals:
                raise PathError("turn_ended", turn_id, "an ended turn has no work tree; read it")
            raise NotStored("workspace turn", f"{self.conversation_id}/{turn_id}")

    def turns(self) -> list[str]:
        """The turns the workspace knows, oldest first (the open one last)."""
        with self._lock:
            opened = [self._open.turn_id] if self._open is not None else []
            return [turn for turn, _ in self._ended] + opened

    # -- metadata ----------------------------------------------------------------------------------

    def _meta(self, commit: str) -> dict[str, Any]:
        """The meta.json of an ended turn's commit (cached: commits never change)."""
        meta = self._metas.get(commit)
        if meta is None:
            raw = self._git.cat(f"{commit}:{META}")
            if raw is None:
                raise GitError("cat-file", 0, f"commit {commit} has no {META}")
            meta = json.loads(raw)
            self._remember(commit, meta)
        self._metas.move_to_end(commit)
        return meta

    def _remember(self, commit: str, meta: dict[str, Any]) -> None:
        self._metas[commit] = meta
        while len(self._metas) > 256:
            self._metas.popitem(last=False)

    def _parent_live(self, turn: OpenTurn) -> dict[str, Entry]:
        if not turn.parent:
            return {}
        live: dict[str, Entry] = self._meta(turn.parent)["live"]
        return live

    def _in_tree(self, turn: OpenTurn, *args: str) -> str:
        """Run git in the turn's work tree with the private index (never the work tree's own)."""
        admin = turn.admin()
        return self._git.run(*args, git_dir=admin, work_tree=turn.tree, index=admin / INDEX)

    def _scan(
        self, turn: OpenTurn, areas: tuple[str, ...]
    ) -> tuple[dict[str, Entry], dict[str, float]]:
        """Live files and tombstones of ``areas`` in the open turn, from its work tree.

        ``git add -A`` into a private index gives every file's blob id (hashing only files whose
        stat changed); a blob matching the journal's last write is that write, one matching the
        parent's ``files/`` entry is inherited, anything else was written on disk this turn.
        """
        admin = turn.admin()
        if not (admin / INDEX).exists() and (admin / "index").exists():
            shutil.copyfile(admin / "index", admin / INDEX)
        for area in areas:
            (turn.tree / area).mkdir(exist_ok=True)
        self._in_tree(turn, "add", "-A", "-f", "--", *areas)
        listing = self._in_tree(turn, "ls-files", "-s", "-z", "--", *areas)
        parent = self._parent_live(turn)
        live: dict[str, Entry] = {}
        for item in listing.split("\0"):
            info, _, key = item.partition("\t")
            mode, oid, *_ = [*info.split(" "), "", ""]
            if mode not in _REGULAR:
                continue  # symlinks and nested repositories are not workspace files
            live[key] = self._entry(turn, key, oid, parent, None)
        now = time.time()
        deleted: dict[str, float] = {}
        gone = [k for k, op in turn.ops.items() if k not in live and k.split("/", 1)[0] in areas]
        if "files" in areas:
            gone += [k for k in parent if k.startswith("files/") and k not in live]
        for key in gone:
            op = turn.ops.get(key)
            deleted[key] = float(op["ts"]) if op is not None and op["op"] == "d" else now
        return dict(sorted(live.items())), deleted

    def _entry(
        self, turn: OpenTurn, key: str, oid: str, parent: dict[str, Entry], data: bytes | None
    ) -> Entry:
        """What the open turn's file ``key`` with blob ``oid`` is (``data``: bytes if at hand)."""
        op = turn.ops.get(key)
        if op is not None and op["op"] == "w" and op["blob"] == oid:
            keep = ("sha", "size", "mime", "ts", "blob")
            return {"turn": turn.turn_id, **{k: op[k] for k in keep}}
        old = parent.get(key)
        if old is not None and key.startswith("files/") and old["blob"] == oid:
            return old
        if data is None:
            data = self._git.cat(oid) or b""
        try:
            ts = (turn.tree / key).lstat().st_mtime
        except OSError:
            ts = time.time()
        sha = hashlib.sha256(data).hexdigest()
        return {
            "turn": turn.turn_id,
            "sha": sha,
            "size": len(data),
            "mime": "",
            "ts": ts,
            "blob": oid,
        }

    def _open_entry(self, turn: OpenTurn, key: str) -> tuple[Entry, bytes] | None:
        path = turn.disk_file(key)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return self._entry(turn, key, blob_id(data), self._parent_live(turn), data), data

    # -- writing -----------------------------------------------------------------------------------

    def _writable(self, turn_id: str, path: str) -> OpenTurn:
        """The open turn ``turn_id``; a never-begun turn is begun; an ended one is refused."""
        if self._open is not None and self._open.turn_id == turn_id:
            self._ensure_tree(self._open)
            return self._open
        if turn_id in self._ordinals:
            now = f"; the open turn is {self._open.turn_id}" if self._open is not None else ""
            detail = f"turn {turn_id} is committed and read-only{now}; write in the open turn"
            raise PathError("turn_ended", path, detail)
        return self._begin_new(turn_id)

    def _refuse_unstorable(self, path: str, rel: str) -> None:
        refuse_unstorable(path, rel)

    def _put(
        self, turn_id: str, area: str, rel: str, path: str, data: bytes, mime: str, when: float
    ) -> str:
        with self._lock:
            turn = self._writable(turn_id, path)
            target = turn.make_room(area, rel, path)
            tmp = turn.tree / ".actline" / "tmp" / uuid.uuid4().hex
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, target)
            record = {
                "op": "w", "key": f"{area}/{rel}", "sha": hashlib.sha256(data).hexdigest(),
                "blob": blob_id(data), "size": len(data), "mime": mime, "ts": when,
            }  # fmt: skip
            turn.log(record)
            turn.ops[f"{area}/{rel}"] = record
        return path

    def _remove(self, turn_id: str, area: str, rel: str, path: str, when: float) -> str:
        key = f"{area}/{rel}"
        with self._lock:
            known = turn_id in self._ordinals or (
                self._open is not None and self._open.turn_id == turn_id
            )
            if not known and (area not in DURABLE_AREAS or not self._live_in_newest(key)):
                raise NotStored("file", path)  # like the custom backend: no ordinal is given
            turn = self._writable(turn_id, path)
            target = turn.disk_file(key)
            if target is None:
                raise NotStored("file", path)
            turn.remove(target, area)
            record = {"op": "d", "key": key, "ts": when}
            turn.log(record)
            turn.ops[key] = record
        return path

    def _live_in_newest(self, key: str) -> bool:
        if self._open is not None:
            return self._open.disk_file(key) is not None
        return bool(self._ended) and key in self._meta(self._ended[-1][1])["live"]

    # -- reading -----------------------------------------------------------------------------------

    def _view(self, turn_id: str) -> OpenTurn | str:
        """The open turn, or the commit of an ended one; ``NotStored`` for an unknown turn."""
        if self._open is not None and self._open.turn_id == turn_id:
            return self._open
        if turn_id in self._ordinals:
            return self._ended[self._ordinals[turn_id] - 1][1]
        raise NotStored("workspace turn", f"{self.conversation_id}/{turn_id}")

    def _file(self, path: str | LogicalPath) -> tuple[LogicalPath, Entry, bytes | None]:
        """Resolve a file path: its entry, and its bytes when they came from disk."""
        lp, text = self._parse(path)
        if lp.is_folder:
            raise NotStored("file", text)
        assert lp.turn_id is not None
        key = f"{lp.name}/{lp.rel}"
        view = self._view(lp.turn_id)
        if isinstance(view, OpenTurn):
            found = self._open_entry(view, key)
            if found is None:
                raise NotStored("file", text)
            return lp, found[0], found[1]
        entry: Entry | None = self._meta(view)["live"].get(key)
        if entry is None:
            raise NotStored("file", text)
        return lp, entry, None

    def read(self, path: str | LogicalPath) -> bytes:
        """The bytes a ``fi:`` file path resolves to (see ``actline.storage.workspace``)."""
        with self._lock:
            _, entry, data = self._file(path)
            if data is None:
                data = self._git.cat(str(entry["blob"]))
                if data is None:
                    raise GitError("cat-file", 0, f"blob {entry['blob']} is missing")
            return data

    def stat(self, path: str | LogicalPath) -> FileStat:
        """What a ``fi:`` file path resolves to: its version, digest, size, mime and time."""
        with self._lock:
            lp, entry, _ = self._file(path)
            return file_stat(str(lp), f"{lp.name}/{lp.rel}", entry)

    def _live(self, turn_id: str, area: str) -> dict[str, Entry]:
        view = self._view(turn_id)
        if isinstance(view, OpenTurn):
            return self._scan(view, (area,))[0]
        live: dict[str, Entry] = self._meta(view)["live"]
        return {k: e for k, e in sorted(live.items()) if k.startswith(area + "/")}

    def listdir(self, path: str | LogicalPath) -> list[str]:
        """The logical paths of every live file under a ``files/`` or ``outputs/`` folder.

        Recursive, sorted, as of the path's turn; an unknown folder lists nothing.
        """
        lp, turn_id, rel = self._folder(path)
        under = f"{lp.name}/{rel}"
        with self._lock:
            keys = [k for k in self._live(turn_id, lp.name) if k.startswith(under)]
        return [_logical(turn_id, lp.name, k.split("/", 1)[1]) for k in keys]

    def tree(self, turn_id: str, area: str = "files") -> dict[str, FileStat]:
        """The whole ``area`` as of ``turn_id``: rel -> stat of the live version, sorted by rel."""
        _check_turn_and_area(turn_id, area)
        with self._lock:
            live = self._live(turn_id, area)
        out: dict[str, FileStat] = {}
        for key, entry in live.items():
            rel = key.split("/", 1)[1]
            out[rel] = file_stat(_logical(turn_id, area, rel), key, entry)
        return out

    def trees(self, turn_id: str, areas: Sequence[str]) -> dict[str, dict[str, FileStat]]:
        """``tree`` of each of ``areas`` as of ``turn_id``."""
        return {area: self.tree(turn_id, area) for area in areas}

    def versions(self, area: str, rel: str) -> list[FileStat]:
        """Every version of ``<area>/<rel>`` ever written, tombstones included, oldest first."""
        _check_rel(area, rel)
        key = f"{area}/{rel}"
        out: list[FileStat] = []
        with self._lock:
            for turn_id, commit in self._ended:
                meta = self._meta(commit)
                entry = meta["live"].get(key)
                if entry is not None and entry["turn"] == turn_id:
                    out.append(file_stat(_logical(turn_id, area, rel), key, entry))
                elif key in meta["deleted"]:
                    out.append(tombstone(key, turn_id, float(meta["deleted"][key])))
            turn = self._open
            if turn is not None:
                found = self._open_entry(turn, key)
                if found is not None and found[0]["turn"] == turn.turn_id:
                    out.append(file_stat(_logical(turn.turn_id, area, rel), key, found[0]))
                elif found is None and (
                    key in turn.ops or (area in DURABLE_AREAS and key in self._parent_live(turn))
                ):
                    op = turn.ops.get(key)
                    ts = float(op["ts"]) if op is not None and op["op"] == "d" else time.time()
                    out.append(tombstone(key, turn.turn_id, ts))
        return out
