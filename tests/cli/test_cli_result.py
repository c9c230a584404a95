"""``actline result TURN_ID``, run for real: a subprocess reading the results stream of a
real nats-server where an in-process node stored a turn's result."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from typing import NamedTuple

import pytest

from actline.actors import NodeSettings
from actline.actors.client.client import Client
from actline.actors.client.results import open_results
from actline.bus import Bus, EmbeddedNats
from actline.messages import ReActResult, Subjects, new_id
from tests.actors.harness import Scripted, say, start_node
from tests.creds import creds_env

from .test_cli_commands import actline, clean_env


class Stored(NamedTuple):
    url: str
    prefix: str
    result: ReActResult


async def _run_one_turn(url: str, prefix: str, home: Path) -> ReActResult:
    bus = await Bus.connect(url, subject_names=Subjects(prefix))
    await open_results(bus, NodeSettings())  # what Node.start does
    node = await start_node(bus, home, Scripted({"c1": [say("hm", answer="Forty-two.")]}))
    client = Client(bus)
    try:
        return await (await client.submit("The answer?", conversation_id="c1")).wait(30)
    finally:
        await client.close()
        await node.stop()
        await bus.close()


@pytest.fixture(scope="module")
def stored(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Stored:
    """A turn whose result a node stored, on a prefix of this module alone."""
    prefix = f"t{new_id().lower()}"
    home = tmp_path_factory.mktemp("result") / "home"
    result = asyncio.run(_run_one_turn(nats_server.url, prefix, home))
    assert result.status == "completed"
    return Stored(nats_server.url, prefix, result)


def result_of(stored: Stored, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(tmp_path / "home", NATS_URL=stored.url, ACTLINE_SUBJECT_PREFIX=stored.prefix)
    env |= creds_env(stored.url, "client", prefix=stored.prefix)
    return actline("result", *args, env=env)


def test_result_prints_a_stored_turns_answer_status_and_usage(
    stored: Stored, tmp_path: Path
) -> None:
    shown = result_of(stored, tmp_path, stored.result.turn_id)
    assert shown.returncode == 0, shown.stderr
    assert "Forty-two." in shown.stdout
    assert f"conversation c1 · turn {stored.result.turn_id} · completed" in shown.stdout
    assert re.search(r"rounds 1 · tokens in [\d,]+ · out [\d,]+ · cache read [\d,]+", shown.stdout)


def test_result_json_prints_the_stored_result(stored: Stored, tmp_path: Path) -> None:
    shown = result_of(stored, tmp_path, stored.result.turn_id, "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data == stored.result.model_dump(mode="json")


def test_result_of_an_unknown_turn_says_it_is_unknown_or_expired(
    stored: Stored, tmp_path: Path
) -> None:
    shown = result_of(stored, tmp_path, "t-never-ran", "--json")
    assert shown.returncode == 1
    assert shown.stdout == ""
    assert "turn t-never-ran is unknown, still running, or its result expired" in shown.stderr
    assert "ACTLINE_RESULT_RETENTION" in shown.stderr and "Traceback" not in shown.stderr


def test_result_where_no_node_ever_stored_one_says_so(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    nothing = Stored(nats_server.url, f"t{new_id().lower()}", ReActResult(
        conversation_id="c0", turn_id="t-0", status="completed"))  # fmt: skip
    shown = result_of(nothing, tmp_path, "t-0")
    assert shown.returncode == 1
    assert "no results are stored on" in shown.stderr and "Traceback" not in shown.stderr


def test_result_of_something_that_is_not_a_turn_id_names_the_fix(
    stored: Stored, tmp_path: Path
) -> None:
    shown = result_of(stored, tmp_path, "t.1")
    assert shown.returncode == 2
    assert "actline result: 't.1' is not a turn id" in shown.stderr


def test_result_without_nats_url_reads_the_embedded_servers_store(tmp_path: Path) -> None:
    home = tmp_path / "home"
    asked = actline("ask", "What are the limits?", "--json", env=clean_env(home))
    assert asked.returncode == 0, asked.stderr
    printed = json.loads(asked.stdout)
    assert printed.pop("canvas") == {}  # ask adds the panels it streamed; none are stored
    shown = actline("result", printed["turn_id"], "--json", env=clean_env(home))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == printed  # the stored result is what ask printed
