"""Waiting turns hold no work slot (``actline.actors.services.parking``), over a real
nats-server.

A node with ``max_active_turns=2``: turns waiting on the outside agent ``reviewer`` are
parked and do not stop new turns; their queue messages stay in progress on the node (no
nak, no redelivery), or past the node's beats come back after a short park delay and are
parked again; each completes after its DONE (or its skip, or its wait timeout); a later
turn of a parked conversation waits behind it; and parked turns of a node that died
come back because their beats stopped (the ack wait: no nak was sent, and the park delay
is the longest there is), resume on the restarted node and take the DONE sent while no
node ran. The nak advisories of the turn consumer are watched on an admin connection. The
offline model (``ExtractiveModel``) puts the agent's summary in its answer. Every wait is
on a condition, never a sleep.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actline import messages
from actline.actors.client.client import Client, TurnHandle
from actline.actors.node.node import Node
from actline.actors.services.parking import PARK_MAX_S
from actline.bus import Bus, EmbeddedNats, QueueItem, WorkQueue
from actline.llm import ExtractiveModel
from actline.messages import Ack, AgentTask, ErrorReply, ReActResult, TurnRequest
from tests.actors.agents.reviewer import QUESTION, REVIEWER, Inbox, applied
from tests.actors.harness import Scripted, say, start_node
from tests.actors.node.queue_watch import naks, redelivered
from tests.actors.nodeprocs import NodeOptions, NodeProcess
from tests.waiting import until

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 30.0
PARK_S = 0.3
ACK_WAIT_S = 2.0
PLAIN = "What are the retention settings?"


class Agent(Inbox):
    """The reviewer's inbox (this test plays the agent), its tasks by turn."""

    async def task_of(self, turn_id: str) -> AgentTask:
        async with asyncio.timeout(TIMEOUT):
            while True:
                for task in self.tasks:
                    if task.turn_id == turn_id:
                        return task
                self.changed.clear()
                await self.changed.wait()


@pytest.fixture
async def agent(bus: Bus) -> AsyncIterator[Agent]:
    inbox = Agent()
    sub = await bus.subscribe(bus.subjects.agent_inbox(REVIEWER), inbox.on_task)
    yield inbox
    await sub.unsubscribe()


async def node_with(bus: Bus, tmp_path: Path, model: object, **changes: Any) -> Node:
    settings: dict[str, Any] = {
        "max_active_turns": 2,
        "park_s": PARK_S,
        "ack_wait_s": ACK_WAIT_S,
        **changes,
    }
    return await start_node(bus, tmp_path / "home", model, **settings)


async def waiting(client: Client, cid: str, text: str = QUESTION, **kw: object) -> TurnHandle:
    handle = await client.submit(text, conversation_id=cid, **kw)  # type: ignore[arg-type]
    await handle.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    return handle


async def done(client: Client, task: AgentTask, summary: str) -> None:
    reply = await client.send_done(
        REVIEWER, summary, task_id=task.task_id, turn_id=task.turn_id, timeout=TIMEOUT
    )
    assert isinstance(reply, Ack), reply


async def test_a_delivery_parked_with_a_delayed_nak_can_still_be_acked_by_the_server(
    bus: Bus,
) -> None:
    """What parking relies on (nats-server as installed): after ``nak(delay=...)`` the same
    delivery, re-armed, still acks the message, before or after its redelivery."""
    s = bus.subjects
    queue = await WorkQueue.open(
        bus,
        name=s.turn_stream,
        subject=s.turn_submit,
        consumer=s.turn_consumer,
        ack_wait_s=5.0,
        max_msg_size=messages.MAX_PAYLOAD,
    )

    async def pulled() -> QueueItem:
        async with asyncio.timeout(TIMEOUT):
            while (item := await queue.pull(timeout=1.0)) is None:
                pass
        return item

    try:
        for cid in ("c-before", "c-after"):
            await bus.publish_stored(
                s.turn_submit, TurnRequest(conversation_id=cid, turn_id=f"t-{cid}", text="x")
            )
        before = await pulled()
        await before.nak(delay=60.0)  # parked for a minute
        await before.rearmed().in_progress()
        await before.rearmed().ack()  # settled before its redelivery
        after = await pulled()
        assert after.stream_seq != before.stream_seq
        await after.nak(delay=0.2)
        again = await pulled()  # the delayed redelivery
        assert (again.stream_seq, again.deliveries) == (after.stream_seq, 2)
        await again.nak(delay=60.0)  # parked again
        await after.rearmed().ack()  # the first delivery still settles it
        await until(lambda: all_gone(queue, before.stream_seq, after.stream_seq), TIMEOUT)
    finally:
        await queue.close()


