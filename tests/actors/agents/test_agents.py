"""Outside agents and DONE over a real nats-server.

The first tests run ``agent_process.py``, an outside agent that speaks only the wire
contract (nats-py + msgpack), in a subprocess; the others answer with
``Client.send_done`` to reach the routing corners (no ids, ambiguity, skip, cancel,
a DONE that arrives while the turn is still acting). Every wait is on an event (a
card, a reply, a result) with a generous timeout, never on a sleep.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.actors.pools.tool_executor import ToolContext, ToolRegistry
from actline.bus import Bus, EmbeddedNats
from actline.messages import Ack, AgentTask, ErrorReply
from actline.timeline.blocks import SIGNAL_DONE
from actline.tools import KnowledgeSpace
from tests.actors.agents.runtime import (
    REVIEWER,
    SEND_TO_REVIEWER,
    TIMEOUT,
    Runtime,
    completed,
    reviewed_turn,
    submit,
)
from tests.actors.harness import KB, Scripted, say, settings

AGENT_SCRIPT = Path(__file__).parents[1] / "agent_process.py"


# --- helpers -------------------------------------------------------------------------------


class AgentProcess:
    """The subprocess's stdout, read as JSON events."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.seen: list[dict[str, Any]] = []

    async def _line(self) -> bytes:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), TIMEOUT)
        if not line:
            raise AssertionError(f"the agent process exited: {await self.stderr()}")
        return line

    async def stderr(self) -> str:
        if self.proc.returncode is None:
            self.proc.kill()
        assert self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode(errors="replace")[-2000:]

    async def next(self, event: str) -> dict[str, Any]:
        """The next JSON line whose ``event`` is ``event``."""
        while True:
            data = json.loads(await self._line())
            self.seen.append(data)
            if data.get("event") == event:
                return data


