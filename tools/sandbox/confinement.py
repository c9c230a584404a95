"""Which kernel layer confines ``code.exec_python``: Landlock, bubblewrap, or none on purpose.

The audit hook of ``tools/sandbox/runner.py`` runs inside the process it guards, so compiled
code (the installed LMDB extension, SQLite) gets past it. A kernel layer under it is what keeps
such code away from the node's store, other conversations and the rest of the machine:

- ``landlock``: the runner restricts itself with Landlock (the kernel must have it).
- ``bwrap``: the runner starts inside bubblewrap: new user, mount, pid, network, IPC and UTS
  namespaces, all capabilities dropped, a read-only root holding only the Python installation,
  the system libraries and the read roots, the turn's workspace and temp dir bound read-write
  (the only writable places besides a private ``/tmp``), no network at all.
- ``unconfined``: the audit hook and the resource limits only. Code can then open the node's
  LMDB store through the installed extension: only an operator who accepts that asks for it.

``ACTLINE_SANDBOX`` picks one: ``auto`` (the default) takes Landlock when the kernel has it,
else bubblewrap when it is installed and can create its namespaces, else refuses to run code
and says what to install. A named mode that this machine cannot provide is refused the same
way, never replaced by another. ``bwrap`` on a Landlock kernel is how tests (and operators)
run the other path deliberately.

``decide`` is the pure choice from a ``Probe`` of the machine; ``choose`` probes once per
process (per requested mode and ``bwrap`` found on ``PATH``), logs the choice and caches it.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from . import runner

__all__ = [
    "SANDBOX_ENV",
    "SANDBOX_MODES",
    "Confinement",
    "Probe",
    "bwrap_command",
    "choose",
    "decide",
    "probe",
]

log = logging.getLogger(__name__)

SANDBOX_ENV: Final = "ACTLINE_SANDBOX"
SANDBOX_MODES: Final = ("auto", "landlock", "bwrap", "unconfined")
TMPFS_BYTES: Final = 16 * 1024 * 1024
"""Size of the private ``/tmp`` under bubblewrap (the code's temp dir is elsewhere)."""
INSTALL_HINT: Final = (
    "install bubblewrap (apt-get install bubblewrap, dnf install bubblewrap or "
    "apk add bubblewrap; `make sandbox-deps` does it)"
)
_PROBE_TIMEOUT_S = 10.0

Mode = Literal["landlock", "bwrap", "unconfined", "refused"]


@dataclass(frozen=True, slots=True)
class Probe:
    """What this machine offers. ``bwrap`` is the path of a bubblewrap that could start a
    sandbox with ``bwrap_flags`` (``None`` when it is missing or failed: ``bwrap_problem``)."""

    landlock_abi: int
    bwrap: str | None = None
    bwrap_version: str = ""
    bwrap_flags: tuple[str, ...] = ()
    bwrap_problem: str = "bwrap is not on PATH"
    tmpfs_size: bool = False


@dataclass(frozen=True, slots=True)
class Confinement:
    """The layer ``code.exec_python`` runs under, and why. ``mode == "refused"`` means no code
    runs: ``detail`` then says what to install or set."""

    mode: Mode
    detail: str
    requested: str = "auto"
    bwrap: str | None = None
    bwrap_flags: tuple[str, ...] = ()
    tmpfs_size: bool = False

    @property
    def usable(self) -> bool:
        return self.mode != "refused"


def decide(requested: str, machine: Probe) -> Confinement:
    """The confinement for ``ACTLINE_SANDBOX=requested`` on ``machine``; never a fallback to
    a mode other than the one asked for (``auto`` asks for the best available)."""
    landlock = machine.landlock_abi > 0
    bwrap = machine.bwrap is not None
    no_landlock = "this kernel has no Landlock"
    if requested == "unconfined":
        detail = (
            f"{SANDBOX_ENV}=unconfined: audit hook and resource limits only; code can reach "
            "this node's store and files through compiled extensions"
        )
        return Confinement("unconfined", detail, requested)
    if requested in ("auto", "landlock") and landlock:
        return Confinement("landlock", f"Landlock ABI {machine.landlock_abi}", requested)
    if requested in ("auto", "bwrap") and bwrap:
        name = " ".join(filter(None, ("bubblewrap", machine.bwrap_version)))
        why = f" ({no_landlock})" if requested == "auto" else ""
        return Confinement(
            "bwrap",
            f"{name} at {machine.bwrap}{why}",
            requested,
            machine.bwrap,
            machine.bwrap_flags,
            machine.tmpfs_size,
        )
    if requested == "landlock":
        detail = (
            f"{SANDBOX_ENV}=landlock, but {no_landlock} (it needs Linux 5.13+ with landlock in "
            f"the lsm= list); set {SANDBOX_ENV}=bwrap or auto to use bubblewrap instead"
        )
    elif requested == "bwrap":
        detail = (
            f"{SANDBOX_ENV}=bwrap, but bubblewrap cannot be used: {machine.bwrap_problem}; "
            f"{INSTALL_HINT}, or set {SANDBOX_ENV}=auto"
        )
    elif requested == "auto":
        detail = (
            f"code.exec_python is disabled: {no_landlock} and bubblewrap cannot be used "
            f"({machine.bwrap_problem}); {INSTALL_HINT}, or set {SANDBOX_ENV}=unconfined to "
            "run code with the audit hook only (it can then read and rewrite this node's store)"
        )
    else:
        modes = ", ".join(SANDBOX_MODES)
        detail = f"{SANDBOX_ENV}={requested!r} is not a sandbox mode; use one of {modes}"
    return Confinement("refused", detail, requested)


def probe(bwrap: str | None, landlock_abi: int | None = None) -> Probe:
    """Look at this machine: the Landlock ABI (unless given), and whether ``bwrap`` starts a
    sandbox."""
    abi = runner.landlock_abi() if landlock_abi is None else landlock_abi
    if bwrap is None:
        return Probe(abi)
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    try:
        version = _output([bwrap, "--version"], env).strip().removeprefix("bubblewrap ").strip()
        usage = _output([bwrap, "--help"], env)
    except (OSError, subprocess.SubprocessError) as exc:
        return Probe(abi, bwrap_problem=f"{bwrap} does not run: {exc}")
    candidates: list[tuple[str, ...]] = [("--unshare-all",)]
    if "--disable-userns" in usage:
        candidates.insert(0, ("--unshare-all", "--unshare-user", "--disable-userns"))
    exe = sys.executable
    problem = ""
    for flags in candidates:
        argv = [bwrap, *flags, "--cap-drop", "ALL", "--ro-bind", "/", "/", "--", exe]
        argv += ["-I", "-S", "-c", ""]
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            problem = f"{bwrap} does not run: {exc}"
            continue
        if done.returncode == 0:
            return Probe(abi, bwrap, version, flags, "", "--size" in usage)
        error = done.stderr.decode("utf-8", "replace").strip().splitlines()
        problem = f"{bwrap} cannot create its namespaces here: {error[-1] if error else '?'}"
    return Probe(abi, bwrap_version=version, bwrap_problem=problem)


def _output(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        argv, env=env, capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False, text=True
    )
    return done.stdout


_chosen: dict[tuple[str, str | None], Confinement] = {}


def choose(requested: str = "auto") -> Confinement:
    """The confinement for ``requested`` on this machine, probed once and logged once.

    Blocking (the first call runs bubblewrap a few times): call it from a thread in async code.
    """
    bwrap = shutil.which("bwrap")
    key = (requested, bwrap)
    found = _chosen.get(key)
    if found is None:
        abi = runner.landlock_abi()
        try_bwrap = requested == "bwrap" or (requested == "auto" and abi == 0)
        found = decide(requested, probe(bwrap if try_bwrap else None, abi))
        _chosen[key] = found
        if found.mode == "refused":
            log.warning("code.exec_python sandbox refused: %s", found.detail)
        elif found.mode == "unconfined":
            log.warning("code.exec_python sandbox: %s", found.detail)
        else:
            log.info("code.exec_python sandbox: %s (%s)", found.mode, found.detail)
    return found


# --- the bubblewrap command line ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tree:
    """What the interpreter needs to start: files and directories bound read-only, and the
    symbolic links (target, link) that lead from ``sys.executable`` to the real binary."""

    executable: str
    read_only: tuple[str, ...]
    links: tuple[tuple[str, str], ...]


@functools.cache
def _interpreter() -> _Tree:
    exe = os.path.join(
        os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable)
    )
    read_only: list[str] = []
    links: list[tuple[str, str]] = []
    path, hops = exe, 0
    while os.path.islink(path) and hops < 40:
        target = os.readlink(path)
        links.append((target, path))
        path = os.path.normpath(os.path.join(os.path.dirname(path), target))
        path = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        hops += 1
    read_only.append(path)
    for folder in (os.path.dirname(exe), os.path.dirname(os.path.dirname(exe))):
        cfg = os.path.join(folder, "pyvenv.cfg")
        if os.path.isfile(cfg):
            read_only.append(os.path.realpath(cfg))
    libdir, soname = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME")
    if libdir and soname and os.path.isfile(os.path.join(libdir, soname)):
        read_only.append(os.path.realpath(os.path.join(libdir, soname)))
    read_only += [p for p in runner.python_dirs() + runner.zoneinfo_dirs() if os.path.exists(p)]
    read_only.append(os.path.realpath(runner.__file__))
    for system in (*runner.SYSTEM_LIBRARY_DIRS, *runner.SYSTEM_LIBRARY_FILES):
        if os.path.islink(system) and os.path.dirname(system) == "/":
            links.append((os.readlink(system), system))  # /lib -> usr/lib on merged-/usr
            system = os.path.realpath(system)
        if os.path.exists(system):
            read_only.append(os.path.realpath(system) if os.path.isdir(system) else system)
    return _Tree(exe, tuple(dict.fromkeys(read_only)), tuple(links))


