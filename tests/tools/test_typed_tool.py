"""``@tool``: schemas from type hints and docstrings, names, validation, returns, and the
errors a decoration that cannot work raises (``actline.tools.typed``)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from actline import ToolContext, ToolOutput, ToolRegistry, TypedTool, tool

CTX = ToolContext("c-1", "t-1", "call-1", "x.y", deadline=0.0)


class Point(BaseModel):
    lat: float
    lon: float


class Reading(BaseModel):
    city: str
    degrees: int


@tool
async def weather_current(
    city: str, unit: Literal["c", "f"] = "c", ctx: ToolContext | None = None
) -> str:
    """Current weather for a city.

    Longer text that is not the summary.

    Args:
        city: The city name, e.g. "Paris".
            It may have several words.
        unit: Celsius or Fahrenheit.

    Returns:
        A sentence.
    """
    assert ctx is not None
    return f"{city} {unit} {ctx.call_id}"


@tool(name="geo.nearby", timeout_s=5, needs_approval=True, description="Places near a point.")
async def nearby(
    at: Point,
    kinds: list[str],
    radius_km: float = 1.0,
    limit: int | None = None,
    note: Annotated[str, Field(description="Free text.")] = "",
) -> Reading:
    return Reading(city=f"{at.lat},{at.lon} {len(kinds)} {radius_km} {limit}{note}", degrees=3)


def run(typed: TypedTool, params: dict[str, Any]) -> Any:
    return asyncio.run(typed.invoke(params, CTX))


def test_the_schema_comes_from_the_type_hints_and_the_docstring() -> None:
    assert weather_current.name == "weather.current"
    assert weather_current.description == "Current weather for a city."
    assert weather_current.ctx_param == "ctx"
    assert weather_current.schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "city": {
                "type": "string",
                "description": 'The city name, e.g. "Paris". It may have several words.',
            },
            "unit": {
                "type": "string",
                "enum": ["c", "f"],
                "default": "c",
                "description": "Celsius or Fahrenheit.",
            },
        },
        "required": ["city"],
    }


def test_nested_models_lists_optionals_and_annotated_descriptions() -> None:
    schema = nearby.schema
    assert (nearby.name, nearby.timeout_s, nearby.needs_approval) == ("geo.nearby", 5, True)
    assert nearby.description == "Places near a point."
    assert schema["required"] == ["at", "kinds"]
    props = schema["properties"]
    assert props["at"] == {"$ref": "#/$defs/Point"}
    assert schema["$defs"]["Point"]["required"] == ["lat", "lon"]
    assert props["kinds"] == {"type": "array", "items": {"type": "string"}}
    assert props["radius_km"] == {"type": "number", "default": 1.0}
    assert props["limit"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert props["note"]["description"] == "Free text."


def test_params_are_validated_converted_and_passed_by_name() -> None:
    assert run(weather_current, {"city": "Paris"}) == "Paris c call-1"
    out = run(nearby, {"at": {"lat": "1.5", "lon": 2}, "kinds": ["cafe"], "limit": "3"})
    assert out == {"city": "1.5,2.0 1 1.0 3", "degrees": 3}  # a model is dumped to data


def test_params_that_do_not_fit_are_an_error_naming_the_field() -> None:
    out = run(weather_current, {"city": "Paris", "unit": "kelvin"})
    assert isinstance(out, ToolOutput) and out.data == {"code": "bad_params"}
    assert out.error is not None and out.error.startswith("bad params for weather.current: unit")
    missing = run(nearby, {"at": {"lat": 1}, "kinds": "cafe", "extra": 1})
    assert missing.error is not None
    assert "at.lon: Field required; kinds: Input should be a valid list; extra:" in missing.error


def test_the_decorated_function_still_calls_as_written() -> None:
    assert asyncio.run(weather_current("Oslo", "f", ctx=CTX)) == "Oslo f call-1"


def test_the_registry_adds_a_typed_tool_and_lists_its_params_for_the_prompt() -> None:
    registry = ToolRegistry()
    added = registry.add(weather_current)
    assert added.schema == weather_current.schema and added.description.startswith("Current")
    line = registry.prompt_entries()["weather.current"]
    assert line.startswith("Current weather for a city. Params: {") and "\n" not in line
    with pytest.raises(ValueError, match="already registered"):
        registry.add(weather_current)
    with pytest.raises(ValueError, match=r"not a @tool: decorate it with actline\.tool"):
        registry.add(run)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("weather_current", "weather.current"), ("get_stock_price", "get.stock_price")],
)
def test_the_first_underscore_of_the_function_name_becomes_the_dot(
    name: str, expected: str
) -> None:
    async def fn(x: int) -> str:
        return ""

    fn.__name__ = name
    assert tool(fn).name == expected


async def weather(city: str) -> str:
    return city


async def untyped(city) -> str:  # type: ignore[no-untyped-def]
    return str(city)


async def star(*cities: str) -> str:
    return ""


def sync_fn(city: str) -> str:
    return city


async def opaque(lock: asyncio.Lock) -> str:
    return ""


@pytest.mark.parametrize(
    ("fn", "kwargs", "message"),
    [
        (weather, {}, r"tool name 'weather' is not valid: .*pass name='group.action'"),
        (weather, {"name": "Weather"}, r"'Weather' is not valid"),
        (weather, {"name": "react.weather"}, r"reserved for the in-loop tools"),
        (sync_fn, {"name": "a.b"}, r"must be async \(async def\)"),
        (untyped, {"name": "a.b"}, r"parameter 'city' has no type annotation"),
        (star, {"name": "a.b"}, r"\*cities is not supported"),
        (opaque, {"name": "a.b"}, r"parameter 'lock' has a type pydantic cannot describe"),
    ],
)
def test_a_decoration_that_cannot_work_raises_naming_the_fix(
    fn: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        tool(**kwargs)(fn)
