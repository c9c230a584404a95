"""Durable turn results: kept in the results stream, fetched by clients that missed them.

A client is really disconnected through a TCP proxy in front of nats-server whose
connections the test cuts (the server and the node stay up), so it misses what is
published meanwhile and reconnects by itself when the proxy lets it through again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actline import Config, Runtime
from actline.actors import NodeSettings
from actline.actors.client.client import Client, TurnHandle
from actline.actors.client.results import ResultLog, open_results, publish_result
from actline.actors.errors import SettingsError
from actline.bus import Bus, EmbeddedNats, EventLog, StreamMissing
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest, ReActResult, Subjects
from actline.runtime import follow
from tests.actors.harness import Scripted, say, settings, start_node
from tests.waiting import until


class Proxy:
    """A TCP proxy to nats-server; ``cut`` drops every connection through it and refuses
    new ones until ``restore`` (a client behind it sees a real disconnect)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.up = True
        self._transports: set[asyncio.WriteTransport] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def start(self) -> Proxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.url = f"nats://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._transports |= {writer.transport, up_writer.transport}
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    @staticmethod
    async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            dst.transport.abort()

    def cut(self) -> None:
        self.up = False
        for transport in self._transports:
            transport.abort()
        self._transports.clear()

    def restore(self) -> None:
        self.up = True

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


@pytest.fixture
async def proxy(nats_server: EmbeddedNats) -> AsyncIterator[Proxy]:
    p = await Proxy(nats_server.port).start()
    try:
        yield p
    finally:
        await p.close()


def client_creds(nats: EmbeddedNats, subject_names: Subjects) -> Path:
    """The client role of this test's prefix, for a connection through the proxy."""
    return nats.creds_path("client", prefix=subject_names.prefix)


async def queue_without_node(bus: Bus, home: Path) -> None:
    """The turn queue and the results stream exist; no node serves them (yet)."""
    node = await start_node(bus, home, Scripted())
    await node.stop()
    await open_results(bus, node.settings)  # what Node.start does


def scripts(n: int) -> Scripted:
    return Scripted({f"c{i}": [say("looking", answer=f"Answer {i}.")] for i in range(n)})


