"""What a turn asks of others over NATS: a model call, external tool calls, an agent
task, a progress card.

Each function is one request on the bus and turns every failure into a value the
decision loop can use (a failed ``GenerateResult``, a failed ``ToolOutcome``): a
streamer or tool executor that is away never crashes a turn. A pool member that is full
answers ``ErrorReply(code="busy")`` at once (``actline.actors.pools.admission``): the call is
sent again, up to ``BUSY_TRIES`` times with a short growing pause, and the queue group
picks a member anew each time; when every try finds a full member, the call fails with
``model_busy`` (a model call) or a tool error saying so. An agent task is stored
in the agent's durable inbox (``actline.actors.agents.inboxes``); when the agent is not connected,
the model gets a notice and the Waiting card says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actline.actors.base import Ref
from actline.actors.errors import ActorError
from actline.actors.pools.admission import BUSY
from actline.actors.pools.streamer import failed_result
from actline.actors.services.shared import Services
from actline.actors.services.task_book import TaskEntry
from actline.actors.tracing import spans as tracing
from actline.bus import BusError
from actline.llm.errors import ModelError
from actline.llm.protocol import Completion
from actline.messages import (
    AgentTask,
    ErrorReply,
    GenerateRequest,
    GenerateResult,
    Message,
    MessageError,
    Phase,
    ReActProgress,
    ToolCall,
    ToolResult,
)

from . import events as ev
from .mailbox import Render, ToolOutcome
from .reply import AGENT_SEND, TurnOutput

log = logging.getLogger(__name__)

BEST_EFFORT_NOTICE = (
    "The turn's budget is spent ({reason}). Write your final answer now from what is on "
    "the timeline: action complete, no tool calls."
)


BUSY_TRIES = 8
"""How many times a call is sent while pool members answer busy."""
BUSY_PAUSE_S = 0.02
"""The pause before the second try; it doubles each try, up to ``BUSY_PAUSE_MAX_S``."""
BUSY_PAUSE_MAX_S = 0.5


def _is_busy(reply: Message) -> bool:
    return isinstance(reply, ErrorReply) and reply.code == BUSY


async def _ask_pool(
    services: Services,
    subject: str,
    message: Message,
    *,
    timeout: float,
    headers: dict[str, str] | None,
) -> tuple[Message, int]:
    """The reply of a pool on ``subject`` and the tries it took: sent again while a member
    answers busy, at most ``BUSY_TRIES`` times (the last busy reply is returned)."""
    bus = services.bus
    pause, tried = BUSY_PAUSE_S, 1
    reply = await bus.request(
        subject, message, timeout=timeout, raise_remote=False, headers=headers
    )
    while _is_busy(reply) and tried < BUSY_TRIES:
        await asyncio.sleep(pause)
        pause, tried = min(pause * 2, BUSY_PAUSE_MAX_S), tried + 1
        reply = await bus.request(
            subject, message, timeout=timeout, raise_remote=False, headers=headers
        )
    return reply, tried


async def generate(services: Services, request: GenerateRequest) -> GenerateResult:
    """One model call: this node's streamer in process (no copy of the context on the
    wire), else (no streamer here, or the local shortcut off) the pool on
    ``al.llm.generate``."""
    if services.streamer is not None and services.settings.local_shortcut:
        return await services.streamer.call(request)
    bus = services.bus
    timeout = services.settings.model_timeout_s + 5.0
    try:
        reply, tried = await _ask_pool(
            services,
            bus.subjects.llm_generate,
            request,
            timeout=timeout,
            headers=tracing.headers(),  # the streamer's span joins the turn's trace
        )
    except BusError as exc:
        return failed_result(request, "model_unreachable", f"no streamer answered: {exc}")
    if isinstance(reply, GenerateResult):
        return reply
    if _is_busy(reply):
        return failed_result(
            request,
            "model_busy",
            f"every streamer asked was full ({tried} tries): start more model pool members "
            "(actline pool models) or give them a larger --concurrency or --queue",
        )
    text = reply.message if isinstance(reply, ErrorReply) else f"unexpected {reply.kind}"
    return failed_result(request, "model_unreachable", text)


async def call_tool(
    services: Services,
    call: ev.ToolSpec,
    *,
    conversation_id: str,
    turn_id: str,
    timeout_s: float,
    headers: dict[str, str] | None = None,
) -> ToolOutcome:
    """One external tool call: this node's executor when it has one (it sees the
    conversation's workspace), else the pool on ``al.tools.exec``; ``headers``: the
    call's trace context."""
    bus = services.bus
    message = ToolCall(
        conversation_id=conversation_id,
        turn_id=turn_id,
        call_id=call.call_id,
        tool=call.tool,
        params=dict(call.params),
        timeout_s=timeout_s,
        owner=services.settings.node_id,
    )
    subject = (
        bus.subjects.tools_exec_local(services.settings.node_id)
        if services.local_tools
        else bus.subjects.tools_exec
    )
    try:
        reply, tried = await _ask_pool(
            services, subject, message, timeout=timeout_s + 2.0, headers=headers
        )
    except BusError as exc:
        return failed(call, f"the tool executors did not answer: {exc}")
    except MessageError as exc:  # e.g. parameters too large to send
        return failed(call, f"the call could not be sent: {exc}")
    if _is_busy(reply):
        return failed(
            call, f"every tool executor asked was full ({tried} tries); try the call later"
        )
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
    headers: Callable[[str], dict[str, str] | None] = lambda call_id: None,
) -> tuple[ToolOutcome, ...]:
    """External calls at the same time, outcomes in call order; never raises but for
    cancellation (a failure inside the runtime is every call's failed outcome).
    ``headers``: a call id's trace context."""
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
                        headers=headers(c.call_id),
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


