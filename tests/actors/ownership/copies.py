"""Shared helpers of the cluster store tests: a conversation id, a started durable copy, a
writer that persists round by round as a node does, and comparisons of the header rows."""

from __future__ import annotations

from typing import Any

from actline.actors.ownership.durable import JetStreamCopy
from actline.bus import Bus
from actline.storage.layout import pack, unpack
from actline.timeline import Block, SourceRow, Timeline
from actline.timeline.snapshot import split
from tests.timeline.builders import Build, words

CID = "conv:1"  # a ':' is valid in ids but not in KV keys


async def durable(bus: Bus, writer: str) -> JetStreamCopy:
    copy = JetStreamCopy(bus, writer=writer)
    await copy.start()
    return copy


class Writer:
    """A conversation persisted round by round the way a node does it: the round's new and
    rewritten blocks, the small header and the header rows that changed."""

    def __init__(self, copy: JetStreamCopy, tl: Timeline) -> None:
        self.copy = copy
        self.tl = tl
        self.stored = 0
        self.expect: int | None = None

    async def round(self, records: dict[str, dict[str, Any]] | None = None) -> int:
        new = list(self.tl.blocks_since(self.stored))
        updated = [b for b in self.tl.take_restyled() if 0 <= b.seq < self.stored]
        header = {**self.tl.snapshot(), "boundary_seq": self.tl.boundary_seq}
        self.expect = await self.copy.publish_round(
            self.tl.conversation_id,
            new,
            updated,
            header,
            expect=self.expect,
            records=records,
            rows=self.tl.take_row_changes(),
        )
        self.stored += len(new)
        return self.expect


def dicts(blocks: list[Block]) -> list[dict[str, Any]]:
    """Block dicts in seq order as the wire gives them back (msgpack round trip)."""
    return [unpack(pack(b.to_dict())) for b in sorted(blocks, key=lambda b: b.seq)]


def cite(build: Build, *names: str, title: str = "") -> None:
    """Sources a tool found: a new URL gets the next SID, a known one merges (a longer title
    wins and the row changes)."""
    build.tl.sources.add_rows(
        SourceRow(0, url=f"https://docs.example.com/{n}", title=title or f"{n} doc", text=words(5))
        for n in names
    )


def pool(tl: Timeline) -> list[tuple[int, str, str]]:
    return [(row.sid, row.url, row.title) for row in tl.sources.rows()]


def plans(tl: Timeline) -> tuple[str | None, list[dict[str, Any]]]:
    current = tl.plans.current
    return (None if current is None else current.plan_id), [p.to_dict() for p in tl.plans.plans()]


def all_rows(tl: Timeline) -> dict[str, Any]:
    """Every header row of ``tl`` as the wire gives it back."""
    return dict(unpack(pack(split(tl.full_snapshot())[1])))


def assert_same_rows(got: Timeline, want: Timeline) -> None:
    """The same sources pool (SIDs, URLs, titles, next SID) and plans (current one included)."""
    assert pool(want), "the original has no sources: nothing is compared"
    assert pool(got) == pool(want)
    assert [r.to_dict() for r in got.sources.rows()] == [r.to_dict() for r in want.sources.rows()]
    assert got.sources.next_sid == want.sources.next_sid
    assert plans(got) == plans(want)
    assert got.full_snapshot() == unpack(pack(want.full_snapshot()))


def grown(build: Build, turn: str) -> None:
    """A turn of two tool rounds that cite sources (one already known, enriched), with a plan
    made in its first round and acknowledged in its last."""
    build.turn(turn, words(20))
    build.plan(["look it up", "answer"], plan_id=f"{turn}-plan")
    build.rounds(2, size=40, prefix=f"{turn}x")
    cite(build, f"{turn}-1", f"{turn}-2")
    cite(build, "shared", title="shared doc" + " (read again)" * len(build.tl.turn_ids()))
    build.tl.acknowledge("✓ 1. looked", turn_id=turn, ts=build.at(), iteration=1)
    build.completion(words(10))
