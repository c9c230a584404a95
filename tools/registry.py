"""The external tool registry: names, JSON-schema params, the call context and outputs.

A node's ``ToolRegistry`` holds the tools its ``ToolExecutorActor``
(``actline.actors.pools.tool_executor``) runs: each a name (dotted lowercase words), an async
callable ``fn(params, ctx)``, a JSON schema for its params and an optional timeout. ``ToolContext``
is what a running tool may use besides its params; ``ToolOutput`` is what it returns (``error`` set
when it ran but failed).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jsonschema.exceptions
from jsonschema.validators import validator_for

from actline.messages import ArtifactRef
from actline.tools.workspace.workspace import TurnFiles

__all__ = [
    "IN_LOOP_ADVICE",
    "MAX_SCHEMA_ERRORS",
    "TOOL_NAME_PATTERN",
    "RegisteredTool",
    "ToolContext",
    "ToolDefinition",
    "ToolFn",
    "ToolOutput",
    "ToolRegistry",
    "is_in_loop",
    "shorten",
]

TOOL_NAME_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$"
"""Dotted lowercase words with at least one dot, e.g. ``clock.now`` or ``web.fetch_page``."""

_NAME_RE = re.compile(TOOL_NAME_PATTERN)
IN_LOOP_ADVICE = "react.* and agent.send are in-loop tools that the decision loop runs itself"
MAX_SCHEMA_ERRORS = 5
MAX_ERROR_CHARS = 300


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a running tool may need besides its params.

    ``deadline`` is on the event loop's monotonic clock (``loop.time()``); a tool that
    calls further services can pass the time left on to them.
    """

    conversation_id: str
    turn_id: str
    call_id: str
    tool: str
    deadline: float
    files: TurnFiles | None = None
    """The running turn's workspace, when the conversation is served on this node."""

    def time_left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.deadline - asyncio.get_running_loop().time()


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """A tool's result: ``content`` for the model, ``data`` for programs, and artifacts."""

    content: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    artifacts: tuple[ArtifactRef, ...] = ()
    error: str | None = None
    """Set when the tool ran but failed (a script that timed out): the reply says ``ok=False``
    with this text, and still carries the content and data."""


ToolFn = Callable[[dict[str, Any], ToolContext], Awaitable[ToolOutput | str | dict[str, Any]]]
"""A tool: ``async def fn(params, ctx)``; a ``str`` return is content, a ``dict`` is data."""


def _is_async(fn: object) -> bool:
    # An instance whose class defines ``async def __call__`` is async too.
    return inspect.iscoroutinefunction(fn) or (
        callable(fn) and inspect.iscoroutinefunction(type(fn).__call__)
    )


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """A tool the executor can run; the name and the params schema are checked here.

    Raises ``ValueError`` for a name outside ``TOOL_NAME_PATTERN``, an in-loop name
    (``react.*``, ``agent.send``), a schema that is not a valid JSON schema, a
    non-positive ``timeout_s`` or a ``fn`` that is not async.
    """

    name: str
    fn: ToolFn
    description: str = ""
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "object"})
    timeout_s: float | None = None
    needs_approval: bool = False
    """Each call waits for an approval before it runs (``actline.actors.turn.approvals``)."""
    _validator: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(
                f"tool name {self.name!r} is not valid: use dotted lowercase words "
                f"such as 'clock.now' (pattern {TOOL_NAME_PATTERN})"
            )
        if is_in_loop(self.name):
            raise ValueError(
                f"tool name {self.name!r} is reserved: {IN_LOOP_ADVICE}; pick another name"
            )
        if not _is_async(self.fn):
            raise ValueError(f"tool {self.name!r}: fn must be an async function (async def)")
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ValueError(
                f"tool {self.name!r}: timeout_s must be positive or None, got {self.timeout_s}"
            )
        if not isinstance(self.schema, Mapping):
            raise ValueError(
                f"tool {self.name!r}: schema must be a JSON-schema object (a dict), "
                f"got {type(self.schema).__name__}"
            )
        cls = validator_for(self.schema)
        try:
            cls.check_schema(self.schema)
        except jsonschema.exceptions.SchemaError as exc:
            raise ValueError(
                f"tool {self.name!r}: the params schema is not a valid JSON schema: "
                f"{exc.message} (at {exc.json_path}); fix the schema"
            ) from None
        object.__setattr__(self, "_validator", cls(self.schema))

    def check_params(self, params: Mapping[str, Any]) -> list[str]:
        """Schema violations of ``params``, most relevant first, each with its JSON path."""
        errors = sorted(self._validator.iter_errors(params), key=jsonschema.exceptions.relevance)
        return [shorten(f"{err.json_path}: {err.message}") for err in errors]


