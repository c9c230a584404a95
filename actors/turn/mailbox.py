"""The named messages of the ConversationActor's and the DecisionActor's mailboxes.

Only values cross a mailbox: frozen dataclasses of ids, blocks, specs and wire
messages; never a closure or an actor object. A message that is asked subclasses
``Request[R]`` (``R`` is its answer); the others are told.

A round of a turn is at most three exchanges with its conversation:

1. ``Render``: apply the writes the decision collected since its last exchange,
   commit them to LMDB with the turn's checkpoint (one transaction), render the
   context. Answers ``Rendered``.
2. ``RunTools`` (told): apply the decision's writes (notes, notices, tool-call blocks),
   run the round's react.* tools, tell the turn ``ReactRan``. Only when the round calls
   a react.* tool (the external ones run meanwhile, on the tool executors).
3. ``Commit``: apply writes and commit them with a record, when the turn enters
   Waiting (its checkpoint must be stored before it sleeps on a DONE).

``Render`` answers as soon as the context is rendered; its commit becomes durable while
the model runs and the conversation tells the turn ``Durable`` when it is. The turn
acts on the model's reply only after that, so nothing a round does leaves the node
before the round before it is stored.

and the turn ends with one ``EndTurn`` (a result to persist and publish, or the turn
handed back because another node owns the conversation now).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from actline import messages
from actline.actors.base import Request
from actline.messages import ReActResult, TurnRequest
from actline.timeline import AnnounceContext, Block
from actline.tools.react.core import ReactOutcome

from . import events as ev
from .state import DecisionState
from .watchdog import NO_STATS, ContextStats

# --- what a decision writes ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NotesAck:
    """The model's notes of round ``iteration``: the plan book acknowledges them."""

    text: str
    iteration: int
    ts: float


