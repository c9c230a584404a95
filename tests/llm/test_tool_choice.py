"""The offline model and a user's tools: which tool a question plainly asks for, its params
read off the question, and none when in doubt (``actline.llm.extractive.choose_tool``)."""

from __future__ import annotations

from typing import Any

import pytest

from actline.llm.context import ToolEntry, external_tools
from actline.llm.extractive import choose_tool
from actline.llm.prompt import system_prompt

WEATHER = ToolEntry(
    "weather.current",
    "Current weather for a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        },
        "required": ["city"],
    },
)
STOCK = ToolEntry(
    "stock.price",
    "Closing price of a stock over some days.",
    {
        "type": "object",
        "properties": {"symbol": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["symbol", "days"],
    },
)
FILES = ToolEntry(
    "files.read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}}
)
TOOLS = [WEATHER, STOCK, FILES]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("What is the weather in Paris?", ("weather.current", {"city": "Paris"})),
        (
            "Weather in New York in fahrenheit?",
            ("weather.current", {"city": "New York", "unit": "fahrenheit"}),
        ),
        (
            'What was the stock price of "ACME" over 5 days?',
            ("stock.price", {"symbol": "ACME", "days": 5}),
        ),
        ("What is the weather like?", None),  # no city in the question
        ("Paris weather", None),  # a word that starts the sentence is not taken
        ("What was the stock price of ACME?", None),  # no number of days
        ("How do I read the files in S3?", None),  # actline's own tools are never chosen
        ("How do the pricing tiers differ?", None),
    ],
)
def test_a_tool_is_chosen_only_when_the_question_names_it_and_holds_its_params(
    question: str, expected: tuple[str, dict[str, Any]] | None
) -> None:
    assert choose_tool(question, TOOLS) == expected


def test_the_tools_are_read_from_the_system_prompt_lines() -> None:
    lines = {
        "weather.current": 'Current weather for a city. Params: {"type":"object",'
        '"properties":{"city":{"type":"string"}},"required":["city"]}',
        "code.exec_python": "Run Python code.\n    Params: code, timeout_s.",
        "clock.now": "The time now.",
    }
    tools = external_tools(system_prompt(lines))
    assert [t.name for t in tools] == ["clock.now", "code.exec_python", "weather.current"]
    assert tools[0].schema == {} and tools[1].schema == {}
    assert tools[2].description == "Current weather for a city."
    assert tools[2].schema["required"] == ["city"]
    assert external_tools(system_prompt({})) == []
