"""``@tool``: a typed async function as a registered tool.

    @tool
    async def weather_current(city: str, unit: Literal["c", "f"] = "c") -> str:
        \"\"\"Current weather for a city.

        Args:
            city: The city name, e.g. "Paris".
            unit: Celsius or Fahrenheit.
        \"\"\"

becomes a ``TypedTool`` named ``weather.current`` (the first underscore of the function's
name becomes the dot; ``name=`` says otherwise). Its JSON schema comes from the type hints
through a pydantic model built from the signature (a parameter without a default is
required; ``Literal`` gives an enum, ``Optional`` a null choice, lists, dicts and nested
pydantic models their own schemas), its description from the docstring's first paragraph,
each parameter's description from the docstring's ``Args:`` section (Google style) or from
``Annotated[T, Field(description=...)]``. A parameter named ``ctx`` (or annotated
``ToolContext``) gets the call's ``ToolContext`` and is left out of the schema.

When the model calls it, pydantic validates and converts the params (a nested model arrives
as its instance) and the function gets them as keyword arguments; params that do not fit are
the tool's error result naming the field, and the function does not run. It may return a
``str`` (the content), a ``dict`` (data), a ``ToolOutput`` or a pydantic model (dumped to
data). The decorated object still calls the function directly: ``await weather_current("Paris")``.

Register with ``Runtime(tools=[weather_current])`` or ``ToolRegistry.add(weather_current)``.
A decoration that cannot work raises ``ValueError`` at import time, naming the fix.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError
from pydantic.fields import FieldInfo

from .registry import TOOL_NAME_PATTERN, ToolContext, ToolOutput, is_in_loop, shorten

__all__ = ["TypedTool", "tool"]

_NAME_RE = re.compile(TOOL_NAME_PATTERN)
_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params)\s*:\s*$")
_OTHER_SECTION = re.compile(
    r"^(Returns?|Yields?|Raises?|Examples?|Notes?|See Also|Attributes|Warnings?)\s*:\s*$"
)
_ARG = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
MAX_FIELD_ERRORS = 3


@dataclass(frozen=True, slots=True)
class TypedTool:
    """A decorated tool: what ``ToolRegistry.add`` registers, and the function itself."""

    name: str
    fn: Callable[..., Any]
    description: str
    schema: dict[str, Any]
    model: type[BaseModel]
    ctx_param: str | None = None
    timeout_s: float | None = None
    needs_approval: bool = False
    _fields: tuple[str, ...] = field(default=(), repr=False)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function as written (tests, other code)."""
        return self.fn(*args, **kwargs)

    async def invoke(self, params: dict[str, Any], ctx: ToolContext) -> Any:
        """The registry's ``fn(params, ctx)``: validate, convert, call, normalise the return."""
        try:
            parsed = self.model.model_validate(params)
        except ValidationError as exc:
            return ToolOutput(error=self.params_error(exc), data={"code": "bad_params"})
        kwargs = {name: getattr(parsed, name) for name in self._fields}
        if self.ctx_param is not None:
            kwargs[self.ctx_param] = ctx
        raw = await self.fn(**kwargs)
        if isinstance(raw, BaseModel):
            return raw.model_dump(mode="json")
        return raw

    def params_error(self, exc: ValidationError) -> str:
        """What the model reads when its params do not fit: each field and what is wrong."""
        parts = []
        for err in exc.errors()[:MAX_FIELD_ERRORS]:
            where = ".".join(str(p) for p in err["loc"]) or "(params)"
            parts.append(f"{where}: {err['msg']}")
        more = exc.error_count() - len(parts)
        tail = f" (and {more} more)" if more > 0 else ""
        return shorten(
            f"bad params for {self.name}: {'; '.join(parts)}{tail}; "
            "fix the params to match the tool's schema and call again",
            600,
        )


@overload
def tool(fn: Callable[..., Any], /) -> TypedTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    needs_approval: bool = False,
) -> Callable[[Callable[..., Any]], TypedTool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    needs_approval: bool = False,
) -> TypedTool | Callable[[Callable[..., Any]], TypedTool]:
    """Make a typed async function a tool (module docstring); ``@tool`` or ``@tool(...)``."""

    def decorate(f: Callable[..., Any]) -> TypedTool:
        return build(
            f,
            name=name,
            description=description,
            timeout_s=timeout_s,
            needs_approval=needs_approval,
        )

    return decorate(fn) if fn is not None else decorate


