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
import stat as statmod
import subprocess
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from actline.storage.errors import NotStored
from actline.storage.workspace import (
    DURABLE_AREAS,
    FileStat,
    _check_turn_and_area,
    _logical,
    _refuse_absolute,
    _refuse_folder,
    _stat,
)
from actline.timeline.errors import PathError
from actline.timeline.paths import FI_AREAS, FOLLOWUP_AREA, LogicalPath, fi_path, parse_path
from actline.tools.errors import ToolError

__all__ = ["GIT_RULES", "GitError", "GitWorkspace"]

GIT_RULES: Final = ("turn_ended", "path_conflict")
"""The ``PathError`` rules only the git mode raises (see the module docstring)."""
HISTORY: Final = ".history.git"
META: Final = ".actline/meta.json"
INDEX: Final = "actline-index"  # in the work tree's admin folder, removed with it
EMPTY_TREE: Final = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
ONE_TURN_AREAS: Final = tuple(a for a in FI_AREAS if a not in DURABLE_AREAS)
MAX_NAME_BYTES: Final = 255
_ZERO: Final = "0" * 40
_REGULAR: Final = ("100644", "100755")
_CONFIG: Final = (
    "core.hooksPath=/dev/null", "core.autocrlf=false", "core.safecrlf=false",
    "core.fsmonitor=false", "core.untrackedCache=false", "core.quotePath=false",
    "core.protectNTFS=false", "core.attributesFile=/dev/null", "core.excludesFile=/dev/null",
    "commit.gpgSign=false", "gc.auto=0", "maintenance.auto=false", "safe.directory=*",
    "advice.detachedHead=false", "init.defaultBranch=main",
)  # fmt: skip
_ATTRIBUTES: Final = "* -text -eol -filter -ident -working-tree-encoding\n"

Entry = dict[str, Any]
"""One live file in meta.json: turn (writer), sha, size, mime, ts, blob."""


class GitError(ToolError):
    """A git command of the git workspace failed (``command``, ``returncode``, ``stderr``)."""

    def __init__(self, command: str, returncode: int, stderr: str) -> None:
        self.command = command
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"git {command} failed ({returncode}): {stderr.strip()[:2000]}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.command, self.returncode, self.stderr))


def _env() -> dict[str, str]:
    """The caller's environment without GIT_* (hooks, GIT_DIR), no user or system config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    who = {"NAME": "actline", "EMAIL": "actline@localhost"}
    for role in ("AUTHOR", "COMMITTER"):
        for part, value in who.items():
            env[f"GIT_{role}_{part}"] = value
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", GIT_NO_REPLACE_OBJECTS="1",
        GIT_LITERAL_PATHSPECS="1", LC_ALL="C",
    )  # fmt: skip
    return env


class _Git:
    """Runs git with a fixed environment; keeps one ``cat-file --batch`` for object reads."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self.env = _env()
        self.config = [arg for item in _CONFIG for arg in ("-c", item)]
        self._batch: subprocess.Popen[bytes] | None = None

    def run(
        self,
        *args: str,
        git_dir: Path | None = None,
        work_tree: Path | None = None,
        index: Path | None = None,
        stdin: str = "",
    ) -> str:
        where = ["--git-dir", str(git_dir or self.git_dir)]
        if work_tree is not None:
            where += ["--work-tree", str(work_tree)]
        env = self.env if index is None else {**self.env, "GIT_INDEX_FILE": str(index)}
        try:
            done = subprocess.run(
                ["git", *self.config, *where, *args],
                cwd=work_tree or self.git_dir,
                env=env,
                input=stdin.encode(),
                capture_output=True,
                check=False,
            )
        except FileNotFoundError as exc:
            raise GitError(args[0], -1, f"cannot run git: {exc}") from None
        if done.returncode != 0:
            raise GitError(args[0], done.returncode, done.stderr.decode(errors="replace"))
        return done.stdout.decode(errors="surrogateescape")

    def init(self) -> None:
        """Create the bare repository (no template: no hooks, no sample files)."""
        args = ["init", "-q", "--bare", "--template=", "--initial-branch=main", str(self.git_dir)]
        try:
            done = subprocess.run(["git", *self.config, *args], env=self.env, capture_output=True)
        except FileNotFoundError as exc:
            raise GitError("init", -1, f"cannot run git: {exc}") from None
        if done.returncode != 0:
            raise GitError("init", done.returncode, done.stderr.decode(errors="replace"))

    def cat(self, name: str) -> bytes | None:
        """The bytes of a blob (``<oid>`` or ``<rev>:<path>``), None when it is not a blob."""
        for attempt in (0, 1):
            proc = self._batch_proc()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(name.encode() + b"\n")
                proc.stdin.flush()
                header = proc.stdout.readline().decode().split()
            except (BrokenPipeError, OSError):
                header = []
            if len(header) == 3:
                body = proc.stdout.read(int(header[2]) + 1)[:-1]
                return body if header[1] == "blob" else None
            if header and header[-1] in ("missing", "ambiguous"):
                return None
            self.close()  # the process died: start it again once
            if attempt:
                raise GitError("cat-file", -1, f"no answer for {name!r}")
        return None

    def _batch_proc(self) -> subprocess.Popen[bytes]:
        if self._batch is None or self._batch.poll() is not None:
            self._batch = subprocess.Popen(
                ["git", *self.config, "--git-dir", str(self.git_dir), "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,  # a terminal's Ctrl-C must not end it under us
            )
        return self._batch

    def close(self) -> None:
        proc, self._batch = self._batch, None
        if proc is not None:
            streams: tuple[IO[bytes] | None, ...] = (proc.stdin, proc.stdout)
            for stream in streams:
                if stream is not None:
                    stream.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass(slots=True)
class _Open:
    """The open turn: its work tree, the commit it started from and its journal."""

    turn_id: str
    ordinal: int
    parent: str  # the previous turn's commit, "" for the first turn
    tree: Path
    journal: Path
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)  # "<area>/<rel>" -> last op

    def admin(self) -> Path:
        """The work tree's private git folder (named by its ``.git`` file)."""
        text = (self.tree / ".git").read_text().strip()
        return Path(text.removeprefix("gitdir:").strip())

    def log(self, record: dict[str, Any]) -> None:
        with self.journal.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def _ref(turn_id: str) -> str:
    return "refs/turns/" + turn_id.replace(":", "%3A")


