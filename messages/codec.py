"""The one discriminated union of messages, its adapter, and the msgpack codec.

Wire format: msgpack of ``model_dump(mode="python")``; datetimes use msgpack's
timestamp extension and bytes its bin type, so any msgpack library can read it.
``decode`` raises ``DecodeError`` (and nothing else) for anything malformed.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgpack
from pydantic import Field, TypeAdapter, ValidationError

from .actors import ActorAnswer, ActorMail
from .agents import AgentHello, AgentsList, AgentsListed, AgentTask, AgentWelcome, DoneSignal
from .errors import DecodeError, EncodeError, PayloadTooLarge
from .llm import GenerateRequest, GenerateResult
from .react import ApprovalDecision, CancelReAct, ReActProgress, SkipWaiting, StreamDelta
from .system import Ack, DeadLetter, ErrorReply
from .tools import ToolCall, ToolResult, WorkspaceApply, WorkspaceFetch, WorkspaceFiles
from .turn import (
    ConversationManage,
    ConversationManaged,
    Feedback,
    Followup,
    ReActResult,
    TurnAccepted,
    TurnHandoff,
    TurnRequest,
)

MAX_PAYLOAD: Final = 8 * 1024 * 1024
"""The embedded server's ``max_payload``; larger payloads travel as storage references."""

Message = Annotated[
    TurnRequest
    | TurnHandoff
    | TurnAccepted
    | ReActResult
    | Followup
    | Feedback
    | ReActProgress
    | StreamDelta
    | SkipWaiting
    | CancelReAct
    | ApprovalDecision
    | ConversationManage
    | ConversationManaged
    | GenerateRequest
    | GenerateResult
    | AgentTask
    | DoneSignal
    | AgentHello
    | AgentWelcome
    | AgentsList
    | AgentsListed
    | ToolCall
    | ToolResult
    | WorkspaceFetch
    | WorkspaceFiles
    | WorkspaceApply
    | ErrorReply
    | Ack
    | DeadLetter
    | ActorMail
    | ActorAnswer,
    Field(discriminator="kind"),
]

MESSAGE_ADAPTER: Final[TypeAdapter[Message]] = TypeAdapter(Message)

MESSAGE_TYPES: Final[dict[str, type[Any]]] = {
    cls.model_fields["kind"].default: cls
    for cls in (
        TurnRequest,
        TurnHandoff,
        TurnAccepted,
        ReActResult,
        Followup,
        Feedback,
        ReActProgress,
        StreamDelta,
        SkipWaiting,
        CancelReAct,
        ApprovalDecision,
        ConversationManage,
        ConversationManaged,
        GenerateRequest,
        GenerateResult,
        AgentTask,
        DoneSignal,
        AgentHello,
        AgentWelcome,
        AgentsList,
        AgentsListed,
        ToolCall,
        ToolResult,
        WorkspaceFetch,
        WorkspaceFiles,
        WorkspaceApply,
        ErrorReply,
        Ack,
        DeadLetter,
        ActorMail,
        ActorAnswer,
    )
}
"""Every message class by its ``kind``."""


def encode(msg: Message, *, max_size: int = MAX_PAYLOAD) -> bytes:
    """Serialise a message to msgpack bytes; raises ``PayloadTooLarge`` past ``max_size``."""
    try:
        data: bytes = msgpack.packb(msg.model_dump(mode="python"), datetime=True)
    except (TypeError, ValueError, OverflowError) as exc:
        kind = getattr(msg, "kind", type(msg).__name__)
        raise EncodeError(f"cannot encode {kind}: {exc}") from None
    if len(data) > max_size:
        raise PayloadTooLarge(len(data), max_size)
    return data


def from_dict(obj: Any) -> Message:
    """Validate a plain dict (e.g. from JSON) into a message; raises ``DecodeError``."""
    if not isinstance(obj, dict):
        raise DecodeError(f"a message must be a map, got {type(obj).__name__}")
    kind = obj.get("kind")
    if not isinstance(kind, str):
        raise DecodeError("the map has no string 'kind' field")
    if kind not in MESSAGE_TYPES:
        raise DecodeError(f"unknown kind {kind!r}")
    try:
        return MESSAGE_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        raise DecodeError(f"invalid {kind}: {_summarise(exc)}") from None
    except Exception as exc:  # a validator tripping on exotic input is still bad input
        raise DecodeError(f"invalid {kind}: {type(exc).__name__}: {exc}") from None


def decode(data: bytes | bytearray | memoryview, *, max_size: int = MAX_PAYLOAD) -> Message:
    """Parse msgpack bytes into a message; raises ``DecodeError`` with the reason."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"expected bytes, got {type(data).__name__}")
    size = len(data)
    if size > max_size:
        raise DecodeError(f"payload over the {max_size} byte limit", size)
    if size == 0:
        raise DecodeError("empty payload", 0)
    try:
        obj = msgpack.unpackb(data, raw=False, timestamp=3, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types for bad bytes
        raise DecodeError(f"not msgpack: {type(exc).__name__}: {exc}", size) from None
    return from_dict(obj)


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        parts.append(f"{loc}: {err['msg']}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
