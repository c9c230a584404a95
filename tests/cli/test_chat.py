"""``actline chat`` driven for real in a pseudo-terminal.

Each test starts the chat in a child process whose controlling terminal is the slave side of
a pty (``pty.fork``), with LMDB under a temporary ACTLINE_HOME and the offline
ExtractiveModel. Ctrl-C is the byte ``\\x03`` written to the master: the terminal's line
discipline turns it into SIGINT for the foreground process group, which the chat leads. Each
press waits for the chat's reaction to the previous one, so no two SIGINTs can merge into one.

A question that says "ask reviewer to ..." makes the turn wait for the reviewer's DONE, which
nobody sends here: the turn sits in the waiting state until the user skips or cancels.

The chats that get Ctrl-C use a nats-server this test process started (``NATS_URL``): the
embedded one is started in the chat's process group, so the terminal's SIGINT stops it too
(``test_the_embedded_nats_server_is_out_of_reach_of_ctrl_c`` pins that until
``bus/embedded.py`` starts it in a session of its own). The other chats use the embedded one.
The double-press window is 60 s in the child so that no test depends on how fast this
machine is; ``press`` itself is tested with explicit times.
"""

from __future__ import annotations

import io
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from actline.bus import EmbeddedNats
from actline.config import Config, ConfigError
from actline.terminal.chat import (
    DOUBLE_PRESS_S,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Presses,
    press,
    run_chat,
)
from tests.creds import creds_env

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 30.0
CTRL_C = b"\x03"
CTRL_D = b"\x04"
WAITING_QUESTION = "Check the retention settings and ask reviewer to review them"
CHILD = (
    "import asyncio, os, sys\n"
    "from rich.console import Console\n"
    "from actline.config import Config\n"
    "from actline.terminal.chat import run_chat\n"
    "cid = os.environ.get('CHAT_CONVERSATION') or None\n"
    "sys.exit(asyncio.run(run_chat(Config.load(env=os.environ), cid, Console(),"
    " double_press_s=60.0)))\n"
)


class Chat:
    """A chat child on a pty: write to it, wait for text, wait for its exit."""

    def __init__(
        self,
        home: Path,
        *,
        grace: float = 0.0,
        conversation: str = "",
        nats_url: str = "",
        approve_tools: str = "",
    ) -> None:
        env = {
            k: v for k, v in os.environ.items() if k != "NATS_URL" and not k.startswith("ACTLINE_")
        }
        env.update(
            ACTLINE_HOME=str(home),
            ACTLINE_DOCS="examples/kb",
            ACTLINE_FOLLOWUP_GRACE=str(grace),
            CHAT_CONVERSATION=conversation,
            ACTLINE_APPROVE_TOOLS=approve_tools,
            COLUMNS="120",
            LINES="40",
            TERM="dumb",
            PYTHONPATH=str(ROOT),
            PYTHONIOENCODING="utf-8",
        )
        if nats_url:  # the chat runs its node in-process: the node role
            env["NATS_URL"] = nats_url
            env |= creds_env(nats_url, "node")
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: never return into pytest
            try:
                os.chdir(ROOT)
                os.execve(sys.executable, [sys.executable, "-c", CHILD], env)
            finally:
                os._exit(127)
        self.transcript = ""
        self.pos = 0
        self.status: int | None = None

    def _read(self, timeout: float) -> bool:
        """Read what is there within ``timeout``; False at the end of output."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the child has closed the terminal
            return False
        if not data:
            return False
        self.transcript += data.decode("utf-8", errors="replace")
        return True

    def expect(self, text: str) -> str:
        """Wait for ``text`` after the previous match; the output up to and including it."""
        deadline = time.monotonic() + DEADLINE_S
        while (found := self.transcript.find(text, self.pos)) < 0:
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(min(left, 1.0)):
                if text in self.transcript[self.pos :]:
                    break
                pytest.fail(f"no {text!r} in the chat's output:\n{self.transcript}")
        found = self.transcript.find(text, self.pos)
        seen = self.transcript[self.pos : found + len(text)]
        self.pos = found + len(text)
        return seen

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def line(self, text: str) -> None:
        self.send(text.encode() + b"\n")

    def exit_code(self) -> int:
        """Read to the end of output, then reap the child."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and self._read(1.0):
            pass
        while self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                pytest.fail(f"the chat did not exit:\n{self.transcript}")
            else:
                select.select([], [], [], 0.05)
        return self.status

    def close(self) -> None:
        """End the chat with SIGTERM (it cleans up as on /quit), SIGKILL if it hangs."""
        if self.status is None:
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.exit_code()
            finally:
                if self.status is None:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
                    self.status = -int(signal.SIGKILL)
        os.close(self.fd)


