"""Turn results across a NATS outage: the server stops while a node finishes 20 turns and
comes back later with its store; the results are those of the same batch run without the
outage, none is lost, and none reaches a client twice.

One client submits the turns over its own connection; another, on the node's connection
(as in a runtime with its node in process), watches their conversations; a plain
subscription to every result on the node's connection counts the copies on the wire (a
connection subscribes again before it sends what it kept while away, so it misses none).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actline.actors import Node
from actline.actors.client.client import Client, TurnHandle
from actline.actors.client.results import STORE_TIMEOUT_S, open_results
from actline.bus import Authority, Bus, EmbeddedNats, Envelope
from actline.messages import Message, ReActResult, Subjects, new_id
from tests.actors.client.test_results_durable import Held, scripts
from tests.actors.harness import SHORTCUT, settings, start_node
from tests.waiting import until

TURNS = 20
OUTAGE_S = 4 * STORE_TIMEOUT_S
"""How long the server stays away after the last result was made: long enough that a node
which gave up waiting for a store's confirmation (``STORE_TIMEOUT_S``) and then for a read
of the stream (5 s) would have sent the result again meanwhile."""


class Server:
    """A nats-server of one test that can be taken away and brought back on the same port
    with the same store (clients reconnect by themselves)."""

    def __init__(self, root: Path, authority: Authority) -> None:
        self.root, self.authority = root, authority
        self.nats = EmbeddedNats(store_dir=root, authority=authority).start()
        self.url = self.nats.url

    async def outage(self) -> None:
        await asyncio.to_thread(self.nats.stop, keep_store=True)

    async def back(self) -> None:
        port = int(self.url.rsplit(":", 1)[1])
        back = EmbeddedNats(port=port, store_dir=self.root, authority=self.authority)
        self.nats = await back.astart()

    def stop(self) -> None:
        self.nats.stop()


@pytest.fixture
def server(tmp_path: Path, authority: Authority) -> Iterator[Server]:
    running = Server(tmp_path / "nats", authority)
    try:
        yield running
    finally:
        running.stop()


@dataclass
class Batch:
    """What one run of the batch gave, by conversation index."""

    results: list[dict[str, Any]]
    """Each turn's result without its ids and times."""
    submitter: Counter[str]
    watcher: Counter[str]
    watched: list[str]
    """The turn ids the watcher was told of, in order."""
    copies: Counter[str]
    """Copies of each turn's result a plain subscriber received."""
    answers: int
    """Turn deliveries the node took (a turn redelivered after a lost ack is answered
    again)."""
    reconnects: int
    """Reconnects of the connection that reconnected least."""


def outcome(result: ReActResult) -> dict[str, Any]:
    return result.model_dump(exclude={"turn_id", "ts", "usage"})


async def run_batch(server: Server, home: Path, *, outage: bool) -> Batch:
    names = Subjects(f"t{new_id().lower()}")
    node_bus = await Bus.connect(server.url, subject_names=names)
    client_bus = await Bus.connect(server.url, subject_names=names)
    copies: Counter[str] = Counter()

    async def count(msg: Message, env: Envelope) -> None:
        if isinstance(msg, ReActResult):
            copies[msg.turn_id] += 1

    await node_bus.subscribe(names.results_all, count)  # resubscribed before it sends again
    await open_results(node_bus, settings(home))
    model = Held(scripts(TURNS))
    node = await start_node(node_bus, home, model)
    submitter, watcher = Client(client_bus), Client(node_bus)
    seen: list[TurnHandle] = []
    try:
        for i in range(TURNS):
            await watcher.watch(f"c{i}", seen.append)
        handles = [await submitter.submit(f"q{i}", conversation_id=f"c{i}") for i in range(TURNS)]
        await until(lambda: len(seen) == TURNS and all(h.accepted for h in handles))

        def made(handle: TurnHandle) -> bool:
            record = node.store.turn_record(handle.conversation_id, handle.turn_id)
            return record is not None and record.get("status") == "completed"

        if outage:
            await server.outage()
            await until(lambda: not node_bus.is_connected and not client_bus.is_connected)
        model.release.set()
        await until(lambda: all(made(h) for h in handles))  # each is being published now
        if outage:
            await asyncio.sleep(OUTAGE_S)  # the outage itself, not a wait for something
            await server.back()
        async with asyncio.timeout(30):
            got = await asyncio.gather(*(h.wait(30) for h in handles))
            await asyncio.gather(*(h.wait(30) for h in seen))
        await until(lambda: settled(node, node_bus, names), 30)  # no redelivery can follow
        await node_bus.flush()  # a redelivery sent before the ack was seen is in by now
        await until(lambda: node.turns_settled == node.turns_taken, 30)
        await node_bus.flush()  # every copy the node sent is on its way to the clients
        await client_bus.flush()
        answers = node.turns_taken
        reconnects = min(b.counters["reconnects"] for b in (node_bus, client_bus))
    finally:
        await submitter.close()
        await watcher.close()
        await node.stop()
        await client_bus.close()
        await node_bus.close()
    return Batch(
        results=[outcome(r) for r in got],
        submitter=submitter.counters,
        watcher=watcher.counters,
        watched=[h.turn_id for h in seen],
        copies=copies,
        answers=answers,
        reconnects=reconnects,
    )


async def settled(node: Node, bus: Bus, names: Subjects) -> bool:
    """Every turn request the node took is settled and the server holds none unacked."""
    if node.turns_settled != node.turns_taken:
        return False
    info = await bus.nc.jetstream().consumer_info(names.turn_stream, names.turn_consumer)
    return info.num_ack_pending == 0 and info.num_pending == 0


@pytest.mark.skipif(
    not SHORTCUT,
    reason="the node finishes its turns while NATS is away: with every hop of a turn over "
    "NATS (ACTLINE_LOCAL_SHORTCUT=0) a turn waits for NATS instead",
)
async def test_results_after_an_outage_are_those_of_a_calm_run_each_delivered_once(
    server: Server, tmp_path: Path
) -> None:
    calm = await run_batch(server, tmp_path / "calm", outage=False)
    stormy = await run_batch(server, tmp_path / "stormy", outage=True)

    assert [r["answer"] for r in calm.results] == [f"Answer {i}." for i in range(TURNS)]
    assert stormy.results == calm.results  # same answers, none lost
    for run in (calm, stormy):
        for counters in (run.submitter, run.watcher):
            assert counters["results"] == TURNS
            assert counters["results_duplicate"] == 0, counters
        assert len(set(run.watched)) == len(run.watched) == TURNS  # each turn watched once
        # one copy on the wire per answer the node gave (a turn whose ack was lost in the
        # outage is answered again; the clients drop that by its turn id)
        assert len(run.copies) == TURNS
        assert sum(run.copies.values()) == run.answers, run.copies
    assert (calm.reconnects, stormy.reconnects) == (0, 1)
