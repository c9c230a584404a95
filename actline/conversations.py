"""Managing stored conversations: list, search, get, rename, delete, export and fork.

    async with Runtime() as rt:
        for info in await rt.conversations.list(search="tiers"):
            print(info.conversation_id, info.title, info.turns, info.cost_usd)
        fork = await rt.conversations.fork(cid, at=1, title="try the other way")
        await rt.ask("And without the cache?", conversation_id=fork.conversation_id)

``rt.conversations`` asks the node that serves the conversations: a ``conv.manage`` request
on ``<prefix>.conv.manage`` (any node of the tenant answers; a client needs no LMDB), or,
with a node in this process and the local shortcut on (``ACTLINE_LOCAL_SHORTCUT``, the
default), that node's handler directly: the same messages either way. A refusal raises
``ConversationNotFound``, ``ConversationBusy`` (a turn of it runs: rename and delete wait for
its end; a fork at a finished turn is allowed meanwhile) or ``ConfigError`` (bad input, no
node, cluster mode), each naming the fix. What each operation does and costs:
``docs/conversations.md``.
"""

from __future__ import annotations

import builtins
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from actline.actors import Node
from actline.bus import Bus, BusError, NoResponders, RequestTimeout
from actline.messages import (
    ConversationManage,
    ConversationManaged,
    ConversationRemoved,
    ConversationSummary,
    ErrorReply,
    is_valid_id,
)

from .errors import ConfigError

__all__ = [
    "EXPORT_FORMATS",
    "MAX_TITLE",
    "ConversationBusy",
    "ConversationInfo",
    "ConversationNotFound",
    "Conversations",
    "DeletedConversation",
]

MAX_TITLE = 200
"""The longest title ``rename`` and ``fork`` accept, in characters."""
EXPORT_FORMATS = ("json", "markdown")
DEFAULT_TIMEOUT = 30.0
"""Seconds a management request waits for the node (a delete or a fork of a long
conversation is one LMDB transaction of its size)."""


class ConversationNotFound(ConfigError):
    """The node serves no conversation ``conversation_id``."""

    def __init__(self, conversation_id: str, message: str = "") -> None:
        self.conversation_id = conversation_id
        super().__init__(
            message
            or f"conversation {conversation_id!r} not found: list them with "
            "actline conversations list (or rt.conversations.list())"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.message))


