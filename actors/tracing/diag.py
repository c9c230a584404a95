"""The diagnostic log lines of a turn (``actline.messages.diag``): one call per site, so the actor
modules keep one line each. INFO: ids, names, sizes, counts, timings; the DEBUG lines add
the bodies (the prompt's last block, tool params and results)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from actline.messages import GenerateRequest, GenerateResult, ToolResult
from actline.messages import diag as d
from actline.tools.react.core import ReactOutcome


class Call(Protocol):
    """One tool call as the log lines show it (``actline.actors.turn.events.ToolSpec`` is one)."""

    @property
    def call_id(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...


def model_request(request: GenerateRequest) -> float:
    """``[AI-REQ]`` for a model call about to start; returns its start (monotonic)."""
    if d.enabled(d.AI_REQ):
        size = len(request.system) + sum(len(json.dumps(b, default=str)) for b in request.blocks)
        d.info(
            d.AI_REQ,
            conv=request.conversation_id,
            turn=request.turn_id,
            round=request.round,
            model=request.model or "-",
            blocks=len(request.blocks),
            chars=size,
            tokens=size // 4,  # an estimate: ~4 characters a token
            cache_marks=list(request.cache_marks),
        )
    if d.enabled(d.AI_REQ, logging.DEBUG):
        d.debug(d.AI_REQ, turn=request.turn_id, round=request.round, blocks=_body(request.blocks))
    return time.monotonic()


def model_result(result: GenerateResult, started: float) -> None:
    """``[AI-RESP]`` for a model call's result (failed ones too, with their code)."""
    usage = result.usage
    d.info(
        d.AI_RESP,
        conv=result.conversation_id,
        turn=result.turn_id,
        round=result.round,
        model=usage.model or "-",
        tokens_in=usage.input_tokens,
        tokens_out=usage.output_tokens,
        cache_read=usage.cache_read_tokens,
        cache_write=usage.cache_write_5m_tokens + usage.cache_write_1h_tokens,
        channels=sorted(result.channels),
        chars=sum(len(text) for text in result.channels.values()),
        ms=d.ms_since(started),
        error=result.error_code or None,
    )
    if d.enabled(d.AI_RESP, logging.DEBUG):
        d.debug(d.AI_RESP, turn=result.turn_id, round=result.round, channels=_body(result.channels))


def tool_calls(conversation_id: str, turn_id: str, round_: int, calls: Iterable[Call]) -> None:
    """``[AI-FnCall]``: the tools a decision calls in one round (names and call ids)."""
    calls = tuple(calls)
    d.info(
        d.AI_FNCALL,
        conv=conversation_id,
        turn=turn_id,
        round=round_,
        count=len(calls),
        tools=[c.tool for c in calls],
        calls=[c.call_id for c in calls],
    )
    if d.enabled(d.AI_FNCALL, logging.DEBUG):
        for c in calls:
            d.debug(d.AI_FNCALL, turn=turn_id, call=c.call_id, params=_body(c.params))


def tool_ran(result: ToolResult, started: float) -> None:
    """``[AI-TOOL]`` for an external tool call served by a tool executor."""
    d.info(
        d.AI_TOOL,
        conv=result.conversation_id,
        turn=result.turn_id,
        call=result.call_id,
        tool=result.tool,
        status="ok" if result.ok else "error",
        chars=len(result.content),
        artifacts=len(result.artifacts) or None,
        ms=d.ms_since(started),
    )
    d.debug(d.AI_TOOL, call=result.call_id, content=result.content, error=result.error)


def react_ran(
    conversation_id: str, turn_id: str, call: Call, outcome: ReactOutcome, started: float
) -> None:
    """``[AI-TOOL]`` for a react.* tool run in the conversation's actor."""
    if not d.enabled(d.AI_TOOL):
        return  # the size below costs a JSON encoding of the result
    d.info(
        d.AI_TOOL,
        conv=conversation_id,
        turn=turn_id,
        call=call.call_id,
        tool=call.tool,
        status=str(outcome.result.get("status", "-")),
        chars=len(json.dumps(outcome.result, default=str)),
        blocks=len(outcome.blocks),
        ms=d.ms_since(started),
    )
    if d.enabled(d.AI_TOOL, logging.DEBUG):
        d.debug(d.AI_TOOL, call=call.call_id, result=_body(outcome.result))


def _body(value: Mapping[str, Any] | Any) -> str:
    return json.dumps(value, default=str)
