"""The ``actline`` commands run for real: subprocesses, a real nats-server, a real LMDB home."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.actors.conversation.title import heuristic_title
from actline.bus import Authority, EmbeddedNats
from tests.creds import creds_env

ROOT = Path(__file__).resolve().parents[2]
READY_S = 30.0
"""Upper bound for a process to print its ready line (not a timing assertion)."""
CID = re.compile(r"conversation (c-[A-Za-z0-9]+) · turn (t-[A-Za-z0-9]+) · (\w+)")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The test's environment without the caller's NATS, API key or actline settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NATS_URL", "ANTHROPIC_API_KEY") and not k.startswith("ACTLINE_")
    }
    env.update(
        COLUMNS="120", ACTLINE_HOME=str(home), ACTLINE_EMBEDDINGS="off", PYTHONPATH=str(ROOT)
    )
    env.update(extra)
    return env


def as_role(nats: EmbeddedNats, role: str = "node", name: str = "") -> dict[str, str]:
    """The credentials of ``role`` on the test's server, for a child's environment."""
    return creds_env(nats.url, role, name=name)


def actline(
    *args: str, env: dict[str, str], timeout: float = 50
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actline", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


class Running:
    """An ``actline`` process in the background whose stdout lines are read as they come."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actline", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.stderr = ""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, needle: str, timeout: float = READY_S) -> str:
        """The first stdout line containing ``needle`` (fails when the process ends first)."""
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no line with {needle!r} (seen: {self.seen})")
            self.seen.append(line)
            if needle in line:
                return line

    def interrupt(self, sig: int = signal.SIGINT) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=READY_S)
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def asked(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, str, subprocess.CompletedProcess[str]]:
    """One ``actline ask`` with an embedded server and node: (home, conversation id, result)."""
    home = tmp_path_factory.mktemp("asked") / "home"
    result = actline("ask", "How do the pricing tiers differ?", env=clean_env(home))
    match = CID.search(result.stdout)
    assert match, result.stdout + result.stderr
    return home, match.group(1), result


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    with EmbeddedNats(store_dir=tmp_path / "nats") as server:
        yield server


@pytest.fixture
def serving(nats: EmbeddedNats, tmp_path: Path) -> Iterator[Running]:
    """``actline serve --nats URL`` ready to take turns."""
    node = Running("serve", "--nats", nats.url, env=clean_env(tmp_path / "node", **as_role(nats)))
    try:
        node.wait_for("serving on")
        yield node
    finally:
        node.stop()


# -- ask -------------------------------------------------------------------------------------------