async def all_gone(queue: WorkQueue, *seqs: int) -> bool:
    return all([await queue.get(seq) is None for seq in seqs])


def record(ended: list[str], turn_id: str, _: object) -> None:
    ended.append(turn_id)


async def test_five_parked_turns_leave_room_stay_in_progress_and_complete_after_their_done(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path, client: Client, agent: Agent
) -> None:
    node = await node_with(bus, tmp_path, ExtractiveModel())
    try:
        async with naks(nats_server, bus) as naked:
            handles = [await waiting(client, f"c-park-{i}") for i in range(5)]
            await until(lambda: len(node.queue.parked) == 5 and node.queue.active == 0, TIMEOUT)
            # five waiting turns on a node of two slots: a new turn still runs, beside them
            plain = await client.submit(PLAIN, conversation_id="c-new")
            result = await plain.wait(TIMEOUT)
            assert result.status == "completed", result.error
            beats = node.queue.beats
            await until(lambda: node.queue.beats >= beats + 6, TIMEOUT)  # over an ack wait
            # kept in progress by the beats: nothing handed back, nothing came back
            assert len(node.queue.parked.kept()) == 5 and node.queue.parked.handed_back == 0
            assert naked == [] and await redelivered(nats_server, bus) == 0
            assert node.queue.parked.reparked == 0
            assert all(not h.result.done() for h in handles)

            for i, handle in enumerate(handles):
                await done(client, await agent.task_of(handle.turn_id), f"looks right {i}")
            results = [await h.wait(TIMEOUT) for h in handles]
            # a turn's result goes out before its queue message is acked: wait for the acks
            await until(lambda: node.queue.settled == 6, TIMEOUT)
            assert len(node.queue.parked) == 0 and node.queue.active == 0
            assert naked == []
    finally:
        await node.stop()
    for i, answer in enumerate(results):
        assert answer.status == "completed", answer.error
        assert f"{REVIEWER} reviewed this: looks right {i}" in answer.answer, answer.answer


async def test_past_the_beats_parked_messages_come_back_after_the_delay_and_park_again(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path, client: Client, agent: Agent
) -> None:
    node = await node_with(bus, tmp_path, ExtractiveModel())
    node.queue.parked.kept_max = 1  # the beats keep one parked turn, the others go back
    try:
        async with naks(nats_server, bus) as naked:
            handles = [await waiting(client, f"c-over-{i}") for i in range(3)]
            await until(lambda: len(node.queue.parked) == 3, TIMEOUT)
            await until(lambda: node.queue.parked.reparked >= 4, TIMEOUT)  # back, parked again
            assert len(node.queue.parked.kept()) == 1
            assert all(not h.result.done() for h in handles)
            for i, handle in enumerate(handles):
                await done(client, await agent.task_of(handle.turn_id), f"seen {i}")
            results = [await h.wait(TIMEOUT) for h in handles]
            await until(lambda: node.queue.settled == 3, TIMEOUT)
            kept = node.queue.parked.kept()
    finally:
        await node.stop()
    assert [r.status for r in results] == ["completed"] * 3, results
    assert kept == [] and len(set(naked)) == 2  # the two past the beats, handed back


async def test_a_parked_turns_wait_timeout_and_skip_still_move_it(
    bus: Bus, tmp_path: Path, client: Client
) -> None:
    send = ("agent.send", {"name": REVIEWER, "text": "review it"})
    model = Scripted(
        {
            cid: [say("Asking.", calls=[send]), say("On without it.", answer=f"{cid} done.")]
            for cid in ("c-timeout", "c-skip")
        }
    )
    node = await node_with(bus, tmp_path, model, max_active_turns=1)
    try:
        timed = await waiting(client, "c-timeout", "Review.", config={"wait_timeout_s": 1.0})
        skipped = await waiting(client, "c-skip", "Review.")
        await until(lambda: len(node.queue.parked) == 2, TIMEOUT)
        await client.skip_waiting(skipped.turn_id, "no time")
        results = [await timed.wait(TIMEOUT), await skipped.wait(TIMEOUT)]
    finally:
        await node.stop()
    assert [r.status for r in results] == ["completed", "completed"], results
    assert [r.answer for r in results] == ["c-timeout done.", "c-skip done."]
    await timed.wait_for("notice", detail="wait_timeout", timeout=TIMEOUT)
    await skipped.wait_for("notice", detail="wait_skipped", timeout=TIMEOUT)


