"""Many conversations on one node: turns of one conversation never interleave."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from actline.actors.client.client import Client
from actline.bus import Bus
from actline.timeline.blocks import COMPLETION, TURN_HEADER
from tests.actors.harness import Scripted, say, start_node

CONVERSATIONS = 20
TURNS = 3


async def test_twenty_conversations_of_three_turns_each_run_side_by_side_in_order(
    bus: Bus, tmp_path: Path
) -> None:
    scripts = {
        f"c{c}": [
            output
            for t in range(TURNS)
            for output in (
                say(f"c{c} t{t} searching", calls=[("react.search_knowledge", {"query": f"q{t}"})]),
                say(f"c{c} t{t} answering", answer=f"answer {t} of c{c}"),
            )
        ]
        for c in range(CONVERSATIONS)
    }
    model = Scripted(scripts, delay=0.002, chunk_chars=16)
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        handles = {}
        for t, c in itertools.product(range(TURNS), range(CONVERSATIONS)):
            handles[(c, t)] = await client.submit(
                f"question {t}", conversation_id=f"c{c}", turn_id=f"c{c}-t{t}"
            )
        results = await asyncio.gather(*(h.wait(60) for h in handles.values()))
        timelines = {cid: conv.tl for cid, conv in node.conversations.items()}
        peak = max(node.stats()["conversations"], 0)
    finally:
        await client.close()
        await node.stop()
    assert all(r.status == "completed" for r in results)
    assert peak == CONVERSATIONS
    for c in range(CONVERSATIONS):
        cid = f"c{c}"
        # the model saw the turns of a conversation strictly one after another
        seen = [r.turn_id for r in model.models[cid].requests]
        assert seen == [f"{cid}-t{t}" for t in range(TURNS) for _ in range(2)]
        # each turn's blocks are contiguous on the timeline, in submit order
        order = [b.turn_id for b in timelines[cid].blocks]
        assert [k for k, _ in itertools.groupby(order)] == [f"{cid}-t{t}" for t in range(TURNS)]
        answers = [b.text for b in timelines[cid].blocks if b.type == COMPLETION]
        assert answers == [f"answer {t} of {cid}" for t in range(TURNS)]
        assert sum(b.type == TURN_HEADER for b in timelines[cid].blocks) == TURNS
    # results arrived per conversation in turn order
    for c in range(CONVERSATIONS):
        finished = [handles[(c, t)].result.result().ts for t in range(TURNS)]
        assert finished == sorted(finished)
