"""Feedback, attachments, closing the terminal and agent-skill from the command line, for real:
``actline`` subprocesses (and ``actline chat`` on a pty) on an embedded nats-server, LMDB in a
temporary home and the offline model over examples/kb."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest
import yaml

from actline.config import Config, ConfigError
from actline.messages import ErrorReply
from actline.runtime import Runtime
from actline.terminal.chat import EXIT_HANGUP
from tests.cli.test_chat import WAITING_QUESTION, Chat, _children, _conversation_id
from tests.cli.test_cli_commands import ROOT, Running, actline, clean_env
from tests.waiting import until

KB = ROOT / "examples" / "kb"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_gone(pids: list[int]) -> None:
    asyncio.run(until(lambda: all(_gone(pid) for pid in pids), timeout=30))


def _stored(home: Path, cid: str, env: dict[str, str]) -> list[dict[str, object]]:
    shown = actline("timeline", cid, "--json", "--home", str(home), env=env)
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]


def _quit_and_read(chat: Chat, home: Path) -> list[dict[str, object]]:
    """Quit the chat (exit status 0) and read its conversation's stored blocks."""
    chat.line("/quit")
    assert chat.exit_code() == 0
    return _stored(home, _conversation_id(chat.transcript[chat.pos :]), clean_env(home))


