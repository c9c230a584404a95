"""The in-process runtime of the agent tests (a node with a scripted model and a client on
the test's bus, made by the ``rt`` fixture) and the turns that send a task to the outside
agent ``reviewer``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actline.actors.client.client import Client, TurnHandle
from actline.actors.node.node import Node
from actline.timeline.blocks import TOOL_RESULT
from tests.actors.harness import BlockViews, Scripted, say

TIMEOUT = 10.0
REVIEWER = "reviewer"
SEND_TO_REVIEWER = ("agent.send", {"name": REVIEWER, "text": "review the plan\nsection 2 first"})


@dataclass
class Runtime(BlockViews):
    model: Scripted
    node: Node
    client: Client

    def task_ids(self, cid: str, turn_id: str) -> list[str]:
        """Task ids of the turn's ``agent.send`` calls, from their result blocks."""
        return [
            b.data["task_id"]
            for b in self.blocks(cid)
            if b.type == TOOL_RESULT
            and b.turn_id == turn_id
            and b.meta.get("tool") == "agent.send"
            and isinstance(b.data, dict)
            and "task_id" in b.data
        ]

    def phase(self, cid: str) -> str | None:
        current = self.node.conversations[cid].current
        return None if current is None else str(current.state.phase)


async def submit(rt: Runtime, cid: str, outputs: list[str], text: str, **kw: Any) -> TurnHandle:
    rt.model.script(cid, outputs)
    return await rt.client.submit(text, conversation_id=cid, **kw)


def reviewed_turn() -> list[str]:
    return [
        say("Asking the reviewer.", calls=[SEND_TO_REVIEWER]),
        say("The reviewer answered.", answer="The plan is reviewed."),
    ]


async def completed(handle: TurnHandle) -> None:
    result = await handle.wait(TIMEOUT)
    assert result.status == "completed", (result.status, result.error)
    assert result.rounds == 2
