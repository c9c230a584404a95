"""The outside agent ``reviewer`` as a test plays it: the question that makes a turn send it
a task, the tasks it receives, and the DONEs a conversation applied (read from the store)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from actline import messages
from actline.bus import Envelope
from actline.messages import AgentTask
from actline.storage import Store
from actline.timeline.blocks import SIGNAL_DONE

REVIEWER = "reviewer"
QUESTION = "Check the retention settings and ask reviewer to review them"


class Inbox:
    """The tasks sent to ``reviewer`` (the test plays the outside agent)."""

    def __init__(self) -> None:
        self.tasks: list[AgentTask] = []
        self.changed = asyncio.Event()

    async def on_task(self, msg: messages.Message, env: Envelope) -> None:
        if isinstance(msg, AgentTask):
            self.tasks.append(msg)
            self.changed.set()

    async def first(self, timeout: float = 60.0) -> AgentTask:
        async with asyncio.timeout(timeout):
            while not self.tasks:
                self.changed.clear()
                await self.changed.wait()
        return self.tasks[0]


def applied(home: Path, cid: str) -> list[str]:
    """The task ids of the conversation's stored ``signal.done`` blocks (DONEs applied)."""
    with Store(home) as store:
        return [
            str((b.get("meta") or {}).get("task_id"))
            for b in store.iter_blocks(cid)
            if b["type"] == SIGNAL_DONE
        ]
