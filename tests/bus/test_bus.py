"""The typed bus on a real nats-server: tell, ask, queue groups, dead letters, reconnects."""

from __future__ import annotations

import asyncio
import pickle
from collections import Counter

import pytest

from actline import messages
from actline.bus import (
    Bus,
    ConnectFailed,
    EmbeddedNats,
    Envelope,
    NatsServerError,
    NatsServerNotFound,
    NoResponders,
    NotConnected,
    RemoteError,
    RequestTimeout,
)
from actline.messages import (
    DeadLetter,
    ErrorReply,
    Message,
    PayloadTooLarge,
    SkipWaiting,
    TurnAccepted,
    TurnRequest,
    decode,
)


def turn(text: str = "hello", turn_id: str = "t1") -> TurnRequest:
    return TurnRequest(conversation_id="c1", turn_id=turn_id, text=text)


async def accept(msg: Message, env: Envelope) -> Message | None:
    assert isinstance(msg, TurnRequest)
    return TurnAccepted(conversation_id=msg.conversation_id, turn_id=msg.turn_id, node="n1")


async def test_request_returns_the_decoded_reply(bus: Bus) -> None:
    subject = bus.subjects.turn_submit
    await bus.subscribe(subject, accept)
    reply = await bus.request(subject, turn(turn_id="t42"))
    assert isinstance(reply, TurnAccepted)
    assert (reply.turn_id, reply.node) == ("t42", "n1")


async def test_published_messages_reach_the_handler_decoded_with_their_envelope(bus: Bus) -> None:
    got: asyncio.Queue[tuple[Message, Envelope]] = asyncio.Queue()

    async def handler(msg: Message, env: Envelope) -> None:
        await got.put((msg, env))

    subject = bus.subjects.stream("c1")
    await bus.subscribe(subject, handler)
    await bus.publish(subject, turn("one"), headers={"al-trace": "tr-1"})
    msg, env = await asyncio.wait_for(got.get(), 5)
    assert isinstance(msg, TurnRequest) and msg.text == "one"
    assert env.subject == subject and env.reply is None and env.size > 0
    assert env.headers["al-trace"] == "tr-1"


async def test_a_subscription_is_live_for_every_connection_when_subscribe_returns(
    nats_server: EmbeddedNats, subject_names: messages.Subjects
) -> None:
    # Regression: nats-py's flush PING overtook a pending SUB, so a request
    # from another connection right after subscribe() found no responders.
    for i in range(30):
        client = await Bus.connect(nats_server.url, subject_names=subject_names)
        server = await Bus.connect(nats_server.url, subject_names=subject_names)
        subject = subject_names.conv(f"c{i}", "render")
        await server.subscribe(subject, accept)
        assert isinstance(await client.request(subject, turn()), TurnAccepted)
        await client.close()
        await server.close()


async def test_request_without_a_reply_times_out(bus: Bus) -> None:
    async def silent(msg: Message, env: Envelope) -> None:
        return None

    subject = bus.subjects.turn_control("t1")
    await bus.subscribe(subject, silent)
    with pytest.raises(RequestTimeout) as info:
        await bus.request(subject, SkipWaiting(turn_id="t1"), timeout=0.2)
    assert info.value.subject == subject and info.value.timeout == 0.2


async def test_request_to_nobody_raises_no_responders(bus: Bus) -> None:
    with pytest.raises(NoResponders, match="no responders"):
        await bus.request(bus.subjects.result("nobody"), turn(), timeout=2)


async def test_queue_group_spreads_work_over_two_subscribers(
    nats_server: EmbeddedNats, bus: Bus
) -> None:
    other = await Bus.connect(nats_server.url, subject_names=bus.subjects)
    counts: Counter[str] = Counter()
    all_in = asyncio.Event()
    total = 200

    def worker(name: str):  # type: ignore[no-untyped-def]
        async def handle(msg: Message, env: Envelope) -> None:
            counts[name] += 1
            if sum(counts.values()) == total:
                all_in.set()

        return handle

    subject = bus.subjects.tools_exec
    await bus.subscribe(subject, worker("a"), queue="tools")
    await other.subscribe(subject, worker("b"), queue="tools")
    for i in range(total):
        await bus.publish(subject, turn(turn_id=f"t{i}"))
    await asyncio.wait_for(all_in.wait(), 10)
    assert sum(counts.values()) == total  # each message went to exactly one worker
    assert counts["a"] > 0 and counts["b"] > 0, counts
    await other.close()