@asynccontextmanager
async def agent_process(
    nats_server: EmbeddedNats, bus: Bus, mode: str, *, delay: float | None = None
) -> AsyncIterator[AgentProcess]:
    args = [
        str(AGENT_SCRIPT),
        "--nats",
        nats_server.url,
        "--prefix",
        bus.subjects.prefix,
        "--name",
        REVIEWER,
        "--mode",
        mode,
        "--creds",  # the agent's own role: its hello, its consumer, its DONE subject
        str(nats_server.creds_path("agent", name=REVIEWER, prefix=bus.subjects.prefix)),
    ]
    if delay is not None:
        args += ["--delay", str(delay)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    agent = AgentProcess(proc)
    try:
        line = await agent._line()
        assert line.strip() == b"ready", line
        yield agent
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


# --- an outside agent in its own process -------------------------------------------------


async def test_an_agent_process_answers_done_and_the_turn_completes(
    rt: Runtime, bus: Bus, nats_server: EmbeddedNats
) -> None:
    async with agent_process(nats_server, bus, "normal") as agent:
        handle = await submit(rt, "c1", reviewed_turn(), "Get the plan reviewed.")
        await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
        task = await agent.next("task")
        reply = await agent.next("reply")
        await completed(handle)
    assert task["turn_id"] == handle.turn_id and task["conversation_id"] == "c1"
    assert (reply["kind"], reply["detail"]) == ("ack", "applied")
    [block] = rt.signals("c1", task["task_id"])
    assert "reviewed: review the plan" in block.text and not block.meta.get("late")
    assert rt.task_ids("c1", handle.turn_id) == [task["task_id"]]
    await handle.wait_for("tool_result", detail="DONE from reviewer", timeout=TIMEOUT)


async def test_a_duplicate_done_from_the_agent_process_is_applied_once(
    rt: Runtime, bus: Bus, nats_server: EmbeddedNats
) -> None:
    async with agent_process(nats_server, bus, "duplicate") as agent:
        handle = await submit(rt, "c1", reviewed_turn(), "Get the plan reviewed.")
        await handle.wait_for("waiting", timeout=TIMEOUT)
        task = await agent.next("task")
        first = await agent.next("reply")
        second = await agent.next("reply")
        await completed(handle)
    assert (first["kind"], first["detail"]) == ("ack", "applied")
    assert second["kind"] == "ack" and second["detail"].startswith("duplicate"), second
    assert len(rt.signals("c1", task["task_id"])) == 1


async def test_a_done_from_the_wrong_agent_is_refused_and_the_right_one_applied(
    rt: Runtime, bus: Bus, nats_server: EmbeddedNats
) -> None:
    async with agent_process(nats_server, bus, "wrong_agent") as agent:
        handle = await submit(rt, "c1", reviewed_turn(), "Get the plan reviewed.")
        await handle.wait_for("waiting", timeout=TIMEOUT)
        task = await agent.next("task")
        wrong = await agent.next("reply")
        right = await agent.next("reply")
        await completed(handle)
    assert wrong["agent"] == "impostor"  # on reviewer's own subject: refused before routing
    assert (wrong["kind"], wrong["code"]) == ("error.reply", "agent_mismatch"), wrong
    assert (right["agent"], right["kind"], right["detail"]) == (REVIEWER, "ack", "applied")
    assert not rt.notices("c1", "done_wrong_agent")
    [block] = rt.signals("c1", task["task_id"])
    assert block.meta["agent"] == REVIEWER


async def test_a_done_without_ids_goes_to_the_agents_only_open_task(
    rt: Runtime, bus: Bus, nats_server: EmbeddedNats
) -> None:
    async with agent_process(nats_server, bus, "no_ids") as agent:
        handle = await submit(rt, "c1", reviewed_turn(), "Get the plan reviewed.")
        await handle.wait_for("waiting", timeout=TIMEOUT)
        task = await agent.next("task")
        reply = await agent.next("reply")
        await completed(handle)
    assert (reply["kind"], reply["detail"]) == ("ack", "applied"), reply
    [block] = rt.signals("c1", task["task_id"])
    assert "reviewed: review the plan" in block.text


async def test_a_done_after_the_wait_timed_out_is_recorded_late_and_announced_next_turn(
    rt: Runtime, bus: Bus, nats_server: EmbeddedNats
) -> None:
    outputs = [
        *reviewed_turn(),
        say("Noting the late review.", answer="The late review is noted."),
    ]
    async with agent_process(nats_server, bus, "late", delay=1.0) as agent:
        handle = await submit(
            rt, "c1", outputs, "Get the plan reviewed.", config={"wait_timeout_s": 0.3}
        )
        await handle.wait_for("waiting", timeout=TIMEOUT)
        task = await agent.next("task")
        await handle.wait_for("notice", detail="wait_timeout", timeout=TIMEOUT)
        await completed(handle)
        reply = await agent.next("reply")
    assert reply["kind"] == "ack" and reply["detail"].startswith("late"), reply
    assert len(rt.notices("c1", "wait_timeout")) == 1
    [block] = rt.signals("c1", task["task_id"])
    assert block.meta.get("late") is True and block.meta.get("for_turn") == handle.turn_id

    following = await rt.client.submit("And now?", conversation_id="c1")
    result = await following.wait(TIMEOUT)
    assert result.status == "completed", result.error
    requests = rt.model.models["c1"].requests
    assert len(requests) == 3
    announce = requests[2].blocks[-1]["text"]
    assert "late DONE from reviewer" in announce and task["task_id"] in announce
    # the turn that timed out did not show it: it came after that turn's last render
    assert "late DONE" not in requests[1].blocks[-1]["text"]


# --- routing corners, answered with Client.send_done ------------------------------------------


async def test_a_done_without_ids_when_the_agent_has_no_open_task_is_refused(
    rt: Runtime,
) -> None:
    reply = await rt.client.send_done(REVIEWER, "all good", timeout=TIMEOUT)
    assert isinstance(reply, ErrorReply) and reply.code == "no_outstanding_task", reply


async def test_a_done_without_ids_for_an_agent_waited_on_by_two_turns_is_ambiguous(
    rt: Runtime,
) -> None:
    a = await submit(rt, "c1", reviewed_turn(), "Review plan one.")
    b = await submit(rt, "c2", reviewed_turn(), "Review plan two.")
    await a.wait_for("waiting", timeout=TIMEOUT)
    await b.wait_for("waiting", timeout=TIMEOUT)

    reply = await rt.client.send_done(REVIEWER, "which one?", timeout=TIMEOUT)
    assert isinstance(reply, ErrorReply) and reply.code == "ambiguous_done", reply
    for cid, handle in (("c1", a), ("c2", b)):
        assert rt.phase(cid) == "waiting"
        assert not handle.result.done()
        assert not [c for c in handle.cards if "DONE from" in c.detail]
        assert not [x for x in rt.blocks(cid) if x.type == SIGNAL_DONE]

    for cid, handle in (("c1", a), ("c2", b)):
        [task_id] = rt.task_ids(cid, handle.turn_id)
        answer = await rt.client.send_done(
            REVIEWER, f"done {cid}", turn_id=handle.turn_id, task_id=task_id, timeout=TIMEOUT
        )
        assert isinstance(answer, Ack) and answer.detail == "applied", answer
        await completed(handle)
        assert len(rt.signals(cid, task_id)) == 1


async def test_skip_waiting_resumes_thinking_with_a_wait_skipped_notice(rt: Runtime) -> None:
    outputs = [
        say("Asking the reviewer.", calls=[SEND_TO_REVIEWER]),
        say("Going on without the review.", answer="Unreviewed plan."),
    ]
    handle = await submit(rt, "c1", outputs, "Review the plan.")
    await handle.wait_for("waiting", timeout=TIMEOUT)
    await rt.client.skip_waiting(handle.turn_id, "no time")
    await completed(handle)
    await handle.wait_for("notice", detail="wait_skipped", timeout=TIMEOUT)
    [notice] = rt.notices("c1", "wait_skipped")
    assert REVIEWER in notice.text
    phases = [c.phase for c in handle.cards]
    assert phases.index("waiting") < phases.index("thinking", phases.index("waiting"))
    # the model's second round saw the notice
    second = rt.model.models["c1"].requests[1]
    assert any("wait_skipped" in (part.get("text") or "") for part in second.blocks)


async def test_cancel_while_waiting_ends_the_turn_cancelled(rt: Runtime) -> None:
    outputs = [say("Asking the reviewer.", calls=[SEND_TO_REVIEWER])]
    handle = await submit(rt, "c1", outputs, "Review the plan.")
    await handle.wait_for("waiting", timeout=TIMEOUT)
    await rt.client.cancel(handle.turn_id, "changed my mind")
    result = await handle.wait(TIMEOUT)
    assert result.status == "cancelled", result
    assert "changed my mind" in (result.error or "")
    assert handle.cards[-1].phase == "complete"
    assert len(rt.notices("c1", "cancelled")) == 1
    assert rt.model.models["c1"].calls == 1


async def test_done_during_acting_is_queued_and_applied_when_the_turn_would_wait(
    bus: Bus, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()

    async def slow(params: dict[str, Any], ctx: ToolContext) -> str:
        started.set()
        await gate.wait()
        return "slow work finished"

    registry = ToolRegistry()
    registry.register("test.slow", slow, timeout_s=30.0)
    model = Scripted(
        {
            "c1": [
                say("Review and slow work.", calls=[SEND_TO_REVIEWER, ("test.slow", {})]),
                say("Both are in.", answer="Reviewed and done."),
            ]
        }
    )
    node = Node(
        bus,
        settings(tmp_path / "home"),
        model=model,
        registry=registry,
        knowledge=KnowledgeSpace(KB),
    )
    await node.start()
    client = Client(bus)
    inbox: asyncio.Queue[AgentTask] = asyncio.Queue()

    async def on_task(msg: Any, env: Any) -> None:
        if isinstance(msg, AgentTask):
            await inbox.put(msg)

    sub = await bus.subscribe(bus.subjects.agent_inbox(REVIEWER), on_task)
    try:
        handle = await client.submit("Review and work.", conversation_id="c1")
        task = await asyncio.wait_for(inbox.get(), TIMEOUT)
        await asyncio.wait_for(started.wait(), TIMEOUT)
        assert str(node.conversations["c1"].current.state.phase) == "acting"

        reply = await client.send_done(
            REVIEWER, "looks fine", turn_id=task.turn_id, task_id=task.task_id, timeout=TIMEOUT
        )
        assert isinstance(reply, Ack) and reply.detail.startswith("queued"), reply
        await handle.wait_for("notice", detail="queued", timeout=TIMEOUT)
        assert not [b for b in node.conversations["c1"].tl.blocks if b.type == SIGNAL_DONE]

        gate.set()
        result = await handle.wait(TIMEOUT)
        assert result.status == "completed", result.error
        blocks = node.conversations["c1"].tl.blocks
        signals = [b for b in blocks if b.type == SIGNAL_DONE]
        assert [b.meta["task_id"] for b in signals] == [task.task_id]
        assert not signals[0].meta.get("late")
        # the DONE was drained on the way into Waiting: the turn never had to wait
        assert "waiting" not in [c.phase for c in handle.cards]
        assert result.rounds == 2
    finally:
        gate.set()
        await sub.unsubscribe()
        await client.close()
        await node.stop()
