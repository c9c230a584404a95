"""Child side of ``actline.tools.sandbox.sandbox``: confine this interpreter, then run the code read
from stdin.

``actline.tools.sandbox.sandbox.run_python`` starts ``python -I -B -u -X utf8 runner.py CONFIG``
with a clean environment and the workspace as its working directory, directly or inside bubblewrap
(``actline.tools.sandbox.confinement``). This module is stdlib only; the parent imports it for
``landlock_abi``, ``python_dirs`` and the path lists, tests to inspect the hook. In order, the
runner:

1. reads the code from stdin (so nothing is written into the workspace);
2. applies Landlock when the configuration says so (``"landlock": true``; it refuses to run
   the code, reporting ``F<why>``, when the kernel cannot apply it): the kernel then refuses,
   whatever the Python code does, reads outside the allowed trees, writes outside the
   workspace and its temp dir, executing any file, TCP bind/connect (ABI 4+) and signalling
   processes outside (ABI 6+);
3. sets resource limits (address space, CPU seconds, file size, open files, no core dumps);
4. narrows ``sys.path`` and ``sys.meta_path`` to the workspace and the Python installation;
5. installs an audit hook (``sys.addaudithook``) that refuses, with a ``PermissionError`` that
   says why, writes outside the workspace, reads outside the allowed trees, new processes,
   network calls, ctypes and the few interpreter features that could switch the hook off
   (unless ``"audit_hook": false``: tests show what the kernel layer stops alone);
6. runs the code as ``__main__`` (file name ``<code>``).

Report channel: the runner writes lines to the inherited fd ``report_fd``: ``L<abi>`` once (the
Landlock ABI applied, 0 for none), ``R<message>`` per refusal, ``M`` on a ``MemoryError``,
``F<message>`` when it did not run the code because its confinement could not be applied.

The hook is built so that the code it guards cannot change what it checks: every function and
value it uses is captured in closures when it is built (no global or builtin is looked up while
it runs), paths are resolved with ``posix.lstat``/``readlink`` directly, and it never calls back
into Python code the guarded code could have replaced. It is still an audit hook inside the
guarded process, not a kernel boundary: C code (an extension module, SQLite's ``ATTACH``) does
file I/O without audit events. Landlock or bubblewrap is what stops those.
"""

from __future__ import annotations

import json
import linecache
import os
import resource
import signal
import sys
import sysconfig
import traceback
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

CODE_FILENAME = "<code>"
"""The file name the code runs under, as it appears in tracebacks."""

DENIED_MODULES = frozenset(
    {
        "ctypes",
        "_ctypes",
        "_ctypes_test",
        "_cffi_backend",
        "_posixsubprocess",  # replaced by a stub: its fork_exec raises no audit event
        "_xxsubinterpreters",
        "_xxinterpchannels",
        "_interpreters",
        "_interpchannels",
        "_interpqueues",
        "_testcapi",
        "_testinternalcapi",
        "_testmultiphase",
        "_testsinglephase",
        "_testimportmultiple",
        "_testbuffer",
        "_testclinic",
        "_xxtestfuzz",
        "_ssl",  # reads and writes files from C (cert stores, keylog files); no network anyway
        "readline",  # history files are read and written from C
        "_curses",
        "_curses_panel",
        "_tkinter",
        "spwd",
        "nis",
        "ossaudiodev",
    }
)
"""Modules whose import is refused (with ``ImportError``, so optional imports degrade)."""
QUIET_MODULES = frozenset({"_ssl", "readline"})
"""Denied modules that the standard library imports optionally (asyncio, urllib, site): their
refusal is not reported, since the code did not ask for them."""

PROCESS_EVENTS = frozenset(
    {
        "subprocess.Popen",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "pty.spawn",
        "os.startfile",
    }
)
DENIED_EVENTS = frozenset(
    {
        "sys.settrace",
        "sys.setprofile",
        "sys._current_frames",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "resource.setrlimit",
        "resource.prlimit",
        "cpython.PyInterpreterState_New",
        "os.unshare",
        "os.setns",
        "sqlite3.enable_load_extension",
        "sqlite3.load_extension",
        "syslog.openlog",
        "syslog.syslog",
        "syslog.closelog",
    }
)
ALLOWED_SOCKET_EVENTS = frozenset({"socket.__new__", "socket.gethostname"})
PATH_READ_EVENTS = frozenset({"os.listdir", "os.scandir", "os.getxattr", "os.listxattr"})

