"""Running git for the git workspace mode (``actline.tools.workspace.git``).

``Git`` runs every command with a fixed environment: no ``GIT_*`` variable of the caller (hooks,
``GIT_DIR``), no user or system config, the config below on the command line, a fixed author.
Object reads go through one long-running ``git cat-file --batch`` that is started again once
when it dies. A command that fails raises ``GitError``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import IO, Any, Final

from actline.tools.errors import ToolError

__all__ = ["Git", "GitError"]

_CONFIG: Final = (
    "core.hooksPath=/dev/null", "core.autocrlf=false", "core.safecrlf=false",
    "core.fsmonitor=false", "core.untrackedCache=false", "core.quotePath=false",
    "core.protectNTFS=false", "core.attributesFile=/dev/null", "core.excludesFile=/dev/null",
    "commit.gpgSign=false", "gc.auto=0", "maintenance.auto=false", "safe.directory=*",
    "advice.detachedHead=false", "init.defaultBranch=main",
)  # fmt: skip


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


class Git:
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