@dataclass(frozen=True, slots=True)
class LateSignal:
    """A DONE that came after its turn ended: recorded and announced next turn."""

    signal: ev.DoneSignal
    reason: str


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call's outcome; the conversation builds its ``tc:…result`` block.

    ``sources`` are source rows (url, title, text) an external tool found: the
    conversation pools them and names their SIDs in the result. ``after`` are the
    blocks that follow the result (a react tool's content blocks, notices).
    """

    call_id: str
    tool: str
    ok: bool
    data: Mapping[str, Any]
    sources: tuple[Mapping[str, Any], ...] = ()
    after: tuple[Block, ...] = ()


Write = Block | NotesAck | LateSignal | ToolOutcome
"""One thing a decision puts on the timeline, applied in order by the conversation."""


@dataclass(frozen=True, slots=True)
class Writes:
    """What a decision collected since its last exchange, in order."""

    items: tuple[Write, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.items)


# --- asks of the ConversationActor ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered model request and how many followups of the turn it includes;
    ``committing``: the round's commit is on its way (a ``Durable`` follows); ``usage``:
    the compaction summaries written before it (``actline.actors.conversation.compactor``)."""

    request: messages.GenerateRequest
    followups: int
    committing: bool = False
    stats: ContextStats = NO_STATS
    """The rendered context as the watchdog reads it."""
    usage: messages.Usage | None = None
    """What the compaction summaries written for this render cost (the turn counts it)."""
    edits: tuple[Mapping[str, Any], ...] = ()
    """The context policy's decisions in this render (``actline.timeline.editing.cost``): one
    plain mapping per decision, recorded as a ``context.edit`` event on the render span."""

    def counted(self, result: messages.GenerateResult) -> messages.GenerateResult:
        """``result`` with the summaries' usage added to its own."""
        if self.usage is None:
            return result
        return result.model_copy(update={"usage": result.usage + self.usage})


@dataclass(frozen=True, slots=True)
class Render(Request[Rendered]):
    """Apply ``writes``, commit them with ``record`` (the turn's checkpoint), render."""

    turn_id: str
    round: int
    announce: AnnounceContext
    writes: Writes = Writes()
    record: Mapping[str, Any] | None = None
    model: str = ""
    max_output_tokens: int = 4096
    seq_start: int = 0
    force_compaction: bool = False
    """Compact now: the model refused the context as too long."""
    ask_compaction: str = ""
    """A compaction the context watchdog asks for (its reason), weighed by the conversation's
    context policy where a rewrite is cheap (``actline.timeline.rendering.policy``)."""


@dataclass(frozen=True, slots=True)
class RunTools:
    """Told: apply ``writes``, run these react.* calls in order, and tell the running turn
    ``ReactRan`` with their outcomes."""

    turn_id: str
    round: int
    calls: tuple[ev.ToolSpec, ...]
    writes: Writes = Writes()


@dataclass(frozen=True, slots=True)
class Commit(Request[int]):
    """Apply ``writes`` and commit them with ``record``; answers the store revision."""

    turn_id: str
    writes: Writes = Writes()
    record: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RouteDone(Request[messages.Message]):
    """An ``agent.done`` for this conversation's ended turns; answers ``Ack`` or
    ``ErrorReply`` (a DONE for the running turn goes to its DecisionActor)."""

    signal: messages.DoneSignal


@dataclass(frozen=True, slots=True)
class UserInput(Request[messages.Message]):
    """A followup or feedback for this conversation; answers ``Ack`` or ``ErrorReply``."""

    message: messages.Followup | messages.Feedback


# --- told to the ConversationActor ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnJob:
    """A turn request taken from the durable queue (the node's turn queue settles it)."""

    request: TurnRequest


@dataclass(frozen=True, slots=True)
class EndTurn:
    """The running turn is over: the one way a turn ends.

    ``how`` ``result``: apply ``writes``, persist ``result`` as the turn's final record,
    publish it, settle the request; ``lost``: another node owns the conversation now,
    nothing is persisted or published and the request goes back to the queue.
    ``state`` is the decision state the turn ended in.
    """

    turn_id: str
    how: Literal["result", "lost"]
    state: DecisionState
    result: ReActResult | None = None
    writes: Writes = Writes()
    reason: str = ""


# --- the DecisionActor's mailbox -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Durable:
    """The commit of round ``round`` is durable in the node's store (in cluster mode its
    durable copy follows at the turn's next copy point, ``actline.actors.ownership``); or it
    failed: ``lost`` (another node owns the conversation) or ``error``."""

    round: int
    lost: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class ApplyDone(Request[messages.Message]):
    """A DONE routed to the running turn; answers ``Ack`` or ``ErrorReply``."""

    signal: messages.DoneSignal


@dataclass(frozen=True, slots=True)
class ApplyApproval(Request[messages.Message]):
    """A ``turn.approval`` routed to the running turn; answers ``Ack`` or ``ErrorReply``."""

    decision: messages.ApprovalDecision


@dataclass(frozen=True, slots=True)
class FollowupArrived:
    """A followup joined the running turn (the conversation counted ``count`` so far)."""

    count: int


@dataclass(frozen=True, slots=True)
class Control:
    """Skip-waiting or cancel from ``al.turn.<tid>.control``."""

    message: messages.SkipWaiting | messages.CancelReAct


@dataclass(frozen=True, slots=True)
class ModelReply:
    """The model call of ``round`` came back (``forced``: after a forced compaction)."""

    round: int
    result: messages.GenerateResult
    forced: bool
    followups_rendered: int = 0
    gated: bool = False
    """Wait for ``Durable(round)`` before acting on it."""


@dataclass(frozen=True, slots=True)
class GraceOver:
    """The followup grace after round ``round``'s answer ran out."""

    round: int
    answer: str
    tokens: int


@dataclass(frozen=True, slots=True)
class ReactRan:
    """The react.* calls of ``round`` ran (told by the conversation, in call order)."""

    round: int
    outcomes: tuple[ReactOutcome, ...]


@dataclass(frozen=True, slots=True)
class ExternalRan:
    """The external calls of ``round`` have outcomes (in call order)."""

    round: int
    outcomes: tuple[ToolOutcome, ...]
