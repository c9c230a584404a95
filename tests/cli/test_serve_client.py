"""``actline serve`` and the commands that join it, run for real as a user runs them.

Each server is ``actline serve`` in a child process with its home in a temporary folder, the
offline model and a port this test picked free. ``actline chat`` runs on a pseudo-terminal
(``os.openpty``) with no ``NATS_URL`` and no credentials: it finds the server in the home's
state file and joins it as a client, so the turn is served by the server's node (its id is
in the "accepted by node" line). The agent test stops the server with SIGTERM and starts it
again on the same port: the running ``actline agent`` and ``actline chat`` say they lost the
server and that it is back, and the agent answers the next task. Every wait is on output or
on a process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline import served
from tests.ports import free_port
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 45.0
QUESTION = "What are the tiers?"
HANDOFF = "Check the retention settings and ask reviewer to review them"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL" and not k.startswith("ACTLINE_")}
    env.update(ACTLINE_DOCS="examples/kb", COLUMNS="200", TERM="dumb", PYTHONPATH=str(ROOT))
    return env


def actline(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actline", *args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class Child:
    """An ``actline`` child whose output (stdout and stderr) goes to a file, or to a
    pseudo-terminal with ``tty=True``."""

    def __init__(self, log: Path, *args: str, tty: bool = False) -> None:
        self.log = log
        self.fd: int | None = None
        self.text = ""
        if tty:
            self.fd, slave = os.openpty()
            out: int | object = slave
        else:
            out = self._file = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actline", *args],
            cwd=ROOT,
            env=_env(),
            stdin=slave if tty else subprocess.DEVNULL,
            stdout=out,  # type: ignore[arg-type]
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if tty:
            os.close(slave)
            assert self.fd is not None
            os.set_blocking(self.fd, False)

    def output(self) -> str:
        if self.fd is None:
            return self.log.read_text(errors="replace")
        with contextlib.suppress(BlockingIOError, OSError):
            while data := os.read(self.fd, 65536):
                self.text += data.decode(errors="replace")
        return self.text

    async def shows(self, text: str, count: int = 1) -> str:
        await until(lambda: self.output().count(text) >= count, WAIT_S)
        return self.output()

    def write(self, line: str) -> None:
        assert self.fd is not None
        os.write(self.fd, line.encode() + b"\n")

    async def exited(self) -> int:
        await until(lambda: self.proc.poll() is not None, WAIT_S)
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def serve(home: Path, port: int, log: Path) -> Child:
    return Child(log, "serve", "--home", str(home), "--model", "extractive", "--port", str(port))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, str]]:
    """A running ``actline serve``: its home, URL and node id."""
    home = tmp_path_factory.mktemp("serve")
    port = free_port()
    child = serve(home, port, home / "serve.out")
    try:
        text = asyncio.run(child.shows(f"serving on nats://127.0.0.1:{port}"))
        found = re.search(r"node (\S+) serving on", text)
        assert found is not None, text
        yield home, f"nats://127.0.0.1:{port}", found.group(1)
    finally:
        child.stop()


@pytest.mark.parametrize("given", ["home", "url"])
async def test_chat_joins_the_running_serve_as_a_client(
    server: tuple[Path, str, str], tmp_path: Path, given: str
) -> None:
    """Found in the home's state file, or given by URL (then with the home's client
    credentials, never its node keys)."""
    home, url, node = server
    found, _ = served.find(home)
    assert found is not None and found.url == url and found.creds is not None
    where = ["--nats", url] if given == "url" else []
    chat = Child(tmp_path / "chat.out", "chat", "--home", str(home), *where, tty=True)
    try:
        seen = await chat.shows("you>")
        assert f"a client of the node on NATS {url}" in seen
        chat.write(QUESTION)
        seen = await chat.shows("you>", 2)
        assert f"accepted by node {node}" in seen  # the server's node served it: no second one
        assert "four tiers" in seen and "completed" in seen
        chat.write("/quit")
        assert await chat.exited() == 0
    finally:
        chat.stop()


async def test_deny_of_an_ended_turn_says_so_at_once(server: tuple[Path, str, str]) -> None:
    home, _, _ = server
    asked = actline("ask", "--home", str(home), "--json", QUESTION)
    assert asked.returncode == 0, asked.stderr
    turn = json.loads(asked.stdout)["turn_id"]
    denied = actline("deny", turn, "--home", str(home))
    assert denied.returncode == 1
    assert f"turn {turn} has ended (completed)" in denied.stdout
    assert "no_node" not in denied.stdout
    cid = json.loads(asked.stdout)["conversation_id"]  # feedback joins the serve too
    rated = actline(
        "feedback", cid, "to the point", "--turn", turn, "--rating", "up", "--home", str(home)
    )
    assert rated.returncode == 0, rated.stdout + rated.stderr
    assert f"feedback on turn {turn}" in rated.stdout
    unnamed = actline("feedback", cid, "again", "--home", str(home))  # a client: name the turn
    assert unnamed.returncode == 2 and "--turn TURN_ID" in unnamed.stderr


async def test_an_agent_resumes_after_serve_restarts_on_the_same_port(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    url = f"nats://127.0.0.1:{port}"
    first = serve(home, port, tmp_path / "serve1.out")
    agent: Child | None = None
    chat: Child | None = None
    second: Child | None = None
    try:
        await first.shows(f"serving on {url}")
        agent = Child(  # it finds the server in the home
            tmp_path / "agent.out", "agent", "reviewer", "--home", str(home), "--", "echo", "fine"
        )
        await agent.shows(f"listening on al.agent.reviewer.inbox at {url}")
        chat = Child(tmp_path / "chat.out", "chat", "--home", str(home), tty=True)
        await chat.shows("you>")
        first.proc.send_signal(signal.SIGTERM)
        assert await first.exited() == 0
        assert not (home / served.STATE_FILE).exists()  # a clean stop forgets it
        await agent.shows(f"disconnected from {url}: retrying")
        second = serve(home, port, tmp_path / "serve2.out")
        await second.shows(f"serving on {url}")
        await agent.shows(f"reconnected to {url}")
        await chat.shows(f"disconnected from {url}: retrying")
        await chat.shows(f"reconnected to {url}")
        asked = actline("ask", "--home", str(home), HANDOFF)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        seen = await agent.shows("answered; node: applied")
        assert seen.count("disconnected from") == 1 and seen.count("reconnected to") == 1
    finally:
        for child in (chat, agent, first, second):
            if child is not None:
                child.stop()


async def test_serve_on_a_taken_port_names_who_holds_it(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        refused = actline("serve", "--home", str(tmp_path), "--port", str(port))
    assert refused.returncode == 2
    assert f"port {port} is taken by pid {os.getpid()}" in refused.stderr
    assert "--port N" in refused.stderr


def test_serve_keeps_its_port_when_the_default_one_is_taken(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        default = held.getsockname()[1]
        first = served.pick_port(tmp_path, None, default=default)
        served.record(tmp_path, served.Served(f"nats://127.0.0.1:{first}", os.getpid(), None))
        assert first != default
        assert served.pick_port(tmp_path, None, default=default) == first


def test_a_stale_state_file_is_ignored_and_said(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    state = served.Served("nats://127.0.0.1:1", int(dead.stdout), None)
    served.record(tmp_path, state)
    found, note = served.find(tmp_path)
    assert found is None and f"pid {dead.stdout.strip()}) is no longer running" in note
    served.record(tmp_path, served.Served(f"nats://127.0.0.1:{free_port()}", os.getpid(), None))
    found, note = served.find(tmp_path)
    assert found is None and "nothing listens on" in note
