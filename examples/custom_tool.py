"""A custom tool with a pre hook, a post hook and a permission callback, offline.

    python examples/custom_tool.py

``weather_current`` becomes the tool ``weather.current`` (its schema from the type hints, its
description from the docstring). A ``Runtime`` with an in-process node, an embedded
nats-server and the offline model (in a temporary home) answers two questions: for Paris the
model calls the tool, the recording hooks see the call and its output, and the answer is what
the tool returned; for Atlantis the pre hook refuses the call and the answer carries its
reason. ``can_use_tool`` lets every call through but ``code.exec_python``.
"""

from __future__ import annotations

import asyncio
import tempfile
from typing import Any, Literal

from actline import (
    Allow,
    Config,
    Deny,
    Runtime,
    ToolContext,
    ToolHooks,
    ToolOutput,
    ToolUse,
    tool,
)

FORECASTS = {"Paris": 18, "Oslo": 4}


@tool(timeout_s=10)
async def weather_current(
    city: str, unit: Literal["c", "f"] = "c", ctx: ToolContext | None = None
) -> str:
    """Current weather for a city.

    Args:
        city: The city name, e.g. "Paris".
        unit: Celsius or Fahrenheit.
    """
    degrees = FORECASTS.get(city, 12)
    if unit == "f":
        degrees = round(degrees * 9 / 5 + 32)
    return f"It is {degrees} degrees {unit.upper()} and sunny in {city}."


audit: list[str] = []
hooks = ToolHooks()


@hooks.pre
def no_imaginary_places(call: ToolUse) -> Deny | None:
    """Refuse the weather of a place that is not on the map."""
    if call.tool == "weather.current" and call.params.get("city") == "Atlantis":
        return Deny("Atlantis is not on the map")
    return None


@hooks.post
async def record(call: ToolUse, output: ToolOutput) -> None:
    """Keep a line per call that ran (refused calls never get here)."""
    audit.append(f"{call.tool} {dict(call.params)} -> {output.content or output.error or 'ok'}")


def can_use_tool(name: str, params: dict[str, Any], call: ToolUse) -> Allow | Deny:
    """Everything but running code."""
    if name == "code.exec_python":
        return Deny("running code is switched off here")
    return Allow()


async def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        config = Config.load(env={"ACTLINE_HOME": home, "ACTLINE_FOLLOWUP_GRACE": "0"})
        async with Runtime(
            config, tools=[weather_current], hooks=hooks, can_use_tool=can_use_tool
        ) as rt:
            for question in ("What is the weather in Paris?", "What is the weather in Atlantis?"):
                result = await rt.ask(question)
                print(f"Q: {question}\nA: {result.answer}\n")
    print("Calls that ran:")
    for line in audit:
        print(f"  {line}")


if __name__ == "__main__":
    asyncio.run(main())
