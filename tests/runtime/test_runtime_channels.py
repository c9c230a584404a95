"""``Runtime.subscribe``: per-channel subscribers of the turns a runtime submits (embedded
NATS, an in-process node, a scripted model)."""

from __future__ import annotations

import json
from pathlib import Path

from actline.llm import ReplayModel
from actline.messages import StreamDelta
from actline.runtime import Runtime
from tests.actors.harness import say

from .test_runtime import config

CANVAS = '<channel:canvas>{"title": "Tiers", "body": "Team and *Pro*"}</channel:canvas>'


async def test_subscribers_get_the_deltas_of_their_channel_until_they_unsubscribe(
    tmp_path: Path,
) -> None:
    model = ReplayModel.of([say("t1", answer="One.") + CANVAS, say("t2", answer="Two.") + CANVAS])
    panels: dict[str, str] = {}
    everything: list[StreamDelta] = []
    answers: list[str] = []

    def on_canvas(delta: StreamDelta) -> None:
        assert delta.key is not None
        panels[delta.key] = ("" if delta.replace else panels.get(delta.key, "")) + delta.text

    async def on_answer(delta: StreamDelta) -> None:  # coroutine callbacks are awaited
        answers.append(delta.text)

    def broken(delta: StreamDelta) -> None:
        raise RuntimeError("a subscriber that fails does not stop the others")

    async with Runtime(config(tmp_path), model=model) as rt:
        rt.subscribe("canvas", broken)
        rt.subscribe("canvas", on_canvas)
        stop_all = rt.subscribe("*", everything.append)
        stop_answers = rt.subscribe("answer", on_answer)
        first = await rt.ask("Compare the tiers")
        await_all = len(everything)
        stop_all()
        stop_answers()
        panels.clear()
        second = await rt.ask("Again", first.conversation_id)
        # the canvas subscriber still gets the second turn's panels
        assert second.status == "completed"
    assert first.status == "completed", first.error
    assert panels == {"title": "Tiers", "body": "Team and *Pro*"}
    assert "".join(answers) == "One."
    channels = {d.channel for d in everything}
    assert {"thinking", "answer", "followup", "canvas"} <= channels
    assert all(d.turn_id == first.turn_id for d in everything)
    assert len(everything) == await_all
    assert json.loads("".join(d.text for d in everything if d.channel == "followup")) == []