READABLE_DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
WRITABLE_DEVICES = ("/dev/null",)
SYSTEM_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib")
"""Shared libraries that extension modules load lazily; readable at the kernel level only."""
SYSTEM_LIBRARY_FILES = ("/etc/ld.so.cache", "/etc/localtime")

Hook = Callable[[str, tuple[Any, ...]], None]


# --- the audit hook ---------------------------------------------------------------------------


def build_hook(
    *,
    workspace: str,
    writable_dirs: Sequence[str],
    readable_dirs: Sequence[str],
    readable_files: Sequence[str],
    writable_files: Sequence[str],
    report_fd: int,
) -> Hook:
    """The audit hook of one run; every path given must already be absolute and resolved.

    Everything the hook uses is bound here, so that replacing a builtin, a module attribute or
    a global after this returns changes nothing the hook does.
    """
    import _stat
    import pathlib
    import posix

    _type = type
    _issubclass = issubclass
    _str = str
    _bytes = bytes
    _int = int
    _exception = Exception
    _os_error = OSError
    _permission_error = PermissionError
    _import_error = ImportError
    _attribute_error = AttributeError
    _lstat = posix.lstat
    _readlink = posix.readlink
    _getcwd = posix.getcwd
    _write = posix.write
    _s_islnk = _stat.S_ISLNK
    _s_isdir = _stat.S_ISDIR
    _s_ischr = _stat.S_ISCHR
    _s_isblk = _stat.S_ISBLK
    _o_write = posix.O_WRONLY | posix.O_RDWR | posix.O_APPEND | posix.O_CREAT | posix.O_TRUNC
    _pid = posix.getpid()
    _denied_modules = DENIED_MODULES
    _quiet_modules = QUIET_MODULES
    _process_events = PROCESS_EVENTS
    _denied_events = DENIED_EVENTS
    _allowed_socket_events = ALLOWED_SOCKET_EVENTS
    _path_read_events = PATH_READ_EVENTS
    _workspace = workspace
    _write_prefixes = _prefixes(writable_dirs)
    _read_prefixes = _prefixes((*writable_dirs, *readable_dirs))
    _write_files = frozenset(writable_files)
    _read_files = frozenset((*readable_files, *writable_files))
    _path_types, _path_guards, _str_slot = _pathlib_guards(pathlib)

    def refuse(
        message: str, error: type[Exception] = _permission_error, report: bool = True
    ) -> None:
        if report:
            try:
                line = message.encode("utf-8", "backslashreplace").replace(b"\n", b" ")
                _write(report_fd, b"R" + line + b"\n")
            except _exception:
                pass  # a full or closed report pipe must not let the call through
        raise error(message)

    def path_text(obj: object, event: str) -> str | None:
        """The path ``obj`` names as a str, or None for a file descriptor."""
        kind = _type(obj)
        if kind is _str:
            return obj  # type: ignore[return-value]
        if kind is _bytes:
            return obj.decode("utf-8", "surrogateescape")  # type: ignore[attr-defined, no-any-return]
        if kind is _int or _issubclass(kind, _int):
            return None
        if _issubclass(kind, _str):  # copy the characters without calling the subclass
            return "".join((obj,))  # type: ignore[arg-type]
        if _issubclass(kind, _bytes):
            return b"".join((obj,)).decode("utf-8", "surrogateescape")  # type: ignore[arg-type]
        for path_type in _path_types:
            if kind is path_type:
                return pathlib_text(obj, event)
        refuse(f"sandbox: {event} got a path that is not a str or a pathlib.Path; pass a str")
        return None

    def pathlib_text(obj: object, event: str) -> str:
        # os.* events carry the converted str, but a few (sqlite3.connect) carry the object the
        # caller passed. Its text was computed by PurePath.__str__, which caches it in the
        # ``_str`` slot: read the slot directly once the methods involved are checked unchanged.
        for namespace, name, original in _path_guards:
            if namespace.get(name, None) is not original:
                refuse(f"sandbox: pathlib.{name} was replaced; pass paths as str")
        if _str_slot is None:
            refuse(f"sandbox: {event} needs the path as a str in this Python version")
        try:
            text = _str_slot.__get__(obj, None)
        except _attribute_error:
            text = None
        if _type(text) is not _str:
            refuse(f"sandbox: {event} got a pathlib.Path that was never formatted; pass str(path)")
        return text  # type: ignore[no-any-return]

    def fd_path(fd: int) -> str | None:
        try:
            target = _readlink(f"/proc/self/fd/{fd}")
        except _os_error:
            return None
        return target if target.startswith("/") else None  # pipes and sockets are not paths

    def resolve(path: str) -> str:
        """``os.path.realpath`` from C calls only: symlinks and ``..`` resolved, absolute."""
        if not path.startswith("/"):
            path = _getcwd() + "/" + path
        todo = path.split("/")
        todo.reverse()
        out: list[str] = []
        hops = 0
        while todo:
            name = todo.pop()
            if name == "" or name == ".":
                continue
            if name == "..":
                if out:
                    out.pop()
                continue
            out.append(name)
            here = "/" + "/".join(out)
            try:
                mode = _lstat(here).st_mode
            except _os_error:
                continue  # does not exist (yet): keep the name as written
            if not _s_islnk(mode):
                continue
            hops += 1
            if hops > 40:
                refuse(f"sandbox: too many symbolic links in {path!r}")
            out.pop()
            try:
                target = _readlink(here)
            except _os_error:
                out.append(name)
                continue
            if target.startswith("/"):
                out = []
            parts = target.split("/")
            parts.reverse()
            todo.extend(parts)
        return "/" + "/".join(out)

    def target(obj: object, dir_fd: object, event: str) -> str | None:
        """The resolved path an os call acts on, or None when it is not a file system path."""
        text = path_text(obj, event)
        if text is None:
            return fd_path(obj)  # type: ignore[arg-type]
        if not text.startswith("/") and _type(dir_fd) is _int and dir_fd >= 0:  # type: ignore[operator]
            base = fd_path(dir_fd)  # type: ignore[arg-type]
            if base is None:
                refuse(f"sandbox: {event} with dir_fd={dir_fd} is not allowed")
            text = f"{base}/{text}"
        return resolve(text)

    def writable(path: str) -> bool:
        return path in _write_files or (path + "/").startswith(_write_prefixes)

    def readable(path: str) -> bool:
        return path in _read_files or (path + "/").startswith(_read_prefixes)

    def check_write(path: str | None, what: str) -> None:
        if path is not None and not writable(path):
            refuse(
                f"sandbox: cannot {what} {path!r}: the workspace {_workspace!r} is the only "
                "writable place; use a path inside it"
            )

    def check_read(path: str | None, what: str) -> None:
        if path is not None and not readable(path):
            refuse(
                f"sandbox: cannot {what} {path!r}: only the workspace {_workspace!r}, the read "
                "roots and the Python installation are readable"
            )

    def on_open(args: tuple[Any, ...]) -> None:
        raw, mode, flags = args[0], args[1], args[2]
        text = path_text(raw, "open")
        if text is None:
            return  # an open file descriptor: it was checked when it was opened
        if mode is None and not text.startswith("/") and ".." in text.split("/"):
            # os.open's audit event does not carry dir_fd, so a relative '..' cannot be placed
            refuse(f"sandbox: os.open({text!r}) with '..' is not allowed; use an absolute path")
        path = resolve(text)
        if flags & _o_write:
            check_write(path, "write")
        else:
            check_read(path, "read")
        try:
            mode_bits = _lstat(path).st_mode
        except _os_error:
            return
        if (_s_ischr(mode_bits) or _s_isblk(mode_bits)) and path not in _read_files:
            refuse(f"sandbox: cannot open the device {path!r}")
        if mode is None and _s_isdir(mode_bits) and not writable(path):
            refuse(
                f"sandbox: cannot open the directory {path!r} as a file descriptor: only "
                "directories inside the workspace can be"
            )

    def on_symlink(args: tuple[Any, ...]) -> None:
        link = target(args[1], args[2], "os.symlink")
        check_write(link, "create the link")
        text = path_text(args[0], "os.symlink")
        if text is None or link is None:
            refuse("sandbox: os.symlink needs path names")
            return
        if not text.startswith("/"):
            text = link.rsplit("/", 1)[0] + "/" + text
        pointee = resolve(text)
        if not writable(pointee):
            refuse(
                f"sandbox: cannot create a link to {pointee!r}: links may only point inside "
                f"the workspace {_workspace!r}"
            )

    def on_sqlite(args: tuple[Any, ...]) -> None:
        text = path_text(args[0], "sqlite3.connect")
        if text is None or text == "" or text == ":memory:" or text.startswith("file::memory:"):
            return
        if text.startswith("file:"):
            if "%" in text:
                refuse("sandbox: sqlite3 URIs with %-escapes are not allowed")
            text = text[5:].split("?", 1)[0]
            if text.startswith("//"):
                text = "/" + text[2:].partition("/")[2]  # drop the (empty) authority
        check_write(resolve(text), "open the database")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            on_open(args)
        elif event == "import":
            name = args[0]
            if _type(name) is not _str:  # a str subclass could lie about its hash and equality
                name = "".join((name,))
            if name in _denied_modules:
                refuse(
                    f"sandbox: importing {name!r} is not allowed: it could get around the sandbox",
                    _import_error,
                    name not in _quiet_modules,
                )
        elif event in _path_read_events:
            path = args[0]
            check_read(resolve(_getcwd()) if path is None else target(path, -1, event), "list")
        elif event == "os.remove" or event == "os.rmdir":
            check_write(target(args[0], args[1], event), "remove")
        elif event == "os.mkdir":
            check_write(target(args[0], args[2], event), "create the directory")
        elif event == "os.chmod" or event == "os.utime":
            check_write(
                target(args[0], args[2] if event == "os.chmod" else args[3], event), "change"
            )
        elif event == "os.chown":
            check_write(target(args[0], args[3], event), "change the owner of")
        elif event == "os.truncate" or event == "os.setxattr" or event == "os.removexattr":
            check_write(target(args[0], -1, event), "change")
        elif event == "os.rename" or event == "os.link":
            check_write(target(args[0], args[2], event), "move or link")
            check_write(target(args[1], args[3], event), "move or link to")
        elif event == "os.symlink":
            on_symlink(args)
        elif event == "sqlite3.connect":
            on_sqlite(args)
        elif event in _process_events:
            refuse(
                f"sandbox: cannot start a process ({event}): running other programs is not "
                "allowed; do the work in Python in this process"
            )
        elif event.startswith("socket."):
            if event not in _allowed_socket_events:
                refuse(f"sandbox: no network access ({event}): the code runs offline")
        elif event.startswith("ctypes."):
            refuse(f"sandbox: {event} is not allowed: ctypes could get around the sandbox")
        elif event == "os.kill" or event == "os.killpg":
            pid = args[0]
            if not (pid == _pid or pid == 0 or pid == -_pid):
                refuse(f"sandbox: cannot signal process {pid}: only this process can be")
        elif event in _denied_events:
            refuse(f"sandbox: {event} is not allowed in the sandbox")

    return hook


