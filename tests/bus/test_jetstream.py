"""JetStream behind the bus, on a real nats-server: the work queue, KV buckets, the event log."""

from __future__ import annotations

import asyncio
import pickle

import nats.errors
import nats.js.errors
import pytest

from actline import messages
from actline.bus import (
    AckFailed,
    AlreadyAcked,
    Bus,
    BusError,
    EventLog,
    JetStreamError,
    JetStreamUnavailable,
    KeyExists,
    KvBucket,
    KvEntry,
    NoStream,
    NotConnected,
    QueueItem,
    RequestTimeout,
    StreamMissing,
    WorkQueue,
    WrongRevision,
)
from actline.bus.jetstream import healer, translate
from actline.messages import TurnRequest
from tests.waiting import until


def turn(turn_id: str = "t1") -> TurnRequest:
    return TurnRequest(conversation_id="c1", turn_id=turn_id, text="hello")


def turn_id(data: bytes) -> str:
    msg = messages.decode(data)
    assert isinstance(msg, TurnRequest)
    return msg.turn_id


async def queue(bus: Bus, *, ack_wait_s: float = 30.0) -> WorkQueue:
    s = bus.subjects
    return await WorkQueue.open(
        bus,
        name=s.turn_stream,
        subject=s.turn_submit,
        consumer=s.turn_consumer,
        ack_wait_s=ack_wait_s,
        max_msg_size=messages.MAX_PAYLOAD,
    )


async def pull(q: WorkQueue, timeout: float = 10.0) -> QueueItem:
    item = await q.pull(timeout=timeout)
    assert item is not None, f"nothing pulled within {timeout}s"
    return item


# --- stored publish and the work queue -----------------------------------------------------------


async def test_a_stored_publish_without_a_stream_raises_no_stream(bus: Bus) -> None:
    with pytest.raises(NoStream) as caught:
        await bus.publish_stored(bus.subjects.turn_submit, turn())
    assert caught.value.subject == bus.subjects.turn_submit


async def test_a_stored_message_is_pulled_decoded_and_gone_once_acked(bus: Bus) -> None:
    q = await queue(bus)
    first = await bus.publish_stored(bus.subjects.turn_submit, turn("t1"))
    second = await bus.publish_stored(bus.subjects.turn_submit, turn("t2"))
    assert second == first + 1
    item = await pull(q)
    assert item.deliveries == 1 and item.stream_seq == first
    assert item.subject == bus.subjects.turn_submit
    assert turn_id(item.data) == "t1"
    await item.ack(confirm=5.0)
    nxt = await pull(q)
    assert turn_id(nxt.data) == "t2"
    await nxt.ack()
    assert await q.pull(timeout=0.3) is None
    await q.close()


async def test_a_nak_redelivers_and_counts_the_delivery(bus: Bus) -> None:
    q = await queue(bus)
    await bus.publish_stored(bus.subjects.turn_submit, turn())
    item = await pull(q)
    await item.nak()
    again = await pull(q)
    assert (again.deliveries, again.stream_seq, again.data) == (2, item.stream_seq, item.data)
    await again.nak(delay=0.3)
    third = await pull(q)
    assert third.deliveries == 3
    await third.ack()
    await q.close()


async def test_an_unsettled_message_comes_back_after_the_ack_wait(bus: Bus) -> None:
    q = await queue(bus, ack_wait_s=0.5)
    assert q.ack_wait_s == pytest.approx(0.5)
    await bus.publish_stored(bus.subjects.turn_submit, turn())
    first = await pull(q)
    again = await pull(q)
    assert again.deliveries == 2 and again.stream_seq == first.stream_seq
    await again.ack()
    await q.close()


async def test_in_progress_keeps_a_message_from_being_redelivered(bus: Bus) -> None:
    mine = await queue(bus, ack_wait_s=1.0)
    other = await queue(bus, ack_wait_s=1.0)
    await bus.publish_stored(bus.subjects.turn_submit, turn())
    item = await pull(mine)

    async def heartbeat() -> None:
        while True:
            await item.in_progress()
            await asyncio.sleep(0.1)

    beat = asyncio.create_task(heartbeat())
    try:
        assert await other.pull(timeout=2.5) is None  # more than two ack waits
    finally:
        beat.cancel()
    await item.ack()
    await mine.close()
    await other.close()


async def test_a_termed_message_is_never_redelivered(bus: Bus) -> None:
    q = await queue(bus, ack_wait_s=0.5)
    await bus.publish_stored(bus.subjects.turn_submit, turn())
    item = await pull(q)
    await item.term()
    assert await q.pull(timeout=1.5) is None  # three ack waits
    await q.close()


async def test_settling_a_settled_message_raises_already_acked(bus: Bus) -> None:
    q = await queue(bus)
    await bus.publish_stored(bus.subjects.turn_submit, turn())
    item = await pull(q)
    await item.ack()
    for settle in (item.ack, item.nak, item.term, item.in_progress):
        with pytest.raises(AlreadyAcked) as caught:
            await settle()
        assert caught.value.subject == bus.subjects.turn_submit
    await q.close()


