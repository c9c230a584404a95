"""The errors of the actors package; each keeps its fields and pickles (Ray moves them).

::

    ActorError
    ├── ActorStopped        a message was sent to an actor that has stopped (name)
    ├── AskTimeout          an ask got no answer in time (actor, message, timeout_s)
    ├── NodeNotStarted      a node's resource was used before ``start()`` (what)
    ├── McpConfigError      the MCP servers file cannot be used (path, reason)
    ├── SettingsError       an ``ACTLINE_*`` setting cannot work (name, value, reason)
    │   └── InputRefused    a turn's config or a text over its limit (field, value, limit)
    ├── SettingsFileError   the settings file or the settings it gives cannot work (message)
    ├── RequestsFileError   a line of a Ray job's requests file is not a turn.request
    │                       (path, line, reason)
    ├── UnexpectedMessage   an actor was sent a message it does not take (actor, kind)
    ├── NoTurnQueue         nothing stores turn requests on this NATS (subject)
    ├── DoneNotStored       an ``agent.done`` could not be stored (agent, within_s, reason)
    ├── AgentNotWelcome     no node answered an agent's hello with its inbox (agent, reason)
    ├── ConversationHeld    a conversation was let go while claimed or let go already
    │                       (conversation_id)
    └── ClusterError
        ├── ConversationLost  this node no longer owns the conversation (conversation_id,
        │                     reason): the running turn goes back to the queue
        ├── HeadConflict      the durable head moved since ``expected`` (conversation_id,
        │                     expected, actual, owner)
        └── CopyBroken        a round the durable head chain needs is missing
                              (conversation_id, stream_seq, reason)

``CancelledError`` is never wrapped. A pending ask of an actor that stops fails with
``ActorStopped``; one that outlives its timeout fails with ``AskTimeout`` (the message
may still be handled later: asks are not transactions).
"""

from __future__ import annotations

from typing import Any


class ActorError(Exception):
    """Base of the errors of ``actors``."""


class ActorStopped(ActorError):
    """A message was sent to (or was queued in) an actor that has stopped."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"actor {name} has stopped")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name,))


class AskTimeout(ActorError):
    """An ask of ``message`` to ``actor`` had no answer within ``timeout_s``."""

    def __init__(self, actor: str, message: str, timeout_s: float) -> None:
        self.actor = actor
        self.message = message
        self.timeout_s = timeout_s
        super().__init__(
            f"{actor} did not answer {message} within {timeout_s:g}s; "
            "the actor is stuck or overloaded (see its log)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.actor, self.message, self.timeout_s))


class NodeNotStarted(ActorError):
    """``what`` of a node was used before ``await node.start()``."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what} is not available before the node starts: await node.start()")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what,))


class McpConfigError(ActorError, ValueError):
    """The MCP servers file at ``path`` cannot be used (``reason`` says why and what to fix)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


class SettingsError(ActorError, ValueError):
    """The setting ``name`` (an environment variable or field) cannot take ``value``."""

    def __init__(self, name: str, value: str, reason: str) -> None:
        self.name = name
        self.value = value
        self.reason = reason
        super().__init__(reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name, self.value, self.reason))


class InputRefused(SettingsError):
    """``field`` cannot take ``value`` (a short description of it): ``limit`` says what it
    may be. A ``SettingsError`` whose ``name`` is ``field``."""

    def __init__(self, field: str, value: str, limit: str) -> None:
        self.field = field
        self.limit = limit
        super().__init__(field, value, f"{field} is {value}; the limit is {limit}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.value, self.limit))


class SettingsFileError(ActorError, ValueError):
    """The settings file (``actline.toml``) or a setting it gives cannot work; the message
    says which and what to do."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.message,))


class RequestsFileError(ActorError, ValueError):
    """Line ``line`` of the requests file ``path`` is not a turn request."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.line, self.reason))


class UnexpectedMessage(ActorError, TypeError):
    """``actor`` was sent a ``kind`` it does not take (a bug in the sender)."""

    def __init__(self, actor: str, kind: str) -> None:
        self.actor = actor
        self.kind = kind
        super().__init__(f"{actor} does not take {kind}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.actor, self.kind))


class NoTurnQueue(ActorError, RuntimeError):
    """No node ever created the turn queue on this NATS: start a node first."""

    def __init__(self, subject: str) -> None:
        self.subject = subject
        super().__init__(
            f"nothing stores turn requests on {subject}: start a node "
            "(actline serve, or python -m actline.cli.node) against this NATS, then submit again"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.subject,))


class DoneNotStored(ActorError):
    """An ``agent.done`` could not be stored in the DONE stream, even after retrying."""

    def __init__(self, agent: str, within_s: float, reason: str) -> None:
        self.agent = agent
        self.within_s = within_s
        self.reason = reason
        super().__init__(
            f"the DONE of {agent} could not be stored within {within_s:g} s ({reason}): "
            "start a node (actline serve) against this NATS, or check NATS_URL, and send it "
            "again"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.agent, self.within_s, self.reason))


class AgentNotWelcome(ActorError):
    """An outside agent's hello got no ``agent.welcome``: no node answered, or it refused."""

    def __init__(self, agent: str, reason: str) -> None:
        self.agent = agent
        self.reason = reason
        super().__init__(
            f"agent {agent} has no inbox yet ({reason}): start a node (actline serve) against "
            "this NATS, or check NATS_URL and the agent's credentials"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.agent, self.reason))


class ConversationHeld(ActorError, RuntimeError):
    """A release of a conversation began while a claim or another release of it was in
    progress (``actline.actors.node.holding``: check ``may_release`` first, with no await
    between)."""

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id
        super().__init__(f"conversation {conversation_id} is being claimed or let go already")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id,))


class ClusterError(ActorError):
    """Base of the errors of cluster mode (leases and the durable copy)."""


class ConversationLost(ClusterError):
    """This node no longer owns the conversation (its lease lapsed, another node wrote):
    the running turn goes back to the queue instead of ending here."""

    def __init__(self, conversation_id: str, reason: str) -> None:
        self.conversation_id = conversation_id
        self.reason = reason
        super().__init__(f"conversation {conversation_id} was lost: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.reason))


class HeadConflict(ClusterError):
    """Another writer moved the conversation's head since ``expected`` (a KV revision).

    ``actual`` is the head's KV revision now (0 when there is none) and ``owner`` the
    writer of that head. Nothing was overwritten: re-read the head, rebase, retry.
    """

    def __init__(
        self, conversation_id: str, expected: int, actual: int, owner: str | None = None
    ) -> None:
        self.conversation_id = conversation_id
        self.expected = expected
        self.actual = actual
        self.owner = owner
        by = f" (written by {owner})" if owner else ""
        super().__init__(
            f"conversation {conversation_id}: expected head revision {expected}, "
            f"found {actual}{by}; re-read the head and retry"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.expected, self.actual, self.owner))


class CopyBroken(ClusterError):
    """The durable copy lacks a round that the head chain points at (stream messages lost)."""

    def __init__(self, conversation_id: str, stream_seq: int, reason: str) -> None:
        self.conversation_id = conversation_id
        self.stream_seq = stream_seq
        self.reason = reason
        super().__init__(
            f"conversation {conversation_id}: durable copy broken at stream seq {stream_seq}: "
            f"{reason}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.stream_seq, self.reason))
