"""The write limit of a sandbox run: real children under each kernel layer this machine has,
writing many files each under the per-file limit; then the measuring and the clean-up by
themselves on real folders."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from actline.tools.sandbox.confinement import Confinement
from actline.tools.sandbox.sandbox import (
    FILE_SIZE_LIMIT_MB,
    ExecResult,
    SandboxError,
    run_python,
)
from actline.tools.sandbox.write_limit import Unmeasurable, WriteWatch, scan

from .sandbox_modes import AVAILABLE, available_layer

LIMIT_MB = 4
LIMIT = LIMIT_MB * 1024 * 1024
CHUNK = 256 * 1024
"""Each file the runs write: far under the per-file limit (which the write limit caps)."""
WRITE_FOREVER = (
    "i = 0\nwhile True:\n"
    f"    with open(f'part{{i}}.bin', 'wb') as f:\n        f.write(b'x' * {CHUNK})\n"
    "    i += 1\n"
)
"""Only the write limit (or the timeout, which the tests keep far away) ends this run."""
_layer: dict[str, Confinement] = {}


@pytest.fixture(params=AVAILABLE)
def ws(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """The workspace of a run under the kernel layer of this parameter."""
    _layer["current"] = available_layer(request.param)
    path = tmp_path / "ws"
    path.mkdir()
    return path.resolve()


async def run(code: str, ws: Path, **kw: object) -> ExecResult:
    kw.setdefault("timeout_s", 60.0)
    kw.setdefault("write_limit_mb", LIMIT_MB)
    return await run_python(code, cwd=ws, sandbox=_layer["current"], **kw)  # type: ignore[arg-type]


def listing(folder: Path) -> dict[str, int]:
    """The size of each file in ``folder``, by name."""
    return {entry.name: entry.stat().st_size for entry in os.scandir(folder)}


def stopped_by_the_limit(result: ExecResult) -> bool:
    return result.write_limit_exceeded and not result.ok and not result.timed_out


# --- runs ---------------------------------------------------------------------------------------


async def test_many_files_each_under_the_file_limit_but_over_the_total_stop_the_run(
    ws: Path,
) -> None:
    assert CHUNK < LIMIT < FILE_SIZE_LIMIT_MB * 1024 * 1024
    (ws / "before.txt").write_text("kept")
    result = await run(WRITE_FOREVER, ws)
    assert stopped_by_the_limit(result) and result.exit_code is None
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"sandbox: the run wrote more than its write limit of {LIMIT_MB} MB")
    assert "raise write_limit_mb" in last and "and was stopped" in last
    assert sorted(os.listdir(ws)) == ["before.txt"]  # what it created went, nothing else
    assert (ws / "before.txt").read_text() == "kept"


async def test_a_run_just_under_the_total_succeeds_and_keeps_its_files(ws: Path) -> None:
    parts = LIMIT // CHUNK
    code = f"for i in range({parts}):\n"
    code += f"    open(f'part{{i}}.bin', 'wb').write(b'x' * ({CHUNK} - (i == {parts - 1})))\n"
    result = await run(code, ws)
    assert result.ok and not result.write_limit_exceeded and result.stderr == ""
    sizes = listing(ws)
    assert len(sizes) == parts and sum(sizes.values()) == LIMIT - 1


async def test_one_byte_over_the_total_fails_the_run_however_soon_it_ends(ws: Path) -> None:
    code = f"for i in range({LIMIT // CHUNK}):\n"
    code += f"    open(f'part{{i}}.bin', 'wb').write(b'x' * {CHUNK})\n"
    code += "open('last.bin', 'wb').write(b'x')\nprint('done')\n"
    result = await run(code, ws)
    assert result.write_limit_exceeded and not result.ok and not result.timed_out
    assert "write_limit_mb" in result.stderr.splitlines()[-1]
    assert os.listdir(ws) == []


async def test_what_the_workspace_held_before_the_run_does_not_count(ws: Path) -> None:
    (ws / "big.bin").write_bytes(b"x" * (LIMIT + CHUNK))
    result = await run(f"open('new.bin', 'wb').write(b'x' * {CHUNK})", ws)
    assert result.ok and listing(ws) == {"big.bin": LIMIT + CHUNK, "new.bin": CHUNK}


async def test_deleted_temp_files_the_run_holds_open_count(ws: Path) -> None:
    code = "import tempfile\nheld = []\nwhile True:\n    f = tempfile.TemporaryFile()\n"
    code += f"    f.write(b'x' * {CHUNK})\n    f.flush()\n    held.append(f)\n"
    result = await run(code, ws)
    assert stopped_by_the_limit(result) and os.listdir(ws) == []


async def test_files_from_before_stay_when_the_run_changed_or_moved_them(ws: Path) -> None:
    (ws / "log.txt").write_text("start\n")
    (ws / "data.csv").write_text("1,2\n")
    code = "import os\nopen('log.txt', 'a').write('more\\n')\nos.mkdir('moved')\n"
    code += "os.rename('data.csv', 'moved/data.csv')\nos.mkdir('junk')\nos.chdir('junk')\n"
    result = await run(code + WRITE_FOREVER, ws)
    assert stopped_by_the_limit(result)
    assert sorted(os.listdir(ws)) == ["log.txt", "moved"]
    assert (ws / "log.txt").read_text() == "start\nmore\n"  # changed in place, as after a timeout
    assert os.listdir(ws / "moved") == ["data.csv"]
    assert (ws / "moved" / "data.csv").read_text() == "1,2\n"


async def test_a_write_limit_under_one_mb_is_a_sandbox_error(tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as info:
        await run_python("print(1)", cwd=tmp_path, write_limit_mb=0)
    assert info.value.code == "bad_limit" and "write_limit_mb" in info.value.message


# --- measuring and cleaning up, without a child -----------------------------------------------


def test_a_hard_linked_file_counts_once_and_a_sparse_file_its_whole_length(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.bin").write_bytes(b"x" * 1000)
    os.link(tmp_path / "a.bin", tmp_path / "b.bin")
    with open(tmp_path / "sparse.bin", "wb") as file:
        file.truncate(5000)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.bin").write_bytes(b"x" * 10)
    (tmp_path / "link").symlink_to(tmp_path / "sub")  # not followed: c.bin counts once
    assert scan([str(tmp_path)]).size == 1000 + 5000 + 10


def test_removing_what_a_run_created_follows_no_link_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    ws = tmp_path / "ws"
    (ws / "old").mkdir(parents=True)
    (ws / "old" / "kept.txt").write_text("kept")
    watch = WriteWatch([str(ws)], LIMIT)
    watch.start()
    (ws / "old" / "new.txt").write_text("new")
    (ws / "new" / "deep").mkdir(parents=True)
    (ws / "new" / "deep" / "file.txt").write_text("new")
    (ws / "out").symlink_to(outside)
    os.link(ws / "old" / "kept.txt", ws / "new" / "same.txt")  # an inode from before: kept
    assert watch.remove_new() == 4  # old/new.txt, new/deep/file.txt, new/deep, out
    assert sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*")) == [
        "new",
        "new/same.txt",
        "old",
        "old/kept.txt",
    ]
    assert (outside / "secret.txt").read_text() == "secret"


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists every folder")
def test_a_folder_that_cannot_be_listed_makes_the_limit_unmeasurable(tmp_path: Path) -> None:
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    hidden.chmod(0)
    try:
        with pytest.raises(Unmeasurable) as info:
            scan([str(tmp_path)])
    finally:
        hidden.chmod(0o700)
    assert str(hidden) in info.value.what


def test_unmeasurable_pickles_with_its_field() -> None:
    error = pickle.loads(pickle.dumps(Unmeasurable("cannot list '/x'")))
    assert error.what == "cannot list '/x'" and str(error) == "cannot list '/x'"
