"""Mail between the actors of a node: one typed envelope for every mailbox message.

A ConversationActor and the DecisionActor of its running turn exchange named mailbox
messages (``Render``, ``Rendered``, ``RunTools``, ``ReactRan``, ``Commit``, ``Durable``,
``EndTurn``, ...; their meaning is in ``actline.actors.turn.mailbox``). In one process they
pass as values; with the local shortcut off (``ACTLINE_LOCAL_SHORTCUT=0``) every one of them
travels over NATS as an ``actor.mail`` on ``<prefix>.actor.<node>.<actor>.<id>``, and an
asked one is answered with ``actor.answer`` (or ``error.reply`` naming the error the
receiver raised). ``body`` is the mailbox message in the actors' own value encoding
(``actline.actors.node.post``): plain msgpack values, each dataclass tagged with its name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import UtcDatetime, WireModel, utcnow
from .ids import Id

ActorKind = Literal["conversation", "turn"]


class ActorMail(WireModel):
    """A mailbox message for the ``actor`` of id ``target`` (a conversation or a turn id)
    on node ``node``; ``ask``: the sender waits for an ``actor.answer``."""

    kind: Literal["actor.mail"] = "actor.mail"
    node: str
    actor: ActorKind
    target: Id
    name: str
    """The mailbox message's type name (``Render``, ``Durable``, ...)."""
    body: dict[str, Any] = Field(default_factory=dict)
    ask: bool = False
    ts: UtcDatetime = Field(default_factory=utcnow)


class ActorAnswer(WireModel):
    """The answer to an asked ``actor.mail``: ``body`` holds the answer value."""

    kind: Literal["actor.answer"] = "actor.answer"
    name: str
    """The answered mailbox message's type name."""
    body: dict[str, Any] = Field(default_factory=dict)
    ts: UtcDatetime = Field(default_factory=utcnow)
