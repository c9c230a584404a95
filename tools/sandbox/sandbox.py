"""Run model-written Python in a confined child process.

``run_python`` starts ``python -I -B -u -X utf8 tools/sandbox/runner.py`` in its own session
(process group), with the workspace as working directory, a clean environment (``PATH``,
``LANG``, ``HOME`` = the workspace, ``TMPDIR`` = a private temp dir removed afterwards, plus the
caller's ``env``; nothing of the parent's, so no API keys) and the code on stdin. A kernel
layer, chosen once per process by ``actline.tools.sandbox.confinement`` (``ACTLINE_SANDBOX``,
reported in
``ExecResult.confinement``), sits under the runner's own confinement:

- ``landlock`` (``ExecResult.landlock_abi`` > 0): a kernel rule set that allows reading only the
  workspace, the read roots, the Python installation and the system libraries, writing only
  the workspace and the temp dir, executing nothing, and (ABI 4+) no TCP, (ABI 6+) no signals
  to processes outside.
- ``bwrap``: the runner starts inside bubblewrap, whose mount namespace holds only those same
  trees (the workspace and the temp dir the only writable ones, a private ``/tmp``), with no
  network, its own pids and no capabilities. Exit statuses above 128 are read as signals (the
  convention bubblewrap reports them with).
- ``unconfined``: only what follows. Asked for explicitly, never a fallback: without Landlock
  or bubblewrap, ``auto`` refuses to run code (``SandboxError("sandbox_unavailable")``).

The runner then confines itself before the code runs (see ``tools/sandbox/runner.py``):

- Resource limits: address space ``memory_mb``, CPU seconds ``timeout_s + 1``, 256 MB per file
  (``FILE_SIZE_LIMIT_MB``, never more than the write limit), 256 open files, no core dumps.
- An audit hook that refuses, with a ``PermissionError`` naming the path or event, writes
  outside the workspace, reads outside the allowed trees, new processes, network calls,
  ctypes, subinterpreters, tracing and ``gc`` introspection; each refusal is reported back in
  ``ExecResult.refused`` even when the code catches the error.

The parent holds the run to its write limit: ``write_limit_mb`` (``WRITE_LIMIT_MB``, 256 MB by
default) for all the files it adds to the workspace and the temp dir together, measured from
outside the child (``actline.tools.sandbox.write_limit`` says what counts and how often). A run
that goes over it is killed with its process group, the files and folders it created are
removed (what the workspace held before stays), and the result says ``write_limit_exceeded``,
with a line at the end of ``stderr`` naming the limit and ``write_limit_mb``.

Known limits: the audit hook lives inside the process it guards. It resists the easy ways of
switching it off (it looks up no global or builtin while it runs, and the interpreter features
that could reach into it are refused), but C code does file I/O without audit events: SQLite's
``ATTACH``, any compiled extension in the environment, ``os.mknod``. Only the kernel layer
confines those: under ``unconfined`` nothing does. UDP is refused by the hook only under
Landlock (bubblewrap has no network at all). Running as root weakens everything but the kernel
layer; bubblewrap also drops every capability.

Timeouts: after ``timeout_s`` of wall-clock time the whole process group gets SIGKILL and the
result says ``timed_out``. Output is read concurrently (a chatty child cannot block on a full
pipe) and each stream keeps its first ``max_output_chars`` characters.

Cancellation contract: cancelling ``run_python`` kills the process group and reaps the child
before ``CancelledError`` propagates; the temp dir is removed either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actline.tools.errors import ToolError

from .confinement import Confinement, bwrap_command, choose
from .write_limit import Unmeasurable, WriteWatch

__all__ = ["ExecResult", "SandboxError", "run_python"]

log = logging.getLogger(__name__)

RUNNER = Path(__file__).resolve().with_name("runner.py")
FILE_SIZE_LIMIT_MB = 256
WRITE_LIMIT_MB = 256
"""The default of ``write_limit_mb``: what one run may add to its workspace and temp dir."""
OPEN_FILES_LIMIT = 256
MIN_MEMORY_MB = 64
MAX_REFUSALS = 50
_REPORT_LIMIT_BYTES = 1_000_000
_DRAIN_GRACE_S = 5.0
_CHILD_PATH = "/usr/local/bin:/usr/bin:/bin"


class SandboxError(ToolError):
    """The sandbox could not run the code at all (a bad argument or a failed start).

    ``code`` is ``bad_cwd``, ``bad_read_root``, ``bad_limit``, ``start_failed``,
    ``sandbox_unavailable`` (no kernel layer as ``ACTLINE_SANDBOX`` asks; the message says what
    to install or set) or ``write_limit_unchecked`` (the parent could not measure what the run
    wrote, so it could not hold it to its write limit; a run is stopped for it). Code that runs
    and fails is not an error: it is an ``ExecResult`` with a non-zero exit code.
    """

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message))


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What one run did. ``exit_code`` is None when the sandbox killed the run (timeout, write
    limit); a negative value is the signal that ended it. ``refused`` lists what the sandbox
    blocked; ``write_limit_exceeded`` says it wrote more than ``write_limit_mb`` (the files it
    created are gone); ``confinement`` is the kernel layer it ran under (``landlock``,
    ``bwrap``, ``unconfined``)."""

    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    memory_exceeded: bool = False
    write_limit_exceeded: bool = False
    refused: tuple[str, ...] = ()
    truncated: bool = False
    landlock_abi: int = 0
    confinement: str = "unconfined"

    @property
    def ok(self) -> bool:
        """The code ran to the end and exited with 0."""
        return (
            self.exit_code == 0
            and not self.timed_out
            and not self.memory_exceeded
            and not self.write_limit_exceeded
        )