async def test_two_queues_on_one_consumer_share_its_messages(bus: Bus) -> None:
    a = await queue(bus)
    b = await queue(bus)
    await bus.publish_stored(bus.subjects.turn_submit, turn("t1"))
    await bus.publish_stored(bus.subjects.turn_submit, turn("t2"))
    one = await pull(a)
    two = await pull(b)
    assert sorted([turn_id(one.data), turn_id(two.data)]) == ["t1", "t2"]
    await one.ack()
    await two.ack()
    await a.close()
    await b.close()


async def test_an_existing_consumer_keeps_its_ack_wait(bus: Bus) -> None:
    first = await queue(bus, ack_wait_s=7.0)
    second = await queue(bus, ack_wait_s=3.0)
    assert (first.ack_wait_s, second.ack_wait_s) == (7.0, 7.0)
    await first.close()
    await second.close()


async def test_stored_publish_dedupes_by_message_id(bus: Bus) -> None:
    await queue(bus)
    seq = await bus.publish_stored(bus.subjects.turn_submit, turn(), msg_id="m1")
    assert await bus.publish_stored(bus.subjects.turn_submit, turn(), msg_id="m1") == seq


async def test_a_closed_bus_refuses_stored_publishes(bus: Bus) -> None:
    await bus.close()
    with pytest.raises(NotConnected):
        await bus.publish_stored(bus.subjects.turn_submit, turn())


# --- key-value ---------------------------------------------------------------------------------


async def test_create_then_a_second_create_raises_key_exists(bus: Bus) -> None:
    kv = await KvBucket.open(bus, name=bus.subjects.leases_bucket)
    assert kv.ttl_s is None
    assert await kv.get("k") is None
    rev = await kv.create("k", b"one")
    entry = await kv.get("k")
    assert entry is not None and (entry.value, entry.revision) == (b"one", rev)
    with pytest.raises(KeyExists) as caught:
        await kv.create("k", b"two")
    assert (caught.value.key, caught.value.revision) == ("k", rev)


async def test_update_is_check_and_set(bus: Bus) -> None:
    kv = await KvBucket.open(bus, name=bus.subjects.heads_bucket)
    rev = await kv.create("k", b"one")
    rev2 = await kv.update("k", b"two", last=rev)
    assert rev2 > rev
    with pytest.raises(WrongRevision) as caught:
        await kv.update("k", b"three", last=rev)
    assert (caught.value.key, caught.value.expected) == ("k", rev)
    entry = await kv.get("k")
    assert entry is not None and (entry.value, entry.revision) == (b"two", rev2)


async def test_delete_with_a_stale_revision_is_refused_and_create_steps_over_the_marker(
    bus: Bus,
) -> None:
    kv = await KvBucket.open(bus, name=bus.subjects.leases_bucket)
    rev = await kv.create("k", b"one")
    rev2 = await kv.update("k", b"two", last=rev)
    with pytest.raises(WrongRevision):
        await kv.delete("k", last=rev)
    assert await kv.get("k") is not None
    await kv.delete("k", last=rev2)
    assert await kv.get("k") is None
    rev3 = await kv.create("k", b"again")
    assert rev3 > rev2
    await kv.delete("k")
    assert await kv.get("k") is None


async def test_a_ttl_bucket_ages_keys_out_and_they_can_be_created_again(bus: Bus) -> None:
    kv = await KvBucket.open(bus, name=bus.subjects.leases_bucket, ttl_s=1.0)
    assert kv.ttl_s == pytest.approx(1.0)
    assert await kv.status_ttl() == pytest.approx(1.0)
    rev = await kv.create("k", b"lease")

    async def gone() -> bool:
        return await kv.get("k") is None

    await until(gone, timeout=15)
    with pytest.raises(WrongRevision):
        await kv.update("k", b"renew", last=rev)
    with pytest.raises(WrongRevision):
        await kv.delete("k", last=rev)
    assert await kv.create("k", b"new owner") > rev


async def test_an_existing_buckets_ttl_wins_and_concurrent_opens_agree(bus: Bus) -> None:
    name = bus.subjects.leases_bucket
    a, b = await asyncio.gather(
        KvBucket.open(bus, name=name, ttl_s=5.0), KvBucket.open(bus, name=name, ttl_s=5.0)
    )
    assert a.ttl_s == b.ttl_s == pytest.approx(5.0)
    later = await KvBucket.open(bus, name=name, ttl_s=9.0)
    assert later.ttl_s == pytest.approx(5.0)


