"""Diagnostic logs of a real turn (the AI-* categories, plus BUS and STORE): at INFO ids,
sizes and timings only, never the prompt or a tool's payload; at DEBUG the bodies, as the
README says; the JSON format; the CLI's flags and variables."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.actors import ToolRegistry
from actline.actors.client.client import Client
from actline.bus import Bus
from actline.cli import main as cli_main
from actline.messages import diag, new_id
from tests.actors.harness import Scripted, run_turn, say, start_node

TURN_CATEGORIES = (diag.AI_REQ, diag.AI_RESP, diag.AI_FNCALL, diag.AI_TOOL, diag.STORE)


@pytest.fixture
def root_logging() -> Iterator[logging.Logger]:
    """The root logger, given back as it was (handlers and level) after the test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield root
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


async def _logged_turn(
    bus: Bus, client: Client, home: Path, root: logging.Logger, level: int, fmt: str
) -> tuple[str, str, dict[str, str]]:
    """One two-round turn (an external tool and a react tool) with unique strings in the
    prompt, the tool params, the tool result and the answer, logged at ``level`` in ``fmt``;
    the log text, the turn id and the planted strings."""
    planted = {
        "prompt": f"PROMPT{new_id()}",
        "params": f"PARAMS{new_id()}",
        "result": f"RESULT{new_id()}",
        "answer": f"ANSWER{new_id()}",
    }
    registry = ToolRegistry()

    @registry.tool(
        "vault.read",
        schema={"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    )
    async def read(params: dict[str, Any], ctx: Any) -> str:
        return f"the value is {planted['result']}"

    calls = [
        ("vault.read", {"key": planted["params"]}),
        ("react.search_knowledge", {"query": planted["params"]}),
    ]
    model = Scripted({"c1": [say("looking", calls=calls), say("done", answer=planted["answer"])]})
    node = await start_node(bus, home, model, registry=registry)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(diag.JsonFormatter() if fmt == "json" else diag.TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    try:
        handle = await run_turn(client, f"what does {planted['prompt']} hold?", "c1")
    finally:
        root.removeHandler(handler)
        await node.stop()
    assert handle.result.result().status == "completed"
    request = model.models["c1"].requests[1]
    assert planted["result"] in json.dumps(request.blocks)  # the model did see the payload
    return out.getvalue(), handle.turn_id, planted


async def test_info_logs_carry_ids_sizes_and_timings_but_no_prompt_or_payload(
    bus: Bus, client: Client, tmp_path: Path, root_logging: logging.Logger
) -> None:
    text, turn_id, planted = await _logged_turn(
        bus, client, tmp_path / "home", root_logging, logging.INFO, "text"
    )
    for name, value in planted.items():
        assert value not in text, f"the {name} leaked into the INFO logs"
    lines = text.splitlines()
    for category in TURN_CATEGORIES:
        mine = [line for line in lines if f" INFO [{category}] conv=c1 " in line]
        assert mine, f"no [{category}] line"
        if category != diag.STORE:
            assert all(f"turn={turn_id}" in line for line in mine), mine
    line = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO \[AI-REQ\] conv=c1 turn=\S+ round=1 "
    assert any(re.match(line + r"model=\S+ blocks=\d+ chars=\d+ tokens=\d+", x) for x in lines)
    fncall = next(x for x in lines if "[AI-FnCall]" in x)
    assert "count=2 tools=vault.read,react.search_knowledge" in fncall
    tools = [x for x in lines if "[AI-TOOL]" in x]
    assert any("tool=vault.read status=ok chars=" in x and " ms=" in x for x in tools)
    assert any("tool=react.search_knowledge status=ok" in x for x in tools)
    resp = [x for x in lines if "[AI-RESP]" in x]
    assert len(resp) == 2 and all("tokens_in=" in x and " ms=" in x for x in resp)
    assert "[BUS]" not in text  # every delta is a publish: DEBUG only


async def test_debug_logs_carry_the_bodies_as_json_lines(
    bus: Bus, client: Client, tmp_path: Path, root_logging: logging.Logger
) -> None:
    text, turn_id, planted = await _logged_turn(
        bus, client, tmp_path / "home", root_logging, logging.DEBUG, "json"
    )
    lines = [json.loads(line) for line in text.splitlines()]  # every line is one object
    assert all({"ts", "level", "category", "logger", "message", "fields"} <= set(x) for x in lines)
    debug = [x for x in lines if x["level"] == "DEBUG" and x["logger"].startswith(diag.PREFIX)]
    bodies = json.dumps(debug)
    for name in ("prompt", "params", "result", "answer"):
        assert planted[name] in bodies, f"the {name} is not in the DEBUG lines"
    categories = {x["category"] for x in lines}
    assert set(TURN_CATEGORIES) | {diag.BUS} <= categories
    req = next(x for x in lines if x["category"] == diag.AI_REQ and x["level"] == "INFO")
    assert req["fields"]["conv"] == "c1" and req["fields"]["turn"] == turn_id
    assert req["message"].startswith("conv=c1 ")
    bus_line = next(x for x in lines if x["category"] == diag.BUS)
    assert {"op", "subject", "kind", "bytes"} <= set(bus_line["fields"])


def _cli_logs(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, **env: str
) -> tuple[int, str]:
    """``actline ARGV profiles``, then an INFO, a DEBUG and a WARNING line: exit code, stderr."""
    for key in ("ACTLINE_LOG_LEVEL", "ACTLINE_LOG_FORMAT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    code = cli_main([*argv, "profiles"])
    if code == 0:
        diag.info(diag.STORE, conv="c9", revision=3)
        diag.debug(diag.BUS, op="publish", subject="x.y")
        logging.getLogger("actline.actors.node.node").warning("a plain warning")
    return code, capsys.readouterr().err


def test_the_cli_selects_the_log_level_and_format(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, root_logging: Any
) -> None:
    code, err = _cli_logs(["--log-format", "json", "-v"], capsys, monkeypatch)
    lines = [json.loads(x) for x in err.splitlines()]
    assert code == 0
    assert [(x["level"], x["category"]) for x in lines] == [
        ("INFO", "STORE"),
        ("WARNING", "actline.actors.node.node"),
    ]
    assert lines[0]["fields"] == {"conv": "c9", "revision": 3}

    code, err = _cli_logs(["-vv"], capsys, monkeypatch, ACTLINE_LOG_FORMAT="json")
    assert [json.loads(x)["category"] for x in err.splitlines()] == [
        "STORE",
        "BUS",
        "actline.actors.node.node",
    ]

    code, err = _cli_logs([], capsys, monkeypatch, ACTLINE_LOG_LEVEL="info")
    expected = (
        r"\S+Z INFO \[STORE\] conv=c9 revision=3\n"
        r"\S+Z WARNING actline\.actors\.node\.node: a plain warning\n"
    )
    assert re.fullmatch(expected, err)

    code, err = _cli_logs([], capsys, monkeypatch)  # the default: WARNING, text
    assert (
        err.endswith("WARNING actline.actors.node.node: a plain warning\n") and "STORE" not in err
    )

    code, err = _cli_logs([], capsys, monkeypatch, ACTLINE_LOG_FORMAT="xml")
    assert code == 2 and "ACTLINE_LOG_FORMAT='xml'" in err and "text, json" in err
    code, err = _cli_logs([], capsys, monkeypatch, ACTLINE_LOG_LEVEL="loud")
    assert code == 2 and "ACTLINE_LOG_LEVEL='loud'" in err
