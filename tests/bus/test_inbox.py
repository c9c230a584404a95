"""Durable agent inboxes on a real nats-server: the task stream, an agent's consumer made by a
node, the agent's pull, and a work queue widened to more subjects (``actline.bus.inbox``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actline import messages
from actline.bus import AgentPull, Bus, EmbeddedNats, KvBucket, StreamMissing, TaskStream, WorkQueue
from actline.messages import AgentTask, DoneSignal, Subjects

WEEK_S = 7 * 24 * 3600.0


def task(task_id: str, agent: str = "reviewer") -> AgentTask:
    return AgentTask(
        agent=agent,
        conversation_id="c1",
        turn_id="t1",
        task_id=task_id,
        text="review it",
        done_subject=f"al.agent.{agent}.done",
    )


def task_id(data: bytes) -> str:
    msg = messages.decode(data)
    assert isinstance(msg, AgentTask)
    return msg.task_id


async def tasks(bus: Bus) -> TaskStream:
    s = bus.subjects
    return await TaskStream.open(
        bus,
        name=s.tasks_stream,
        subjects=s.agent_inbox_any,
        max_msg_size=messages.MAX_PAYLOAD,
        max_age_s=WEEK_S,
    )


@pytest.fixture
async def agent_bus(nats_server: EmbeddedNats, subject_names: Subjects) -> AsyncIterator[Bus]:
    """A second connection: the agent ``reviewer``'s, with its role's credentials."""
    creds = nats_server.creds_path("agent", name="reviewer", prefix=subject_names.prefix)
    connection = await Bus.connect(nats_server.url, subject_names=subject_names, creds=creds)
    try:
        yield connection
    finally:
        await connection.close()


async def test_the_stream_holds_what_was_stored_until_it_is_deleted(bus: Bus) -> None:
    stream = await tasks(bus)
    s = bus.subjects
    agents = ("reviewer", "critic", "reviewer")
    seqs = [
        await bus.publish_stored(s.agent_inbox(a), task(f"k{i}", a)) for i, a in enumerate(agents)
    ]
    held = await stream.held(s.agent_inbox("reviewer"))
    assert [(seq, task_id(data)) for seq, data in held] == [(seqs[0], "k0"), (seqs[2], "k2")]
    assert [task_id(d) for _, d in await stream.held(s.agent_inbox_any)] == ["k0", "k1", "k2"]

    assert await stream.delete(seqs[0]) is True
    assert await stream.delete(seqs[0]) is False  # gone already: no error
    assert [task_id(d) for _, d in await stream.held(s.agent_inbox_any)] == ["k1", "k2"]


async def test_an_agent_pulls_from_a_consumer_the_node_made_and_gets_all_again_after_a_reset(
    bus: Bus, agent_bus: Bus
) -> None:
    stream = await tasks(bus)
    s = bus.subjects
    consumer, inbox = s.agent_consumer("reviewer"), s.agent_inbox("reviewer")
    await bus.publish_stored(inbox, task("k1"))  # before the agent ever came
    assert await stream.ensure_consumer(consumer, inbox) is True
    assert await stream.ensure_consumer(consumer, inbox) is False  # there: left alone

    pull = await AgentPull.bind(agent_bus, stream=s.tasks_stream, consumer=consumer)
    try:
        assert await pull.check()
        first = await pull.pull(timeout=5)
        assert first is not None and task_id(first.data) == "k1" and first.deliveries == 1
        await first.ack()
        assert await pull.pull(timeout=0.3) is None  # acked: not again while connected
        await bus.publish_stored(s.agent_inbox("critic"), task("other", "critic"))
        assert await pull.pull(timeout=0.3) is None  # another agent's task

        assert await stream.ensure_consumer(consumer, inbox, reset=True) is True
        again = await pull.pull(timeout=5)  # the same binding: the consumer is found by name
        assert again is not None and task_id(again.data) == "k1"
    finally:
        await pull.close()


async def test_a_pull_from_a_consumer_that_is_gone_raises_stream_missing(
    bus: Bus, agent_bus: Bus
) -> None:
    stream = await tasks(bus)
    s = bus.subjects
    consumer = s.agent_consumer("reviewer")
    pull = await AgentPull.bind(agent_bus, stream=s.tasks_stream, consumer=consumer)
    try:
        assert not await pull.check()
        with pytest.raises(StreamMissing):
            await pull.pull(timeout=1)
        await stream.ensure_consumer(consumer, s.agent_inbox("reviewer"))
        assert await pull.check()
        assert await stream.delete_consumer(consumer) is True
        assert await stream.delete_consumer(consumer) is False
    finally:
        await pull.close()


async def test_a_work_queue_made_for_one_subject_is_widened_to_two(bus: Bus) -> None:
    s = bus.subjects

    async def open_queue(subject: str | tuple[str, ...]) -> WorkQueue:
        return await WorkQueue.open(
            bus,
            name=s.done_stream,
            subject=subject,
            consumer=s.done_consumer,
            ack_wait_s=10.0,
            max_msg_size=messages.MAX_PAYLOAD,
        )

    old = await open_queue(s.agent_done)  # as an earlier version made it
    await old.close()
    queue = await open_queue((s.agent_done_any, s.agent_done))
    try:
        for subject, agent in ((s.agent_done, "a"), (s.agent_done_of("reviewer"), "reviewer")):
            await bus.publish_stored(subject, DoneSignal(agent=agent, summary="ok"))
            item = await queue.pull(timeout=5)
            assert item is not None and item.subject == subject
            await item.ack()
    finally:
        await queue.close()


async def test_a_kv_put_writes_over_anything_and_keys_lists_the_live_ones(bus: Bus) -> None:
    kv = await KvBucket.open(bus, name=bus.subjects.agents_bucket)
    assert await kv.keys() == []
    first = await kv.put("reviewer", b"1")
    assert await kv.put("reviewer", b"2") > first
    await kv.put("critic", b"1")
    await kv.delete("critic")
    assert await kv.keys() == ["reviewer"]
    entry = await kv.get("reviewer")
    assert entry is not None and entry.value == b"2"