def _prefix(path: str) -> str:
    return path.rstrip("/") + "/"


def _prefixes(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(_prefix(path) for path in paths)


def _pathlib_guards(
    pathlib: types.ModuleType,
) -> tuple[tuple[type, ...], tuple[tuple[Any, str, Any], ...], Any]:
    """The concrete path classes, the class attributes a path's text depends on (with their
    values now, before any guarded code ran), and PurePath's ``_str`` slot if it has one."""
    classes = tuple(
        getattr(pathlib, name) for name in ("PosixPath", "PurePosixPath") if hasattr(pathlib, name)
    )
    guards: list[tuple[Any, str, Any]] = []
    seen: set[type] = set()
    for cls in classes:
        for base in cls.__mro__:
            if base is object or base in seen:
                continue
            seen.add(base)
            namespace = base.__dict__
            for name in ("__fspath__", "__str__", "__getattribute__", "_str"):
                guards.append((namespace, name, namespace.get(name)))
    slot = None
    for cls in classes:
        for base in cls.__mro__:
            candidate = base.__dict__.get("_str")
            if candidate is not None and type(candidate).__name__ == "member_descriptor":
                slot = candidate
                break
        if slot is not None:
            break
    return classes, tuple(guards), slot


# --- Landlock ---------------------------------------------------------------------------------

_SYS_LANDLOCK_CREATE_RULESET = 444  # the same number on every architecture (asm-generic)
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_PR_SET_NO_NEW_PRIVS = 38
_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_BLOCK = 1 << 11
_FS_REFER = 1 << 13  # ABI 2
_FS_TRUNCATE = 1 << 14  # ABI 3
_FS_IOCTL_DEV = 1 << 15  # ABI 5
_NET_TCP = (1 << 0) | (1 << 1)  # bind and connect, ABI 4
_SCOPE_ALL = (1 << 0) | (1 << 1)  # abstract unix sockets and signals, ABI 6


def _libc() -> tuple[Any, Any] | None:
    """libc's ``syscall`` and ``prctl`` through ctypes; None without ctypes."""
    try:
        import ctypes
    except ImportError:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    return syscall, prctl


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers, 0 when it has none; restricts nothing."""
    found = _libc()
    if found is None:
        return 0
    import ctypes

    c_long = ctypes.c_long
    abi = int(found[0](c_long(_SYS_LANDLOCK_CREATE_RULESET), None, c_long(0), c_long(1)))
    return max(abi, 0)


def apply_landlock(
    *,
    writable_dirs: Iterable[str],
    readable_dirs: Iterable[str],
    readable_files: Iterable[str],
    writable_files: Iterable[str],
) -> int:
    """Restrict this process with Landlock; the ABI version applied, or 0 when unavailable."""
    found = _libc()
    if found is None:
        return 0
    import ctypes

    syscall, prctl = found
    c_long = ctypes.c_long
    abi = int(syscall(c_long(_SYS_LANDLOCK_CREATE_RULESET), None, c_long(0), c_long(1)))
    if abi < 1:
        return 0
    handled_fs = (1 << 13) - 1
    if abi >= 2:
        handled_fs |= _FS_REFER
    if abi >= 3:
        handled_fs |= _FS_TRUNCATE
    if abi >= 5:
        handled_fs |= _FS_IOCTL_DEV
    file_rights = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV

    class RulesetAttr(ctypes.Structure):
        _fields_ = (
            ("handled_access_fs", ctypes.c_uint64),
            ("handled_access_net", ctypes.c_uint64),
            ("scoped", ctypes.c_uint64),
        )

    class PathBeneathAttr(ctypes.Structure):
        _pack_ = 1
        _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))

    attr = RulesetAttr(handled_fs, _NET_TCP if abi >= 4 else 0, _SCOPE_ALL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = int(
        syscall(c_long(_SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr), c_long(size), c_long(0))
    )
    if ruleset < 0:
        return 0
    read = _FS_READ_FILE | _FS_READ_DIR
    write = handled_fs & ~(_FS_EXECUTE | _FS_MAKE_CHAR | _FS_MAKE_BLOCK | _FS_IOCTL_DEV)
    rules = [(path, write) for path in writable_dirs]
    rules += [(path, read) for path in (*readable_dirs, *readable_files)]
    rules += [(path, _FS_READ_FILE | _FS_WRITE_FILE | _FS_TRUNCATE) for path in writable_files]
    try:
        for path, access in rules:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(f"/proc/self/fd/{fd}"):
                    access &= file_rights
                rule = PathBeneathAttr(access & handled_fs, fd)
                syscall(
                    c_long(_SYS_LANDLOCK_ADD_RULE),
                    c_long(ruleset),
                    c_long(1),
                    ctypes.byref(rule),
                    c_long(0),
                )
            finally:
                os.close(fd)
        if prctl(_PR_SET_NO_NEW_PRIVS, c_long(1), c_long(0), c_long(0), c_long(0)) != 0:
            return 0
        if syscall(c_long(_SYS_LANDLOCK_RESTRICT_SELF), c_long(ruleset), c_long(0)) != 0:
            return 0
    finally:
        os.close(ruleset)
    return abi


# --- setup and run ----------------------------------------------------------------------------


def _real(path: str) -> str:
    return os.path.realpath(path)


def python_dirs() -> list[str]:
    """The trees the interpreter imports from: ``sys.path`` entries inside the installation(s)
    and the sysconfig library directories, resolved."""
    prefixes = {
        _prefix(_real(p))
        for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        if _real(p) != "/"
    }
    dirs = [
        _real(entry)
        for entry in sys.path
        if entry and _prefix(_real(entry)).startswith(tuple(prefixes))
    ]
    paths = sysconfig.get_paths()
    dirs += [
        _real(paths[key]) for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths
    ]
    return list(dict.fromkeys(dirs))


def zoneinfo_dirs() -> list[str]:
    tzpath = sysconfig.get_config_var("TZPATH") or ""
    return [_real(p) for p in str(tzpath).split(os.pathsep) if p and os.path.isdir(p)]


def _set_limits(memory_mb: int, cpu_s: int, file_mb: int, nofile: int) -> None:
    def cap(kind: int, value: int) -> None:
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large write raises OSError instead
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_NOFILE, nofile)
    cap(resource.RLIMIT_FSIZE, file_mb * 1024 * 1024)
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    cpu_soft = cpu_s if cpu_hard == resource.RLIM_INFINITY else min(cpu_s, cpu_hard)
    cpu_hard_new = cpu_soft + 1 if cpu_hard == resource.RLIM_INFINITY else cpu_hard
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_soft, cpu_hard_new))
    cap(resource.RLIMIT_AS, memory_mb * 1024 * 1024)


def _stub_posixsubprocess(report_fd: int) -> None:
    """Put a stub in place of ``_posixsubprocess``: its ``fork_exec`` starts processes without
    an audit event, so the real module must never load (its import is refused too)."""
    message = (
        "sandbox: cannot start a process (_posixsubprocess.fork_exec): running other programs "
        "is not allowed; do the work in Python in this process"
    )
    write, line = os.write, b"R" + message.encode() + b"\n"

    def fork_exec(*args: object, **kwargs: object) -> None:
        try:
            write(report_fd, line)
        except OSError:
            pass
        raise PermissionError(message)

    stub = types.ModuleType("_posixsubprocess", "sandbox stub: starting processes is refused")
    stub.fork_exec = fork_exec  # type: ignore[attr-defined]
    sys.modules["_posixsubprocess"] = stub


def _narrow_imports(workspace: str, dirs: Sequence[str]) -> None:
    from importlib.machinery import BuiltinImporter, FrozenImporter, PathFinder

    allowed = tuple(_prefix(d) for d in dirs)
    sys.path[:] = [workspace] + [
        entry for entry in sys.path if entry and _prefix(_real(entry)).startswith(allowed)
    ]
    sys.meta_path[:] = [
        finder
        for finder in sys.meta_path
        if finder in (BuiltinImporter, FrozenImporter, PathFinder)
    ]
    sys.path_importer_cache.clear()


def _print_exception(error: BaseException) -> None:
    """The traceback as ``python file.py`` prints it, without the runner's own frames."""
    runner = os.path.abspath(__file__)
    formatted = traceback.TracebackException(
        type(error), error, error.__traceback__, lookup_lines=False
    )
    pending = [formatted]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        frames = [frame for frame in current.stack if frame.filename != runner]
        current.stack = traceback.StackSummary.from_list(frames)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    sys.stderr.write("".join(formatted.format()))


_MEMORY_MARK = b"M\n"


def main(argv: Sequence[str]) -> int:
    config = json.loads(argv[1])
    report_fd = int(config["report_fd"])
    os.set_blocking(report_fd, False)
    source = sys.stdin.buffer.read().decode("utf-8", "replace")
    sys.stdin.close()
    sys.stdin = open(os.devnull, encoding="utf-8")

    workspace = _real(config["cwd"])
    scratch = _real(config["scratch"])
    read_roots = [_real(p) for p in config["read_roots"]]
    runner_file = _real(__file__)
    interpreter = python_dirs()
    zones = zoneinfo_dirs()

    abi = 0
    if config["landlock"]:
        abi = apply_landlock(
            writable_dirs=(workspace, scratch),
            readable_dirs=(*read_roots, *interpreter, *zones, *SYSTEM_LIBRARY_DIRS),
            readable_files=(runner_file, *READABLE_DEVICES, *SYSTEM_LIBRARY_FILES),
            writable_files=WRITABLE_DEVICES,
        )
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    os.write(report_fd, f"L{abi}\n".encode())
    if config["landlock"] and abi == 0:
        os.write(report_fd, b"FLandlock was chosen but this kernel did not apply it\n")
        return 70

    _set_limits(
        int(config["memory_mb"]),
        int(config["cpu_s"]),
        int(config["file_mb"]),
        int(config["nofile"]),
    )
    os.chdir(workspace)
    _narrow_imports(workspace, interpreter)
    _stub_posixsubprocess(report_fd)
    module = types.ModuleType("__main__")
    module.__file__ = CODE_FILENAME
    sys.modules["__main__"] = module
    sys.argv = [CODE_FILENAME]
    linecache.cache[CODE_FILENAME] = (len(source), None, source.splitlines(True), CODE_FILENAME)

    if config["audit_hook"]:
        sys.addaudithook(
            build_hook(
                workspace=workspace,
                writable_dirs=(workspace, scratch),
                readable_dirs=(*read_roots, *interpreter, *zones),
                readable_files=(runner_file, *READABLE_DEVICES),
                writable_files=WRITABLE_DEVICES,
                report_fd=report_fd,
            )
        )
    try:
        exec(compile(source, CODE_FILENAME, "exec"), module.__dict__)
    except MemoryError:
        try:
            os.write(report_fd, _MEMORY_MARK)
        except OSError:
            pass
        module.__dict__.clear()
        limit = config["memory_mb"]
        sys.stderr.write(f"MemoryError: the code went over the memory limit of {limit} MB\n")
        return 1
    except Exception as error:
        _print_exception(error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
