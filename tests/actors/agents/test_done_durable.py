"""DONEs and open agent tasks survive a node restart: a real node process whose
turn waits on the outside agent ``reviewer`` is SIGKILLed.

A: the DONE (with its task id) is sent while no node runs: the sender is told it was stored
and will be applied, and once the node is back the turn completes with the review.
B: the node is restarted first, then ``actline done reviewer "..."`` (no ids) is run: it finds
the open task, is applied, and the turn completes with the review.
C: with nothing to store it (no node ever started on this NATS), a DONE is retried with
backoff, then refused with ``DoneNotStored`` naming the agent, the time and the fix.

Every wait is on an event (the task on the agent's inbox, the ``waiting`` card, the ready
line, the result) with a generous bound; none is a timing assertion.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import pytest

from actline import messages
from actline.actors.client.client import Client
from actline.actors.errors import DoneNotStored
from actline.bus import Bus, EmbeddedNats, TaskStream
from actline.messages import AgentTask, ErrorReply
from tests.actors.agents.reviewer import QUESTION, REVIEWER, Inbox, applied
from tests.actors.nodeprocs import ROOT, NodeOptions, NodeProcess
from tests.creds import creds_env
from tests.waiting import until

pytestmark = pytest.mark.timeout(300)

RESULT_S = 120.0
"""Upper bound for the resumed turn's result."""


def node(nats: EmbeddedNats, bus: Bus, home: Path) -> NodeProcess:
    return NodeProcess(
        nats.url,
        bus.subjects.prefix,
        home,
        home.parent / "logs",
        # a parked turn's queue message comes back within ACTLINE_PARK of the restart (10 s
        # by default): 1 s here, the rest of the settings are the node's defaults
        NodeOptions(model_delay_s=0.0, env=(("ACTLINE_PARK", "1"),)),
    )


async def waiting_turn(
    bus: Bus, client: Client, cid: str
) -> tuple[AgentTask, asyncio.Future[messages.ReActResult]]:
    """Submit the question; return once its task reached the reviewer and the turn waits
    (the ``waiting`` card follows the commit of the round that sent the task)."""
    inbox = Inbox()
    await bus.subscribe(bus.subjects.agent_inbox(REVIEWER), inbox.on_task)
    handle = await client.submit(QUESTION, conversation_id=cid)
    task = await inbox.first()
    await handle.wait_for("waiting", detail=REVIEWER, timeout=60)
    assert task.turn_id == handle.turn_id and task.conversation_id == cid
    return task, handle.result


async def no_open_tasks(bus: Bus) -> bool:
    s = bus.subjects
    return not await TaskStream.bind(bus, name=s.tasks_stream).held(s.agent_inbox_any)


async def actline_done(nats: EmbeddedNats, bus: Bus, home: Path, summary: str) -> tuple[int, str]:
    """``actline done reviewer SUMMARY`` as a user runs it (no ids); exit code and output."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NATS_URL", "ANTHROPIC_API_KEY") and not k.startswith("ACTLINE_")
    }
    env |= creds_env(nats.url, "agent", name=REVIEWER, prefix=bus.subjects.prefix)
    env |= {
        "ACTLINE_HOME": str(home),
        "ACTLINE_EMBEDDINGS": "off",
        "ACTLINE_SUBJECT_PREFIX": bus.subjects.prefix,
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "200",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "actline",
        "done",
        REVIEWER,
        summary,
        "--nats",
        nats.url,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return int(proc.returncode or 0), out.decode(errors="replace")


async def test_a_done_sent_while_no_node_runs_completes_the_turn_after_restart(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    proc = node(nats_server, bus, home)
    client = Client(bus)
    try:
        await proc.start()
        task, result = await waiting_turn(bus, client, "c-done-a")
        await proc.kill()

        verdict = await client.send_done(
            REVIEWER, "retention is right", task_id=task.task_id, turn_id=task.turn_id
        )
        assert not isinstance(verdict, ErrorReply), verdict  # stored, to be applied

        await proc.start()
        answer = await asyncio.wait_for(asyncio.shield(result), RESULT_S)
        # the restarted node withdrew the answered task from the reviewer's durable inbox
        await until(lambda: no_open_tasks(bus), 30)
    finally:
        await client.close()
        await proc.stop()
    assert answer.status == "completed", answer.error
    assert f"{REVIEWER} reviewed this: retention is right" in answer.answer, answer.answer
    assert applied(home, "c-done-a") == [task.task_id]  # the task outlived the node


async def test_actline_done_without_ids_after_a_restart_finds_the_open_task(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    proc = node(nats_server, bus, home)
    client = Client(bus)
    try:
        await proc.start()
        _, result = await waiting_turn(bus, client, "c-done-b")
        await proc.kill()
        await proc.start()

        code, out = await actline_done(nats_server, bus, tmp_path / "cli", "backups are fine")
        assert code == 0 and "accepted" in out, out
        answer = await asyncio.wait_for(asyncio.shield(result), RESULT_S)
    finally:
        await client.close()
        await proc.stop()
    assert answer.status == "completed", answer.error
    assert f"{REVIEWER} reviewed this: backups are fine" in answer.answer, answer.answer
    assert len(applied(home, "c-done-b")) == 1, applied(home, "c-done-b")


async def test_a_done_nothing_stores_is_retried_with_backoff_then_refused_naming_the_fix(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client(bus)  # no node ever ran under this prefix: no DONE stream
    loop = asyncio.get_running_loop()
    began = loop.time()
    try:
        with caplog.at_level(logging.INFO, logger="actline.actors.client.agent"):
            with pytest.raises(DoneNotStored) as refused:
                await client.send_done(REVIEWER, "looks fine", turn_id="t-1", store_within=0.8)
    finally:
        await client.close()
    took = loop.time() - began
    retries = [r for r in caplog.records if "not stored yet" in r.getMessage()]
    assert len(retries) >= 3, [r.getMessage() for r in caplog.records]  # 0.1, 0.2, 0.4 s
    assert 0.6 <= took < 10, took  # it kept trying for about store_within, then gave up
    error = refused.value
    assert (error.agent, error.within_s) == (REVIEWER, 0.8)
    assert "could not be stored within 0.8 s" in str(error) and "start a node" in str(error)
