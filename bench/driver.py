"""A minimal in-process decision loop for benchmarks and model tests: no NATS, no actors.

It drives any ``llm.Model`` round after round over a real ``Timeline`` and
``Renderer``, runs the react.* tools through ``actline.tools.react.core.ReactTools`` (the
same code the conversation actor runs; react.write to files needs ``store``)
and answers agent.send with a local callback. What it measures is what the
model is sent: the rendered requests, their cache marks and the usage the
model (or the local Messages API server) reports. The production loop with its
state machine and guards is ``actors/``; this driver writes the same block
types and paths.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from actline.actors.pools.streamer import CHANNEL_SPECS
from actline.actors.turn.protocol import check_decision
from actline.channels import parse
from actline.llm.prompt import DECISION_PROTOCOL
from actline.llm.protocol import Model, complete
from actline.messages import GenerateRequest, Usage
from actline.storage import Store
from actline.timeline import AnnounceContext, Block, Renderer, Timeline, TimelineConfig
from actline.timeline.blocks import (
    COMPLETION,
    NOTICE,
    SIGNAL_DONE,
    TOOL_CALL,
    TOOL_RESULT,
    USER_FOLLOWUP,
    USER_PROMPT,
)
from actline.timeline.paths import ar_path, tc_path
from actline.timeline.tokens import DEFAULT_COUNTER
from actline.tools import KnowledgeSpace
from actline.tools.react.core import ReactContext, ReactTools

SPECS = CHANNEL_SPECS

BENCH_READ_PATHS = 32
"""react.read paths per call here: the wide cache scenario reads 22 documents in one call
(the runtime's cap is ``actline.tools.react.core.MAX_READ_PATHS``)."""


@dataclass
class TurnOutcome:
    """What one turn produced and what its model calls cost."""

    turn_id: str
    answer: str = ""
    followups: list[str] = field(default_factory=list)
    rounds: int = 0
    tools: list[str] = field(default_factory=list)
    usage: list[Usage] = field(default_factory=list)
    requests: list[GenerateRequest] = field(default_factory=list)
    status: str = "completed"

    @property
    def total(self) -> Usage:
        out = Usage()
        for u in self.usage:
            out = out + u
        return out


class Driver:
    """One conversation: turns of model rounds over a timeline, tools run in process."""

    def __init__(
        self,
        model: Model,
        knowledge: KnowledgeSpace,
        *,
        clock: Callable[[], float],
        conversation_id: str = "bench",
        config: TimelineConfig | None = None,
        system: str = DECISION_PROTOCOL,
        max_iterations: int = 15,
        agents: Mapping[str, Callable[[str], str]] | None = None,
        round_seconds: float = 2.0,
        advance: Callable[[float], None] | None = None,
        store: Store | None = None,
        max_read_paths: int = BENCH_READ_PATHS,
    ) -> None:
        self.model = model
        self.knowledge = knowledge
        self.store = store
        self.tools = ReactTools(max_read_paths=max_read_paths)
        self.clock = clock
        self.cid = conversation_id
        self.tl = Timeline(conversation_id)
        self.renderer = Renderer(self.tl, config or TimelineConfig(max_tokens=200_000))
        self.system = system
        self.system_tokens = DEFAULT_COUNTER.count(system)
        self.max_iterations = max_iterations
        self.agents = dict(agents or {})
        self.round_seconds = round_seconds
        self.advance = advance
        self.turns = 0
        self._calls = 0

    def _add(self, block_type: str, turn: str, **fields: Any) -> Block:
        return self.tl.append(Block.new(block_type, turn, self.clock(), **fields))

    def request(self, turn: str, iteration: int) -> GenerateRequest:
        """Render this round and build the model request."""
        announce = AnnounceContext(iteration=iteration, max_iterations=self.max_iterations)
        result = self.renderer.render(
            now=self.clock(), system_tokens=self.system_tokens, announce=announce
        )
        return GenerateRequest(
            conversation_id=self.cid,
            turn_id=turn,
            round=iteration,
            model=self.model.name,
            system=self.system,
            blocks=result.parts(),
            cache_marks=list(result.marks),
        )

    async def turn(self, text: str, *, followups: Mapping[int, str] | None = None) -> TurnOutcome:
        """Run one user turn to completion; ``followups`` land before the given rounds."""
        self.turns += 1
        turn = f"t{self.turns}"
        self.tl.begin_turn(turn, self.clock())
        self._add(USER_PROMPT, turn, path=ar_path(turn, "user.prompt"), text=text)
        out = TurnOutcome(turn)
        for iteration in range(1, self.max_iterations + 1):
            if followups and iteration in followups:
                path = ar_path(turn, f"external.followup.{iteration}")
                self._add(USER_FOLLOWUP, turn, path=path, text=followups[iteration])
            request = self.request(turn, iteration)
            result = await complete(self.model, request)
            out.rounds = iteration
            out.requests.append(request)
            out.usage.append(result.usage)
            if self.advance is not None:
                self.advance(self.round_seconds)
            _, parsed = parse(result.text, SPECS)
            decision = check_decision(parsed["decision"].raw, answer=parsed["answer"].raw)
            if decision.notes:
                self.tl.acknowledge(
                    decision.notes, turn_id=turn, ts=self.clock(), iteration=iteration
                )
            for k, notice in enumerate(decision.notices):
                path = ar_path(turn, f"react.notice.{iteration}.{k}")
                self._add(NOTICE, turn, path=path, text=f"{notice.full_code}: {notice.message}")
            if decision.action in ("complete", "exit"):
                out.answer = parsed["answer"].raw.strip()
                try:
                    out.followups = list(json.loads(parsed["followup"].raw or "[]"))
                except ValueError:
                    out.followups = []
                path = ar_path(turn, "assistant.completion")
                self._add(COMPLETION, turn, path=path, text=out.answer)
                return out
            for call in decision.calls:
                out.tools.append(call.tool)
                self.run(turn, call.tool, dict(call.params))
        out.status = "budget_exhausted"
        return out

    # -- tools --------------------------------------------------------------------------------

    def run(self, turn: str, tool: str, params: dict[str, Any]) -> None:
        """Record the call, run it, record its result, content and notice blocks.

        react.* tools run through ``actline.tools.react.core.ReactTools``; agent.send is answered by
        the local callback of the named agent.
        """
        self._calls += 1
        call_id = f"c{self._calls}"
        body = {"tool": tool, "params": params}
        self._add(TOOL_CALL, turn, path=tc_path(turn, call_id, "call"), call_id=call_id, data=body)
        if tool == "agent.send":
            result, extra = self._agent_send(turn, call_id, params)
            path = tc_path(turn, call_id, "result")
            self._add(TOOL_RESULT, turn, path=path, call_id=call_id, data=result)
            self.tl.extend(extra)
            return
        ctx = ReactContext(
            self.tl,
            self.renderer,
            turn,
            call_id,
            self.clock(),
            store=self.store,
            knowledge=self.knowledge,
        )
        self.tl.extend(self.tools.run(tool, params, ctx).to_blocks(ctx))

    def _agent_send(
        self, turn: str, call_id: str, params: dict[str, Any]
    ) -> tuple[dict[str, Any], list[Block]]:
        name = str(params.get("name", ""))
        reply = self.agents.get(name)
        if reply is None:
            return {"error": f"no outside agent named {name}"}, []
        summary = reply(str(params.get("text", "")))
        path = ar_path(turn, f"signal.done.{call_id}")
        done = Block.new(SIGNAL_DONE, turn, self.clock(), path=path, text=f"{name}: {summary}")
        return {"status": "sent", "agent": name, "task_id": call_id}, [done]