def _refuse_unstorable(path: str, rel: str) -> None:
    """Names a work tree cannot hold: ``.git`` segments, segments over 255 bytes."""
    for seg in rel.split("/"):
        if seg.lower() == ".git":
            detail = "git cannot keep a segment named .git; rename it"
            raise PathError("bad_segment", path, detail)
        if len(seg.encode()) > MAX_NAME_BYTES:
            detail = f"a segment is at most {MAX_NAME_BYTES} bytes of UTF-8 on disk"
            raise PathError("too_long", path, detail)


def _file_stat(path: str, key: str, entry: Entry) -> FileStat:
    area, rel = key.split("/", 1)
    row = {"rel": rel, "turn_id": entry["turn"], **entry}
    return _stat(path, area, row)


def _tombstone(key: str, turn_id: str, ts: float) -> FileStat:
    area, rel = key.split("/", 1)
    row = {"rel": rel, "turn_id": turn_id, "deleted": True, "ts": ts}
    return _stat(_logical(turn_id, area, rel), area, row)


class GitWorkspace:
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
        self._git = _Git(self._git_dir)
        self._closer = weakref.finalize(self, self._git.close)
        self._lock = threading.RLock()
        self._ended: list[tuple[str, str]] = []  # (turn id, commit), oldest first
        self._ordinals: dict[str, int] = {}
        self._open: _Open | None = None
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
            records = _read_journal(journal)
            begin = records[0] if records and records[0].get("op") == "begin" else {}
            if self._open is not None or begin.get("parent", head) != head:
                raise GitError("load", 0, f"{journal}: an open turn that does not follow main")
            turn = _Open(turn_id, len(self._ended) + 1, head, self.root / turn_id, journal)
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

    def _setup_tree(self, turn: _Open) -> None:
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

    def _begin_new(self, turn_id: str) -> _Open:
        if self._open is not None:
            self._end(self._open)
        parent = self._ended[-1][1] if self._ended else ""
        journal = self._git_dir / "actline" / f"{turn_id}.jsonl"
        turn = _Open(turn_id, len(self._ended) + 1, parent, self.root / turn_id, journal)
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

    def _end(self, turn: _Open) -> str:
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

    def _ensure_tree(self, turn: _Open) -> None:
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

    def _parent_live(self, turn: _Open) -> dict[str, Entry]:
        if not turn.parent:
            return {}
        live: dict[str, Entry] = self._meta(turn.parent)["live"]
        return live

    def _in_tree(self, turn: _Open, *args: str) -> str:
        """Run git in the turn's work tree with the private index (never the work tree's own)."""
        admin = turn.admin()
        return self._git.run(*args, git_dir=admin, work_tree=turn.tree, index=admin / INDEX)

    def _scan(
        self, turn: _Open, areas: tuple[str, ...]
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
        self, turn: _Open, key: str, oid: str, parent: dict[str, Entry], data: bytes | None
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

    def _disk_file(self, turn: _Open, key: str) -> Path | None:
        """The open turn's file ``key`` when it is a workspace file on disk, else None."""
        area, rel = key.split("/", 1)
        here = turn.tree / area
        segs = rel.split("/")
        for seg in segs[:-1]:
            here = here / seg
            try:
                if not statmod.S_ISDIR(here.lstat().st_mode) or (here / ".git").exists():
                    return None
            except OSError:
                return None
        here = here / segs[-1]
        try:
            regular = statmod.S_ISREG(here.lstat().st_mode)
        except OSError:
            return None
        return here if regular and all(s.lower() != ".git" for s in segs) else None

    def _open_entry(self, turn: _Open, key: str) -> tuple[Entry, bytes] | None:
        path = self._disk_file(turn, key)
        if path is None:
            return None
        try:
            data = path.read_bytes()
        except OSError:
            return None
        return self._entry(turn, key, _blob_id(data), self._parent_live(turn), data), data

    # -- writing -----------------------------------------------------------------------------------

    def _writable(self, turn_id: str, path: str) -> _Open:
        """The open turn ``turn_id``; a never-begun turn is begun; an ended one is refused."""
        if self._open is not None and self._open.turn_id == turn_id:
            self._ensure_tree(self._open)
            return self._open
        if turn_id in self._ordinals:
            now = f"; the open turn is {self._open.turn_id}" if self._open is not None else ""
            detail = f"turn {turn_id} is committed and read-only{now}; write in the open turn"
            raise PathError("turn_ended", path, detail)
        return self._begin_new(turn_id)

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
        """Write ``<area>/<rel>`` in the open turn ``turn_id``; returns its ``fi:`` path.

        ``area`` is ``files``, ``outputs`` or ``user.attachments``.
        """
        _refuse_absolute(turn_id, area, rel)
        path = fi_path(turn_id, area, rel)
        _refuse_folder(path, rel)
        _refuse_unstorable(path, rel)
        return self._put(turn_id, area, rel, path, data, mime, ts)

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
        _refuse_unstorable(path, rel)
        return self._put(turn_id, FOLLOWUP_AREA, rel, path, data, mime, ts)

    def _put(
        self, turn_id: str, area: str, rel: str, path: str, data: bytes, mime: str, ts: float | None
    ) -> str:
        when = time.time() if ts is None else ts
        with self._lock:
            turn = self._writable(turn_id, path)
            target = self._make_room(turn, area, rel, path)
            tmp = turn.tree / ".actline" / "tmp" / uuid.uuid4().hex
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, target)
            record = {
                "op": "w", "key": f"{area}/{rel}", "sha": hashlib.sha256(data).hexdigest(),
                "blob": _blob_id(data), "size": len(data), "mime": mime, "ts": when,
            }  # fmt: skip
            turn.log(record)
            turn.ops[f"{area}/{rel}"] = record
        return path

    def _make_room(self, turn: _Open, area: str, rel: str, path: str) -> Path:
        """Create the folders of ``rel``; ``path_conflict`` when a file or link is in the way."""
        here = turn.tree / area
        segs = rel.split("/")
        for i, seg in enumerate(segs[:-1], 1):
            here = here / seg
            try:
                mode = here.lstat().st_mode
            except FileNotFoundError:
                here.mkdir()
                continue
            if not statmod.S_ISDIR(mode) or (here / ".git").exists():
                what = "a nested repository" if statmod.S_ISDIR(mode) else "a file"
                detail = f"{area}/{'/'.join(segs[:i])} is {what}; delete it to write under it"
                raise PathError("path_conflict", path, detail)
        here = here / segs[-1]
        if here.is_dir() and not here.is_symlink():
            if any(f for _, _, files in os.walk(here) for f in files):
                detail = f"{area}/{rel} is a folder with files; write another name"
                raise PathError("path_conflict", path, detail)
            shutil.rmtree(here)
        return here

    def delete(self, turn_id: str, area: str, rel: str, *, ts: float | None = None) -> str:
        """Delete ``<area>/<rel>`` in the open turn (a tombstone); returns the deleted path.

        ``NotStored("file", path)`` when the file is not live as of that turn.
        """
        _refuse_absolute(turn_id, area, rel)
        path = _logical(turn_id, area, rel)
        _refuse_folder(path, rel)
        key = f"{area}/{rel}"
        when = time.time() if ts is None else ts
        with self._lock:
            known = turn_id in self._ordinals or (
                self._open is not None and self._open.turn_id == turn_id
            )
            if not known and (area not in DURABLE_AREAS or not self._live_in_newest(key)):
                raise NotStored("file", path)  # like the custom backend: no ordinal is given
            turn = self._writable(turn_id, path)
            target = self._disk_file(turn, key)
            if target is None:
                raise NotStored("file", path)
            target.unlink()
            stop = turn.tree / area
            for folder in target.parents:
                if folder == stop or not folder.is_relative_to(stop) or any(folder.iterdir()):
                    break
                folder.rmdir()
            record = {"op": "d", "key": key, "ts": when}
            turn.log(record)
            turn.ops[key] = record
        return path

    def _live_in_newest(self, key: str) -> bool:
        if self._open is not None:
            return self._disk_file(self._open, key) is not None
        return bool(self._ended) and key in self._meta(self._ended[-1][1])["live"]

    # -- reading -----------------------------------------------------------------------------------

    def _parse(self, path: str | LogicalPath) -> tuple[LogicalPath, str]:
        lp = parse_path(path) if isinstance(path, str) else path
        text = path if isinstance(path, str) else str(path)
        if lp.prefix != "fi" or lp.turn_id is None:
            detail = "the workspace holds fi: paths only; write fi:<turn>.files/<rel>"
            raise PathError("unknown_prefix", text, detail)
        return lp, text

    def _view(self, turn_id: str) -> _Open | str:
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
        if isinstance(view, _Open):
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
            return _file_stat(str(lp), f"{lp.name}/{lp.rel}", entry)

    def _live(self, turn_id: str, area: str) -> dict[str, Entry]:
        view = self._view(turn_id)
        if isinstance(view, _Open):
            return self._scan(view, (area,))[0]
        live: dict[str, Entry] = self._meta(view)["live"]
        return {k: e for k, e in sorted(live.items()) if k.startswith(area + "/")}

    def listdir(self, path: str | LogicalPath) -> list[str]:
        """The logical paths of every live file under a ``files/`` or ``outputs/`` folder.

        Recursive, sorted, as of the path's turn; an unknown folder lists nothing.
        """
        lp, text = self._parse(path)
        turn_id = lp.turn_id
        assert turn_id is not None
        if lp.name not in ("files", "outputs"):
            detail = f"only files/ and outputs/ hold folders; use tree({turn_id!r}, {lp.name!r})"
            raise PathError("bad_area", text, detail)
        under = f"{lp.name}/{lp.rel if lp.is_folder else lp.rel + '/'}"
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
            out[rel] = _file_stat(_logical(turn_id, area, rel), key, entry)
        return out

    def trees(self, turn_id: str, areas: Sequence[str]) -> dict[str, dict[str, FileStat]]:
        """``tree`` of each of ``areas`` as of ``turn_id``."""
        return {area: self.tree(turn_id, area) for area in areas}

    def versions(self, area: str, rel: str) -> list[FileStat]:
        """Every version of ``<area>/<rel>`` ever written, tombstones included, oldest first."""
        try:
            _logical("_", area, rel)
        except PathError as exc:
            raise PathError(exc.rule, f"{area}/{rel}", exc.detail) from None
        _refuse_folder(f"{area}/{rel}", rel)
        key = f"{area}/{rel}"
        out: list[FileStat] = []
        with self._lock:
            for turn_id, commit in self._ended:
                meta = self._meta(commit)
                entry = meta["live"].get(key)
                if entry is not None and entry["turn"] == turn_id:
                    out.append(_file_stat(_logical(turn_id, area, rel), key, entry))
                elif key in meta["deleted"]:
                    out.append(_tombstone(key, turn_id, float(meta["deleted"][key])))
            turn = self._open
            if turn is not None:
                found = self._open_entry(turn, key)
                if found is not None and found[0]["turn"] == turn.turn_id:
                    out.append(_file_stat(_logical(turn.turn_id, area, rel), key, found[0]))
                elif found is None and (
                    key in turn.ops or (area in DURABLE_AREAS and key in self._parent_live(turn))
                ):
                    op = turn.ops.get(key)
                    ts = float(op["ts"]) if op is not None and op["op"] == "d" else time.time()
                    out.append(_tombstone(key, turn.turn_id, ts))
        return out


def _read_journal(path: Path) -> list[dict[str, Any]]:
    """The journal's records; a line torn by a crash (the last one) is skipped."""
    records: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