async def test_a_later_turn_of_a_parked_conversation_waits_behind_it(
    bus: Bus, tmp_path: Path, client: Client, agent: Agent
) -> None:
    node = await node_with(bus, tmp_path, ExtractiveModel())
    try:
        first = await waiting(client, "c-order")
        second = await client.submit(PLAIN, conversation_id="c-order")
        # both wait (the second behind the first), neither holds a slot: others run
        await until(lambda: len(node.queue.parked) == 2 and node.queue.active == 0, TIMEOUT)
        others = [await client.submit(PLAIN, conversation_id=f"c-other-{i}") for i in range(3)]
        assert {(await h.wait(TIMEOUT)).status for h in others} == {"completed"}
        assert not first.result.done() and not second.result.done()

        await done(client, await agent.task_of(first.turn_id), "order kept")
        ended: list[str] = []
        for handle in (first, second):
            handle.result.add_done_callback(functools.partial(record, ended, handle.turn_id))
        results = [await first.wait(TIMEOUT), await second.wait(TIMEOUT)]
        turns = node.conversations["c-order"].tl.turn_ids()
    finally:
        await node.stop()
    assert [r.status for r in results] == ["completed", "completed"], results
    assert f"{REVIEWER} reviewed this: order kept" in results[0].answer
    assert turns == [first.turn_id, second.turn_id]  # on the timeline in submission order
    assert ended == [first.turn_id, second.turn_id]


async def test_parked_turns_of_a_killed_node_resume_and_take_a_done_sent_meanwhile(
    bus: Bus, nats_server: EmbeddedNats, tmp_path: Path, client: Client, agent: Agent
) -> None:
    """The park delay is the longest there is, longer than this test waits for the results:
    the parked turns come back because the killed node's beats stopped, and no nak was sent."""
    home = tmp_path / "home"
    env = (("ACTLINE_PARK", str(PARK_MAX_S)), ("ACTLINE_MAX_TURNS", "2"))
    proc = NodeProcess(
        nats_server.url, bus.subjects.prefix, home, tmp_path / "logs", NodeOptions(0.0, env=env)
    )
    cids = [f"c-kill-{i}" for i in range(3)]
    try:
        async with naks(nats_server, bus) as naked:
            await proc.start()
            handles = [await waiting(client, cid) for cid in cids]
            # three waiting turns on two slots: a new turn still completes in the process
            plain = await client.submit(PLAIN, conversation_id="c-kill-new")
            assert (await plain.wait(TIMEOUT)).status == "completed"
            tasks = [await agent.task_of(h.turn_id) for h in handles]
            await proc.kill()

            for i, task in enumerate(tasks):  # while no node runs: stored, applied later
                verdict = await client.send_done(
                    REVIEWER, f"verdict {i}", task_id=task.task_id, turn_id=task.turn_id
                )
                assert not isinstance(verdict, ErrorReply), verdict
            await proc.start()
            results = [await asyncio.wait_for(asyncio.shield(h.result), 90) for h in handles]

            # the same turn on a node that was never killed, for comparison
            reference = await waiting(client, "c-kill-ref")
            await done(client, await agent.task_of(reference.turn_id), "verdict 0")
            expected: ReActResult = await reference.wait(TIMEOUT)
            handed_back = list(naked)
    finally:
        await proc.stop()
    assert handed_back == []  # parked in progress; back after the ack wait, not a nak
    for i, (cid, task, result) in enumerate(zip(cids, tasks, results, strict=True)):
        assert result.status == "completed", result.error
        assert f"{REVIEWER} reviewed this: verdict {i}" in result.answer, result.answer
        assert applied(home, cid) == [task.task_id]  # applied once, after the restart
    assert results[0].answer == expected.answer