async def test_garbage_is_dead_lettered_and_the_subscription_keeps_serving(bus: Bus) -> None:
    letters: asyncio.Queue[Message] = asyncio.Queue()
    received: asyncio.Queue[Message] = asyncio.Queue()

    async def on_letter(msg: Message, env: Envelope) -> None:
        await letters.put(msg)

    async def handler(msg: Message, env: Envelope) -> None:
        await received.put(msg)

    subject = bus.subjects.turn_submit
    await bus.subscribe(bus.subjects.deadletter, on_letter)
    await bus.subscribe(subject, handler)
    await bus.flush()
    await bus.nc.publish(subject, b"\xc1 this is not msgpack")
    await bus.publish(subject, turn("valid"))

    letter = await asyncio.wait_for(letters.get(), 5)
    assert isinstance(letter, DeadLetter)
    assert letter.subject == subject
    assert letter.raw == b"\xc1 this is not msgpack" and not letter.truncated
    assert "msgpack" in letter.reason
    good = await asyncio.wait_for(received.get(), 5)
    assert isinstance(good, TurnRequest) and good.text == "valid"
    assert received.empty()
    assert bus.counters["dead_letter"] == 1


async def test_a_malformed_request_is_answered_with_decode_error(bus: Bus) -> None:
    subject = bus.subjects.turn_submit
    await bus.subscribe(subject, accept)
    wrong_shape = messages.encode(turn())[:-4]
    raw = await bus.nc.request(subject, wrong_shape, timeout=5)
    reply = decode(raw.data)
    assert isinstance(reply, ErrorReply) and reply.code == "decode_error"
    assert reply.subject == subject


async def test_handler_errors_are_answered_and_the_subscription_keeps_serving(bus: Bus) -> None:
    async def flaky(msg: Message, env: Envelope) -> Message | None:
        assert isinstance(msg, TurnRequest)
        if msg.text == "boom":
            raise ValueError("cannot take this turn")
        return await accept(msg, env)

    subject = bus.subjects.turn_submit
    await bus.subscribe(subject, flaky)
    with pytest.raises(RemoteError) as info:
        await bus.request(subject, turn("boom"))
    assert info.value.code == "handler_error"
    assert "cannot take this turn" in info.value.message
    reply = await bus.request(subject, turn("fine"))
    assert isinstance(reply, TurnAccepted)
    error = await bus.request(subject, turn("boom"), raise_remote=False)
    assert isinstance(error, ErrorReply)


async def test_large_payloads_up_to_the_server_limit_pass(bus: Bus) -> None:
    assert bus.max_payload == messages.MAX_PAYLOAD

    async def echo(msg: Message, env: Envelope) -> Message:
        return msg

    subject = bus.subjects.llm_generate
    await bus.subscribe(subject, echo)
    big = turn("x" * (7 * 1024 * 1024))
    reply = await bus.request(subject, big, timeout=10)
    assert isinstance(reply, TurnRequest) and len(reply.text) == len(big.text)
    with pytest.raises(PayloadTooLarge):
        await bus.publish(subject, turn("x" * (9 * 1024 * 1024)))


async def test_unsubscribe_stops_delivery(bus: Bus) -> None:
    subject = bus.subjects.turn_submit
    sub = await bus.subscribe(subject, accept)
    assert isinstance(await bus.request(subject, turn()), TurnAccepted)
    await sub.unsubscribe()
    with pytest.raises(NoResponders):
        await bus.request(subject, turn(), timeout=2)


