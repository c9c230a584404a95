"""Hooks and a permission callback around every tool call of a node's turns.

    hooks = ToolHooks(can_use_tool=policy)

    @hooks.pre
    def no_delete(call: ToolUse) -> Deny | None:
        if call.tool == "files.write" and "secret" in call.params.get("path", ""):
            return Deny("secret files are read-only")
        return None

    @hooks.post
    async def record(call: ToolUse, output: ToolOutput) -> None:
        audit.append((call.tool, output.error))

Order for each call, once the turn has decided it (and, for a tool registered with
``needs_approval``, once it is approved): ``can_use_tool(name, params, call)`` first
(``Allow(params=None)`` goes on, ``Allow(params={...})`` replaces the params, ``Deny(reason)``
refuses), then the pre hooks in the order they were added (``None`` goes on, a dict or
``Allow(params=...)`` replaces the params the next hook and the tool see, ``Deny(reason)``
refuses), then the tool, then the post hooks in order (``None`` keeps the output; a
``ToolOutput``, ``str`` or ``dict`` replaces it for the model and the next hook). A refused
call does not run: its result is an error the model reads (``<tool> was refused by <who>:
<reason>``), recorded on the timeline like any failed call, and the post hooks do not see
it. A hook or callback that raises (or returns something else) refuses the call with an
error naming it, and is logged; it never fails the turn. Hooks may be plain or async
functions.

They run in the decision loop of the node that runs the turn (``actline.actors.turn``), for
every kind of call: the external tools (wherever an executor runs them), the in-loop
``react.*`` tools and ``agent.send``. Keep them quick: the turn waits for them.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .registry import ToolOutput, is_in_loop, shorten

__all__ = [
    "Allow",
    "Deny",
    "Permission",
    "PostHook",
    "PreHook",
    "Refusal",
    "ToolHooks",
    "ToolUse",
    "as_output",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call as the hooks see it: the tool, its params and where it was made."""

    tool: str
    params: Mapping[str, Any]
    conversation_id: str
    turn_id: str
    call_id: str

    @property
    def in_loop(self) -> bool:
        """True for the tools the decision loop runs itself (``react.*``, ``agent.send``)."""
        return is_in_loop(self.tool)


@dataclass(frozen=True, slots=True)
class Allow:
    """Run the call; ``params`` (when given) replace the ones the model sent."""

    params: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Deny:
    """Refuse the call; the model reads ``reason`` as the tool's error."""

    reason: str

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str) or not self.reason.strip():
            raise ValueError("Deny needs a reason the model can read, e.g. Deny('read-only')")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A call that will not run: who refused it, why, and the ``code`` programs read
    (``refused``, or ``hook_failed`` when a hook raised)."""

    by: str
    reason: str
    code: str = "refused"

    def error(self, tool: str) -> str:
        """The error the model reads as the call's result."""
        return shorten(f"{tool} was refused by {self.by}: {self.reason}", 1000)


PreHook = Callable[[ToolUse], Any]
"""``fn(call) -> None | dict | Allow | Deny`` (or an awaitable of it)."""
PostHook = Callable[[ToolUse, ToolOutput], Any]
"""``fn(call, output) -> None | ToolOutput | str | dict`` (or an awaitable of it)."""
Permission = Callable[[str, Mapping[str, Any], ToolUse], Any]
"""``can_use_tool(name, params, call) -> Allow | Deny`` (or an awaitable of it)."""
F = TypeVar("F", bound=Callable[..., Any])


