"""The ``SKILL.md`` of ``actline agent-skill`` names only what the runtime really uses: the
ids an agent sees, its subjects, the environment of ``actline agent``'s command and the
commands themselves, each checked against a real turn on a real nats-server and the real
command-line parser."""

from __future__ import annotations

import asyncio
import io
import json
import re
import shlex
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from actline.actors.client.agent import AgentInbox
from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.bus import Bus, EmbeddedNats
from actline.cli.agent import AgentRunner
from actline.cli.main import _parser, _split_agent_command
from actline.cli.skill import agent_skill_text
from actline.config import Config
from actline.llm import ReplayModel
from actline.timeline.blocks import SIGNAL_DONE
from tests.actors.harness import say, start_node
from tests.waiting import until

TIMEOUT = 15.0
REVIEWER = "reviewer"
URL = "nats://10.0.0.5:4222"
ECHO_ENV = (
    "import json, os, sys; sys.stdin.read(); names = sys.argv[1:]; "
    "print('DONE(' + json.dumps({n: os.environ.get(n) for n in names}) + ')')"
)
"""A command that answers its task with the values of the variables named on its command line."""


def body(text: str) -> str:
    """The skill without its front matter."""
    _, front, rest = text.split("---\n", 2)
    assert yaml.safe_load(front)["name"] == "actline-reviewer"
    return rest


def spans(text: str) -> list[str]:
    """Every backquoted span and every line of a fenced block."""
    found = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", text)
    for block in re.findall(r"```\n(.*?)```", text, re.DOTALL):
        found.extend(line for line in block.splitlines() if line.strip())
    return found


@pytest.fixture
async def node(bus: Bus, tmp_path: Path) -> AsyncIterator[Node]:
    model = ReplayModel.of(
        [
            say("Asking.", calls=[("agent.send", {"name": REVIEWER, "text": "review it"})]),
            say("Going on.", answer="Reviewed."),
        ]
    )
    node = await start_node(bus, tmp_path / "home", model)
    try:
        yield node
    finally:
        await node.stop()


async def test_every_id_subject_variable_and_command_in_the_skill_is_the_runtimes(
    bus: Bus, nats_server: EmbeddedNats, node: Node, tmp_path: Path
) -> None:
    text = body(agent_skill_text(REVIEWER, URL, prefix=bus.subjects.prefix))
    named = spans(text)
    id_prefixes = {m.group(1) for s in named if (m := re.fullmatch(r"([a-z]+-)\.\.\.", s))}
    assert id_prefixes == {"task-", "t-", "c-"}
    assert "tk-" not in text
    variables = sorted(set(re.findall(r"\bACTLINE_[A-Z_]+\b", text)) - {"ACTLINE_NATS_CREDS"})
    assert variables == [
        "ACTLINE_AGENT",
        "ACTLINE_CONVERSATION_ID",
        "ACTLINE_TASK_ID",
        "ACTLINE_TURN_ID",
    ]

    # A real turn hands a task to the agent, run by `actline agent`'s runner with a command
    # that answers with the variables the skill names.
    creds = nats_server.creds_path("agent", name=REVIEWER, prefix=bus.subjects.prefix)
    agent_bus = await Bus.connect(
        nats_server.url, name="agent-reviewer", subject_names=bus.subjects, creds=creds
    )
    inbox = AgentInbox(agent_bus, REVIEWER, pull_s=0.5)
    out = io.StringIO()
    runner = AgentRunner(
        inbox, [sys.executable, "-c", ECHO_ENV, *variables], 30.0, Console(file=out)
    )
    client = Client(bus)
    worker: asyncio.Task[None] | None = None
    try:
        await inbox.start(within=TIMEOUT)
        worker = asyncio.create_task(runner.work())
        handle = await client.submit("Get the plan reviewed.")  # the client makes the ids
        result = await handle.wait(TIMEOUT)
        assert result.status == "completed", (result.status, result.error)
        await until(lambda: "answered by its DONE line; node: applied" in out.getvalue(), TIMEOUT)
    finally:
        if worker is not None:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        await inbox.close()
        await agent_bus.close()
        await client.close()

    cid = handle.conversation_id
    [signal] = [b for b in node.conversations[cid].tl.blocks if b.type == SIGNAL_DONE]
    task_id = signal.meta["task_id"]
    seen = json.loads(signal.text[signal.text.index("{") : signal.text.rindex("}") + 1])
    assert seen == {
        "ACTLINE_AGENT": REVIEWER,
        "ACTLINE_CONVERSATION_ID": cid,
        "ACTLINE_TASK_ID": task_id,
        "ACTLINE_TURN_ID": handle.turn_id,
    }
    for value in (task_id, handle.turn_id, cid):  # each id starts as the skill says
        assert [p for p in id_prefixes if value.startswith(p)], (value, id_prefixes)
    assert task_id.startswith("task-") and handle.turn_id.startswith("t-")

    # The subjects it names are the agent's own, as the runtime builds them.
    subjects = {s for s in named if s.startswith(f"{bus.subjects.prefix}.")}
    assert subjects == {
        bus.subjects.agent_inbox(REVIEWER),
        bus.subjects.agent_done_of(REVIEWER),
    }

    # Its commands are commands of the real parser, with real ids in place of the names.
    real = {"TASK_ID": task_id, "TURN_ID": handle.turn_id, "FILE": str(tmp_path / "r.creds")}
    commands = [s for s in named if s.startswith("actline ")]
    subcommands = {shlex.split(c)[1] for c in commands}
    assert subcommands == {"agent", "agents", "done", "creds"}
    full = [c for c in commands if len(shlex.split(c)) > 2]
    assert len(full) == 4, full
    for command in full:
        argv = [real.get(word, word) for word in shlex.split(command)[1:]]
        args = _parser().parse_args(argv)  # argparse exits on a command it does not know
        if args.command == "agent":
            _split_agent_command(args)
            assert (args.name, args.nats, args.cmd) == (REVIEWER, URL, ["COMMAND"])
        if args.command == "done":
            assert (args.name, args.task, args.turn, args.nats) == (
                REVIEWER,
                task_id,
                handle.turn_id,
                URL,
            )
        if args.command == "creds":
            assert (args.role, args.name) == ("agent", REVIEWER)

    # The credentials variable it names is the one the configuration reads.
    config = Config.load(env={"ACTLINE_NATS_CREDS": real["FILE"], "NATS_URL": URL})
    assert str(config.nats_creds) == real["FILE"]


def test_the_skill_names_no_subject_of_another_tenant() -> None:
    text = agent_skill_text(REVIEWER, prefix="acme-eu")
    assert "acme-eu.agent.reviewer.inbox" in text and "acme-eu.agent.reviewer.done" in text
    assert "al.agent." not in text
