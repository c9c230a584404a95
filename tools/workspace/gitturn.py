"""The open turn of the git workspace mode on disk, and the entries of its ``meta.json``.

``OpenTurn`` is the newest turn of a ``GitWorkspace`` (``actline.tools.workspace.git``) while it
is open: its git work tree ``root/<turn id>/``, the commit it started from and its journal
(one JSON line per ``begin``, ``ready``, write and delete, read back by ``read_journal`` when
a new ``GitWorkspace`` opens the root). It knows where a file of the turn is on disk
(``disk_file``: regular files only, never inside a nested repository), makes the folders of a
write (``make_room``: ``path_conflict`` when a file or a nested repository is in the way) and
removes a deleted file with the folders it leaves empty. ``refuse_unstorable`` refuses names a
work tree cannot hold. An ``Entry`` is one live file of ``meta.json``; ``file_stat`` and
``tombstone`` give the ``FileStat`` both workspace modes report (``actline.storage.workspace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat as statmod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from actline.storage.workspace import FileStat, _logical, _stat
from actline.timeline.errors import PathError

__all__ = [
    "MAX_NAME_BYTES",
    "Entry",
    "OpenTurn",
    "blob_id",
    "file_stat",
    "read_journal",
    "refuse_unstorable",
    "tombstone",
]

MAX_NAME_BYTES: Final = 255

Entry = dict[str, Any]
"""One live file in meta.json: turn (writer), sha, size, mime, ts, blob."""


@dataclass(slots=True)
class OpenTurn:
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

    def disk_file(self, key: str) -> Path | None:
        """The open turn's file ``key`` when it is a workspace file on disk, else None."""
        area, rel = key.split("/", 1)
        here = self.tree / area
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

    def make_room(self, area: str, rel: str, path: str) -> Path:
        """Create the folders of ``rel``; ``path_conflict`` when a file or link is in the way."""
        here = self.tree / area
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

    def remove(self, target: Path, area: str) -> None:
        """Delete the file ``target`` of ``area`` and the folders it leaves empty."""
        target.unlink()
        stop = self.tree / area
        for folder in target.parents:
            if folder == stop or not folder.is_relative_to(stop) or any(folder.iterdir()):
                break
            folder.rmdir()


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what ``git hash-object`` gives)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def refuse_unstorable(path: str, rel: str) -> None:
    """Names a work tree cannot hold: ``.git`` segments, segments over 255 bytes."""
    for seg in rel.split("/"):
        if seg.lower() == ".git":
            detail = "git cannot keep a segment named .git; rename it"
            raise PathError("bad_segment", path, detail)
        if len(seg.encode()) > MAX_NAME_BYTES:
            detail = f"a segment is at most {MAX_NAME_BYTES} bytes of UTF-8 on disk"
            raise PathError("too_long", path, detail)


def file_stat(path: str, key: str, entry: Entry) -> FileStat:
    """The stat of the live file ``key`` (``<area>/<rel>``) whose meta entry is ``entry``."""
    area, rel = key.split("/", 1)
    row = {"rel": rel, "turn_id": entry["turn"], **entry}
    return _stat(path, area, row)


def tombstone(key: str, turn_id: str, ts: float) -> FileStat:
    """The stat of the tombstone of ``key`` written in ``turn_id``."""
    area, rel = key.split("/", 1)
    row = {"rel": rel, "turn_id": turn_id, "deleted": True, "ts": ts}
    return _stat(_logical(turn_id, area, rel), area, row)


def read_journal(path: Path) -> list[dict[str, Any]]:
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