@runtime_checkable
class ToolDefinition(Protocol):
    """A tool that describes itself, as ``@tool`` makes one (``actline.tools.typed``)."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def schema(self) -> dict[str, Any]: ...
    @property
    def timeout_s(self) -> float | None: ...
    @property
    def needs_approval(self) -> bool: ...

    async def invoke(self, params: dict[str, Any], ctx: ToolContext) -> Any:
        """Run one call: ``fn(params, ctx)`` of the registry."""


class ToolRegistry:
    """The tools of one node, by name; ``describe()`` lists them for the system prompt."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def add(self, typed: ToolDefinition) -> RegisteredTool:
        """Register a ``@tool``-decorated function (``actline.tools.typed``) under its name.

        Raises ``ValueError`` for a plain function (decorate it with ``@tool`` or use
        ``register``) and for a name already registered."""
        if not isinstance(typed, ToolDefinition):
            what = getattr(typed, "__qualname__", type(typed).__name__)
            raise ValueError(
                f"{what} is not a @tool: decorate it with actline.tool, or register a plain "
                "fn(params, ctx) with ToolRegistry.register(name, fn, schema=...)"
            )
        return self.register(
            typed.name,
            typed.invoke,
            schema=typed.schema,
            description=typed.description or typed.name,
            timeout_s=typed.timeout_s,
            needs_approval=typed.needs_approval,
        )

    def register(
        self,
        name: str,
        fn: ToolFn,
        *,
        schema: Mapping[str, Any] | None = None,
        description: str = "",
        timeout_s: float | None = None,
        needs_approval: bool = False,
    ) -> RegisteredTool:
        """Add a tool; ``description`` defaults to the function's docstring. A tool with
        ``needs_approval`` runs only once a human (or an approver agent) approves each call.

        Raises ``ValueError`` for a bad or reserved name, a duplicate, or a broken schema.
        """
        if name in self._tools:
            raise ValueError(
                f"tool {name!r} is already registered; pick another name or register it once"
            )
        tool = RegisteredTool(
            name=name,
            fn=fn,
            description=description or inspect.getdoc(fn) or "",
            schema=copy.deepcopy(dict(schema)) if schema is not None else {"type": "object"},
            timeout_s=timeout_s,
            needs_approval=needs_approval,
        )
        self._tools[name] = tool
        return tool

    def tool(
        self,
        name: str,
        *,
        schema: Mapping[str, Any] | None = None,
        description: str = "",
        timeout_s: float | None = None,
        needs_approval: bool = False,
    ) -> Callable[[ToolFn], ToolFn]:
        """Decorator form of ``register``; returns the function unchanged."""

        def decorate(fn: ToolFn) -> ToolFn:
            self.register(
                name,
                fn,
                schema=schema,
                description=description,
                timeout_s=timeout_s,
                needs_approval=needs_approval,
            )
            return fn

        return decorate

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._tools)

    def approval_required(self) -> list[str]:
        """The names of the tools registered with ``needs_approval``, sorted."""
        return sorted(n for n, t in self._tools.items() if t.needs_approval)

    def get(self, name: str) -> RegisteredTool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def describe(self) -> list[dict[str, Any]]:
        """``{"name", "description", "schema"}`` of every tool, sorted by name."""
        return [
            {
                "name": tool.name,
                "description": tool.description,
                "schema": copy.deepcopy(tool.schema),
            }
            for tool in sorted(self._tools.values(), key=lambda t: t.name)
        ]

    def prompt_entries(self) -> dict[str, str]:
        """Name -> the line the system prompt lists: the description, then the params'
        JSON schema when the tool has any and the description does not name them already
        ("Params: ..."): a model needs their names and types."""
        entries = {}
        for tool in self._tools.values():
            line = tool.description
            if tool.schema.get("properties") and "Params:" not in line:
                params = json.dumps(tool.schema, ensure_ascii=False, separators=(",", ":"))
                line = " ".join(f"{line} Params: {params}".split())  # one line
            entries[tool.name] = line
        return entries

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)


def is_in_loop(name: str) -> bool:
    return name.startswith("react.") or name == "agent.send"


def shorten(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