async def test_a_client_disconnected_while_its_results_were_published_gets_all_20_on_reconnect(
    bus: Bus, proxy: Proxy, subject_names: Subjects, tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    await queue_without_node(bus, tmp_path / "home")
    client_bus = await Bus.connect(
        proxy.url, subject_names=subject_names, creds=client_creds(nats_server, subject_names)
    )
    client = Client(client_bus)
    node = None
    try:
        handles = [await client.submit(f"q{i}", conversation_id=f"c{i}") for i in range(20)]
        proxy.cut()
        await until(lambda: not client_bus.is_connected)
        node = await start_node(bus, tmp_path / "home", scripts(20))
        await until(lambda: node is not None and node.turns_settled == 20)
        assert not any(h.result.done() for h in handles)  # all 20 went out while it was away

        proxy.restore()
        async with asyncio.timeout(20):
            results = await asyncio.gather(*(h.result for h in handles))
    finally:
        await client.close()
        await client_bus.close()
        if node is not None:
            await node.stop()
    assert [r.answer for r in results] == [f"Answer {i}." for i in range(20)]
    assert all(r.status == "completed" for r in results)
    assert client_bus.counters["reconnects"] >= 1
    assert client.counters["results"] == 20
    assert client.counters["results_fetched"] == 20


async def test_the_runtime_gets_the_results_it_missed_while_disconnected(
    bus: Bus,
    proxy: Proxy,
    subject_names: Subjects,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    nats_server: EmbeddedNats,
) -> None:
    monkeypatch.setenv("ACTLINE_SUBJECT_PREFIX", subject_names.prefix)
    monkeypatch.setenv("ACTLINE_NATS_CREDS", str(client_creds(nats_server, subject_names)))
    await queue_without_node(bus, tmp_path / "home")
    config = Config.load(None, nats_url=proxy.url, home=tmp_path / "client")
    node = None
    async with Runtime(config, node=False) as rt:
        try:
            handles = [await rt.submit(f"q{i}", f"c{i}") for i in range(3)]
            proxy.cut()
            await until(lambda: not rt.bus.is_connected)
            node = await start_node(bus, tmp_path / "home", scripts(3))
            await until(lambda: node is not None and node.turns_settled == 3)
            proxy.restore()
            async with asyncio.timeout(20):  # fetched on reconnect
                await asyncio.gather(*(h.result for h in handles))
            seen = [[e async for e in follow(h, timeout=1)][-1] for h in handles]
            assert await rt.result(handles[0].turn_id) == seen[0]
        finally:
            if node is not None:
                await node.stop()
    assert [r.answer for r in seen] == ["Answer 0.", "Answer 1.", "Answer 2."]


async def test_a_result_seen_on_the_subscription_and_in_the_stream_is_delivered_once(
    bus: Bus, tmp_path: Path
) -> None:
    await open_results(bus, settings(tmp_path))
    node = await start_node(bus, tmp_path / "home", scripts(1))
    client = Client(bus)
    try:
        handle = await client.submit("q", conversation_id="c0")
        first = await handle.wait(30)  # on the subscription: the stream takes nothing from it
        await publish_result(bus, first, node.settings)  # a redelivered turn answers again
        again = await client.fetch_result(handle.turn_id)
        await bus.flush()
        stored = EventLog.bind(bus, name=bus.subjects.results_stream)
        count = await stored.count()
    finally:
        await client.close()
        await node.stop()
    assert again == first and handle.result.result() == first
    assert client.counters["results"] == 1
    assert client.counters["results_fetched"] == 0
    assert client.counters["results_duplicate"] >= 1
    assert count == 1  # the turn id is the message id: stored once


async def test_wait_reads_the_stream_when_the_subscription_missed_the_result(
    bus: Bus, tmp_path: Path
) -> None:
    await queue_without_node(bus, tmp_path / "home")
    client = Client(bus)
    handles = [await client.submit(f"q{i}", conversation_id=f"c{i}") for i in range(2)]
    for handle in handles:  # they will miss the results
        await client._results.pop(handle.turn_id).unsubscribe()
    node = await start_node(bus, tmp_path / "home", scripts(2))
    try:
        await until(lambda: node.turns_settled == 2)
        assert not any(h.result.done() for h in handles)
        waited = await handles[0].wait(0.05)  # nothing on the subscription: read the stream
        followed = [e async for e in follow(handles[1], timeout=0.05)]  # the same in follow
    finally:
        await client.close()
        await node.stop()
    assert waited.answer == "Answer 0."
    assert isinstance(followed[-1], ReActResult) and followed[-1].answer == "Answer 1."
    assert client.counters["results_fetched"] == 2


async def test_results_survive_a_nats_server_restart(
    fresh_nats: EmbeddedNats, tmp_path: Path
) -> None:
    node_bus = await Bus.connect(fresh_nats.url)
    await open_results(node_bus, settings(tmp_path))
    node = await start_node(node_bus, tmp_path / "home", scripts(2))
    client = Client(node_bus)
    try:
        handles = [await client.submit(f"q{i}", conversation_id=f"c{i}") for i in range(2)]
        sent = [await h.wait(30) for h in handles]
    finally:
        await client.close()
        await node.stop()
        await node_bus.close()

    await asyncio.to_thread(fresh_nats.restart)
    later = await Bus.connect(fresh_nats.url)
    reader = Client(later)
    try:
        got = [await reader.fetch_result(h.turn_id) for h in handles]
        unknown = await reader.fetch_result("t-never")
    finally:
        await reader.close()
        await later.close()
    assert got == sent
    assert unknown is None


async def test_fetching_without_a_results_stream_says_it_is_missing(bus: Bus) -> None:
    client = Client(bus)
    with pytest.raises(StreamMissing):
        await client.fetch_result("t-1")
    await client.close()


async def test_a_deleted_results_stream_is_recreated_and_the_result_kept(
    bus: Bus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    await open_results(bus, settings(tmp_path))
    node = await start_node(bus, tmp_path / "home", scripts(2))
    client = Client(bus)
    try:
        await client.submit("q", conversation_id="c0")
        await until(lambda: node.turns_settled == 1)
        await bus.nc.jetstream().delete_stream(bus.subjects.results_stream)
        caplog.set_level(logging.WARNING, logger="actline.actors.client.results")
        handle = await client.submit("q", conversation_id="c1")  # subscribed: no NoStream
        result = await handle.wait(30)
        await until(lambda: node.turns_settled == 2)  # the node waited for the store
        stored = await ResultLog.bind(bus).get(handle.turn_id)
        # and with no subscriber at all (the publish finds no stream at once)
        lone = ReActResult(conversation_id="c9", turn_id="t-lone", status="completed")
        await bus.nc.jetstream().delete_stream(bus.subjects.results_stream)
        await publish_result(bus, lone, node.settings)
        stored_lone = await ResultLog.bind(bus).get("t-lone")
    finally:
        await client.close()
        await node.stop()
    assert result.answer == "Answer 1." and stored == result
    assert stored_lone == lone
    assert sum("missing; creating it again" in r.getMessage() for r in caplog.records) == 2


async def test_a_result_that_cannot_be_stored_is_still_published_and_logged(
    bus: Bus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    subjects = bus.subjects
    # A results stream that refuses every result: each is larger than its message limit.
    await EventLog.open(bus, name=subjects.results_stream, subjects=subjects.results_all,
                        max_msg_size=16)  # fmt: skip
    node = await start_node(bus, tmp_path / "home", scripts(1))
    client = Client(bus)
    caplog.set_level(logging.ERROR, logger="actline.actors.client.results")
    try:
        result = await (await client.submit("q", conversation_id="c0")).wait(30)
        stored = await client.fetch_result(result.turn_id)
    finally:
        await client.close()
        await node.stop()
    assert result.answer == "Answer 0."
    assert stored is None
    assert any("was not stored" in r.getMessage() for r in caplog.records)


async def test_a_result_is_gone_after_the_retention(bus: Bus, tmp_path: Path) -> None:
    results = await open_results(bus, settings(tmp_path, result_retention_s=1.0))
    result = ReActResult(conversation_id="c0", turn_id="t-short", status="completed")
    await results.store(result)
    assert await results.get("t-short") == result

    async def aged_out() -> bool:  # the server ages messages out on its own clock
        return await results.get("t-short") is None

    await until(aged_out, 15)


@pytest.mark.parametrize(
    ("field", "value"),
    [("result_retention_s", 0.0), ("result_retention_s", float("inf")), ("result_max_bytes", -1)],
)
async def test_a_retention_or_cap_that_cannot_work_is_refused(
    bus: Bus, field: str, value: float
) -> None:
    with pytest.raises(SettingsError) as caught:
        await open_results(bus, NodeSettings().with_(**{field: value}))
    assert caught.value.name.startswith("ACTLINE_RESULT_")


class Held:
    """The scripted model, holding every call until ``release``."""

    name = "held"

    def __init__(self, scripted: Scripted) -> None:
        self.scripted, self.release = scripted, asyncio.Event()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        await self.release.wait()
        async for chunk in self.scripted.stream(request):
            yield chunk


async def test_a_turn_another_client_submitted_is_watched_and_its_missed_result_recovered(
    bus: Bus, proxy: Proxy, subject_names: Subjects, tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    """``Client.watch``: a turn submitted by another client gets a handle at its first
    event, and its result, published while the watcher was disconnected, comes on reconnect
    from the results stream, as a watcher's own turns' results do."""
    model = Held(scripts(1))
    node = await start_node(bus, tmp_path / "home", model)
    watcher_bus = await Bus.connect(
        proxy.url, subject_names=subject_names, creds=client_creds(nats_server, subject_names)
    )
    watcher, submitter = Client(watcher_bus), Client(bus)
    seen: list[TurnHandle] = []
    try:
        await watcher.watch("c0", seen.append)
        submitted = await submitter.submit("q0", conversation_id="c0")
        await until(lambda: bool(seen))  # its turn.accepted made the handle
        proxy.cut()
        await until(lambda: not watcher_bus.is_connected)
        model.release.set()
        result = await submitted.wait(20)
        proxy.restore()
        async with asyncio.timeout(20):
            watched = await seen[0].result
    finally:
        await watcher.close()
        await submitter.close()
        await watcher_bus.close()
        await node.stop()
    [handle] = seen
    assert (handle.turn_id, handle.conversation_id, handle.request) == (
        submitted.turn_id,
        "c0",
        None,
    )
    assert watched == result and watched.answer == "Answer 0."
    assert watcher.counters["results_fetched"] == 1  # read from the stream, after reconnect
    assert handle.accepted is not None