def bwrap_command(
    confinement: Confinement,
    *,
    workspace: str,
    scratch: str,
    read_roots: Sequence[str],
) -> tuple[list[str], str]:
    """The bubblewrap arguments that start the interpreter confined (to be followed by the
    interpreter's own arguments), and the interpreter path to run inside.

    Every path keeps its host name inside, so the runner's configuration and the audit hook's
    rules are the same as without bubblewrap. Nothing else of the host is visible: not
    ``ACTLINE_HOME`` (only the turn's folders of it), not ``$HOME``, not ``/etc``.
    """
    assert confinement.mode == "bwrap" and confinement.bwrap is not None
    tree = _interpreter()
    args = [confinement.bwrap, *confinement.bwrap_flags, "--cap-drop", "ALL"]
    args += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    read_only = _outermost((*tree.read_only, *read_roots))
    writable = _outermost((workspace, scratch))
    roots = [path for path in read_only if path == "/"]
    for path in roots:
        args += ["--ro-bind", path, path]
    args += ["--proc", "/proc", "--dev", "/dev"]
    if confinement.tmpfs_size:
        args += ["--size", str(TMPFS_BYTES)]
    args += ["--tmpfs", "/tmp"]
    for path in sorted((p for p in read_only if p != "/"), key=_depth):
        args += ["--ro-bind", path, path]
    for target, link in tree.links:
        if not _inside(link, read_only):
            args += ["--symlink", target, link]
    for path in sorted(writable, key=_depth):
        args += ["--bind", path, path]
    args += ["--remount-ro", "/", "--chdir", workspace, "--"]
    return args, tree.executable


def _depth(path: str) -> tuple[int, str]:
    return (path.rstrip("/").count("/"), path)


def _inside(path: str, folders: Iterable[str]) -> bool:
    return any(path.startswith(folder.rstrip("/") + "/") for folder in folders)


def _outermost(paths: Iterable[str]) -> list[str]:
    """The paths without those that lie inside another one of them."""
    unique = list(dict.fromkeys(paths))
    return [path for path in unique if path == "/" or not _inside(path, unique)]