@dataclass(frozen=True, slots=True)
class SentTask:
    """An ``agent.send`` carried out: the call's result, and the notice the model gets
    when the agent is not connected (None when it is, or the task could not be sent)."""

    outcome: ToolOutcome
    notice: str | None = None


async def send_task(
    services: Services, effect: ev.SendAgentTask, *, conversation_id: str, turn_id: str
) -> SentTask:
    """Store an ``agent.task`` in the agent's durable inbox and book it in the node's
    ``TaskBook``; the outcome is the ``agent.send`` call's result (sent, queued for an
    agent that is not connected, or why it could not be sent)."""
    done = services.bus.subjects.agent_done_of(effect.agent)
    text = (
        f"{effect.text}\n\n---\nYou are the outside agent '{effect.agent}'. When the work "
        f"is done, publish agent.done (agent={effect.agent}, turn_id={turn_id}, "
        f"task_id={effect.task_id}, summary=...) on {done}, or run: "
        f'actline done {effect.agent} "<summary>" --task {effect.task_id}'
    )
    task = AgentTask(
        agent=effect.agent,
        conversation_id=conversation_id,
        turn_id=turn_id,
        task_id=effect.task_id,
        text=text,
        done_subject=done,
    )
    entry = TaskEntry(effect.task_id, effect.agent, conversation_id, turn_id, services.clock())
    services.task_book.add(entry)
    status: dict[str, Any] = {"status": "sent", "agent": effect.agent, "task_id": effect.task_id}
    notice = None
    try:
        stored = await services.agents.send(task)
    except (BusError, MessageError) as exc:
        status = {"status": "error", "error": f"could not send: {exc}"}
    else:
        entry.seq, entry.present = stored.seq, stored.present
        if not stored.present:
            notice = f"{effect.agent} is not connected; the task is queued"
            status |= {"status": "queued", "connected": False, "note": notice}
    ok = status["status"] != "error"
    return SentTask(ToolOutcome(effect.call_id, AGENT_SEND, ok, status), notice)


def absent_note(agents: Sequence[str]) -> str:
    """What the Waiting card starts with when tasks wait for agents that are not connected
    (before "waiting for NAME (task ID)", which stays last)."""
    if not agents:
        return ""
    if len(agents) == 1:
        return f"{agents[0]} is not connected, the task is queued; "
    return f"{', '.join(agents)} are not connected, their tasks are queued; "


async def best_effort(
    services: Services,
    conv: Ref,
    render: Render | None,
    out: TurnOutput,
    reason: str,
    timeout_s: float,
) -> str:
    """The answer of one tool-free model call outside the round loop when a turn's budget
    is spent (``render``: the call, with ``BEST_EFFORT_NOTICE``; None: no call, the tokens
    are spent too); a plain note when there is no call or it failed."""
    fallback = (
        f"I could not finish this within the turn's budget ({reason}). "
        "What I found so far is on the timeline."
    )
    if render is None:
        return fallback
    try:
        rendered = await conv.ask(render, timeout=timeout_s)
        result = rendered.counted(await generate(services, rendered.request))
    except (TimeoutError, BusError, ActorError) as exc:
        log.warning("best-effort answer of turn %s failed: %s", render.turn_id, exc)
        return fallback
    out.add(result)
    answer = result.channels.get("answer", "").strip()
    if answer:
        out.answered(result, answer)
    return answer or fallback


async def publish_card(
    services: Services,
    conversation_id: str,
    turn_id: str,
    phase: Phase,
    round_: int,
    detail: str,
    data: Mapping[str, Any] | None = None,
) -> None:
    """A ``react.progress`` card on the conversation's stream (``data``: the context
    telemetry, a waiting card's approvals); a card lost is logged."""
    bus = services.bus
    if phase == "waiting":
        detail = absent_note(services.task_book.absent(turn_id)) + detail
    # Built from the turn's own validated ids and the state machine's phase: no re-validation.
    card = ReActProgress(
        conversation_id=conversation_id,
        turn_id=turn_id,
        phase=phase,
        round=round_,
        detail=detail,
        data=dict(data or {}),
    )
    try:
        await bus.publish(bus.subjects.stream(conversation_id), card)
    except BusError as exc:
        log.warning("progress card of turn %s lost: %s", turn_id, exc)


async def complete(services: Services, request: GenerateRequest) -> Completion:
    """A model call run to the end with nothing streamed to clients (a compaction summary):
    this node's streamer in process, or (the local shortcut off) a streamer of the pool on
    ``al.llm.generate`` (``quiet``). Raises ``ModelError`` with the failure's reason."""
    streamer = services.streamer
    if streamer is not None and services.settings.local_shortcut:
        return await streamer.complete(request)
    quiet = request.model_copy(update={"quiet": True})
    timeout = services.settings.model_timeout_s + 5.0
    try:
        reply, _ = await _ask_pool(
            services, services.bus.subjects.llm_generate, quiet, timeout=timeout, headers=None
        )
    except BusError as exc:
        raise ModelError(f"no streamer answered: {exc}") from None
    if not isinstance(reply, GenerateResult):
        detail = reply.message if isinstance(reply, ErrorReply) else f"got {reply.kind}"
        raise ModelError(f"the streamer refused the call: {detail}")
    if reply.error:
        raise ModelError(f"{reply.error_code}: {reply.error}")
    return Completion(reply.raw, reply.usage)
