"""A minimal in-process decision loop for benchmarks and model tests: no NATS, no actors.

It drives any ``llm.Model`` round after round over a real ``Timeline`` and
``Renderer`` and runs the handful of tools the offline model uses
(react.plan, react.search_knowledge, react.read, react.write on the internal
channel, react.memsearch over earlier turns, agent.send answered by a local
callback). What it measures is what the model is sent: the rendered requests,
their cache marks and the usage the model (or the local Messages API server)
reports. The production loop with its state machine and guards is
``actors/``; this driver writes the same block types and paths.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.decision_protocol import check_decision
from channels import ChannelSpec, parse
from llm.context import terms
from llm.prompt import DECISION_PROTOCOL
from llm.protocol import Model, complete
from messages import GenerateRequest, Usage
from timeline import AnnounceContext, Block, Renderer, Timeline, TimelineConfig
from timeline.blocks import (
    COMPLETION,
    NOTE,
    NOTICE,
    SIGNAL_DONE,
    TOOL_CALL,
    TOOL_RESULT,
    USER_FOLLOWUP,
    USER_PROMPT,
)
from timeline.errors import PlanError
from timeline.paths import ar_path, tc_path
from timeline.sources import SourceRow
from timeline.tokens import DEFAULT_COUNTER
from tools import KnowledgeSpace

SPECS = (
    ChannelSpec("thinking", "markdown", replace_citations=False),
    ChannelSpec("decision", "json", replace_citations=False),
    ChannelSpec("answer", "markdown"),
    ChannelSpec("followup", "json", replace_citations=False),
    ChannelSpec("usage", "json", replace_citations=False),
    ChannelSpec("canvas", "json", replace_citations=False),
)
PLAN_MODES = {"create": "new", "update": "replace", "close": "close"}


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
    ) -> None:
        self.model = model
        self.knowledge = knowledge
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
        """Record the call, run it, record its result blocks."""
        self._calls += 1
        call_id = f"c{self._calls}"
        body = {"tool": tool, "params": params}
        self._add(TOOL_CALL, turn, path=tc_path(turn, call_id, "call"), call_id=call_id, data=body)
        handler = getattr(self, "_" + tool.replace(".", "_"), None)
        if handler is None:
            result: Any = {"error": f"unknown tool {tool}"}
            extra: Sequence[Block] = ()
        else:
            result, extra = handler(turn, call_id, params)
        self._add(
            TOOL_RESULT,
            turn,
            path=tc_path(turn, call_id, "result"),
            call_id=call_id,
            **({"data": result} if isinstance(result, dict) else {"text": str(result)}),
        )
        for block in extra:
            self.tl.append(block)

    def _react_plan(
        self, turn: str, call_id: str, params: dict[str, Any]
    ) -> tuple[Any, list[Block]]:
        mode = PLAN_MODES.get(str(params.get("mode")), str(params.get("mode")))
        try:
            plan = self.tl.plans.apply(
                mode, turn_id=turn, plan_id=params.get("plan_id"), steps=params.get("steps")
            )
        except PlanError as exc:
            return {"error": str(exc)}, []
        self.tl.record_plan(plan, turn_id=turn, ts=self.clock())
        return {"plan_id": plan.plan_id, "status": "ok"}, []

    def _react_search_knowledge(
        self, turn: str, call_id: str, params: dict[str, Any]
    ) -> tuple[Any, list[Block]]:
        hits = self.knowledge.search(str(params.get("query", "")), int(params.get("top_k", 5)))
        return {"query": params.get("query", ""), "hits": [h.to_dict() for h in hits]}, []

    def _react_read(
        self, turn: str, call_id: str, params: dict[str, Any]
    ) -> tuple[Any, list[Block]]:
        blocks: list[Block] = []
        found: list[str] = []
        for path in params.get("paths") or []:
            doc = self.knowledge.read(str(path))
            row = self.tl.sources.add_rows(
                [SourceRow(0, url=doc.url or "", title=doc.title, text=doc.text[:500])]
            )[0]
            sid = row.sid if row is not None else 0
            head = f"[S:{sid}] {doc.title} — {doc.url}\n" if sid else ""
            blocks.append(
                Block.new(
                    TOOL_RESULT,
                    turn,
                    self.clock(),
                    path=doc.path,
                    call_id=call_id,
                    text=head + doc.text,
                )
            )
            found.append(doc.path)
        return {"status": "ok", "found": found}, blocks

    def _react_write(
        self, turn: str, call_id: str, params: dict[str, Any]
    ) -> tuple[Any, list[Block]]:
        path = ar_path(turn, f"react.note.{call_id}")
        note = Block.new(NOTE, turn, self.clock(), path=path, text=str(params.get("content", "")))
        return {"status": "ok", "path": f"fi:{turn}.{params.get('path', '')}"}, [note]

    def _react_memsearch(
        self, turn: str, call_id: str, params: dict[str, Any]
    ) -> tuple[Any, list[Block]]:
        wanted = set(terms(str(params.get("query", ""))))
        hits: list[dict[str, Any]] = []
        for block in self.tl.blocks:
            if block.turn_id == turn or block.type not in (USER_PROMPT, COMPLETION):
                continue
            score = len(wanted & set(terms(block.content)))
            if score:
                hits.append(
                    {
                        "turn_id": block.turn_id,
                        "snippet": block.content[:240],
                        "score": score,
                        "path": ar_path(block.turn_id, "react.turn.index"),
                    }
                )
        hits.sort(key=lambda h: (-int(h["score"]), str(h["turn_id"])))
        return {"hits": hits[: int(params.get("top_k", 5))]}, []

    def _agent_send(
        self, turn: str, call_id: str, params: dict[str, Any]
    ) -> tuple[Any, list[Block]]:
        name = str(params.get("name", ""))
        reply = self.agents.get(name)
        if reply is None:
            return {"error": f"no outside agent named {name}"}, []
        summary = reply(str(params.get("text", "")))
        path = ar_path(turn, f"signal.done.{call_id}")
        done = Block.new(SIGNAL_DONE, turn, self.clock(), path=path, text=f"{name}: {summary}")
        return {"status": "sent", "agent": name, "task_id": call_id}, [done]