async def test_a_deleted_bucket_is_made_again_once_it_is_gone_for_good(
    bus: Bus, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(healer, "HEAL_CONFIRM_S", 0.3)
    monkeypatch.setattr(healer, "HEAL_CHECK_S", 0.05)
    kv = await KvBucket.open(bus, name=bus.subjects.heads_bucket, history=1)
    remade: list[int] = []
    kv.on_healed.append(lambda: remade.append(kv.healed))
    await kv.create("k", b"v")
    await bus.nc.jetstream().delete_key_value(bus.subjects.heads_bucket)
    with pytest.raises(StreamMissing):  # the error stands: nobody waits on the check
        await kv.get("k")
    await until(lambda: kv.healed == 1, timeout=10)
    assert remade == [1]
    assert "KV bucket " + kv.name + " is gone (deleted?): making it again" in caplog.text
    assert await kv.get("k") is None  # made again: its keys are gone
    assert await kv.create("k", b"w") == 1
    assert (await kv.get("k")) == KvEntry(b"w", 1)
    # a bucket only bound (not made by this process's open) is not made again
    bound = KvBucket(kv.name, kv._kv, None, 5.0)
    await bus.nc.jetstream().delete_key_value(bus.subjects.heads_bucket)
    with pytest.raises(StreamMissing):
        await bound.get("k")
    assert bound.healed == 0


async def test_an_invalid_key_is_a_jetstream_error(bus: Bus) -> None:
    kv = await KvBucket.open(bus, name=bus.subjects.heads_bucket)
    with pytest.raises(JetStreamError):
        await kv.get("a key")


# --- the event log -----------------------------------------------------------------------------


async def blocks_log(bus: Bus) -> EventLog:
    s = bus.subjects
    return await EventLog.open(
        bus, name=s.blocks_stream, subjects=s.blocks_all, max_msg_size=messages.MAX_PAYLOAD
    )


async def test_append_dedupes_by_message_id(bus: Bus) -> None:
    log = await blocks_log(bus)
    subject = bus.subjects.blocks("c1")
    seq = await log.append(subject, b"round", msg_id="r1.0")
    assert await log.append(subject, b"round", msg_id="r1.0") == seq
    assert await log.append(subject, b"round") == seq + 1
    assert await log.count() == 2
    assert await log.get(seq) == (subject, b"round")


async def test_next_after_walks_one_subject_in_order(bus: Bus) -> None:
    log = await blocks_log(bus)
    a, b = bus.subjects.blocks("c:a"), bus.subjects.blocks("c:b")
    for i in range(3):
        await log.append(a, f"a{i}".encode())
        await log.append(b, f"b{i}".encode())
    seen: list[bytes] = []
    seq = 1
    while (found := await log.next_after(a, seq)) is not None:
        at, data = found
        assert at >= seq
        seen.append(data)
        seq = at + 1
    assert seen == [b"a0", b"a1", b"a2"]
    assert await log.next_after(bus.subjects.blocks("c:none"), 1) is None
    await log.purge(a)
    assert await log.next_after(a, 1) is None
    assert await log.next_after(b, 1) is not None


async def test_opening_the_log_twice_binds_the_same_stream(bus: Bus) -> None:
    first, second = await asyncio.gather(blocks_log(bus), blocks_log(bus))
    seq = await first.append(bus.subjects.blocks("c1"), b"x")
    assert await second.get(seq) == (bus.subjects.blocks("c1"), b"x")


async def test_appending_outside_the_logs_subjects_raises_no_stream(bus: Bus) -> None:
    log = await blocks_log(bus)
    with pytest.raises(NoStream):
        await log.append(bus.subjects.stream("c1"), b"x")


async def test_a_deleted_log_raises_stream_missing(bus: Bus) -> None:
    log = await blocks_log(bus)
    await log.append(bus.subjects.blocks("c1"), b"x")
    await bus.nc.jetstream().delete_stream(bus.subjects.blocks_stream)
    with pytest.raises(StreamMissing):
        await log.next_after(bus.subjects.blocks("c1"), 1)
    with pytest.raises(StreamMissing):
        await log.count()


async def test_the_account_counts_streams(bus: Bus) -> None:
    before = await bus.jetstream_account()
    await blocks_log(bus)
    assert (await bus.jetstream_account()).streams == before.streams + 1


# --- errors ------------------------------------------------------------------------------------

ERRORS: list[BusError] = [
    JetStreamError("create stream", "bad config", 10058),
    JetStreamUnavailable("account info"),
    NoStream("al.turn.submit"),
    StreamMissing("AL_BLOCKS"),
    KeyExists("c=1", 7),
    WrongRevision("c=1", 7),
    AckFailed("nak", "al.turn.submit", "connection closed"),
    AlreadyAcked("ack", "al.turn.submit"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_jetstream_errors_pickle_with_their_fields(error: BusError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert vars(back) == vars(error)
    assert str(back) == str(error)
    assert isinstance(back, JetStreamError)


def test_nats_exceptions_become_bus_errors() -> None:
    def tr(exc: Exception) -> BusError:
        return translate(exc, "op", target="AL_TURNS", timeout=2.0)

    timeout = tr(nats.errors.TimeoutError())
    assert isinstance(timeout, RequestTimeout) and timeout.timeout == 2.0
    assert isinstance(tr(nats.errors.ConnectionClosedError()), NotConnected)
    assert isinstance(tr(nats.js.errors.ServiceUnavailableError()), JetStreamUnavailable)
    missing = tr(nats.js.errors.NotFoundError(code=404, err_code=10059, description="gone"))
    assert isinstance(missing, StreamMissing) and missing.name == "AL_TURNS"
    other = tr(nats.js.errors.BadRequestError(code=400, err_code=10058, description="in use"))
    assert isinstance(other, JetStreamError) and (other.code, other.reason) == (10058, "in use")