async def run_python(
    code: str,
    *,
    cwd: Path,
    timeout_s: float = 30.0,
    memory_mb: int = 512,
    write_limit_mb: int = WRITE_LIMIT_MB,
    read_roots: Sequence[Path] = (),
    max_output_chars: int = 50_000,
    env: Mapping[str, str] | None = None,
    sandbox: str | Confinement = "auto",
    audit_hook: bool = True,
) -> ExecResult:
    """Run ``code`` as ``__main__`` in a confined child whose working directory is ``cwd``.

    ``sandbox`` is an ``ACTLINE_SANDBOX`` mode or a ``Confinement`` already chosen.
    ``write_limit_mb`` is what the run may add to ``cwd`` and its temp dir together.
    ``audit_hook=False`` leaves the kernel layer alone in charge: tests use it to show what
    that layer stops by itself. Raises ``SandboxError`` when ``cwd`` or a read root is not an
    existing directory, a limit is out of range, the kernel layer asked for is unavailable, the
    interpreter cannot start, or what the run writes cannot be measured.
    """
    workspace = _existing_dir(cwd, "bad_cwd", "the workspace")
    roots = [_existing(root) for root in read_roots]
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise SandboxError("bad_limit", f"timeout_s must be a positive number, got {timeout_s}")
    if memory_mb < MIN_MEMORY_MB:
        raise SandboxError(
            "bad_limit", f"memory_mb must be at least {MIN_MEMORY_MB}, got {memory_mb}"
        )
    if write_limit_mb < 1:
        raise SandboxError("bad_limit", f"write_limit_mb must be at least 1, got {write_limit_mb}")
    if max_output_chars < 0:
        raise SandboxError(
            "bad_limit", f"max_output_chars must not be negative, got {max_output_chars}"
        )
    if not sys.executable:
        raise SandboxError("start_failed", "no Python interpreter to run (sys.executable is empty)")
    confinement = await asyncio.to_thread(choose, sandbox) if isinstance(sandbox, str) else sandbox
    if not confinement.usable:
        raise SandboxError("sandbox_unavailable", confinement.detail)
    scratch = _new_scratch()
    try:
        watch = WriteWatch((str(workspace), scratch), write_limit_mb * 1024 * 1024)
        try:
            await asyncio.to_thread(watch.start)
        except Unmeasurable as exc:
            raise SandboxError("write_limit_unchecked", _unchecked(exc.what, watch)) from None
        config = {
            "cwd": str(workspace),
            "scratch": scratch,
            "read_roots": [str(root) for root in roots],
            "memory_mb": memory_mb,
            "cpu_s": math.ceil(timeout_s) + 1,
            "file_mb": min(FILE_SIZE_LIMIT_MB, write_limit_mb),
            "nofile": OPEN_FILES_LIMIT,
            "landlock": confinement.mode == "landlock",
            "audit_hook": audit_hook,
        }
        child_env = {
            "PATH": _CHILD_PATH,
            "LANG": "C.UTF-8",
            "HOME": str(workspace),
            "TMPDIR": scratch,
            "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MB of address space per arena
            **(env or {}),
        }
        return await _run(
            code, confinement, workspace, config, child_env, watch, timeout_s, max_output_chars
        )
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)


