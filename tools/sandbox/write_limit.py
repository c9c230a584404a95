"""The write limit of one sandbox run: how many bytes it may add to its workspace and temp dir.

What counts is the apparent size of every regular file under those folders (what a caller that
stores the workspace afterwards reads: a sparse file counts its whole length, a hard-linked file
once) plus the files the run's processes hold open after deleting them
(``tempfile.TemporaryFile``), over what the folders held when the run started: removing files
makes room, rewriting a file counts only what it grew.

The parent measures from outside the child, which cannot switch it off: every
``CHECK_INTERVAL_S`` while the run lives (longer when one check takes long, so that checking
costs at most a fifth of a CPU), and once more after it ended. A run found over the limit is
killed with its process group, and one that ended over it fails all the same: no run ends over
the limit with its files kept. A fast writer still holds more than the limit for a moment: what
it writes between two checks (tens of MB at page-cache speed).

After a run over the limit, ``WriteWatch.remove_new`` removes what it created: entries whose path
and inode were not there when it started, and the folders that held only such entries. What was
there before stays, changed or not (as after a timeout), including files the run moved; no
symbolic link is followed. Nobody else may write into those folders while the run lives (the
exec tool holds the workspace's lock), or their files would count and go too.

A folder the parent cannot list (a run can ``chmod 000`` one) or a run process whose open files
it cannot see makes the limit impossible to check: ``Unmeasurable``, which stops the run, never a
quiet pass. Not counted: deleted files the run only maps into memory (its address-space limit
bounds them) and bubblewrap's private ``/tmp`` (a tmpfs of its own size).
"""

from __future__ import annotations

import asyncio
import math
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "CHECK_INTERVAL_S",
    "Tree",
    "Unmeasurable",
    "WriteWatch",
    "descendants",
    "open_deleted_bytes",
    "scan",
]

CHECK_INTERVAL_S: Final = 0.02
"""The shortest time between two checks of a running run."""
_CHECK_SHARE: Final = 0.2
"""The most of its time the watcher spends checking (a large tree is checked less often)."""
_PROCESS_SCAN_S: Final = 0.5
"""How often the run's processes are looked up again (``/proc`` of the whole machine is read);
at every check during the run's first ``_PROCESS_START_S``, while bubblewrap starts the code."""
_PROCESS_START_S: Final = 1.0


class Unmeasurable(Exception):
    """The parent cannot see all that a run writes, so it cannot hold the run to its limit."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(what)

    def __reduce__(self) -> tuple[type[Unmeasurable], tuple[str]]:
        return (type(self), (self.what,))


@dataclass(frozen=True, slots=True)
class Tree:
    """The total apparent size of the regular files under some folders and, when recorded, the
    absolute paths and ``(device, inode)`` pairs of every entry under them."""

    size: int
    paths: frozenset[str] = frozenset()
    inodes: frozenset[tuple[int, int]] = frozenset()


def scan(roots: Iterable[str], *, record: bool = False) -> Tree:
    """Measure the folders ``roots`` (blocking); ``record`` keeps every entry's path and inode."""
    size = 0
    linked: set[tuple[int, int]] = set()
    paths: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    for root in roots:
        for path, info in _entries(root):
            key = (info.st_dev, info.st_ino)
            if record:
                paths.add(path)
                inodes.add(key)
            if not stat.S_ISREG(info.st_mode):
                continue
            if info.st_nlink > 1:
                if key in linked:
                    continue
                linked.add(key)
            size += info.st_size
    return Tree(size, frozenset(paths), frozenset(inodes))