def test_ask_attaches_files_and_feedback_is_recorded_on_the_latest_turn(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = clean_env(home, ACTLINE_DOCS=str(KB), ACTLINE_FOLLOWUP_GRACE="0")
    notes = tmp_path / "notes.txt"
    notes.write_text("the meeting moved to Thursday")
    (tmp_path / "logo.bin").write_bytes(b"\x00\x01binary")
    asked = actline(
        "ask", "How do the pricing tiers differ?", "--json",
        "--attach", str(notes), "--attach", str(tmp_path / "logo.bin"), env=env,
    )  # fmt: skip
    assert asked.returncode == 0, asked.stderr
    result = json.loads(asked.stdout)
    cid, tid = result["conversation_id"], result["turn_id"]
    given = actline("feedback", cid, "cite the tier page", "--rating", "down", env=env)
    assert given.returncode == 0, given.stderr
    assert f"feedback on turn {tid}: feedback recorded" in given.stdout
    blocks = _stored(home, cid, env)
    paths = [str(b.get("path")) for b in blocks]
    assert f"fi:{tid}.user.attachments/notes.txt" in paths
    assert f"fi:{tid}.user.attachments/logo.bin" in paths
    notes_block = next(b for b in blocks if str(b.get("path")).endswith("/notes.txt"))
    assert "the meeting moved to Thursday" in json.dumps(notes_block)
    feedback = [b for b in blocks if b.get("type") == "feedback"]
    assert len(feedback) == 1 and "cite the tier page" in json.dumps(feedback[0])
    assert "negative" in json.dumps(feedback[0])
    unknown = actline("feedback", cid, "x", "--turn", "t-nope", env=env)
    assert unknown.returncode == 1 and "refused: unknown_turn" in unknown.stdout


def test_bad_attachments_are_refused_naming_the_file_and_the_limit(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home", ACTLINE_MAX_ATTACHMENT_BYTES="10")
    missing = actline("ask", "q", "--attach", str(tmp_path / "nope.txt"), env=env)
    assert missing.returncode == 2
    assert f"attachment '{tmp_path / 'nope.txt'}' does not exist" in missing.stderr
    big = tmp_path / "big.txt"
    big.write_text("x" * 11)
    over = actline("ask", "q", "--attach", str(big), env=env)
    assert over.returncode == 2
    assert f"attachment '{big}' is 11 bytes, over the limit of 10 bytes" in over.stderr
    assert "ACTLINE_MAX_ATTACHMENT_BYTES" in over.stderr
    bad_rating = actline("feedback", "c-1", "x", "--rating", "5", env=env)
    assert bad_rating.returncode == 2 and "rating '5': write -1, 0 or 1" in bad_rating.stderr


async def test_runtime_feedback_defaults_to_the_latest_turn_and_checks_the_rating(
    tmp_path: Path,
) -> None:
    env = {"ACTLINE_HOME": str(tmp_path / "home"), "ACTLINE_DOCS": str(KB)}
    config = Config.load(env={**env, "ACTLINE_FOLLOWUP_GRACE": "0"})
    async with Runtime(config) as rt:
        first = await rt.ask("How do the pricing tiers differ?")
        second = await rt.ask("And the quotas?", first.conversation_id)
        verdict = await rt.feedback(first.conversation_id, "good", rating=1)
        assert verdict.kind == "ack" and verdict.ref == second.turn_id
        on_first = await rt.feedback(first.conversation_id, "ok", turn_id=first.turn_id)
        assert on_first.kind == "ack" and on_first.ref == first.turn_id
        with pytest.raises(ConfigError, match="rating 2"):
            await rt.feedback(first.conversation_id, "x", rating=2)
        big = await rt.feedback(first.conversation_id, "x" * 20_000, rating=-1)
        assert isinstance(big, ErrorReply) and big.code == "invalid_input"
        assert "ACTLINE_MAX_FEEDBACK_BYTES" in big.message
        third = await rt.ask("What did I say about the answers?", first.conversation_id)
    assert third.status == "completed"


def test_closing_the_chat_terminal_stops_its_nats_server(tmp_path: Path) -> None:
    chat = Chat(tmp_path / "home")
    try:
        chat.expect("(embedded)")
        chat.expect("you> ")
        servers = _children(chat.pid)
        assert servers, "the chat started no nats-server"
        os.kill(chat.pid, signal.SIGHUP)
        assert chat.exit_code() == EXIT_HANGUP
        _wait_gone(servers)
    finally:
        chat.close()


def test_chat_attach_and_feedback(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("remember the blue tier")
    chat = Chat(tmp_path / "home")
    try:
        chat.expect("you> ")
        chat.line("/feedback up")
        chat.expect("no turn yet to give feedback on")
        # A name relative to the chat's folder, so that the refusal fits on one line of
        # the pty whatever the length of the test's temporary folder.
        chat.line(f"/attach nope-{tmp_path.name}.txt")
        chat.expect("does not exist")
        chat.line(f"/attach {notes}")
        chat.expect("attached notes.txt (22 bytes, text/plain): it goes with your next message")
        chat.line("How do the pricing tiers differ?")
        chat.expect("complete  completed")
        chat.expect("you> ")
        chat.line("/feedback down too long")
        chat.expect("feedback on turn t-")
        chat.expect("feedback recorded")
        blocks = _quit_and_read(chat, tmp_path / "home")
    finally:
        chat.close()
    attached = [b for b in blocks if str(b.get("path")).endswith(".user.attachments/notes.txt")]
    assert len(attached) == 1 and "remember the blue tier" in json.dumps(attached[0])
    feedback = [b for b in blocks if b.get("type") == "feedback"]
    assert len(feedback) == 1 and "too long" in json.dumps(feedback[0])


def test_a_file_attached_while_a_turn_runs_goes_with_the_followup(tmp_path: Path) -> None:
    extra = tmp_path / "extra.txt"
    extra.write_text("the backups run nightly")
    chat = Chat(tmp_path / "home")
    try:
        chat.expect("you> ")
        chat.line(WAITING_QUESTION)
        chat.expect("waiting for reviewer")
        chat.line(f"/attach {extra}")
        chat.expect("attached extra.txt (23 bytes, text/plain)")
        chat.line("and the backups?")
        chat.expect("followup joined turn t-")
        chat.send(b"\x03")  # skip waiting for the reviewer
        chat.expect("complete  completed")
        chat.expect("you> ")
        blocks = _quit_and_read(chat, tmp_path / "home")
    finally:
        chat.close()
    followup = next(b for b in blocks if b.get("type") == "user.followup")
    message = followup["meta"]["message_id"]
    attached = [b for b in blocks if str(b.get("path")).endswith(f"/{message}/extra.txt")]
    assert len(attached) == 1 and "the backups run nightly" in json.dumps(attached[0])
    assert ".external.followup.attachments/" in str(attached[0]["path"])
    assert not any(".user.attachments/" in str(b.get("path")) for b in blocks)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_a_signal_during_ask_stops_the_embedded_nats_server(tmp_path: Path, sig: int) -> None:
    env = clean_env(tmp_path / "home", ACTLINE_DOCS=str(KB))
    running = Running("ask", WAITING_QUESTION, env=env)
    try:
        running.wait_for("embedded nats-server at")
        running.wait_for("reviewer")
        servers = _children(running.proc.pid)
        assert servers, "ask started no nats-server"
        assert running.interrupt(sig) == 128 + sig
        _wait_gone(servers)
    finally:
        running.stop()


def test_agent_skill_writes_a_claude_code_skill_for_the_agent(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home")
    out = tmp_path / "skills"
    args = ("agent-skill", "reviewer", "--out", str(out), "--nats", "nats://10.0.0.5:4222")
    made = actline(*args, env=env)
    assert made.returncode == 0, made.stderr
    path = out / "actline-reviewer" / "SKILL.md"
    assert f"wrote {path}" in made.stdout
    text = path.read_text()
    front = yaml.safe_load(text.split("---")[1])
    assert front["name"] == "actline-reviewer"
    assert 'outside agent "reviewer"' in front["description"]
    assert "actline done reviewer" in text and "--task TASK_ID --turn TURN_ID" in text
    assert "--nats nats://10.0.0.5:4222" in text and "actline agents" in text
    again = actline(*args, env=env)
    assert again.returncode == 2 and "--force" in again.stderr
    bad = actline("agent-skill", "no such/name", "--out", str(out), env=env)
    assert bad.returncode == 2 and "is not an agent name" in bad.stderr


def test_a_missing_skills_folder_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home", ACTLINE_SKILLS=str(tmp_path / "no-skills"))
    asked = actline("ask", "q", env=env)
    assert asked.returncode == 2
    assert asked.stderr.strip() == (
        f"actline ask: {tmp_path / 'no-skills'}: missing_root: create it or fix the setting "
        "skills (ACTLINE_SKILLS)"
    )