class _Capture:
    """The first ``limit`` bytes of a stream; the rest is read and dropped."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = self.limit - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if len(chunk) > room:
                self.dropped = True

    def text(self, max_chars: int) -> tuple[str, bool]:
        text = self.data.decode("utf-8", "replace")
        if len(text) > max_chars:
            return text[:max_chars], True
        return text, self.dropped


async def _run(
    code: str,
    confinement: Confinement,
    workspace: Path,
    config: dict[str, Any],
    child_env: dict[str, str],
    watch: WriteWatch,
    timeout_s: float,
    max_chars: int,
) -> ExecResult:
    loop = asyncio.get_running_loop()
    read_fd, write_fd = os.pipe()
    report_pipe = os.fdopen(read_fd, "rb", buffering=0)
    config["report_fd"] = write_fd
    prefix: list[str] = []
    python = sys.executable
    if confinement.mode == "bwrap":
        prefix, python = bwrap_command(
            confinement,
            workspace=str(workspace),
            scratch=config["scratch"],
            read_roots=config["read_roots"],
        )
    argv = [*prefix, python, "-I", "-B", "-u", "-X", "utf8", str(RUNNER), json.dumps(config)]
    started = loop.time()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=workspace,
            env=child_env,
            start_new_session=True,
            pass_fds=(write_fd,),
        )
    except OSError as exc:
        report_pipe.close()
        raise SandboxError("start_failed", f"cannot start {argv[0]}: {exc}") from exc
    finally:
        os.close(write_fd)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    byte_limit = max_chars * 4  # UTF-8 needs at most 4 bytes a character
    out, err, report = _Capture(byte_limit), _Capture(byte_limit), _Capture(_REPORT_LIMIT_BYTES)
    timed_out = False
    try:
        async with asyncio.TaskGroup() as group:
            readers = {
                group.create_task(out.drain(proc.stdout)),
                group.create_task(err.drain(proc.stderr)),
                group.create_task(_drain_pipe(report, report_pipe)),
            }
            group.create_task(_feed(proc.stdin, code.encode("utf-8", "surrogatepass")))
            watcher = group.create_task(watch.watch(proc.pid, lambda: _kill_group(proc.pid)))
            try:
                async with asyncio.timeout(timeout_s):
                    await proc.wait()
            except TimeoutError:
                timed_out = True
            watcher.cancel()
            stopped = watch.exceeded  # the watcher killed the run
            _kill_group(proc.pid)  # the child on timeout; anything it left behind otherwise
            await proc.wait()
            _, pending = await asyncio.wait(readers, timeout=_DRAIN_GRACE_S)
            for task in pending:  # a pipe held open by a process outside the group
                task.cancel()
    finally:
        if proc.returncode is None:
            _kill_group(proc.pid)
            await proc.wait()
        report_pipe.close()
    duration = loop.time() - started
    returncode = proc.returncode
    if confinement.mode == "bwrap" and returncode is not None and 128 < returncode < 160:
        returncode = 128 - returncode  # bubblewrap's "128 + signal" of the child
    refused, memory, abi, failure = _parse_report(bytes(report.data))
    if failure:
        raise SandboxError("sandbox_unavailable", f"{confinement.mode}: {failure}")
    removed = await asyncio.to_thread(_settle, watch)
    if watch.problem:
        raise SandboxError("write_limit_unchecked", _unchecked(watch.problem, watch))
    timed_out = timed_out or returncode == -signal.SIGXCPU
    stdout, out_cut = out.text(max_chars)
    stderr, err_cut = err.text(max_chars)
    if watch.exceeded:
        separator = "" if stderr.endswith("\n") or not stderr else "\n"
        stderr += separator + _over_limit(watch, stopped, removed)
    result = ExecResult(
        exit_code=None if timed_out or stopped else returncode,
        stdout=stdout,
        stderr=stderr,
        duration_s=duration,
        timed_out=timed_out,
        memory_exceeded=memory,
        write_limit_exceeded=watch.exceeded,
        refused=refused,
        truncated=out_cut or err_cut,
        landlock_abi=abi,
        confinement=confinement.mode,
    )
    log.info(
        "sandbox run (%s): exit %s in %.3fs, timed_out=%s memory_exceeded=%s, wrote %d bytes "
        "(write_limit_exceeded=%s), %d refusals, stdout %d chars, stderr %d chars, landlock %d",
        confinement.mode,
        result.exit_code,
        duration,
        timed_out,
        memory,
        watch.written,
        watch.exceeded,
        len(refused),
        len(stdout),
        len(stderr),
        abi,
    )
    return result


def _settle(watch: WriteWatch) -> int:
    """Measure what the ended run left; when it went over its write limit, remove what it
    created. How many entries were removed."""
    try:
        if watch.problem or not watch.note(watch.measure()):
            return 0
        return watch.remove_new()
    except Unmeasurable as exc:
        watch.problem = exc.what
        return 0


def _over_limit(watch: WriteWatch, stopped: bool, removed: int) -> str:
    """The line that tells the code's author which limit ended the run and how to raise it."""
    limit_mb = watch.limit // (1024 * 1024)
    seen_mb = watch.written / (1024 * 1024)
    return (
        f"sandbox: the run wrote more than its write limit of {limit_mb} MB into its workspace "
        f"and temp dir (at least {seen_mb:.1f} MB){' and was stopped' if stopped else ''}; the "
        f"{removed} files and folders it created were removed. Write less, or raise "
        f"write_limit_mb ({WRITE_LIMIT_MB} MB by default).\n"
    )


