"""``actline agent NAME -- CMD``: a ``DONE(summary)`` line in the command's output answers its
task, once, on the agent's own DONE subject.

The parser and the scanner are fed lines directly. The runner is the command's own
(``AgentRunner``), on a connection with the credentials of the ``agent reviewer`` role,
running a real ``python -c`` command per task against a node on a real nats-server whose
scripted model hands one task to ``reviewer``. Every wait is on an event or a condition.
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from actline import messages
from actline.actors.client.agent import AgentInbox
from actline.actors.client.client import Client, TurnHandle
from actline.actors.node.node import Node
from actline.bus import Bus, EmbeddedNats
from actline.cli.agent import AgentRunner, DoneLine, DoneScanner, parse_done_line
from tests.actors.harness import BlockViews, Scripted, say, start_node
from tests.waiting import until

TIMEOUT = 15.0
REVIEWER = "reviewer"


# --- the DONE line, fed directly -----------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("DONE(reviewed 3 items)", DoneLine("reviewed 3 items")),
        ("   DONE(reviewed 3 items)  \r", DoneLine("reviewed 3 items")),
        ("DONE(reviewer, reviewed 3 items)", DoneLine("reviewed 3 items", REVIEWER)),
        ("DONE(Claude, fine)", DoneLine("fine", "Claude")),
        (
            "DONE(checked the plan (v2), all tiers, no blockers)",
            DoneLine("checked the plan (v2), all tiers, no blockers"),
        ),
        ("DONE(reviewer, f(x) = 1, g(y) = 2)", DoneLine("f(x) = 1, g(y) = 2", REVIEWER)),
        ("DONE()", DoneLine("")),
        ("so I wrote DONE(reviewed) here", None),
        ("DONE(reviewed) and more", None),
        ("- DONE(reviewed)", None),
        ("done(reviewed)", None),
        ("DONE reviewed", None),
        ("", None),
    ],
)
def test_a_done_line_is_done_alone_on_its_line(line: str, expected: DoneLine | None) -> None:
    assert parse_done_line(line) == expected


def test_a_done_inside_a_fenced_code_block_is_not_a_signal() -> None:
    scanner = DoneScanner()
    lines = [
        "Here is how to answer:",
        "```text",
        "DONE(quoted in a block)",
        "~~~",  # not the fence that opened the block
        "DONE(still quoted)",
        "```",
        "~~~~",
        "DONE(quoted in a tilde block)",
        "~~~~",
        "DONE(the real one)",
    ]
    found = [scanner.feed(line) for line in lines]
    assert [f for f in found if f is not None] == [DoneLine("the real one")]


# --- the runner against a node -------------------------------------------------------------


@dataclass
class Setup(BlockViews):
    nats: EmbeddedNats
    bus: Bus
    model: Scripted
    node: Node
    client: Client

    async def submit(self, cid: str) -> TurnHandle:
        self.model.script(
            cid,
            [
                say("Asking.", calls=[("agent.send", {"name": REVIEWER, "text": "review it"})]),
                say("Going on.", answer="The plan is reviewed."),
            ],
        )
        return await self.client.submit("Get the plan reviewed.", conversation_id=cid)


@pytest.fixture
async def setup(bus: Bus, nats_server: EmbeddedNats, tmp_path: Path) -> AsyncIterator[Setup]:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        yield Setup(nats_server, bus, model, node, client)
    finally:
        await client.close()
        await node.stop()


@dataclass
class Agent:
    runner: AgentRunner
    out: io.StringIO

    def said(self, text: str) -> Callable[[], bool]:
        return lambda: text in self.out.getvalue()


@pytest.fixture
def agent(setup: Setup) -> Callable[[str], AbstractAsyncContextManager[Agent]]:
    """``actline agent reviewer -- python -c SCRIPT`` in process, on its own connection with
    the credentials of its role."""

    @asynccontextmanager
    async def run(script: str) -> AsyncIterator[Agent]:
        prefix = setup.bus.subjects.prefix
        creds = setup.nats.creds_path("agent", name=REVIEWER, prefix=prefix)
        bus = await Bus.connect(
            setup.nats.url, name="agent-reviewer", subject_names=setup.bus.subjects, creds=creds
        )
        inbox = AgentInbox(bus, REVIEWER, pull_s=0.5)
        out = io.StringIO()
        runner = AgentRunner(inbox, [sys.executable, "-c", script], 30.0, Console(file=out))
        await inbox.start(within=TIMEOUT)
        worker = asyncio.create_task(runner.work())
        try:
            yield Agent(runner, out)
        finally:
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
            await inbox.close()
            await bus.close()

    return run


async def completed(handle: TurnHandle) -> messages.ReActResult:
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", (result.status, result.error)
    return result


def only_signal(setup: Setup, cid: str) -> str:
    """The text of the one ``signal.done`` block of the conversation's one task."""
    [call] = [
        b.data["task_id"]
        for b in setup.blocks(cid)
        if b.meta.get("tool") == "agent.send" and isinstance(b.data, dict) and "task_id" in b.data
    ]
    [block] = setup.signals(cid, call)
    return str(block.text)


