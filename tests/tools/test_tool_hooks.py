"""Hooks and ``can_use_tool`` around every tool call, through real turns: a ``Runtime`` with an
in-process node, embedded NATS, LMDB in a temp dir and the offline model, which calls the
user's ``weather.current`` for a weather question (``actline.tools.hooks``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actline import Allow, Config, ConfigError, Deny, Runtime, ToolHooks, ToolOutput, ToolUse, tool

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"


@tool
async def weather_current(city: str) -> str:
    """Current weather for a city.

    Args:
        city: The city name.
    """
    return f"It is 18 degrees and sunny in {city}."


def config(tmp_path: Path) -> Config:
    env = {"ACTLINE_HOME": str(tmp_path / "home"), "ACTLINE_DOCS": str(KB)}
    return Config.load(env={**env, "ACTLINE_FOLLOWUP_GRACE": "0"})


def results(rt: Runtime, conversation_id: str, tool_name: str) -> list[dict[str, Any]]:
    """The data of the conversation's result blocks of ``tool_name``."""
    assert rt.node is not None
    blocks = rt.node.conversations[conversation_id].tl.blocks
    return [
        dict(b.data)
        for b in blocks
        if b.type == "react.tool.result" and (b.meta or {}).get("tool") == tool_name
    ]


async def test_permission_then_pre_hooks_then_the_tool_then_post_hooks(tmp_path: Path) -> None:
    order: list[str] = []

    def can_use_tool(name: str, params: dict[str, Any], call: ToolUse) -> Allow:
        order.append(f"permission {name} {params.get('city', '')}")
        return Allow()

    def to_lyon(call: ToolUse) -> dict[str, Any] | None:
        order.append(f"pre1 {call.tool}")
        return {"city": "Lyon"} if call.tool == "weather.current" else None

    async def replace_output(call: ToolUse, output: ToolOutput) -> str | None:
        order.append(f"post1 {call.tool} {output.content}")
        return f"Checked: {output.content}" if call.tool == "weather.current" else None

    hooks = ToolHooks(pre=[to_lyon], post=[replace_output])
    async with Runtime(
        config(tmp_path), tools=[weather_current], hooks=hooks, can_use_tool=can_use_tool
    ) as rt:

        @rt.hooks.pre
        async def sees_lyon(call: ToolUse) -> None:
            order.append(f"pre2 {call.tool} {call.params.get('city', '')}")

        @rt.hooks.post
        def sees_replaced(call: ToolUse, output: ToolOutput) -> None:
            order.append(f"post2 {call.tool} {output.content}")

        result = await rt.ask("What is the weather in Paris?")
    assert result.status == "completed"
    assert result.answer == "Checked: It is 18 degrees and sunny in Lyon."
    weather = [o for o in order if "react." not in o]
    assert weather == [
        "permission weather.current Paris",
        "pre1 weather.current",
        "pre2 weather.current Lyon",
        "post1 weather.current It is 18 degrees and sunny in Lyon.",
        "post2 weather.current Checked: It is 18 degrees and sunny in Lyon.",
    ]
    assert order[:3] == ["permission react.plan ", "pre1 react.plan", "pre2 react.plan "]


async def test_refusals_and_failing_hooks_are_results_the_model_sees(tmp_path: Path) -> None:
    after: list[str] = []

    def no_atlantis(call: ToolUse) -> Deny | None:
        if call.params.get("city") == "Atlantis":
            return Deny("Atlantis is not on the map")
        return None

    def explode(call: ToolUse) -> dict[str, Any] | None:
        if call.params.get("city") == "Oslo":
            raise RuntimeError("the hook broke")
        return {"city": 42} if call.params.get("city") == "Berlin" else None

    def broken_post(call: ToolUse, output: ToolOutput) -> object:
        after.append(call.tool)
        return 42 if "Rome" in output.content else None

    hooks = ToolHooks(pre=[no_atlantis, explode], post=[broken_post])
    async with Runtime(config(tmp_path), tools=[weather_current], hooks=hooks) as rt:
        refused = await rt.ask("What is the weather in Atlantis?")
        failed = await rt.ask("What is the weather in Oslo?")
        withheld = await rt.ask("What is the weather in Rome?")
        invalid = await rt.ask("What is the weather in Berlin?")
        refused_rows = results(rt, refused.conversation_id, "weather.current")
        failed_rows = results(rt, failed.conversation_id, "weather.current")
        withheld_rows = results(rt, withheld.conversation_id, "weather.current")
    assert refused.status == failed.status == withheld.status == "completed"
    assert refused.answer == (
        "I could not get this from weather.current: weather.current was refused by pre hook "
        "test_refusals_and_failing_hooks_are_results_the_model_sees.<locals>.no_atlantis: "
        "Atlantis is not on the map"
    )
    assert refused_rows == [
        {"status": "error", "error": refused.answer.split(": ", 1)[1], "code": "refused"}
    ]
    assert "explode: it failed (RuntimeError: the hook broke)" in failed.answer
    assert failed_rows[0]["code"] == "hook_failed"
    assert "post hook" in withheld.answer and "it returned int" in withheld.answer
    assert withheld_rows[0]["status"] == "error"
    assert invalid.answer.startswith("I could not get this from weather.current: bad params")
    assert "city" in invalid.answer  # params that break the schema name the field
    assert after.count("weather.current") == 2  # refused calls never reach the post hooks


async def test_can_use_tool_refuses_an_in_loop_tool_and_an_agent_send(tmp_path: Path) -> None:
    def policy(name: str, params: dict[str, Any], call: ToolUse) -> Allow | Deny:
        if name in ("react.search_knowledge", "agent.send"):
            return Deny(f"{name} is off in this test")
        return Allow()

    async with Runtime(config(tmp_path), can_use_tool=policy) as rt:
        searched = await rt.ask("How do the pricing tiers differ?")
        search_rows = results(rt, searched.conversation_id, "react.search_knowledge")
        handle = await rt.submit("Check the retention settings and ask reviewer to review them")
        sent = await handle.wait(30)  # the turn does not wait for an agent that got nothing
        send_rows = results(rt, sent.conversation_id, "agent.send")
    assert searched.status == "completed" and not searched.sources_used
    assert search_rows[0]["code"] == "refused"
    assert "react.search_knowledge is off in this test" in search_rows[0]["error"]
    assert sent.status == "completed"
    assert send_rows[0]["status"] == "error" and "agent.send is off" in send_rows[0]["error"]


def test_hooks_and_tools_need_a_node_in_this_process(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Runtime\\(node=False\\) has none: use node=True"):
        Runtime(config(tmp_path), node=False, hooks=ToolHooks(pre=[print]))
    with pytest.raises(ConfigError, match="has no tool hooks"):
        _ = Runtime(config(tmp_path), node=False).hooks
    with pytest.raises(ValueError, match="Deny needs a reason"):
        Deny("  ")
