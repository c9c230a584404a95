"""The typed wire contract of actline: messages, their msgpack codec, and subject names.

Outside programs (a Ray job publishing turns, an outside agent answering DONE)
need only ``encode``, ``decode``, ``from_dict`` and the public kinds of the wire contract.
"""

from . import subjects
from .actors import ActorAnswer, ActorKind, ActorMail
from .agents import (
    AgentHello,
    AgentsList,
    AgentsListed,
    AgentStatus,
    AgentTask,
    AgentWelcome,
    DoneSignal,
    OpenTask,
)
from .base import (
    ArtifactRef,
    Attachment,
    ContextTelemetry,
    Cost,
    Usage,
    UtcDatetime,
    WireModel,
    utcnow,
)
from .codec import MAX_PAYLOAD, MESSAGE_ADAPTER, MESSAGE_TYPES, Message, decode, encode, from_dict
from .errors import DecodeError, EncodeError, MessageError, PayloadTooLarge, SubjectError
from .ids import AgentName, Id, is_valid_id, is_valid_name, new_id
from .llm import GenerateRequest, GenerateResult
from .react import ApprovalDecision, CancelReAct, Phase, ReActProgress, SkipWaiting, StreamDelta
from .subjects import Subjects
from .system import Ack, DeadLetter, ErrorReply
from .tools import (
    ToolCall,
    ToolResult,
    WorkspaceApply,
    WorkspaceChange,
    WorkspaceFetch,
    WorkspaceFile,
    WorkspaceFiles,
)
from .turn import (
    ConversationManage,
    ConversationManaged,
    ConversationRemoved,
    ConversationSummary,
    Feedback,
    Followup,
    ReActResult,
    TurnAccepted,
    TurnHandoff,
    TurnRequest,
    TurnResult,
    TurnStatus,
)

__all__ = [
    "MAX_PAYLOAD",
    "MESSAGE_ADAPTER",
    "MESSAGE_TYPES",
    "Ack",
    "ActorAnswer",
    "ActorKind",
    "ActorMail",
    "AgentHello",
    "AgentName",
    "AgentStatus",
    "AgentTask",
    "AgentWelcome",
    "AgentsList",
    "AgentsListed",
    "ApprovalDecision",
    "ArtifactRef",
    "Attachment",
    "CancelReAct",
    "ContextTelemetry",
    "ConversationManage",
    "ConversationManaged",
    "ConversationRemoved",
    "ConversationSummary",
    "Cost",
    "DeadLetter",
    "DecodeError",
    "DoneSignal",
    "EncodeError",
    "ErrorReply",
    "Feedback",
    "Followup",
    "GenerateRequest",
    "GenerateResult",
    "Id",
    "Message",
    "MessageError",
    "OpenTask",
    "PayloadTooLarge",
    "Phase",
    "ReActProgress",
    "ReActResult",
    "SkipWaiting",
    "StreamDelta",
    "SubjectError",
    "Subjects",
    "ToolCall",
    "ToolResult",
    "TurnAccepted",
    "TurnHandoff",
    "TurnRequest",
    "TurnResult",
    "TurnStatus",
    "Usage",
    "UtcDatetime",
    "WireModel",
    "WorkspaceApply",
    "WorkspaceChange",
    "WorkspaceFetch",
    "WorkspaceFile",
    "WorkspaceFiles",
    "decode",
    "encode",
    "from_dict",
    "is_valid_id",
    "is_valid_name",
    "new_id",
    "subjects",
    "utcnow",
]
