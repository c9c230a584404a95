"""Copy points of ``ClusterOwnership``: committed rounds are kept and copied together, and a
round committed while a copy is on its way is kept for the next one, never dropped with
the rounds that copy carried. A real nats-server and store; the durable copy is the real
one, held at its publish by a gate so that a round commits meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actline.actors.ownership.durable import JetStreamCopy
from actline.actors.ownership.ownership import ClusterOwnership
from actline.bus import Bus
from actline.storage import Store
from actline.storage.rounds import PersistedRound
from actline.timeline import Timeline
from tests.actors.ownership.copies import CID, dicts, grown
from tests.timeline.builders import Build


class Gated(JetStreamCopy):
    """The durable copy, held at each publish until ``go`` is set."""

    def __init__(self, bus: Bus, writer: str) -> None:
        super().__init__(bus, writer=writer)
        self.entered = asyncio.Event()
        self.go = asyncio.Event()

    async def publish_persisted(
        self, cid: str, persisted: PersistedRound, *, expect: int | None
    ) -> int:
        self.entered.set()
        await self.go.wait()
        return await super().publish_persisted(cid, persisted, expect=expect)


async def test_a_round_committed_while_a_copy_is_on_its_way_is_copied_next(
    bus: Bus, tmp_path: Path
) -> None:
    ownership = ClusterOwnership(bus, "node-a", copy_every_s=60.0)
    gated = Gated(bus, "node-a")
    ownership.durable = gated
    await ownership.start()
    build = Build(Timeline(CID))
    try:
        with Store(tmp_path / "node-a") as store:
            grown(build, "t1")
            await ownership.committed(CID, store.persist_round(build.tl))
            await ownership.committed(CID, store.persist_round(build.tl))
            assert ownership.unpublished == 2 and ownership.copies == 0  # kept, not copied
            copying = asyncio.create_task(ownership.settled(CID))
            await gated.entered.wait()
            grown(build, "t2")  # the last round commits while the copy is on its way
            await ownership.committed(CID, store.persist_round(build.tl))
            gated.go.set()
            await copying
            assert ownership.copies == 1 and ownership.unpublished == 1  # the late one stays
            await ownership.settled(CID)
            assert ownership.copies == 2 and ownership.unpublished == 0
            full = await gated.read(CID)
            assert full is not None
            assert full.blocks == list(store.iter_blocks(CID)) == dicts(build.tl.blocks)
    finally:
        await ownership.stop()