@pytest.fixture
def chat(tmp_path: Path) -> Iterator[Chat]:
    """A chat on an embedded nats-server."""
    session = Chat(tmp_path / "home")
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def ctrl_chat(tmp_path: Path, fresh_nats: EmbeddedNats) -> Iterator[Chat]:
    """A chat on a nats-server of this test, out of reach of the terminal's Ctrl-C."""
    session = Chat(tmp_path / "home", nats_url=fresh_nats.url)
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def slow_chat(tmp_path: Path, fresh_nats: EmbeddedNats) -> Iterator[Chat]:
    """Like ``ctrl_chat``, with turns that hold their final answer open for 30 s of followup
    grace, so a cancel sent after a skip always finds the turn still running."""
    session = Chat(tmp_path / "home", grace=30.0, nats_url=fresh_nats.url)
    try:
        yield session
    finally:
        session.close()


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _conversation_id(text: str) -> str:
    return text.split("actline timeline ", 1)[1].split()[0]


# -- the Ctrl-C state machine, with explicit times ---------------------------------------------


def test_presses_during_a_turn_skip_then_cancel_then_quit() -> None:
    presses, first = press(Presses(), 10.0, running=True)
    presses, second = press(presses, 10.0 + DOUBLE_PRESS_S, running=True)
    presses, third = press(presses, 11.0 + DOUBLE_PRESS_S, running=True)
    assert (first, second, third) == ("skip", "cancel", "quit")


def test_a_slow_second_press_during_a_turn_skips_again() -> None:
    presses, _ = press(Presses(), 10.0, running=True)
    assert press(presses, 10.1 + DOUBLE_PRESS_S, running=True)[1] == "skip"


def test_at_the_prompt_one_press_hints_and_a_quick_second_quits() -> None:
    presses, first = press(Presses(), 5.0, running=False)
    assert first == "hint"
    assert press(presses, 5.5, running=False)[1] == "quit"
    assert press(presses, 5.1 + DOUBLE_PRESS_S, running=False)[1] == "hint"


def test_a_skip_then_one_press_at_the_prompt_only_hints() -> None:
    presses, _ = press(Presses(), 1.0, running=True)
    assert press(presses, 1.2, running=False)[1] == "hint"


def test_a_third_quick_press_quits_even_when_the_cancelled_turn_has_ended() -> None:
    presses, _ = press(Presses(), 1.0, running=True)
    presses, _ = press(presses, 1.2, running=True)
    assert press(presses, 1.4, running=False)[1] == "quit"


# -- the real chat in a pty ---------------------------------------------------------------------


def test_a_question_is_answered_and_the_prompt_returns(chat: Chat) -> None:
    chat.expect("you> ")
    chat.line("How do the pricing tiers differ?")
    chat.expect("answer")
    chat.expect("Lumen Relay has four tiers")
    chat.expect("complete  completed")
    chat.expect("you> ")
    chat.line("/id")
    chat.expect("conversation c-")
    chat.expect("you> ")
    chat.line("/quit")
    assert chat.exit_code() == 0
    tail = chat.transcript[chat.pos :]
    cid = _conversation_id(tail)
    assert f"actline chat --conversation {cid}" in tail


def test_one_ctrl_c_while_waiting_skips_waiting_and_the_turn_completes(ctrl_chat: Chat) -> None:
    chat = ctrl_chat
    chat.expect("you> ")
    chat.line(WAITING_QUESTION)
    chat.expect("waiting for reviewer")
    chat.send(CTRL_C)
    chat.expect("skip: not waiting for outside agents any more")
    chat.expect("wait_skipped")
    chat.expect("reviewer did not answer in time")
    chat.expect("complete  completed")
    chat.expect("you> ")
    chat.send(CTRL_D)
    assert chat.exit_code() == 0


def test_ctrl_c_twice_while_waiting_cancels_the_turn(slow_chat: Chat) -> None:
    chat = slow_chat
    chat.expect("you> ")
    chat.line(WAITING_QUESTION)
    chat.expect("waiting for reviewer")
    chat.send(CTRL_C)
    chat.expect("skip: not waiting")
    chat.send(CTRL_C)
    chat.expect("cancelled: the turn stops")
    chat.expect("turn cancelled")
    chat.expect("you> ")
    chat.line("/quit")
    assert chat.exit_code() == 0


def test_a_third_ctrl_c_quits_the_chat(slow_chat: Chat) -> None:
    chat = slow_chat
    chat.expect("you> ")
    chat.line(WAITING_QUESTION)
    chat.expect("waiting for reviewer")
    chat.send(CTRL_C)
    chat.expect("skip: not waiting")
    chat.send(CTRL_C)
    chat.expect("cancelled: the turn stops")
    chat.send(CTRL_C)
    assert chat.exit_code() == EXIT_INTERRUPTED
    assert "actline timeline c-" in chat.transcript[chat.pos :]


def test_ctrl_c_at_the_prompt_hints_and_twice_quits(ctrl_chat: Chat) -> None:
    chat = ctrl_chat
    chat.expect("you> ")
    chat.send(CTRL_C)
    chat.expect("Ctrl-C again to quit")
    chat.expect("you> ")
    chat.send(CTRL_C)
    assert chat.exit_code() == EXIT_INTERRUPTED
    assert "no conversation was started" in chat.transcript[chat.pos :]