class ToolHooks:
    """The permission callback and the pre and post hooks of one node (module docstring)."""

    def __init__(
        self,
        pre: list[PreHook] | tuple[PreHook, ...] = (),
        post: list[PostHook] | tuple[PostHook, ...] = (),
        can_use_tool: Permission | None = None,
    ) -> None:
        self.pre_hooks: list[PreHook] = []
        self.post_hooks: list[PostHook] = []
        self.can_use_tool: Permission | None = None
        for hook in pre:
            self.pre(hook)
        for after in post:
            self.post(after)
        if can_use_tool is not None:
            self.permission(can_use_tool)

    def pre(self, fn: F) -> F:
        """Add a pre hook (usable as a decorator); hooks run in the order added."""
        self.pre_hooks.append(_callable("pre hook", fn))
        return fn

    def post(self, fn: F) -> F:
        """Add a post hook (usable as a decorator)."""
        self.post_hooks.append(_callable("post hook", fn))
        return fn

    def permission(self, fn: F) -> F:
        """Set the ``can_use_tool`` callback (usable as a decorator); one per node."""
        self.can_use_tool = _callable("can_use_tool", fn)
        return fn

    def __bool__(self) -> bool:
        return bool(self.pre_hooks or self.post_hooks or self.can_use_tool)

    async def before(self, call: ToolUse) -> ToolUse | Refusal:
        """The call to run (its params possibly replaced), or why it must not run."""
        if self.can_use_tool is not None:
            who = f"can_use_tool {_name(self.can_use_tool)}"
            try:
                verdict = await _result(self.can_use_tool(call.tool, dict(call.params), call))
            except Exception as exc:
                return _failed(who, call, exc)
            if isinstance(verdict, Deny):
                return Refusal(who, verdict.reason)
            if not isinstance(verdict, Allow):
                return _wrong(who, call, verdict, "return Allow() or Deny(reason)")
            if verdict.params is not None:
                call = replace(call, params=dict(verdict.params))
        for hook in self.pre_hooks:
            who = f"pre hook {_name(hook)}"
            try:
                said = await _result(hook(call))
            except Exception as exc:
                return _failed(who, call, exc)
            if said is None:
                continue
            if isinstance(said, Deny):
                return Refusal(who, said.reason)
            if isinstance(said, Allow):
                said = said.params
                if said is None:
                    continue
            if not isinstance(said, Mapping):
                return _wrong(who, call, said, "return None, new params (a dict) or Deny(reason)")
            call = replace(call, params=dict(said))
        return call

    async def after(self, call: ToolUse, output: ToolOutput) -> ToolOutput:
        """The output after every post hook; a hook that fails withholds it (an error)."""
        for hook in self.post_hooks:
            who = f"post hook {_name(hook)}"
            try:
                said = await _result(hook(call, output))
            except Exception as exc:
                log.exception("%s failed on %s call %s", who, call.tool, call.call_id)
                reason = f"{type(exc).__name__}: {exc}"
                return ToolOutput(error=_withheld(who, reason), data={"code": "hook_failed"})
            if said is None:
                continue
            replaced = as_output(said)
            if replaced is None:
                kind = type(said).__name__
                log.warning("%s returned %s on %s call %s", who, kind, call.tool, call.call_id)
                reason = f"it returned {kind}; return None, a ToolOutput, a str or a dict"
                return ToolOutput(error=_withheld(who, reason), data={"code": "hook_failed"})
            output = replaced
        return output


def as_output(value: object) -> ToolOutput | None:
    """``value`` as a ``ToolOutput`` (a ``str`` is content, a ``dict`` data), else None."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput(content=value)
    if isinstance(value, dict):
        return ToolOutput(data=value)
    return None


def _callable(what: str, fn: Any) -> Any:
    if not callable(fn):
        raise ValueError(f"a {what} must be a function, got {type(fn).__name__}")
    return fn


async def _result(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)


def _failed(who: str, call: ToolUse, exc: Exception) -> Refusal:
    log.exception("%s failed on %s call %s", who, call.tool, call.call_id)
    reason = f"it failed ({type(exc).__name__}: {exc}); the call was not run"
    return Refusal(who, reason, "hook_failed")


def _wrong(who: str, call: ToolUse, value: object, fix: str) -> Refusal:
    kind = type(value).__name__
    log.warning("%s returned %s on %s call %s", who, kind, call.tool, call.call_id)
    return Refusal(who, f"it returned {kind}; {fix}", "hook_failed")


def _withheld(who: str, reason: str) -> str:
    return shorten(f"the {who} failed ({reason}); the tool ran but its output was withheld", 1000)