def test_ask_streams_a_cited_answer_and_says_how_to_continue(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    _, cid, result = asked
    assert result.returncode == 0, result.stderr
    assert "four tiers" in result.stdout
    assert "](https://docs.lumen-relay.example/" in result.stdout
    assert f"conversation {cid} · turn t-" in result.stdout
    assert f'actline ask --conversation {cid} "..."' in result.stdout
    assert "Traceback" not in result.stderr


def test_ask_with_a_conversation_id_continues_that_conversation(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    home, cid, first = asked
    result = actline("ask", "--conversation", cid, "And the limits?", env=clean_env(home))
    assert result.returncode == 0, result.stderr
    match = CID.search(result.stdout)
    assert match and match.group(1) == cid and match.group(3) == "completed"
    first_turn = CID.search(first.stdout)
    assert first_turn and match.group(2) != first_turn.group(2)


def test_ask_json_prints_only_the_result(tmp_path: Path) -> None:
    result = actline("ask", "What are the limits?", "--json", env=clean_env(tmp_path / "home"))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["kind"] == "turn.result"
    assert data["status"] == "completed"
    assert data["answer"] and data["conversation_id"].startswith("c-")
    assert data["canvas"] == {}  # the offline model writes no canvas


def test_chat_continues_a_stored_conversation_from_the_command_line(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    home, cid, _ = asked
    result = subprocess.run(
        [sys.executable, "-m", "actline", "chat", "--conversation", cid],
        cwd=ROOT,
        input="/id\n/quit\n",
        capture_output=True,
        text=True,
        timeout=50,
        env=clean_env(home),
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"actline timeline {cid}" in result.stdout


# -- timeline --------------------------------------------------------------------------------------


def test_timeline_lists_the_stored_blocks(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    home, cid, _ = asked
    result = actline("timeline", cid, env=clean_env(home))
    assert result.returncode == 0, result.stderr
    assert re.search(r"ar:t-[A-Za-z0-9]+\.user\.prompt", result.stdout)
    assert re.search(r"ar:t-[A-Za-z0-9]+\.assistant\.completion", result.stdout)
    assert "How do the pricing tiers differ?" in result.stdout


def test_timeline_rendered_shows_the_cache_marks(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    home, cid, _ = asked
    result = actline("timeline", cid, "--rendered", env=clean_env(home))
    assert result.returncode == 0, result.stderr
    assert re.search(r"^◆◆◆ cache mark CP\d", result.stdout, re.M)
    assert "--- uncached tail: sources ---" in result.stdout
    assert "[USER MESSAGE]" in result.stdout


def test_timeline_json_prints_one_block_per_line(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    home, cid, _ = asked
    result = actline("timeline", cid, "--json", env=clean_env(home))
    assert result.returncode == 0, result.stderr
    blocks = [json.loads(line) for line in result.stdout.splitlines()]
    assert [b["seq"] for b in blocks] == sorted(b["seq"] for b in blocks)
    types = {b["type"] for b in blocks}
    assert {"user.prompt", "assistant.completion"} <= types


def test_timeline_list_shows_the_stored_conversation(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    home, cid, _ = asked
    table = actline("timeline", "--list", env=clean_env(home))
    assert table.returncode == 0, table.stderr
    assert cid in table.stdout
    rows = [
        json.loads(line)
        for line in actline("timeline", "--list", "--json", env=clean_env(home)).stdout.splitlines()
    ]
    [row] = [row for row in rows if row["conversation_id"] == cid]
    # titled by the gate: offline, the first question's key phrase
    assert row["title"] == heuristic_title("How do the pricing tiers differ?")
    assert row["title"] in table.stdout


# -- serve, agent, done ----------------------------------------------------------------------------


def test_serve_answers_a_client_ask_and_stops_cleanly_on_sigint(
    serving: Running, nats: EmbeddedNats, tmp_path: Path
) -> None:
    client_env = clean_env(tmp_path / "client", NATS_URL=nats.url, **as_role(nats, "client"))
    result = actline("ask", "What are the limits?", env=client_env)
    assert result.returncode == 0, result.stderr
    assert "embedded nats-server" not in result.stdout
    match = CID.search(result.stdout)
    assert match and match.group(3) == "completed"
    assert not (tmp_path / "client").exists()  # a client only: the node stored the turn
    assert serving.interrupt(signal.SIGINT) == 0
    assert "Traceback" not in serving.stderr


def test_serve_without_a_nats_url_starts_an_embedded_server_and_prints_it(
    tmp_path: Path,
) -> None:
    node = Running("serve", env=clean_env(tmp_path / "home"))
    try:
        ready = node.wait_for("serving on")
        url = re.search(r"serving on (nats://127\.0\.0\.1:\d+)", ready)
        assert url, ready
        hint = node.wait_for("actline ask")
        assert f"NATS_URL={url.group(1)} ACTLINE_NATS_CREDS=" in hint, hint
        assert re.search(r"client-[\w-]+-approver@al\.creds", hint), hint  # the local approver
        assert node.interrupt(signal.SIGTERM) == 0
    finally:
        node.stop()


def test_agent_answers_a_task_with_its_command_output(
    serving: Running, nats: EmbeddedNats, tmp_path: Path
) -> None:
    script = "import sys; print('checked: ' + sys.stdin.read()[:20])"
    env = clean_env(tmp_path / "agent", **as_role(nats, "agent", "reviewer"))
    agent = Running(
        "agent", "reviewer", "--nats", nats.url, "--", sys.executable, "-c", script, env=env
    )
    try:
        agent.wait_for("agent reviewer listening on")
        result = actline(
            "ask",
            "Pricing tiers: ask reviewer to check the plan",
            env=clean_env(tmp_path / "client", NATS_URL=nats.url, **as_role(nats, "client")),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "checked: " in result.stdout
        assert "waiting for reviewer" in result.stdout
        assert "answered; node: applied" in agent.wait_for("answered")
        client = clean_env(tmp_path / "client", NATS_URL=nats.url, **as_role(nats, "client"))
        listed = actline("agents", env=client)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        [row] = [line.split() for line in listed.stdout.splitlines() if "reviewer" in line]
        assert row[:2] == ["reviewer", "yes"] and row[-1] == "-"  # connected, no open task
        assert agent.interrupt() == 0
    finally:
        agent.stop()


def test_done_with_no_outstanding_task_is_refused(
    serving: Running, nats: EmbeddedNats, tmp_path: Path
) -> None:
    env = clean_env(tmp_path / "h", NATS_URL=nats.url, **as_role(nats, "agent", "reviewer"))
    result = actline("done", "reviewer", "x", env=env)
    assert result.returncode == 1
    assert "no_outstanding_task" in result.stdout


def test_agent_command_that_fails_answers_with_a_failure_summary(
    serving: Running, nats: EmbeddedNats, tmp_path: Path
) -> None:
    script = (
        "import sys; sys.stdin.read(); sys.stderr.write('boom: no reviewer today'); sys.exit(3)"
    )
    env = clean_env(tmp_path / "agent", **as_role(nats, "agent", "reviewer"))
    agent = Running(
        "agent", "reviewer", "--nats", nats.url, "--", sys.executable, "-c", script, env=env
    )
    try:
        agent.wait_for("agent reviewer listening on")
        result = actline(
            "ask",
            "Pricing tiers: ask reviewer to check the plan",
            env=clean_env(tmp_path / "client", NATS_URL=nats.url, **as_role(nats, "client")),
        )
        assert "exited with code 3: boom: no reviewer today" in result.stdout
        assert "answered (failed)" in agent.wait_for("answered")
    finally:
        agent.stop()


# -- errors ----------------------------------------------------------------------------------------

ERRORS = [
    pytest.param(
        ("ask", "hi"),
        {"NATS_URL": "nats://127.0.0.1:9", "ACTLINE_NATS_CREDS": "CREDS"},
        "cannot reach NATS",
        id="no-nats",
    ),
    pytest.param(
        ("ask", "hi"), {"NATS_URL": "nats://127.0.0.1:9"}, "needs credentials", id="no-creds"
    ),
    pytest.param(
        ("ask", "hi"),
        {"NATS_URL": "nats://127.0.0.1:9", "ACTLINE_NATS_CREDS": "FILE"},
        "not a NATS .creds file",
        id="bad-creds",
    ),
    pytest.param(("ask", "hi"), {"NATS_URL": "http://x"}, "nats://host:4222", id="bad-url"),
    pytest.param(
        ("ask", "--model", "claude-sonnet-4-6", "hi"), {}, "ANTHROPIC_API_KEY", id="no-api-key"
    ),
    pytest.param(("ask", "hi"), {"ACTLINE_HOME": "FILE/sub"}, "not writable", id="home-under-file"),
    pytest.param(
        ("ask", "--conversation", "nope", "hi"), {}, "does not exist", id="no-conversation"
    ),
    pytest.param(("agent", "reviewer", "--", "cat"), {}, "NATS_URL", id="agent-without-nats"),
    pytest.param(("done", "reviewer", "x"), {}, "NATS_URL", id="done-without-nats"),
    pytest.param(("agents",), {}, "NATS_URL", id="agents-without-nats"),
]


@pytest.mark.parametrize(("args", "extra", "fix"), ERRORS)
def test_a_setup_problem_is_one_line_naming_the_fix(
    args: tuple[str, ...], extra: dict[str, str], fix: str, tmp_path: Path
) -> None:
    blocker = tmp_path / "FILE"
    blocker.write_text("a regular file")
    creds = Authority.open(tmp_path / "auth").creds_path("client")
    extra = {
        k: v.replace("FILE", str(blocker)).replace("CREDS", str(creds)) for k, v in extra.items()
    }
    result = actline(*args, env=clean_env(tmp_path / "home", **extra))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert fix in lines[0]
    assert "Traceback" not in result.stderr


def test_timeline_of_an_unknown_conversation_says_it_does_not_exist(
    asked: tuple[Path, str, subprocess.CompletedProcess[str]],
) -> None:
    home, _, _ = asked
    result = actline("timeline", "nope", env=clean_env(home))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"actline timeline: conversation 'nope' does not exist in {home}; list the stored "
        "conversations with actline timeline --list"
    ]


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = actline("--debug", "ask", "hi", env=clean_env(tmp_path / "home", NATS_URL="http://x"))
    assert result.returncode != 0
    assert "Traceback" in result.stderr
    assert "ConfigError" in result.stderr and "nats://host:4222" in result.stderr


# -- approve / deny --------------------------------------------------------------------------------

APPROVE_LINE = re.compile(r"actline approve (t-[A-Za-z0-9]+) --approval (ap-[A-Za-z0-9]+)")


def test_approve_lets_a_waiting_turn_go_on_and_deny_of_a_finished_turn_says_it_ended(
    nats: EmbeddedNats, tmp_path: Path
) -> None:
    gated = "react.search_knowledge"
    node_env = clean_env(tmp_path / "node", ACTLINE_APPROVE_TOOLS=gated, **as_role(nats))
    node = Running("serve", "--nats", nats.url, env=node_env)
    client = clean_env(tmp_path / "client", NATS_URL=nats.url, **as_role(nats, "client"))
    ask: Running | None = None
    try:
        node.wait_for("serving on")
        ask = Running("ask", "How do the pricing tiers?", env=client | {"PYTHONUNBUFFERED": "1"})
        assert gated in ask.wait_for("needs approval:")
        match = APPROVE_LINE.search(ask.wait_for("actline approve"))
        assert match, ask.seen
        turn, approval = match.groups()
        refused = actline("approve", turn, "--approval", approval, env=client)
        assert refused.returncode != 0 and "may not approve" in refused.stderr, refused.stderr
        approver = client | creds_env(nats.url, "client", name="ops", approver=True)
        approved = actline("approve", turn, "--approval", approval, "--reason", "ok", env=approver)
        assert approved.returncode == 0, approved.stdout + approved.stderr
        assert f"approved: {gated}" in approved.stdout
        assert "approved by client ops" in approved.stdout
        assert "· completed" in ask.wait_for(f"turn {turn}")
        denied = actline("deny", turn, "--timeout", "1", env=approver)
        assert denied.returncode == 1
        assert f"turn {turn} has ended (completed)" in denied.stdout, denied.stdout
        bad = actline("approve", "not an id!", env=client)
        assert bad.returncode == 2 and "is not an id" in bad.stderr
    finally:
        if ask is not None:
            ask.stop()
        node.stop()