def _unchecked(what: str, watch: WriteWatch) -> str:
    limit_mb = watch.limit // (1024 * 1024)
    return (
        f"{what}, so the write limit of {limit_mb} MB (write_limit_mb) cannot be checked; "
        "the code did not run or was stopped"
    )


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stdin.write(data)
        await stdin.drain()
        stdin.close()
        await stdin.wait_closed()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the child ended before reading all of its code; its exit status says why


async def _drain_pipe(capture: _Capture, pipe: Any) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        await capture.drain(reader)
    finally:
        transport.close()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _parse_report(data: bytes) -> tuple[tuple[str, ...], bool, int, str]:
    refused: list[str] = []
    seen: set[str] = set()
    extra = 0
    memory = False
    abi: int | None = None
    failure = ""
    lines = data.split(b"\n")
    if len(lines) > 1 and lines[0].startswith(b"L") and lines[1].startswith(b"F"):
        failure = lines[1][1:].decode("utf-8", "replace")  # the runner's, before the code ran
    for line in lines:
        if line.startswith(b"R"):
            message = line[1:].decode("utf-8", "replace")
            if message in seen:
                continue
            seen.add(message)
            if len(refused) < MAX_REFUSALS:
                refused.append(message)
            else:
                extra += 1
        elif line == b"M":
            memory = True
        elif line.startswith(b"L") and abi is None:
            with contextlib.suppress(ValueError):
                abi = int(line[1:])
    if extra:
        refused.append(f"... and {extra} more refusals")
    return tuple(refused), memory, abi or 0, failure


def _new_scratch() -> str:
    """A private temp dir, by its resolved name (bubblewrap binds it under that name)."""
    return os.path.realpath(tempfile.mkdtemp(prefix="actline-sandbox-"))


def _existing(path: Path) -> Path:
    try:
        resolved = Path(path).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise SandboxError(
            "bad_read_root", f"read root {str(path)!r} does not exist ({exc}); pass existing paths"
        ) from None
    return resolved


def _existing_dir(path: Path, code: str, what: str) -> Path:
    try:
        resolved = Path(path).resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise SandboxError(code, f"{what} {str(path)!r} does not exist ({exc})") from None
    if not resolved.is_dir():
        raise SandboxError(code, f"{what} {str(path)!r} is not a directory")
    return resolved
