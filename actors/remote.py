"""What a turn asks of other actors over NATS: a model call, an external tool call.

Each function is one request on the bus and turns every failure into a value the
decision loop can use (a failed ``GenerateResult``, a failed ``ToolOutcome``): a
streamer or tool executor that is away never crashes a turn.
"""

from __future__ import annotations

import logging

from bus import BusError
from messages import ErrorReply, GenerateRequest, GenerateResult, MessageError, ToolCall, ToolResult

from . import events as ev
from .mailbox import ToolOutcome
from .services import Services
from .streamer import failed_result

log = logging.getLogger(__name__)


async def generate(services: Services, request: GenerateRequest) -> GenerateResult:
    """One model call on a streamer: this node's by reference (no copy of the context on
    the wire), else the pool on ``al.llm.generate``."""
    bus = services.bus
    timeout = services.settings.model_timeout_s + 5.0
    shelf = services.shelf
    if shelf is not None:
        ref = shelf.put(request)
        small = GenerateRequest(
            conversation_id=request.conversation_id,
            turn_id=request.turn_id,
            round=request.round,
            context_ref=ref,
        )
        try:
            reply = await bus.request(
                bus.subjects.llm_generate_local(shelf.node_id),
                small,
                timeout=timeout,
                raise_remote=False,
            )
            if isinstance(reply, GenerateResult):
                return reply
            log.warning("local streamer refused round %d: %s", request.round, reply)
        except BusError as exc:
            log.warning("local streamer unreachable (%s); using the pool", exc)
        finally:
            shelf.drop(ref)
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
