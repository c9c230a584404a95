"""Types shared by the react.* tools: the call context, the outcome, notices, param checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from actline.storage import Store
from actline.timeline import Block, Renderer, Timeline
from actline.timeline.blocks import NOTICE, TOOL_RESULT
from actline.timeline.facts import FactBook
from actline.timeline.paths import tc_path
from actline.tools.search.knowledge import KnowledgeSpace

if TYPE_CHECKING:
    from actline.tools.search.memindex import MemIndex
    from actline.tools.workspace.workspace import LocalTree, WorkspaceBackend

__all__ = [
    "MAX_TOP_K",
    "PROTOCOL_CODES",
    "Notice",
    "ReactContext",
    "ReactOutcome",
    "choice",
    "failed",
    "int_param",
    "notice_block",
    "refuse",
    "text_param",
    "write_order_notice",
]

MAX_TOP_K: Final = 50

PROTOCOL_CODES: Final = frozenset(
    {"bad_params", "path_rewritten", "plan_mode", "plan_steps", "plan_target_missing"}
    | {"plan_target_required", "plan_ack_updates", "checkout_missing_paths"}
    | {"checkout_invalid_paths", "checkout_invalid_mode", "patch_requires_pull"}
    | {"path_not_first", "channel_not_second", "content_not_third", "kind_not_fourth"}
)
"""Codes the original runtime prefixes with ``protocol_violation.``; tool-level codes are bare."""


@dataclass(frozen=True, slots=True)
class Notice:
    """A refusal or warning the model sees next round as a ``react.notice`` block.

    The same fields as ``actline.actors.turn.protocol.Notice``; defined here because tools sit
    below actors in the layers ``tests/test_architecture.py`` checks. ``full_code`` is
    prefixed only for protocol codes.
    """

    code: str
    message: str
    tool: str | None = None

    @property
    def full_code(self) -> str:
        return f"protocol_violation.{self.code}" if self.code in PROTOCOL_CODES else self.code


@dataclass(frozen=True, slots=True)
class ReactContext:
    """Where a call runs: the conversation's timeline and the services it may use."""

    timeline: Timeline
    renderer: Renderer | None
    """Needed by react.hide (the cache rules are measured on the rendered stream)."""
    turn_id: str
    call_id: str
    now: float
    """Timestamp of every block the call creates (epoch seconds)."""
    store: Store | None = None
    """Stored blocks (react.read outside the in-memory view) and index rows."""
    knowledge: KnowledgeSpace | None = None
    workspace: WorkspaceBackend | None = None
    """The conversation's versioned files (``fi:``); None: the custom workspace of ``store``."""
    local: LocalTree | None = None
    """The files on disk (pulled refs); needed by react.pull and cross-turn react.patch."""
    memindex: MemIndex | None = None
    """The conversation's memsearch index; None: built from the store's index rows per call."""
    facts: FactBook | None = None
    """The memory facts in effect (the user's under memory scope ``user``); None: the
    timeline's own (``Timeline.facts``)."""

    @property
    def fact_book(self) -> FactBook:
        return self.facts if self.facts is not None else self.timeline.facts

    def files(self) -> WorkspaceBackend | None:
        """The workspace to use: the given one, else the custom workspace of the store."""
        if self.workspace is not None:
            return self.workspace
        if self.store is None or not self.timeline.conversation_id:
            return None
        from actline.tools.workspace.workspace import CustomWorkspace

        return CustomWorkspace(self.store, self.timeline.conversation_id)


def notice_block(notice: Notice, ctx: ReactContext) -> Block:
    """The ``react.notice`` block of ``notice`` at ``tc:<turn>.<call>.notice``."""
    return Block.new(
        NOTICE,
        ctx.turn_id,
        ctx.now,
        path=tc_path(ctx.turn_id, ctx.call_id, "notice"),
        call_id=ctx.call_id,
        text=f"{notice.full_code}: {notice.message}",
        meta={"code": notice.code, "tool": notice.tool or ""},
    )


@dataclass(slots=True)
class ReactOutcome:
    """The result data of one call, the blocks to append after it, and its notices."""

    result: dict[str, Any]
    blocks: list[Block] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.result.get("status") == "ok"

    def to_blocks(self, ctx: ReactContext) -> list[Block]:
        """Everything to append for this call, in order: the result block at
        ``tc:<turn>.<call>.result``, the content blocks, one ``react.notice`` per notice."""
        result = Block.new(
            TOOL_RESULT,
            ctx.turn_id,
            ctx.now,
            path=tc_path(ctx.turn_id, ctx.call_id, "result"),
            call_id=ctx.call_id,
            mime="application/json",
            data=self.result,
        )
        return [result, *self.blocks, *(notice_block(n, ctx) for n in self.notices)]


def refuse(tool: str, code: str, message: str) -> ReactOutcome:
    result = {"status": "error", "code": code, "message": message}
    return ReactOutcome(result, [], [Notice(code, message, tool)])


def failed(notice: Notice) -> ReactOutcome:
    return refuse(notice.tool or "", notice.code, notice.message)


# -- parameters ------------------------------------------------------------------------------


def text_param(params: Mapping[str, Any], name: str, tool: str) -> str | Notice:
    value = params.get(name)
    if not isinstance(value, str) or not value.strip():
        return Notice("bad_params", f"{tool}: {name} must be a non-empty string.", tool)
    return value.strip()


def int_param(params: Mapping[str, Any], name: str, default: int, tool: str) -> int | Notice:
    value = params.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TOP_K:
        return Notice("bad_params", f"{tool}: {name} must be an integer 1-{MAX_TOP_K}.", tool)
    return value


def choice(params: Mapping[str, Any], name: str, default: str, allowed: Sequence[str]) -> str:
    value = params.get(name, default)
    return value if isinstance(value, str) and value in allowed else ""


WRITE_ORDER: Final = ("path", "channel", "content", "kind")
"""react.write's documented parameter order (the original enforced it by dict order)."""
WRITE_ORDER_CODES: Final = (
    "path_not_first",
    "channel_not_second",
    "content_not_third",
    "kind_not_fourth",
)


def write_order_notice(params: Mapping[str, Any]) -> Notice | None:
    """A notice when react.write's parameters are not in the order path, channel, content, kind.

    Only the documented parameters count (``scratchpad`` may go anywhere); each present one
    must sit at its own position among them.
    """
    keys = [k for k in params if k in WRITE_ORDER]
    for position, name in enumerate(WRITE_ORDER):
        if name in params and (position >= len(keys) or keys[position] != name):
            return Notice(
                WRITE_ORDER_CODES[position],
                "react.write parameters go in the order path, channel, content, kind; "
                f"got {', '.join(keys)}.",
                "react.write",
            )
    return None