def open_deleted_bytes(pids: Iterable[int]) -> int:
    """The apparent size of the deleted regular files that the processes ``pids`` hold open."""
    size = 0
    seen: set[tuple[int, int]] = set()
    for pid in pids:
        folder = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(folder)
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended
        except OSError as exc:
            owner = _owner(pid)
            if owner is None or owner != os.getuid():
                continue  # it ended, or a privileged helper (a setuid bubblewrap) without code
            raise Unmeasurable(f"cannot see the open files of process {pid} ({exc})") from None
        for fd in fds:
            try:
                info = os.stat(f"{folder}/{fd}")
            except OSError:
                continue  # closed meanwhile
            key = (info.st_dev, info.st_ino)
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 0 and key not in seen:
                seen.add(key)
                size += info.st_size
    return size


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it, from the parent ids in ``/proc/<pid>/stat`` (this
    kernel may not list ``/proc/<pid>/task/<tid>/children``)."""
    children: dict[int, list[int]] = {}
    try:
        entries = list(os.scandir("/proc"))
    except OSError as exc:
        raise Unmeasurable(f"cannot list the processes in /proc ({exc.strerror})") from None
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as file:
                data = file.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2 :].split()  # after "pid (command) "
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found = [pid]
    for parent in found:
        found.extend(children.get(parent, ()))
    return found


class WriteWatch:
    """Holds one run to ``limit`` bytes written under ``roots`` (its workspace and temp dir)."""

    def __init__(self, roots: Sequence[str], limit: int) -> None:
        self.roots = tuple(roots)
        self.limit = limit
        self.before = Tree(0)
        self.written = 0
        """The most the run was seen to have written."""
        self.exceeded = False
        self.problem = ""
        """Why the run could not be measured (it was stopped), or empty."""
        self._pids: list[int] = []
        self._pids_at = self._started = -math.inf

    def start(self) -> None:
        """Record what the folders hold before the run (blocking); ``Unmeasurable`` when a
        folder cannot be listed."""
        self.before = scan(self.roots, record=True)

    def measure(self, pid: int | None = None) -> int:
        """The bytes written so far (blocking), counting with ``pid`` the deleted files that it
        and the processes under it hold open."""
        size = scan(self.roots).size
        if pid is not None:
            now = time.monotonic()
            if self._started == -math.inf:
                self._started = now
            young = now - self._started < _PROCESS_START_S
            if young or now - self._pids_at >= _PROCESS_SCAN_S:
                self._pids, self._pids_at = descendants(pid), now
            size += open_deleted_bytes(self._pids)
        return size - self.before.size

    def note(self, written: int) -> bool:
        """Take a measurement; True once the run has gone over the limit."""
        self.written = max(self.written, written)
        self.exceeded = self.exceeded or written > self.limit
        return self.exceeded

    async def watch(self, pid: int, stop: Callable[[], None]) -> None:
        """Measure the run of process ``pid`` until it goes over the limit or cannot be
        measured, then ``stop`` it; cancel it when the run ends."""
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                over = self.note(await asyncio.to_thread(self.measure, pid))
            except Unmeasurable as exc:
                self.problem = exc.what
                over = True
            if over:
                stop()
                return
            cost = loop.time() - started
            await asyncio.sleep(max(CHECK_INTERVAL_S, cost * (1 / _CHECK_SHARE - 1)))

    def remove_new(self) -> int:
        """Remove what the run created (blocking): entries that were not under the folders
        before it, by path and by inode, and folders left empty; returns how many went."""
        removed = 0
        for root in self.roots:
            for path, info in reversed(list(_entries(root))):  # children before their folder
                if path in self.before.paths or (info.st_dev, info.st_ino) in self.before.inodes:
                    continue
                if _remove(path, stat.S_ISDIR(info.st_mode)):
                    removed += 1
        return removed


def _entries(root: str) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` with its ``lstat``, each folder before what it holds; symbolic
    links are not followed."""
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                found = list(listing)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed or replaced while it was looked at
        except OSError as exc:
            raise Unmeasurable(f"cannot list {folder!r} ({exc.strerror})") from None
        for entry in found:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise Unmeasurable(f"cannot look at {entry.path!r} ({exc.strerror})") from None
            yield entry.path, info
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)


def _remove(path: str, folder: bool) -> bool:
    """Remove one entry; a folder only when empty. A parent folder the run made read-only is
    given back its owner's rights first."""
    remove = os.rmdir if folder else os.unlink
    for attempt in range(2):
        try:
            remove(path)
            return True
        except PermissionError:
            if attempt:
                return False
            parent = os.path.dirname(path)
            try:
                os.chmod(parent, stat.S_IMODE(os.lstat(parent).st_mode) | stat.S_IRWXU)
            except OSError:
                return False
        except OSError:
            return False  # a folder that still holds what was there before the run
    return False


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
