"""actline.tools.sandbox.sandbox.run_python on real child interpreters: results, limits and
confinement.

Every test runs real code in a real child, once under each kernel layer (Landlock, bubblewrap;
a layer this machine lacks is not run: ``test_sandbox_layers.py`` checks it is refused).
Escapes are checked twice: the result names the refusal, and the file system shows that
nothing happened outside the workspace. The escape attempts aimed at the node itself are in
``test_sandbox_escape.py``.
"""

from __future__ import annotations

import asyncio
import dis
import os
import pickle
import signal
import socket
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.tools.sandbox import runner as _sandbox_runner
from actline.tools.sandbox.confinement import Confinement
from actline.tools.sandbox.sandbox import ExecResult, SandboxError, run_python

from .sandbox_modes import AVAILABLE, available_layer, running

WRITE_ONLY_WORKSPACE = "the only writable place"
_layer: dict[str, Confinement] = {}


@pytest.fixture(params=AVAILABLE)
def ws(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The workspace of a test run under the kernel layer of this parameter."""
    _layer["current"] = available_layer(request.param)
    path = tmp_path / "ws"
    path.mkdir()
    return path.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text("top secret")
    return path


async def run(code: str, ws: Path, **kw: object) -> ExecResult:
    kw.setdefault("timeout_s", 20.0)
    kw.setdefault("sandbox", _layer["current"])
    return await run_python(code, cwd=ws, **kw)  # type: ignore[arg-type]


def refused_with(result: ExecResult, fragment: str) -> bool:
    return any(fragment in message for message in result.refused) and fragment in result.stderr


# --- results ----------------------------------------------------------------------------------


async def test_code_prints_and_writes_a_file_in_the_workspace(ws: Path) -> None:
    code = "import json, csv, math\nprint(json.dumps({'pi': round(math.pi, 2)}))\n"
    code += "with open('out.csv', 'w', newline='') as f:\n    csv.writer(f).writerow([1, 2])\n"
    result = await run(code, ws)
    assert result.ok and result.exit_code == 0
    assert result.stdout == '{"pi": 3.14}\n' and result.stderr == ""
    assert (ws / "out.csv").read_bytes() == b"1,2\r\n"
    assert result.refused == () and not result.timed_out and not result.truncated
    assert result.duration_s > 0 and result.confinement == _layer["current"].mode


async def test_the_code_itself_is_not_written_into_the_workspace(ws: Path) -> None:
    result = await run("import os\nprint(sorted(os.listdir('.')))", ws)
    assert result.stdout == "[]\n"
    assert os.listdir(ws) == []


async def test_the_code_runs_as_main_and_can_import_a_module_it_wrote(ws: Path) -> None:
    code = "open('helper.py', 'w').write('X = 42\\n')\nimport helper\n"
    code += "if __name__ == '__main__':\n    print(helper.X, __file__)"
    result = await run(code, ws)
    assert result.stdout == "42 <code>\n"


async def test_an_uncaught_exception_exits_1_with_the_code_s_traceback(ws: Path) -> None:
    result = await run("def f():\n    raise ValueError('boom')\n\nf()\n", ws)
    assert result.exit_code == 1 and not result.ok
    assert result.stderr.startswith("Traceback (most recent call last):\n")
    assert 'File "<code>", line 4, in <module>' in result.stderr
    assert "raise ValueError('boom')" in result.stderr
    assert result.stderr.endswith("ValueError: boom\n")
    assert "_sandbox_runner" not in result.stderr


async def test_a_syntax_error_is_reported_like_python_does(ws: Path) -> None:
    result = await run("def (:\n", ws)
    assert result.exit_code == 1
    assert 'File "<code>", line 1' in result.stderr and "SyntaxError" in result.stderr


async def test_sys_exit_sets_the_exit_code(ws: Path) -> None:
    result = await run("import sys\nprint('bye')\nsys.exit(3)", ws)
    assert result.exit_code == 3 and result.stdout == "bye\n" and not result.ok


async def test_stdin_is_empty_and_output_is_utf8(ws: Path) -> None:
    result = await run("import sys\nprint(repr(sys.stdin.read()), 'héllo ✓')", ws)
    assert result.stdout == "'' héllo ✓\n"


async def test_output_over_the_cap_is_cut_and_flagged(ws: Path) -> None:
    code = "import sys\nsys.stdout.write('x' * 3_000_000)\nsys.stderr.write('e' * 10)"
    result = await run(code, ws, max_output_chars=1000)
    assert result.ok and result.truncated
    assert result.stdout == "x" * 1000 and result.stderr == "e" * 10


async def test_threads_and_asyncio_work_inside(ws: Path) -> None:
    code = (
        "import asyncio, threading\n"
        "out = []\n"
        "threads = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "async def main():\n    return sum(out)\n"
        "print(asyncio.run(main()))\n"
    )
    result = await run(code, ws)
    assert result.ok and result.stdout == "6\n" and result.refused == ()


async def test_sqlite_works_in_the_workspace_and_not_outside(ws: Path, outside: Path) -> None:
    code = (
        "import sqlite3\n"
        "db = sqlite3.connect('data.db')\n"
        "db.execute('create table t(x)')\ndb.execute('insert into t values (7)')\ndb.commit()\n"
        "print(db.execute('select x from t').fetchone()[0])\n"
        f"sqlite3.connect({str(outside / 'x.db')!r})\n"
    )
    result = await run(code, ws)
    assert result.stdout == "7\n" and (ws / "data.db").exists()
    assert refused_with(result, "cannot open the database")
    assert not (outside / "x.db").exists()


# --- limits -----------------------------------------------------------------------------------


async def test_an_endless_loop_is_killed_at_the_timeout_with_its_group(ws: Path) -> None:
    result = await run("import os\nprint(os.getpid())\nwhile True:\n    pass\n", ws, timeout_s=2)
    assert result.timed_out and result.exit_code is None and not result.ok
    assert int(result.stdout) > 0
    assert running(ws) == []  # output is read to its end: the run's processes are gone


async def test_a_sleeping_child_is_killed_at_the_timeout(ws: Path) -> None:
    code = "import os, time\nprint(os.getpid())\ntime.sleep(600)\nprint('woke')\n"
    result = await run(code, ws, timeout_s=2)
    assert result.timed_out and "woke" not in result.stdout
    assert running(ws) == []  # output is read to its end: the run's processes are gone


async def test_a_run_ended_by_a_signal_reports_the_signal(ws: Path) -> None:
    # Under bubblewrap this arrives as exit status 128 + 15 and is read back as the signal
    # (the same path turns a CPU-limit SIGXCPU into a timeout).
    result = await run("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", ws)
    assert result.exit_code == -signal.SIGTERM and not result.ok and not result.timed_out


async def test_allocating_past_the_memory_limit_is_reported(ws: Path) -> None:
    result = await run("block = bytearray(1024 ** 3)\nprint('allocated')", ws, memory_mb=256)
    assert result.memory_exceeded and not result.ok and result.exit_code == 1
    assert "memory limit of 256 MB" in result.stderr and result.stdout == ""


async def test_a_memory_error_the_code_catches_is_not_reported(ws: Path) -> None:
    code = "try:\n    bytearray(1024 ** 3)\nexcept MemoryError:\n    print('handled')\n"
    result = await run(code, ws, memory_mb=256)
    assert result.ok and result.stdout == "handled\n" and not result.memory_exceeded


async def test_cancelling_the_run_kills_the_child(ws: Path) -> None:
    # The child keeps the FIFO open until it dies: end of file on it is the event.
    fifo = ws / "started"
    os.mkfifo(fifo)
    code = "import os, time\nf = open('started', 'w')\nf.write(f'{os.getpid()}\\n')\nf.flush()\n"
    code += "time.sleep(600)\n"
    task = asyncio.create_task(run(code, ws, timeout_s=300))
    with await asyncio.to_thread(open, fifo, "rb") as pipe:
        assert int(await asyncio.to_thread(pipe.readline)) > 0  # the child is running
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with asyncio.timeout(5.0):
            assert await asyncio.to_thread(pipe.read) == b""  # every writer is gone


# --- the environment ------------------------------------------------------------------------


async def test_the_parent_environment_does_not_leak(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-very-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "also-secret")
    code = "import os\nfor k in sorted(os.environ): print(k, os.environ[k])"
    result = await run(code, ws, env={"GREETING": "hello"})
    assert "secret" not in result.stdout
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines())
    assert lines["HOME"] == str(ws) and lines["GREETING"] == "hello"
    assert "ANTHROPIC_API_KEY" not in lines and "PATH" in lines


async def test_the_parent_environment_cannot_be_read_through_proc(ws: Path) -> None:
    result = await run("import os\nprint(open(f'/proc/{os.getppid()}/environ').read())", ws)
    assert result.exit_code == 1 and result.stdout == ""
    assert refused_with(result, "/environ")


async def test_temp_files_go_to_a_private_dir_that_is_removed(ws: Path) -> None:
    code = "import tempfile\nwith tempfile.NamedTemporaryFile(delete=False) as f:\n"
    code += "    f.write(b'x')\nprint(f.name)\n"
    result = await run(code, ws)
    assert result.ok
    temp_file = Path(result.stdout.strip())
    assert not temp_file.is_relative_to(ws) and not temp_file.parent.exists()


# --- confinement --------------------------------------------------------------------------------


async def test_writing_a_parent_relative_path_is_refused(ws: Path, tmp_path: Path) -> None:
    result = await run("open('../escape.txt', 'w').write('x')", ws)
    assert result.exit_code == 1 and refused_with(result, WRITE_ONLY_WORKSPACE)
    assert "escape.txt" in result.refused[0]
    assert not (tmp_path / "escape.txt").exists()


async def test_writing_an_absolute_path_outside_is_refused(ws: Path, outside: Path) -> None:
    target = outside / "abs.txt"
    result = await run(f"open({str(target)!r}, 'a').write('x')", ws)
    assert refused_with(result, f"cannot write {str(target)!r}")
    assert not target.exists()


async def test_writing_through_a_symlink_that_points_outside_is_refused(
    ws: Path, outside: Path
) -> None:
    (ws / "link").symlink_to(outside)
    result = await run("open('link/new.txt', 'w').write('x')", ws)
    assert refused_with(result, str(outside / "new.txt"))
    assert not (outside / "new.txt").exists()


async def test_creating_a_symlink_that_points_outside_is_refused(ws: Path, outside: Path) -> None:
    result = await run(f"import os\nos.symlink({str(outside)!r}, 'out')", ws)
    assert refused_with(result, "links may only point inside the workspace")
    assert not (ws / "out").is_symlink()


async def test_removing_or_moving_a_file_outside_is_refused(ws: Path, outside: Path) -> None:
    secret = outside / "secret.txt"
    remove = await run(f"import os\nos.remove({str(secret)!r})", ws)
    move = await run(f"import os\nos.rename({str(secret)!r}, 'stolen.txt')", ws)
    assert refused_with(remove, "cannot remove") and refused_with(move, "cannot move or link")
    assert secret.read_text() == "top secret" and not (ws / "stolen.txt").exists()


async def test_changing_the_directory_does_not_widen_the_workspace(
    ws: Path, tmp_path: Path
) -> None:
    result = await run(f"import os\nos.chdir({str(tmp_path)!r})\nopen('x.txt', 'w')", ws)
    assert refused_with(result, WRITE_ONLY_WORKSPACE)
    assert not (tmp_path / "x.txt").exists()


async def test_reading_or_listing_another_directory_is_refused(ws: Path, outside: Path) -> None:
    read = await run(f"print(open({str(outside / 'secret.txt')!r}).read())", ws)
    listing = await run(f"import os\nprint(os.listdir({str(outside)!r}))", ws)
    assert refused_with(read, "cannot read") and "top secret" not in read.stdout
    assert refused_with(listing, "cannot list") and "secret.txt" not in listing.stdout


async def test_read_roots_can_be_read_but_not_written(ws: Path, outside: Path) -> None:
    secret = str(outside / "secret.txt")
    code = f"import os\nprint(open({secret!r}).read(), os.listdir({str(outside)!r}))\n"
    code += f"open({str(outside / 'new.txt')!r}, 'w')"
    result = await run(code, ws, read_roots=[outside])
    assert result.stdout == "top secret ['secret.txt']\n"
    assert refused_with(result, WRITE_ONLY_WORKSPACE) and not (outside / "new.txt").exists()


async def test_directory_descriptors_outside_the_workspace_are_refused(
    ws: Path, outside: Path
) -> None:
    # A directory fd outside would let dir_fd-relative calls (whose audit events do not say
    # where they act) write there; so would a relative '..' in os.open.
    code = f"import os\nos.open({str(outside)!r}, os.O_RDONLY)"
    opened = await run(code, ws, read_roots=[outside])
    climbed = await run("import os\nos.open('../x.txt', os.O_CREAT | os.O_WRONLY)", ws)
    assert refused_with(opened, "as a file descriptor")
    assert refused_with(climbed, "with '..' is not allowed")
    inside = await run("import os\nos.mkdir('d')\nos.close(os.open('d', os.O_RDONLY))", ws)
    assert inside.ok


@pytest.mark.parametrize(
    ("code", "event"),
    [
        ("import subprocess\nsubprocess.run(['true'])", "subprocess.Popen"),
        ("import os\nos.system('true')", "os.system"),
        ("import os\nos.fork()", "os.fork"),
        ("import os\nos.execv('/bin/true', ['true'])", "os.exec"),
        (
            "import multiprocessing as mp\nmp.get_context('spawn').Process(target=print).start()",
            "_posixsubprocess.fork_exec",
        ),
    ],
    ids=["subprocess", "os.system", "fork", "exec", "multiprocessing"],
)
async def test_starting_a_process_is_refused(ws: Path, code: str, event: str) -> None:
    result = await run(code, ws)
    assert result.exit_code == 1
    assert refused_with(result, f"cannot start a process ({event})")


async def test_signalling_the_parent_is_refused(ws: Path) -> None:
    result = await run("import os\nos.kill(os.getppid(), 0)", ws)
    assert refused_with(result, "cannot signal process")


async def test_network_calls_are_refused(ws: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        listener.setblocking(False)
        code = f"import socket\nsocket.socket().connect(('127.0.0.1', {port}))"
        connect = await run(code, ws)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    lookup = await run("import socket\nsocket.getaddrinfo('localhost', 80)", ws)
    assert refused_with(connect, "no network access (socket.connect)")
    assert refused_with(lookup, "no network access (socket.getaddrinfo)")


@pytest.mark.parametrize(
    ("code", "fragment"),
    [
        ("import ctypes", "importing 'ctypes'"),
        ("import gc\ngc.get_objects()", "gc.get_objects is not allowed"),
        ("import sys\nsys.settrace(lambda *a: None)", "sys.settrace is not allowed"),
        (
            "import resource\nresource.setrlimit(resource.RLIMIT_AS, (-1, -1))",
            "resource.setrlimit is not allowed",
        ),
        (
            "import sys\ndel sys.modules['_posixsubprocess']\nimport _posixsubprocess",
            "importing '_posixsubprocess'",
        ),
        (
            "import sys\n"
            "class Name(str):\n"
            "    __hash__ = lambda self: 0\n"
            "    __eq__ = lambda self, other: False\n"
            "del sys.modules['_posixsubprocess']\n"
            "__import__(Name('_posixsubprocess'))",
            "importing '_posixsubprocess'",
        ),
    ],
    ids=["ctypes", "gc", "settrace", "setrlimit", "posixsubprocess", "lying-name"],
)
async def test_ways_around_the_hook_are_refused(ws: Path, code: str, fragment: str) -> None:
    result = await run(code, ws)
    assert result.exit_code == 1 and refused_with(result, fragment)


async def test_replacing_builtins_and_os_functions_does_not_switch_the_hook_off(
    ws: Path, outside: Path
) -> None:
    target = outside / "patched.txt"
    code = (
        "import builtins, os, posix\n"
        "builtins.PermissionError = KeyError\nbuiltins.isinstance = lambda *a: True\n"
        "posix.lstat = os.lstat = lambda *a: None\n"
        "os.path.realpath = lambda p: 'inside'\n"
        f"open({str(target)!r}, 'w')\n"
    )
    result = await run(code, ws)
    assert refused_with(result, WRITE_ONLY_WORKSPACE) and not target.exists()


async def test_the_kernel_stops_what_the_hook_cannot_see(ws: Path, outside: Path) -> None:
    # os.open's audit event has no dir_fd: the hook checks 'link/x.txt' against the working
    # directory, where no 'link' exists; the real open follows sub/link to the outside.
    # Landlock refuses it; under bubblewrap the outside is not there at all. (Without a
    # kernel layer this escapes: see test_sandbox_escape.py.)
    (ws / "sub").mkdir()
    (ws / "sub" / "link").symlink_to(outside)
    code = (
        "import os\nd = os.open('sub', os.O_RDONLY)\n"
        "fd = os.open('link/x.txt', os.O_CREAT | os.O_WRONLY, dir_fd=d)\nprint('escaped')"
    )
    result = await run(code, ws)
    assert result.exit_code == 1 and "escaped" not in result.stdout
    if result.confinement == "landlock":
        assert result.landlock_abi > 0 and "PermissionError: [Errno 13]" in result.stderr
    else:
        assert result.landlock_abi == 0 and "FileNotFoundError: [Errno 2]" in result.stderr
    assert not (outside / "x.txt").exists()


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def test_the_hook_looks_up_no_global_or_builtin_while_it_runs() -> None:
    inner = [
        c for c in _sandbox_runner.build_hook.__code__.co_consts if isinstance(c, types.CodeType)
    ]
    assert {"hook", "on_open", "resolve", "refuse", "path_text"} <= {c.co_name for c in inner}
    loads = [
        (code.co_name, ins.argval)
        for outer in inner
        for code in _code_objects(outer)
        for ins in dis.get_instructions(code)
        if ins.opname in {"LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL"}
    ]
    assert loads == []


def test_the_hook_refuses_writes_outside_without_running_in_a_child(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    hook = _sandbox_runner.build_hook(
        workspace=str(tmp_path),
        writable_dirs=[str(tmp_path)],
        readable_dirs=[],
        readable_files=[],
        writable_files=[],
        report_fd=write_fd,
    )
    hook("open", (str(tmp_path / "a.txt"), "w", os.O_WRONLY | os.O_CREAT))
    with pytest.raises(PermissionError, match="the only writable place"):
        hook("open", (str(tmp_path / ".." / "b.txt"), "w", os.O_WRONLY | os.O_CREAT))
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as report:
        assert report.read().startswith(b"Rsandbox: cannot write ")


# --- arguments ---------------------------------------------------------------------------------


async def test_a_missing_workspace_or_read_root_is_a_sandbox_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as missing:
        await run_python("print(1)", cwd=tmp_path / "nope")
    assert missing.value.code == "bad_cwd"
    with pytest.raises(SandboxError) as root:
        await run_python("print(1)", cwd=tmp_path, read_roots=[tmp_path / "nope"])
    assert root.value.code == "bad_read_root"
    with pytest.raises(SandboxError) as limit:
        await run_python("print(1)", cwd=tmp_path, memory_mb=1)
    assert limit.value.code == "bad_limit"


def test_a_sandbox_error_pickles_with_its_fields() -> None:
    error = pickle.loads(pickle.dumps(SandboxError("bad_cwd", "the workspace is missing")))
    assert (error.code, error.message) == ("bad_cwd", "the workspace is missing")
    assert str(error) == "bad_cwd: the workspace is missing"
