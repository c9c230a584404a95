"""A conversation on a real timeline and renderer, for the react.* tool tests: ``Conv`` runs
calls as a loop would and appends their blocks; ``refused`` reads a refusal's code."""

from __future__ import annotations

from typing import Any

from actline.storage import Store
from actline.timeline import Block, Renderer, Timeline
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT, USER_PROMPT
from actline.timeline.paths import ar_path, tc_path
from actline.tools import KnowledgeSpace
from actline.tools.react.core import ReactContext, ReactOutcome, ReactTools

T0 = 1_800_000_000.0
DAY = 86_400.0
TOOLS = ReactTools()


class Conv:
    """A conversation on a timeline: turns, blocks, and calls run as a loop would run them."""

    def __init__(
        self,
        *,
        knowledge: KnowledgeSpace | None = None,
        store: Store | None = None,
        cid: str = "c1",
    ) -> None:
        self.tl = Timeline(cid)
        self.renderer = Renderer(self.tl)
        self.knowledge = knowledge
        self.store = store
        self.now = T0
        self.calls = 0
        self.turn = ""

    def tick(self, seconds: float = 1.0) -> float:
        self.now += seconds
        return self.now

    def begin(self, turn: str, prompt: str = "question") -> None:
        self.turn = turn
        self.tl.begin_turn(turn, self.tick())
        self.add(USER_PROMPT, ar_path(turn, "user.prompt"), prompt)

    def add(self, block_type: str, path: str, text: str, **fields: Any) -> Block:
        return self.tl.append(
            Block.new(block_type, self.turn, self.tick(), path=path, text=text, **fields)
        )

    def ctx(self, *, renderer: bool = True) -> ReactContext:
        self.calls += 1
        return ReactContext(
            self.tl,
            self.renderer if renderer else None,
            self.turn,
            f"c{self.calls}",
            self.tick(),
            store=self.store,
            knowledge=self.knowledge,
        )

    def run(self, tool: str, params: dict[str, Any], **kwargs: bool) -> ReactOutcome:
        """Run a call and append its call, result, content and notice blocks."""
        ctx = self.ctx(**kwargs)
        path = tc_path(self.turn, ctx.call_id, "call")
        body = {"tool": tool, "params": params}
        self.tl.append(Block.new(TOOL_CALL, self.turn, ctx.now, path=path, data=body))
        outcome = TOOLS.run(tool, params, ctx)
        self.tl.extend(outcome.to_blocks(ctx))
        return outcome


def codes(outcome: ReactOutcome) -> list[str]:
    return [n.code for n in outcome.notices]


def refused(outcome: ReactOutcome, code: str) -> bool:
    return outcome.result["status"] == "error" and codes(outcome) == [code]


def rounds(conv: Conv, n: int, text: str = "result") -> None:
    """``n`` tool rounds ``r1`` .. ``rn`` in the current turn, each result ``text``."""
    for i in range(1, n + 1):
        call = f"r{i}"
        conv.add(TOOL_CALL, tc_path(conv.turn, call, "call"), "{}", call_id=call)
        conv.add(TOOL_RESULT, tc_path(conv.turn, call, "result"), text, call_id=call)
