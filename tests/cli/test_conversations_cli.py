"""``actline conversations`` and ``actline fork``, run for real over a home where an
in-process node stored a conversation (the command starts that home's embedded server with
a node in its own process)."""

from __future__ import annotations

import json
from pathlib import Path

from actline.config import Config
from actline.llm import ReplayModel
from actline.runtime import Runtime
from tests.actors.harness import say

from .test_cli_commands import actline, clean_env

QUESTION = "What is alpha quartz?"


async def stored(home: Path) -> tuple[str, str]:
    model = ReplayModel.of([say("t", answer="Alpha is a silicate."), say("t", answer="More.")])
    env = {"ACTLINE_HOME": str(home), "ACTLINE_FOLLOWUP_GRACE": "0"}
    async with Runtime(Config.load(env=env), model=model) as rt:
        first = await rt.ask(QUESTION)
        await rt.ask("And beta?", first.conversation_id)
    return first.conversation_id, first.turn_id


async def test_list_fork_export_and_delete_from_the_command_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    cid, turn = await stored(home)
    env = clean_env(home)
    forked = actline("fork", cid, "--at", "1", "--title", "a branch", "--json", env=env)
    assert forked.returncode == 0, forked.stderr
    fork = json.loads(forked.stdout)
    assert fork["forked_from"] == [cid, turn] and fork["title"] == "a branch"
    out = tmp_path / "fork.md"
    listed = actline("conversations", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [c["conversation_id"] for c in json.loads(listed.stdout)] == [
        fork["conversation_id"],
        cid,
    ]
    refused = actline("conversations", "delete", cid, env=env)  # no terminal, no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    exported = actline(
        "conversations", "export", fork["conversation_id"], "--format", "markdown",
        "--out", str(out), env=env,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert out.read_text().startswith("# a branch\n") and QUESTION in out.read_text()
    assert "And beta?" not in out.read_text()