def printing(*lines: str) -> str:
    """A command that reads its task and prints ``lines``."""
    return f"import sys; sys.stdin.read(); print({chr(10).join(lines)!r})"


async def test_a_done_line_completes_the_waiting_turn_with_its_summary_once(
    setup: Setup, agent: Callable[[str], AbstractAsyncContextManager[Agent]]
) -> None:
    script = printing(
        "Looking at the plan.",
        "  DONE(checked the plan (v2), all tiers, no blockers)  ",
        "Bye.",
    )
    async with agent(script) as reviewer:
        handle = await setup.submit("c1")
        await completed(handle)
        await until(reviewer.said("answered by its DONE line; node: applied"), TIMEOUT)
        assert reviewer.runner.answered == 1
    text = only_signal(setup, "c1")
    assert "checked the plan (v2), all tiers, no blockers" in text
    assert "Looking at the plan." not in text and "Bye." not in text  # the line, not the output


async def test_a_done_line_answers_at_once_while_the_command_still_runs(
    setup: Setup,
    agent: Callable[[str], AbstractAsyncContextManager[Agent]],
    tmp_path: Path,
) -> None:
    go = tmp_path / "go"
    script = (
        "import os, sys, time; sys.stdin.read(); print('DONE(early answer)', flush=True)\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "print('late output')"
    )
    async with agent(script) as reviewer:
        handle = await setup.submit("c1")
        await completed(handle)  # the command is still running
        assert reviewer.runner.answered == 1
        go.touch()
        await until(reviewer.said("answered by its DONE line"), TIMEOUT)
    assert "early answer" in only_signal(setup, "c1")


async def test_a_done_line_naming_another_agent_is_ignored_with_a_warning(
    setup: Setup, agent: Callable[[str], AbstractAsyncContextManager[Agent]]
) -> None:
    script = printing("DONE(critic, reviewed for the critic)", "DONE(reviewer, reviewed it)")
    async with agent(script) as reviewer:
        handle = await setup.submit("c1")
        await completed(handle)
        await until(reviewer.said("answered by its DONE line; node: applied"), TIMEOUT)
        said = reviewer.out.getvalue()
        assert "ignored a DONE line naming agent 'critic', not 'reviewer'" in said
        assert "DONE(reviewer, summary) or DONE(summary)" in said
    text = only_signal(setup, "c1")
    assert "reviewed it" in text and "for the critic" not in text


async def test_a_done_inside_a_line_or_a_code_block_is_output_not_a_signal(
    setup: Setup, agent: Callable[[str], AbstractAsyncContextManager[Agent]]
) -> None:
    script = printing(
        "The protocol says DONE(summary) at the end.",
        "```",
        "DONE(an example in a code block)",
        "```",
        "Plain result: all fine.",
    )
    async with agent(script) as reviewer:
        handle = await setup.submit("c1")
        await completed(handle)
        await until(reviewer.said("answered; node: applied"), TIMEOUT)  # by its output
        assert "DONE line" not in reviewer.out.getvalue()
    text = only_signal(setup, "c1")
    assert "The protocol says DONE(summary) at the end." in text
    assert "Plain result: all fine." in text  # the whole output is the summary


async def test_two_done_lines_answer_the_task_once(
    setup: Setup, agent: Callable[[str], AbstractAsyncContextManager[Agent]]
) -> None:
    script = printing("DONE(the first answer)", "DONE(the second answer)")
    async with agent(script) as reviewer:
        handle = await setup.submit("c1")
        await completed(handle)
        await until(reviewer.said("answered by its DONE line; node: applied"), TIMEOUT)
        assert "its DONE was sent already; a second DONE line ignored" in reviewer.out.getvalue()
        assert reviewer.runner.answered == 1
    text = only_signal(setup, "c1")  # one signal block: applied once, nothing late
    assert "the first answer" in text and "the second answer" not in text
    assert not setup.notices("c1", "done_already_answered")


async def test_a_done_line_for_a_task_answered_already_says_it_found_no_open_task(
    setup: Setup, agent: Callable[[str], AbstractAsyncContextManager[Agent]], tmp_path: Path
) -> None:
    go = tmp_path / "go"
    script = (
        "import os, sys, time; sys.stdin.read()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "print('DONE(too late)')"
    )
    async with agent(script) as reviewer:
        handle = await setup.submit("c1")
        await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
        typed = await setup.client.send_done(REVIEWER, "typed by hand")  # `actline done`
        assert isinstance(typed, messages.Ack) and typed.detail == "applied", typed
        await completed(handle)
        go.touch()
        await until(reviewer.said("its DONE line found no open task to answer"), TIMEOUT)
        assert reviewer.runner.answered == 0
    assert "typed by hand" in only_signal(setup, "c1")
