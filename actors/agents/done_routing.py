"""Where a DONE goes: the node's routing of ``agent.done`` signals.

First, who sent it: a DONE on an agent's own subject ``<prefix>.agent.<name>.done`` must
name that agent (``agent_mismatch`` otherwise: with authentication on, only that agent
may publish there, so the subject is its identity); the shared ``<prefix>.agent.done`` is
refused when the bus is authenticated (``shared_done_refused``). Neither is applied.

A running turn's DecisionActor applies the signal; a DONE for a turn that ended goes
to its conversation (late, duplicate or refused); a DONE without ids goes to the
agent's oldest open task (ambiguous when the agent has open tasks in several turns);
a DONE for a turn a killed node left mid-way waits here for that turn to resume
(``Later`` hands it back to the DONE stream while it has not). In cluster mode a
verdict that says "not here" is ``Later`` too: another node may hold the task.

``route_approval`` does the same for a ``turn.approval`` request on an approver's
``<prefix>.approve.<role>.<name>.<tid>[.<tool>]``, which every node hears (who decided and
of which tool are taken from that subject): the running turn's DecisionActor
answers (applied, unknown approval, not waiting); a turn left mid-way here is waited for
while it resumes; a node that does not run the turn stays silent, so the one that does
answers, and a requester that hears nothing knows that no node runs it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

from actline import messages
from actline.actors.base import Actor
from actline.actors.configuration.checks import refusal, validate_done
from actline.actors.errors import ActorStopped, AskTimeout, ConversationLost, InputRefused
from actline.actors.ownership.ownership import Ownership
from actline.actors.services.parking import RESUMING_HOLD_S
from actline.actors.services.shared import Services
from actline.actors.turn.mailbox import ApplyApproval, ApplyDone, RouteDone
from actline.bus import Bus
from actline.messages import ApprovalDecision, DoneSignal, ErrorReply, SubjectError

from .done_queue import Later

ASK_TIMEOUT_S = 30.0
"""How long a DONE waits for its turn's DecisionActor or its conversation."""
RESUME_WAIT_S = 3.0
"""How long a DONE for a turn left mid-way waits here for it to resume before it is
handed back to the DONE stream (and taken again)."""

Conversations = Callable[[str], Awaitable[Actor]]
"""The actor of a conversation, loaded on first use (``Node.conversation``)."""


