"""A turn resumed after its node stopped mid-round gives the notices (and the watchdog's
readings) of the same turn run without the stop, over a real nats-server.

Each case is a scripted turn (outputs by round) run twice, each time on a node of its own
home and subject prefix with the same conversation and turn ids (so that the rendered
contexts count the same tokens): once through, and once with the node stopped while the
model call of a chosen round waits, that round's checkpoint stored; a new node on the same
home then resumes the turn from that checkpoint and replays the round. The cases: the token
drift of a turn whose one big read weighs on a shorter window after a resume; notices said
before the stop, then others after it (numbering, a signal said once, the fourth identical
call refused); and the stop in the round the watchdog compacted before.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.bus import Bus, EmbeddedNats
from actline.llm import ReplayModel
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest, Subjects, new_id
from actline.timeline.blocks import NOTICE, SUMMARY
from tests.actors.harness import say, start_node
from tests.waiting import until

TIMEOUT = 30.0
CID = "c-resume"
TID = "t-resume"
TIERS = "ks:pricing/tiers.md"
FIVE = [
    "ks:pricing/billing.md",
    "ks:support/faq.md",
    "ks:support/sla.md",
    "ks:overview/architecture.md",
    "ks:config/reference.md",
]


def read(*paths: str) -> tuple[str, dict[str, Any]]:
    return ("react.read", {"paths": list(paths)})


@dataclass(frozen=True)
class Case:
    """A scripted turn, its profile, the round whose model call the stop lands in, and the
    notices the turn gives."""

    script: tuple[str, ...]
    profile: dict[str, Any]
    stop_in: int
    said: int


DRIFT = Case(
    (
        say("One.", calls=[read(TIERS)]),
        say("Two.", calls=[read("ks:limits/quotas.md")]),
        say("Five.", calls=[read(*FIVE)]),
        say("One more.", calls=[read("ks:support/troubleshooting.md")]),
        say("Done.", answer="The tiers differ by quota."),
    ),
    {"token_drift": 1500, "repeated_reads": 9},
    3,
    0,
)
"""Drift over 1,500 tokens a round: five documents in one round (about 2,000) are, the
average of the last three rounds (one, one and five documents) is not. Stopped in the
round that asks for the five: the resumed turn renders them in its second round."""

SAID_BEFORE = Case(
    (
        say("Reading.", calls=[read(TIERS)]),
        say("Again.", calls=[read(TIERS)]),
        say("Once more.", calls=[read(TIERS), ("no.such_tool", {})]),
        say("And again.", calls=[read(TIERS)]),
        say("Enough.", answer="The Team plan is the middle tier."),
    ),
    {"repeated_reads": 2},
    3,
    4,
)
"""A repeated read said before the stop (in the round it lands in); after it a refused
tool, and a fourth identical call refused: notices numbered after the ones stored, the
identical calls counted over the whole turn, the signal not said twice."""

COMPACTED = Case(
    (
        say("Reading.", calls=[read(TIERS)]),
        say("Again.", calls=[read(TIERS)]),
        say("Once more.", calls=[read(TIERS)]),
        say("Enough.", answer="The Team plan is the middle tier."),
    ),
    {"watchdog_floor_tokens": 0},
    4,
    1,
)
"""Repeated reads and over-tooling ask for a compaction before round 4, and the stop lands
in round 4: its checkpoint is stored with the notice, the compaction is not (it runs after
the commit began), so the resumed round compacts again and says nothing again."""


class Rounds:
    """Outputs by request round; a call of round ``hold`` never answers (the node stops)."""

    name = "rounds"

    def __init__(self, outputs: Sequence[str], hold: int | None = None) -> None:
        self.outputs = list(outputs)
        self.hold = hold
        self.held = asyncio.Event()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        if request.round == self.hold:
            self.held.set()
            await asyncio.Event().wait()  # cancelled when the node stops
        async for chunk in ReplayModel.of([self.outputs[request.round - 1]]).stream(request):
            yield chunk


@asynccontextmanager
async def own_prefix(nats: EmbeddedNats) -> AsyncIterator[Bus]:
    """A node's connection on a subject prefix of its own."""
    names = Subjects(f"t{new_id().lower()}")
    creds = nats.creds_path("node", prefix=names.prefix)
    bus = await Bus.connect(nats.url, subject_names=names, creds=creds)
    try:
        yield bus
    finally:
        await bus.close()


def recorded_round(node: Node) -> int:
    record = node.store.turn_record(CID, TID) or {}
    return int(record.get("round", -1))


def turn_blocks(node: Node, kind: str) -> list[tuple[str, str]]:
    blocks = node.conversations[CID].tl.blocks
    return [(b.path, b.text) for b in blocks if b.type == kind and b.turn_id == TID]


async def run(nats: EmbeddedNats, home: Path, case: Case, *, stop: bool) -> dict[str, Any]:
    """The case's turn, its node stopped during the model call of round ``case.stop_in``
    (when ``stop``) and the turn resumed by a new node on the same home."""
    config = {"profile": {"extends": "balanced", **case.profile}}
    async with own_prefix(nats) as bus:
        client = Client(bus)
        model = Rounds(case.script, hold=case.stop_in if stop else None)
        node = await start_node(bus, home, model)
        try:
            handle = await client.submit(
                "How do the tiers differ?", conversation_id=CID, turn_id=TID, config=config
            )
            if stop:
                await asyncio.wait_for(model.held.wait(), TIMEOUT)
                await until(lambda: recorded_round(node) == case.stop_in - 1, TIMEOUT)
                await node.stop()
                node = await start_node(bus, home, Rounds(case.script))
            result = await handle.wait(TIMEOUT)
            notices = turn_blocks(node, NOTICE)
            summaries = turn_blocks(node, SUMMARY)
        finally:
            await node.stop()
            await client.close()
    assert result.status == "completed", result.error
    resumed = [c.detail for c in handle.cards if c.detail.startswith("resumed after")]
    assert resumed == ([f"resumed after round {case.stop_in - 1}"] if stop else [])
    context = result.usage.context
    return {
        "notices": notices,
        "summaries": len(summaries),
        "context": None if context is None else context.model_dump(),
    }


@pytest.mark.parametrize(
    "case", [DRIFT, SAID_BEFORE, COMPACTED], ids=["drift", "said", "compacted"]
)
async def test_a_resumed_turn_gives_the_notices_and_readings_of_the_turn_not_stopped(
    nats_server: EmbeddedNats, tmp_path: Path, case: Case
) -> None:
    reference = await run(nats_server, tmp_path / "reference", case, stop=False)
    resumed = await run(nats_server, tmp_path / "stopped", case, stop=True)
    assert len(reference["notices"]) == case.said, reference
    assert resumed == reference