async def test_server_restart_the_client_reconnects_tells_its_hooks_and_serves_again(
    fresh_nats: EmbeddedNats,
) -> None:
    client = await Bus.connect(fresh_nats.url)
    server = await Bus.connect(fresh_nats.url)
    subject = client.subjects.turn_submit
    await server.subscribe(subject, accept)
    assert isinstance(await client.request(subject, turn()), TurnAccepted)
    told: list[str] = []
    removers = [
        client.on_disconnect(lambda: told.append("down")),
        client.on_reconnect(lambda: told.append("up")),
    ]

    await asyncio.to_thread(fresh_nats.restart)
    await client.wait_connected(timeout=15, reconnects=1)
    await server.wait_connected(timeout=15, reconnects=1)
    await server.flush()
    reply = await client.request(subject, turn(turn_id="after"), timeout=5)
    assert isinstance(reply, TurnAccepted) and reply.turn_id == "after"
    assert client.counters["reconnects"] == 1
    # the hooks were told, in order; removed, they are not told of the next restart
    assert told == ["down", "up"]
    for remove in removers:
        remove()
    await asyncio.to_thread(fresh_nats.restart)
    await client.wait_connected(timeout=15, reconnects=2)
    assert told == ["down", "up"]
    await client.close()
    await server.close()


async def test_connecting_to_nothing_says_what_to_do() -> None:
    with pytest.raises(ConnectFailed, match="NATS_URL") as info:
        await Bus.connect("nats://127.0.0.1:9", connect_attempts=1, reconnect_wait=0.05)
    assert info.value.url == "nats://127.0.0.1:9"


async def test_using_a_closed_bus_raises_not_connected(nats_server: EmbeddedNats) -> None:
    closed = await Bus.connect(nats_server.url)
    await closed.close()
    with pytest.raises(NotConnected):
        await closed.publish("al.x", turn())
    with pytest.raises(NotConnected):
        await closed.request("al.x", turn())


@pytest.mark.parametrize(
    "error",
    [
        RequestTimeout("al.x", 1.5),
        NoResponders("al.x"),
        RemoteError("al.x", "handler_error", "boom"),
        NotConnected("closed"),
        ConnectFailed("nats://h:1", "refused"),
        NatsServerError("exited", "log tail"),
        NatsServerNotFound("/usr/bin"),
    ],
)
def test_bus_errors_pickle_with_their_fields(error: Exception) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and vars(back) == vars(error)


async def test_a_concurrent_subscription_runs_handlers_side_by_side_up_to_its_limit(
    bus: Bus,
) -> None:
    subject = bus.subjects.llm_generate
    release = asyncio.Event()
    running = 0
    peak = 0

    async def slow(msg: Message, env: Envelope) -> Message | None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return await accept(msg, env)

    sub = await bus.subscribe(subject, slow, concurrency=3)
    asks = [
        asyncio.create_task(bus.request(subject, turn(turn_id=f"t{i}"), timeout=10))
        for i in range(5)
    ]
    for _ in range(100):
        if peak == 3:
            break
        await asyncio.sleep(0.02)
    assert peak == 3 and sub.in_flight == 3  # the other two wait for a free slot
    release.set()
    replies = await asyncio.gather(*asks)
    assert sorted(r.turn_id for r in replies if isinstance(r, TurnAccepted)) == [
        f"t{i}" for i in range(5)
    ]
    assert peak == 3


async def test_unsubscribe_cancels_the_handlers_a_concurrent_subscription_is_running(
    bus: Bus,
) -> None:
    subject = bus.subjects.tools_exec
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def stuck(msg: Message, env: Envelope) -> Message | None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return None

    sub = await bus.subscribe(subject, stuck, concurrency=2)
    await bus.publish(subject, turn())
    await asyncio.wait_for(started.wait(), 5)
    await sub.unsubscribe()
    assert cancelled.is_set() and sub.in_flight == 0
    with pytest.raises(ValueError, match="at least 1"):
        await bus.subscribe(subject, stuck, concurrency=0)