class ConversationBusy(ConfigError):
    """A turn of ``conversation_id`` runs (``turn_id``): the operation waits for its end."""

    def __init__(self, conversation_id: str, turn_id: str = "", message: str = "") -> None:
        self.conversation_id = conversation_id
        self.turn_id = turn_id
        running = f"turn {turn_id}" if turn_id else "a turn"
        super().__init__(
            message
            or f"conversation {conversation_id!r} is busy: {running} runs; try again when it "
            "has ended (or cancel it: Runtime.cancel(turn_id), or Ctrl-C in its actline ask)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.conversation_id, self.turn_id, self.message))


@dataclass(frozen=True)
class ConversationInfo:
    """One stored conversation as a list shows it."""

    conversation_id: str
    title: str
    created: float
    """Unix time of its first turn."""
    updated: float
    """Unix time of its last activity (its last block; a fork's creation)."""
    turns: int
    """Turns in its timeline (a fork's inherited turns included)."""
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cost_usd: float | None
    """What its own turns cost (a fork's inherited turns are the parent's); None when a
    model it used has no price."""
    forked_from: tuple[str, str] | None
    """``(conversation id, turn id)`` of the fork point, for a fork."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["forked_from"] = list(self.forked_from) if self.forked_from else None
        return out

    @classmethod
    def of(cls, summary: ConversationSummary) -> ConversationInfo:
        forked = summary.forked_from
        return cls(
            conversation_id=summary.conversation_id,
            title=summary.title,
            created=summary.created,
            updated=summary.updated,
            turns=summary.turns,
            input_tokens=summary.input_tokens,
            output_tokens=summary.output_tokens,
            cache_read_tokens=summary.cache_read_tokens,
            cost_usd=summary.cost_usd,
            forked_from=(forked, summary.forked_at_turn or "") if forked else None,
        )


@dataclass(frozen=True)
class DeletedConversation:
    """What a delete removed: blocks, turns, workspace file versions, and artifacts (bytes
    no other reference held; artifacts a fork still shares are kept and not counted)."""

    conversation_id: str
    blocks: int
    turns: int
    files: int
    artifacts: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, removed: ConversationRemoved) -> DeletedConversation:
        return cls(
            removed.conversation_id,
            removed.blocks,
            removed.turns,
            removed.files,
            removed.artifacts,
        )


def check_cid(cid: str) -> str:
    if not isinstance(cid, str) or not is_valid_id(cid):
        raise ConfigError(
            f"{cid!r} is not a conversation id: ids are 1-128 letters, digits, '_', '-' "
            "or ':' (list them with actline conversations list)"
        )
    return cid


def check_title(title: str) -> str:
    """The title stripped to one line; ``ConfigError`` when empty or over ``MAX_TITLE``."""
    if not isinstance(title, str):
        raise ConfigError(f"a title is text, not {type(title).__name__}")
    text = " ".join(title.split())
    if not text:
        raise ConfigError("the title is empty: give one with a few words")
    if len(text) > MAX_TITLE:
        raise ConfigError(f"the title has {len(text)} characters; keep it to {MAX_TITLE} at most")
    return text


def check_at(at: str | int) -> str:
    """A fork point as text: a turn id, or a 1-based turn number."""
    if isinstance(at, bool) or not isinstance(at, str | int):
        raise ConfigError(f"at={at!r}: give a turn id or its number (1 = the first turn)")
    if isinstance(at, int):
        if at < 1:
            raise ConfigError(f"at={at}: turn numbers start at 1 (the first turn)")
        return str(at)
    text = at.strip()
    if not text or not is_valid_id(text):
        raise ConfigError(f"at={at!r}: give a turn id or its number (1 = the first turn)")
    if text.isdigit() and int(text) < 1:
        raise ConfigError(f"at={at}: turn numbers start at 1 (the first turn)")
    return text


def refusal_error(reply: ErrorReply) -> ConfigError:
    """The facade's error for a node's refusal of ``conv.manage``."""
    detail = reply.detail or {}
    cid = str(detail.get("conversation_id") or "")
    if reply.code == "conversation_not_found":
        return ConversationNotFound(cid, reply.message)
    if reply.code == "conversation_busy":
        return ConversationBusy(cid, str(detail.get("turn_id") or ""), reply.message)
    return ConfigError(reply.message)


class Connected(Protocol):
    """What ``Conversations`` uses of a started ``Runtime``."""

    node: Node | None

    @property
    def bus(self) -> Bus: ...

    @property
    def nats_url(self) -> str: ...


class Conversations:
    """The stored conversations of the tenant's nodes (``Runtime.conversations``)."""

    def __init__(self, runtime: Connected, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._rt = runtime
        self.timeout = timeout

    async def list(
        self, *, search: str | None = None, limit: int | None = None
    ) -> builtins.list[ConversationInfo]:
        """Every stored conversation, newest first (by last activity). ``search``: words that
        must all occur (any case) in its title, questions or answers; ``limit``: at most so
        many."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ConfigError(f"limit={limit!r}: give a whole number of conversations")
        if limit is not None and limit < 1:
            raise ConfigError(f"limit={limit}: give at least 1 (or None for all)")
        if search is not None and not isinstance(search, str):
            raise ConfigError(f"search={search!r}: give words to look for")
        words = search.strip() if search else None
        reply = await self._ask(ConversationManage(op="list", search=words or None, limit=limit))
        return [ConversationInfo.of(s) for s in reply.conversations]

    async def get(self, cid: str) -> ConversationInfo:
        """One conversation (``ConversationNotFound`` when the node has none of that id)."""
        reply = await self._ask(ConversationManage(op="get", conversation_id=check_cid(cid)))
        return self._one(reply, cid)

    async def rename(self, cid: str, title: str) -> ConversationInfo:
        """Give a conversation a title of its own (lists show it instead of the generated
        one); refused while a turn of it runs."""
        msg = ConversationManage(
            op="rename", conversation_id=check_cid(cid), title=check_title(title)
        )
        return self._one(await self._ask(msg), cid)

    async def delete(self, cid: str) -> DeletedConversation:
        """Remove every row of a conversation in one write transaction; refused while a turn
        of it runs. Its forks keep what they share with it (docs/conversations.md)."""
        reply = await self._ask(ConversationManage(op="delete", conversation_id=check_cid(cid)))
        if reply.deleted is None:
            raise ConfigError(f"the node answered delete of {cid} without what it removed")
        return DeletedConversation.of(reply.deleted)

    async def export(self, cid: str, format: str = "json") -> str:
        """The conversation as text: ``json`` (its turns, question, answer, sources, status,
        usage, time, and its blocks) or ``markdown`` (a readable transcript with sources)."""
        if format not in EXPORT_FORMATS:
            raise ConfigError(f"export format {format!r}: choose json or markdown")
        msg = ConversationManage(op="export", conversation_id=check_cid(cid), format=format)
        return (await self._ask(msg)).export

    async def fork(self, cid: str, *, at: str | int, title: str | None = None) -> ConversationInfo:
        """A new conversation whose timeline is this one's up to the end of turn ``at`` (a
        turn id or its 1-based number); the original is not changed. ``title`` defaults to
        the original's."""
        msg = ConversationManage(
            op="fork",
            conversation_id=check_cid(cid),
            at=check_at(at),
            title=None if title is None else check_title(title),
        )
        reply = await self._ask(msg)
        if not reply.conversations:
            raise ConfigError(f"the node answered the fork of {cid} without the new conversation")
        return ConversationInfo.of(reply.conversations[0])

    # -- the request ----------------------------------------------------------------------------
    @staticmethod
    def _one(reply: ConversationManaged, cid: str) -> ConversationInfo:
        if not reply.conversations:
            raise ConversationNotFound(cid)
        return ConversationInfo.of(reply.conversations[0])

    async def _ask(self, msg: ConversationManage) -> ConversationManaged:
        node = self._rt.node
        management = node.management if node is not None else None
        if management is not None and node is not None and node.settings.local_shortcut:
            reply: Any = await management.handle(msg)
        else:
            bus = self._rt.bus
            try:
                reply = await bus.request(
                    bus.subjects.conv_manage, msg, timeout=self.timeout, raise_remote=False
                )
            except (NoResponders, RequestTimeout):
                raise ConfigError(
                    f"no node answered conversation management within {self.timeout:g} s: "
                    f"start one for this tenant (actline serve) on {self._rt.nats_url or 'NATS'}"
                ) from None
            except BusError as exc:
                raise ConfigError(f"conversation management failed: {exc}") from None
        if isinstance(reply, ErrorReply):
            raise refusal_error(reply)
        if not isinstance(reply, ConversationManaged):
            raise ConfigError(f"the node answered conv.manage with {reply.kind}")
        return reply
