"""A conversation's turns run in submission order whatever holds an earlier one, and the
queue heals when its stream is deleted under a running node."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest

from actline.actors.client.client import Client
from actline.actors.node.turn_queue import TurnQueue
from actline.bus import Bus, WorkQueue
from actline.messages import ErrorReply, Subjects, TurnRequest
from actline.storage import Store
from tests.actors.harness import Scripted, say, start_node
from tests.creds import creds_env
from tests.waiting import until


def turn_order(home: Path, cid: str) -> list[str]:
    with Store(home) as store:
        return [str(b["turn_id"]) for b in store.iter_blocks(cid) if b.get("type") == "turn.header"]


async def test_a_later_turn_waits_while_an_earlier_one_is_held_by_a_dead_taker(
    bus: Bus, subject_names: Subjects, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("one", answer="First."), say("two", answer="Second.")]})
    node = await start_node(bus, tmp_path / "home", model, ack_wait_s=1.0)
    await node.stop()  # the queue exists; the node is gone
    # A taker that dies holding t1: it pulls t1 and never settles it (as a SIGKILL leaves it).
    dead = await WorkQueue.open(
        bus,
        name=subject_names.turn_stream,
        subject=subject_names.turn_submit,
        consumer=subject_names.turn_consumer,
        ack_wait_s=1.0,
        max_msg_size=1 << 20,
    )
    client = Client(bus)
    try:
        first = await client.submit("first question", conversation_id="c1", turn_id="t1")
        held = await dead.pull(timeout=5.0)
        assert held is not None and held.stream_seq > 0
        await dead.close()
        second = await client.submit("second question", conversation_id="c1", turn_id="t2")
        node = await start_node(bus, tmp_path / "home", model, ack_wait_s=1.0)
        try:
            r2 = await second.wait(30)
            r1 = await first.wait(30)
        finally:
            await node.stop()
        held_back = node.queue.ordered
    finally:
        await client.close()
    assert (r1.answer, r2.answer) == ("First.", "Second.")
    assert turn_order(tmp_path / "home", "c1") == ["t1", "t2"]
    assert held_back >= 1  # t2 came first and was held back behind t1


async def test_back_to_back_turns_of_one_conversation_are_not_held_back(
    bus: Bus, tmp_path: Path
) -> None:
    outputs = [say(f"t{i}", answer=f"Answer {i}.") for i in range(4)]
    model = Scripted({"c1": outputs})
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        handles = [
            await client.submit(f"question {i}", conversation_id="c1", turn_id=f"t{i}")
            for i in range(4)
        ]
        results = [await h.wait(30) for h in handles]
    finally:
        await client.close()
        await node.stop()
    assert [r.answer for r in results] == [f"Answer {i}." for i in range(4)]
    assert turn_order(tmp_path / "home", "c1") == [f"t{i}" for i in range(4)]
    assert node.queue.ordered == 0  # earlier turns ran here: no round trip to the queue


async def test_deleted_turn_and_done_streams_are_recreated_and_serve_again(
    bus: Bus, subject_names: Subjects, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("a", answer="Before.")], "c2": [say("b", answer="After.")]})
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        assert (await (await client.submit("q", conversation_id="c1")).wait(30)).answer == "Before."
        creds = creds_env(bus.url, "admin", prefix=subject_names.prefix)["ACTLINE_NATS_CREDS"]
        nc = await nats.connect(bus.url, user_credentials=creds)
        js = nc.jetstream()
        await js.delete_stream(subject_names.turn_stream)
        await js.delete_stream(subject_names.done_stream)

        async def back() -> bool:
            try:
                await js.stream_info(subject_names.turn_stream)
                await js.stream_info(subject_names.done_stream)
            except nats.js.errors.NotFoundError:
                return False
            return True

        await until(back, timeout=30)
        await nc.close()
        after = await client.submit("q", conversation_id="c2")
        result = await after.wait(30)
        verdict = await client.send_done("reviewer", "nothing asked")
    finally:
        await client.close()
        await node.stop()
    assert result.answer == "After."
    assert node.queue.healed >= 1 and node.dones.healed >= 1
    assert isinstance(verdict, ErrorReply) and verdict.code == "no_outstanding_task"


async def test_a_redelivered_request_of_a_finished_turn_is_answered_again_not_rerun(
    bus: Bus, subject_names: Subjects, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("a", answer="Once.")]})
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        first = await (await client.submit("q", conversation_id="c1", turn_id="t1")).wait(30)
        again = await client.submit_request(
            TurnRequest(conversation_id="c1", turn_id="t1", text="q")
        )
        second = await again.wait(30)
    finally:
        await client.close()
        await node.stop()
    assert first.answer == second.answer == "Once."
    assert model.models["c1"].calls == 1
    assert turn_order(tmp_path / "home", "c1") == ["t1"]


async def test_the_heartbeat_follows_the_ack_wait_of_an_existing_consumer(
    bus: Bus, subject_names: Subjects, caplog: pytest.LogCaptureFixture
) -> None:
    older = await WorkQueue.open(
        bus,
        name=subject_names.turn_stream,
        subject=subject_names.turn_submit,
        consumer=subject_names.turn_consumer,
        ack_wait_s=7.0,
        max_msg_size=1 << 20,
    )
    await older.close()
    queue = TurnQueue(bus, ack_wait_s=2.0, max_active=1)

    async def take(request: TurnRequest) -> bool:
        return True

    await queue.start(take)
    try:
        assert queue.ack_wait_s == 7.0
    finally:
        await queue.stop()
    assert "keeps its ack wait of 7.0 s (ACTLINE_ACK_WAIT is 2.0 s)" in caplog.text
