"""DONE summaries are memory, end to end: a real node, a DONE over NATS, memsearch, read.

Turn 1 sends a task to the reviewer, whose DONE (``Client.send_done``) is applied; two more
turns talk about other things; turn 4 asks "what did the reviewer say?" through
``react.memsearch`` and reads the hit's ``block_path`` with ``react.read``. The DONE's
memsearch row was written with its turn (``actline.tools.react.memsearch.index_rows``).
"""

from __future__ import annotations

from typing import Any

from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from tests.actors.agents.runtime import REVIEWER, TIMEOUT, Runtime, completed, reviewed_turn, submit
from tests.actors.harness import say

SUMMARY = "The plan is sound, but section 2 needs a rollback step and an owner for the migration."


def _results(rt: Runtime, cid: str, tool: str) -> list[dict[str, Any]]:
    tl = rt.node.conversations[cid].tl
    calls = {b.call_id for b in tl.blocks if b.type == TOOL_CALL and b.data}
    return [
        b.data
        for b in tl.blocks
        if b.type == TOOL_RESULT
        and b.call_id in calls
        and b.meta.get("tool") == tool
        and isinstance(b.data, dict)
    ]


async def test_what_did_the_reviewer_say_finds_its_done_and_reopens_it(rt: Runtime) -> None:
    first = await submit(rt, "c1", reviewed_turn(), "Get the plan reviewed by the reviewer.")
    await first.wait_for("waiting", detail=REVIEWER, timeout=TIMEOUT)
    [task_id] = rt.task_ids("c1", first.turn_id)
    reply = await rt.client.send_done(
        REVIEWER, SUMMARY, turn_id=first.turn_id, task_id=task_id, timeout=TIMEOUT
    )
    assert reply.kind == "ack", reply
    await completed(first)
    for text in ("What should we cook for the team lunch?", "Say hello to the new intern."):
        done = await submit(rt, "c1", [say("ok", answer="Done.")], text)
        await done.wait(TIMEOUT)

    query = {"query": "what did the reviewer say?"}
    asked = await submit(
        rt,
        "c1",
        [say("Searching.", calls=[("react.memsearch", query)]), say("ok", answer="See above.")],
        "what did the reviewer say?",
    )
    await asked.wait(TIMEOUT)
    [found] = _results(rt, "c1", "react.memsearch")
    best = found["hits"][0]
    assert best["turn_id"] == first.turn_id and best["role"] == "agents"
    assert best["block_path"] == f"ar:{first.turn_id}.signal.done.{task_id}"
    assert "rollback step" in best["snippet"]

    read = {"paths": [best["block_path"]]}
    reopened = await submit(
        rt, "c1", [say("Reading.", calls=[("react.read", read)]), say("ok", answer="Ok.")], "more"
    )
    await reopened.wait(TIMEOUT)
    [result] = _results(rt, "c1", "react.read")
    assert result["status"] == "ok" and result["missing"] == [] == result["invalid"], result
    assert [p["path"] for p in result["paths"]] == [best["block_path"]]  # resolved (visible)
    signals = rt.signals("c1", task_id)
    assert signals and SUMMARY in signals[0].text