def build(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = None,
    needs_approval: bool = False,
) -> TypedTool:
    """The ``TypedTool`` of ``fn``; ``ValueError`` naming the fix when it cannot be one."""
    label = getattr(fn, "__qualname__", repr(fn))
    if not inspect.iscoroutinefunction(fn):
        raise ValueError(f"@tool {label}: the function must be async (async def)")
    tool_name = name if name is not None else tool_name_of(fn.__name__)
    if not _NAME_RE.match(tool_name):
        raise ValueError(
            f"@tool {label}: the tool name {tool_name!r} is not valid: tool names are dotted "
            f"lowercase words such as 'weather.current' ({TOOL_NAME_PATTERN}); pass "
            "name='group.action' or name the function group_action (its first underscore "
            "becomes the dot)"
        )
    if is_in_loop(tool_name):
        raise ValueError(
            f"@tool {label}: the name {tool_name!r} is reserved for the in-loop tools "
            "(react.*, agent.send); pick another name"
        )
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as exc:
        raise ValueError(
            f"@tool {label}: its type hints cannot be resolved ({exc}); define the types "
            "they name at module level"
        ) from None
    docs = arg_docs(inspect.getdoc(fn) or "")
    fields: dict[str, Any] = {}
    ctx_param: str | None = None
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ValueError(
                f"@tool {label}: *{pname} is not supported; name each parameter with its type"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ValueError(
                f"@tool {label}: parameter {pname!r} is positional-only; the params arrive "
                "by name, so drop the '/'"
            )
        annotation = hints.get(pname, inspect.Parameter.empty)
        if pname == "ctx" or _is_context(annotation):
            ctx_param = pname
            continue
        if annotation is inspect.Parameter.empty:
            raise ValueError(
                f"@tool {label}: parameter {pname!r} has no type annotation; annotate it "
                f"(e.g. {pname}: str) so that its schema can be built"
            )
        default = ... if param.default is param.empty else param.default
        if _has_description(annotation) or pname not in docs:
            fields[pname] = (annotation, default)
        else:
            fields[pname] = (annotation, Field(default, description=docs[pname]))
    model = _model(label, fn.__name__, fields)
    schema = _clean(model.model_json_schema())
    schema.pop("description", None)
    return TypedTool(
        name=tool_name,
        fn=fn,
        description=description if description is not None else summary(fn),
        schema=schema,
        model=model,
        ctx_param=ctx_param,
        timeout_s=timeout_s,
        needs_approval=needs_approval,
        _fields=tuple(fields),
    )


def tool_name_of(function_name: str) -> str:
    """``weather_current`` -> ``weather.current``: the first underscore becomes the dot."""
    group, sep, rest = function_name.partition("_")
    return f"{group}.{rest}" if sep and group and rest else function_name


def summary(fn: Callable[..., Any]) -> str:
    """The docstring's first paragraph, on one line."""
    doc = inspect.getdoc(fn) or ""
    first = doc.strip().split("\n\n", 1)[0]
    return " ".join(first.split())


def arg_docs(doc: str) -> dict[str, str]:
    """Parameter descriptions of a Google-style ``Args:`` section (continuation lines joined)."""
    out: dict[str, str] = {}
    lines = doc.splitlines()
    inside, current, indent = False, "", None
    for line in lines:
        stripped = line.strip()
        if not inside:
            inside = bool(_SECTION.match(stripped)) and not line.startswith(" ")
            continue
        if not stripped:
            continue
        if not line.startswith((" ", "\t")) or _OTHER_SECTION.match(stripped):
            break
        depth = len(line) - len(line.lstrip())
        found = _ARG.match(stripped)
        if found is not None and (indent is None or depth <= indent):
            indent = depth
            current = found.group(1).lstrip("*")
            out[current] = found.group(2).strip()
        elif current:
            out[current] = f"{out[current]} {stripped}".strip()
    return {k: v for k, v in out.items() if v}


def _is_context(annotation: object) -> bool:
    if annotation is ToolContext:
        return True
    return any(a is ToolContext for a in typing.get_args(annotation))


def _has_description(annotation: object) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return False
    return any(
        isinstance(meta, FieldInfo) and meta.description
        for meta in getattr(annotation, "__metadata__", ())
    )


def _model(label: str, fn_name: str, fields: Mapping[str, Any]) -> type[BaseModel]:
    for pname, (annotation, _) in fields.items():
        try:  # one at a time, so that the error names the parameter
            create_model("Probe", __config__=ConfigDict(extra="forbid"), x=(annotation, ...))
        except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
            raise ValueError(
                f"@tool {label}: parameter {pname!r} has a type pydantic cannot describe "
                f"({annotation!r}: {str(exc).splitlines()[0]}); use str, int, float, bool, "
                "Literal, list, dict, Optional or a pydantic model"
            ) from None
    name = "".join(part.title() for part in fn_name.split("_")) + "Params"
    try:
        model: type[BaseModel] = create_model(name, __config__=ConfigDict(extra="forbid"), **fields)
        model.model_json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, NameError) as exc:
        raise ValueError(
            f"@tool {label}: its params cannot become a JSON schema: "
            f"{str(exc).splitlines()[0]}; use JSON-friendly types"
        ) from None
    return model


def _clean(node: Any) -> Any:
    """The schema without pydantic's generated ``title`` keys (a property named title stays)."""
    if isinstance(node, list):
        return [_clean(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            out[key] = {name: _clean(sub) for name, sub in value.items()}
        elif key == "title" and isinstance(value, str):
            continue
        else:
            out[key] = _clean(value)
    return out