def test_ctrl_d_at_the_prompt_quits_with_0(chat: Chat) -> None:
    chat.expect("you> ")
    chat.send(CTRL_D)
    assert chat.exit_code() == 0


def test_a_line_typed_while_the_turn_waits_joins_it(ctrl_chat: Chat) -> None:
    chat = ctrl_chat
    chat.expect("you> ")
    chat.line(WAITING_QUESTION)
    chat.expect("waiting for reviewer")
    chat.line("and the backups?")
    chat.expect("followup joined turn t-")
    chat.send(CTRL_C)
    chat.expect("skip: not waiting")
    chat.expect("Searching the knowledge space for: backups")
    chat.expect("complete  completed")
    chat.expect("you> ")
    chat.line("/quit")
    assert chat.exit_code() == 0


def test_a_tool_call_waiting_for_approval_is_shown_and_approved_from_the_chat(
    tmp_path: Path,
) -> None:
    chat = Chat(tmp_path / "home", approve_tools="react.search_knowledge")
    try:
        chat.expect("you> ")
        chat.line("How do the pricing tiers differ?")
        chat.expect("needs approval: react.search_knowledge")
        chat.expect("actline approve t-")
        chat.line("/approve ap-nope")
        chat.expect("refused: unknown_approval")
        chat.line("/approve read-only")
        chat.expect("approved: react.search_knowledge")
        chat.expect("complete  completed")
        chat.expect("you> ")
        chat.line("/quit")
        assert chat.exit_code() == 0
    finally:
        chat.close()


def test_slash_cancel_typed_while_the_turn_waits_cancels_it(chat: Chat) -> None:
    chat.expect("you> ")
    chat.line(WAITING_QUESTION)
    chat.expect("waiting for reviewer")
    chat.line("/cancel")
    chat.expect("cancelled: the turn stops")
    chat.expect("turn cancelled")
    chat.expect("you> ")
    chat.line("/quit")
    assert chat.exit_code() == 0


def test_piped_lines_become_turns_and_the_chat_ends_with_the_input(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL" and not k.startswith("ACTLINE_")}
    env.update(
        ACTLINE_HOME=str(tmp_path / "home"),
        ACTLINE_DOCS="examples/kb",
        ACTLINE_FOLLOWUP_GRACE="0",
        COLUMNS="120",
        PYTHONPATH=str(ROOT),
        PYTHONIOENCODING="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input="How do the pricing tiers differ?\n/id\nWhat is Lumen Relay?",
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=DEADLINE_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("complete  completed") == 2
    cid = _conversation_id(done.stdout)
    assert f"conversation {cid}" in done.stdout.split("you> /id", 1)[1]


def test_a_second_chat_continues_the_conversation_and_new_starts_another(tmp_path: Path) -> None:
    first = Chat(tmp_path / "home")
    try:
        first.expect("you> ")
        first.line("How do the pricing tiers differ?")
        first.expect("complete  completed")
        first.expect("you> ")
        first.line("/quit")
        assert first.exit_code() == 0
        cid = _conversation_id(first.transcript[first.pos :])
    finally:
        first.close()
    second = Chat(tmp_path / "home", conversation=cid)
    try:
        second.expect(f"continuing conversation {cid}")
        second.expect("you> ")
        second.line("What did I ask before?")
        second.expect("complete  completed")
        second.expect("you> ")
        second.line("/new")
        second.expect("new conversation")
        second.line("What is Lumen Relay?")
        second.expect("complete  completed")
        second.expect("you> ")
        second.send(CTRL_D)
        assert second.exit_code() == 0
        tail = second.transcript[second.pos :]
        assert tail.count("actline chat --conversation c-") == 2
        assert f"actline timeline {cid}" in tail
    finally:
        second.close()


async def test_an_unknown_conversation_is_a_config_error_naming_the_fix(tmp_path: Path) -> None:
    config = Config.load(env={"ACTLINE_HOME": str(tmp_path / "home")})
    out = io.StringIO()
    with pytest.raises(ConfigError, match=r"does not exist.*omit --conversation"):
        await run_chat(config, "c-nope", Console(file=out))
    assert out.getvalue() == ""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_sigterm_ends_the_chat_and_stops_its_nats_server(chat: Chat) -> None:
    chat.expect("(embedded)")
    chat.expect("you> ")
    servers = _children(chat.pid)
    assert servers, "the chat started no nats-server"
    os.kill(chat.pid, signal.SIGTERM)
    assert chat.exit_code() == EXIT_TERMINATED
    assert "no conversation was started" in chat.transcript
    for pid in servers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_embedded_nats_server_is_out_of_reach_of_ctrl_c(chat: Chat) -> None:
    chat.expect("(embedded)")
    chat.expect("you> ")
    children = _children(chat.pid)
    assert children, "the chat started no nats-server"
    foreground = os.tcgetpgrp(chat.fd)
    assert all(os.getpgid(child) != foreground for child in children)