class DoneRouter:
    """Routes DONE signals to the turns of one node."""

    def __init__(
        self, services: Services, ownership: Ownership, conversation: Conversations
    ) -> None:
        self.services = services
        self.ownership = ownership
        self.conversation = conversation

    async def route(self, msg: DoneSignal, age: float, subject: str) -> messages.Message | Later:
        """A DONE from the durable stream (on ``subject``): its verdict, or ``Later`` while
        its turn may still come to life (resuming here, or in cluster mode on another node)."""
        refused = origin_refusal(self.services.bus, subject, msg)
        if refused is not None:
            return refused
        try:
            verdict = await self.route_now(msg)
        except ConversationLost:
            return Later("the conversation moved to another node", 0.2)
        except AskTimeout as exc:
            return Later(str(exc), 0.5)
        if not isinstance(verdict, Later) and self.ownership.quiet(verdict):
            return Later("no turn here holds the task; another node may", 0.5)
        return verdict

    async def route_now(self, msg: DoneSignal) -> messages.Message | Later:
        """A running turn's DecisionActor answers; a DONE for an ended turn goes to its
        conversation (late, duplicate or refused); one for a turn left mid-way by a
        killed node waits for that turn to resume here (``Later`` when it does not yet)."""
        try:
            msg = validate_done(msg, self.services.settings, self.services.clock())
        except InputRefused as exc:
            return refusal(exc)
        book = self.services.task_book
        signal = msg
        entry = book.get(msg.task_id) if msg.task_id is not None else None
        turn_id = entry.turn_id if entry is not None else msg.turn_id
        if msg.task_id is None and msg.turn_id is None:
            open_tasks = book.open_tasks(msg.agent)
            turns = sorted({t.turn_id for t in open_tasks})
            if not open_tasks:
                return ErrorReply(
                    code="no_outstanding_task",
                    message=f"{msg.agent} has no outstanding task; nothing was applied",
                )
            if len(turns) > 1:
                ids = ", ".join(t.task_id for t in open_tasks)
                return ErrorReply(
                    code="ambiguous_done",
                    message=f"{msg.agent} has open tasks in {len(turns)} turns ({ids}); "
                    "name one with --task ID",
                )
            turn_id = open_tasks[0].turn_id
            signal = msg.model_copy(update={"turn_id": turn_id})
        running = book.running(turn_id)
        if running is None and turn_id is not None and book.resuming(turn_id):
            running = await book.wait_running(turn_id, RESUME_WAIT_S)
            if running is None:
                return Later(f"turn {turn_id} has not resumed yet", 0.5, RESUMING_HOLD_S)
        if running is not None:
            with contextlib.suppress(ActorStopped):  # it just ended: its conversation answers
                return await running.decision.ask(ApplyDone(signal), timeout=ASK_TIMEOUT_S)
        cid = entry.conversation_id if entry is not None else None
        if cid is None and running is not None:
            cid = running.conversation_id
        if cid is None:
            if msg.task_id is not None:
                return ErrorReply(
                    code="unknown_task",
                    message=f"no task {msg.task_id} is known here; check the id, or send the "
                    f"DONE without ids to answer {msg.agent}'s oldest open task",
                )
            return ErrorReply(
                code="unknown_turn",
                message=f"turn {msg.turn_id} is not running here; nothing was applied",
            )
        conv = await self.conversation(cid)
        return await conv.ask(RouteDone(signal), timeout=ASK_TIMEOUT_S)


def origin_refusal(bus: Bus, subject: str, msg: DoneSignal) -> ErrorReply | None:
    """Why a DONE that came on ``subject`` is refused before routing (None: it is not).

    The shared subject only without authentication; an agent's own subject only for a
    DONE that names that agent."""
    subjects = bus.subjects
    own = subjects.agent_done_of(msg.agent)
    if subject == subjects.agent_done:
        if not bus.authenticated:
            return None
        return ErrorReply(
            code="shared_done_refused",
            message=f"authentication is on: {subject} is not accepted; publish the DONE of "
            f"{msg.agent} on its own subject {own} (the task's done_subject); nothing was applied",
        )
    try:
        name = subjects.agent_of(subject, "done")
    except SubjectError:
        name = ""
    if name == msg.agent:
        return None
    return ErrorReply(
        code="agent_mismatch",
        message=f"a DONE from {msg.agent} arrived on {subject}, the DONE subject of "
        f"{name or 'another agent'}; {msg.agent} publishes on {own}; nothing was applied",
    )


async def route_approval(
    services: Services, msg: ApprovalDecision, subject: str
) -> messages.Message | None:
    """The reply to an approval that came on ``subject`` (None: not running here). Who
    decided and of which tool come from the subject (only that approver may publish
    there), never from the message."""
    try:
        role, name, turn_id, tool = services.bus.subjects.approval_of(subject)
    except SubjectError as exc:
        return ErrorReply(code="wrong_subject", message=str(exc))
    if turn_id != msg.turn_id:
        return ErrorReply(
            code="wrong_subject",
            message=f"the approval is for turn {msg.turn_id}, sent on {subject}",
        )
    msg = msg.model_copy(update={"by": f"{role} {name}", "tool": tool})
    book = services.task_book
    running = book.running(turn_id)
    if running is None and book.resuming(turn_id):
        running = await book.wait_running(turn_id, RESUME_WAIT_S)
    if running is not None:
        with contextlib.suppress(ActorStopped):  # it just ended: not running any more
            answer = await running.decision.ask(ApplyApproval(msg), timeout=ASK_TIMEOUT_S)
            if answer is not None:
                return answer
        return ErrorReply(
            code="not_waiting",
            message=f"turn {turn_id} just ended; nothing was approved or denied",
        )
    return None
