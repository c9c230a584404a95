"""What a turn asks of other actors over NATS: a model call, an external tool call.

Each function is one request on the bus and turns every failure into a value the
decision loop can use (a failed ``GenerateResult``, a failed ``ToolOutcome``): a
streamer or tool executor that is away never crashes a turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from bus import BusError
from messages import (
    AgentTask,
    ErrorReply,
    GenerateRequest,
    GenerateResult,
    MessageError,
    Phase,
    ReActProgress,
    ToolCall,
    ToolResult,
)

from . import events as ev
from .base import ActorRef
from .errors import ActorError
from .mailbox import Render, ToolOutcome
from .policy import AGENT_SEND
from .services import Services
from .streamer import failed_result

log = logging.getLogger(__name__)


async def generate(services: Services, request: GenerateRequest) -> GenerateResult:
    """One model call: this node's streamer in process (no copy of the context on the
    wire), else the pool on ``al.llm.generate``."""
    if services.streamer is not None:
        return await services.streamer.call(request)
    bus = services.bus
    timeout = services.settings.model_timeout_s + 5.0
    try:
        reply = await bus.request(
            bus.subjects.llm_generate, request, timeout=timeout, raise_remote=False
        )
    except BusError as exc:
        return failed_result(request, "model_unreachable", f"no streamer answered: {exc}")
    if isinstance(reply, GenerateResult):
        return reply
    text = reply.message if isinstance(reply, ErrorReply) else f"unexpected {reply.kind}"
    return failed_result(request, "model_unreachable", text)


async def call_tool(
    services: Services,
    call: ev.ToolSpec,
    *,
    conversation_id: str,
    turn_id: str,
    timeout_s: float,
) -> ToolOutcome:
    """One external tool call: this node's executor when it has one (it sees the
    conversation's workspace), else the pool on ``al.tools.exec``."""
    bus = services.bus
    message = ToolCall(
        conversation_id=conversation_id,
        turn_id=turn_id,
        call_id=call.call_id,
        tool=call.tool,
        params=dict(call.params),
        timeout_s=timeout_s,
    )
    subject = (
        bus.subjects.tools_exec_local(services.settings.node_id)
        if services.local_tools
        else bus.subjects.tools_exec
    )
    try:
        reply = await bus.request(subject, message, timeout=timeout_s + 2.0, raise_remote=False)
    except BusError as exc:
        return failed(call, f"the tool executors did not answer: {exc}")
    except MessageError as exc:  # e.g. parameters too large to send
        return failed(call, f"the call could not be sent: {exc}")
    if not isinstance(reply, ToolResult):
        return failed(call, reply.message if isinstance(reply, ErrorReply) else f"got {reply.kind}")
    data: dict[str, object] = {"status": "ok" if reply.ok else "error"}
    if reply.content:
        data["content"] = reply.content
    if reply.data:
        data["data"] = {k: v for k, v in reply.data.items() if k != "sources"}
    if reply.error:
        data["error"] = reply.error
    if reply.artifacts:
        data["artifacts"] = [a.model_dump(mode="json") for a in reply.artifacts]
    rows = reply.data.get("sources") if reply.ok else None
    sources = tuple(r for r in rows if isinstance(r, dict)) if isinstance(rows, list) else ()
    return ToolOutcome(call.call_id, call.tool, reply.ok, data, sources)


def failed(call: ev.ToolSpec, error: str) -> ToolOutcome:
    """A call that produced no result, with the reason the model sees."""
    return ToolOutcome(call.call_id, call.tool, False, {"status": "error", "error": error})


async def call_tools(
    services: Services,
    calls: Sequence[ev.ToolSpec],
    *,
    conversation_id: str,
    turn_id: str,
    timeout_s: float,
) -> tuple[ToolOutcome, ...]:
    """External calls at the same time, outcomes in call order; never raises but for
    cancellation (a failure inside the runtime is every call's failed outcome)."""
    try:
        return tuple(
            await asyncio.gather(
                *(
                    call_tool(
                        services,
                        c,
                        conversation_id=conversation_id,
                        turn_id=turn_id,
                        timeout_s=timeout_s,
                    )
                    for c in calls
                )
            )
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("the tool calls of turn %s failed", turn_id)
        error = f"the tool failed inside the runtime: {type(exc).__name__}: {exc}"
        return tuple(failed(c, error) for c in calls)


async def send_task(
    services: Services, effect: ev.SendAgentTask, *, conversation_id: str, turn_id: str
) -> ToolOutcome:
    """Publish an ``agent.task`` on the agent's inbox; its outcome is the ``agent.send``
    call's result (sent, or why not)."""
    bus = services.bus
    text = (
        f"{effect.text}\n\n---\nYou are the outside agent '{effect.agent}'. When the work "
        f"is done, publish agent.done (agent={effect.agent}, turn_id={turn_id}, "
        f"task_id={effect.task_id}, summary=...) on {bus.subjects.agent_done}, or run: "
        f'actline done {effect.agent} "<summary>" --task {effect.task_id}'
    )
    task = AgentTask(
        agent=effect.agent,
        conversation_id=conversation_id,
        turn_id=turn_id,
        task_id=effect.task_id,
        text=text,
        done_subject=bus.subjects.agent_done,
    )
    status: dict[str, Any] = {"status": "sent", "agent": effect.agent, "task_id": effect.task_id}
    try:
        await bus.publish(bus.subjects.agent_inbox(effect.agent), task)
    except BusError as exc:
        status = {"status": "error", "error": f"could not send: {exc}"}
    return ToolOutcome(effect.call_id, AGENT_SEND, status["status"] == "sent", status)


async def render_and_generate(
    services: Services, conv: ActorRef, render: Render, timeout_s: float
) -> GenerateResult | None:
    """Render on the conversation and call the model, for an answer outside the round
    loop (the best effort when the budget is spent); None when either failed."""
    try:
        rendered = await conv.ask(render, timeout=timeout_s)
        return await generate(services, rendered.request)
    except (TimeoutError, BusError, ActorError) as exc:
        log.warning("best-effort answer of turn %s failed: %s", render.turn_id, exc)
        return None


async def publish_card(
    services: Services,
    conversation_id: str,
    turn_id: str,
    phase: Phase,
    round_: int,
    detail: str,
) -> None:
    """A ``react.progress`` card on the conversation's stream; a card lost is logged."""
    bus = services.bus
    # Built from the turn's own validated ids and the state machine's phase: no re-validation.
    card = ReActProgress(
        conversation_id=conversation_id, turn_id=turn_id, phase=phase, round=round_, detail=detail
    )
    try:
        await bus.publish(bus.subjects.stream(conversation_id), card)
    except BusError as exc:
        log.warning("progress card of turn %s lost: %s", turn_id, exc)
