"""A turn's ``config.model``: served by the model of that name, or the turn fails saying why.

Nothing falls back to the node's default model: an unknown name, or a claude model on a
node without an API key, ends the turn ``failed`` with the model, what the node serves and
what to do; a claude model on a node with a key is answered through the Anthropic path
(the real ``anthropic`` client against the local Messages API).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actline.actors.client.client import Client
from actline.actors.configuration.models import NodeModels
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import ExtractiveModel, LLMSettings, ModelConfigError, ReplayModel
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.tools import KnowledgeSpace
from tests.actors.harness import KB, Scripted, run_turn, say, settings

OFFLINE = LLMSettings()
"""A node without an API key."""


async def started(bus: Bus, home: Path, model: Scripted, llm: LLMSettings) -> Node:
    node = Node(bus, settings(home), model=model, llm=llm, knowledge=KnowledgeSpace(KB))
    await node.start()
    return node


@pytest.fixture
async def messages_api() -> AsyncIterator[FakeAnthropicServer]:
    policy = ReplayModel.of([say("from claude", answer="Answered by Claude.")] * 4)
    async with FakeAnthropicServer(policy) as srv:
        yield srv


async def test_a_turn_naming_an_unknown_model_fails_with_what_the_node_serves(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say(answer="never")]})
    node = await started(bus, tmp_path / "home", model, OFFLINE)
    try:
        handle = await run_turn(client, "hello", "c1", config={"model": "gpt-9"})
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "failed"
    assert result.error == (
        "model call failed: model_config: model 'gpt-9': unknown model; this node serves "
        "extractive, scripted: ask for one it serves"
    )
    assert model.models["c1"].calls == 0  # the default model was not asked instead


async def test_a_claude_model_on_a_node_without_a_key_fails_with_the_fix(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say(answer="never")]})
    node = await started(bus, tmp_path / "home", model, OFFLINE)
    try:
        handle = await run_turn(client, "hello", "c1", config={"model": "claude-x"})
        assert node.streamer is not None and node.streamer.calls == 1  # one call, no retry
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "failed"
    assert result.error is not None
    assert result.error.startswith("model call failed: model_config: model 'claude-x': ")
    assert "start it with ACTLINE_MODEL=claude-x (or --model) and ANTHROPIC_API_KEY" in (
        result.error
    )
    assert model.models["c1"].calls == 0


async def test_a_claude_model_on_a_node_with_a_key_is_answered_by_the_messages_api(
    bus: Bus, client: Client, tmp_path: Path, messages_api: FakeAnthropicServer
) -> None:
    llm = LLMSettings(api_key="sk-test", base_url=messages_api.base_url, max_retries=0)
    model = Scripted({"c1": [say(answer="Answered offline.")]})
    node = await started(bus, tmp_path / "home", model, llm)
    try:
        claude = await run_turn(client, "hello", "c1", config={"model": "claude-haiku-4-5"})
        offline = await run_turn(client, "again", "c1")  # the node's own model
    finally:
        await node.stop()
    result = claude.result.result()
    assert result.status == "completed", result.error
    assert result.answer == "Answered by Claude."
    assert [r.body["model"] for r in messages_api.requests] == ["claude-haiku-4-5"]
    assert offline.result.result().answer == "Answered offline."
    assert len(messages_api.requests) == 1


def test_the_resolver_serves_extractive_anywhere_and_names_the_claude_fix() -> None:
    default = ExtractiveModel()
    models = NodeModels(default, default_name="extractive", llm=OFFLINE)
    assert models("") is default and models("extractive") is default
    with pytest.raises(ModelConfigError, match=r"this node serves extractive only; start it"):
        models("claude-sonnet-4-6")
    with pytest.raises(ModelConfigError, match=r"replay model needs a script"):
        models("replay")
    keyed = NodeModels(default, default_name="extractive", llm=LLMSettings(api_key="sk"))
    claude = keyed("claude-sonnet-4-6")
    assert claude.name == "claude-sonnet-4-6" and keyed("claude-sonnet-4-6") is claude
    assert "claude-* (it has an Anthropic API key)" in keyed.served()


def test_a_node_process_refuses_a_model_it_cannot_run_before_connecting(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from actline.cli.node import main

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ACTLINE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./actline.toml
    nowhere = ["--nats", "nats://127.0.0.1:9", "--home", str(tmp_path / "home")]
    assert main([*nowhere, "--model", "claude-sonnet-4-6"]) == 2
    assert "model claude-sonnet-4-6: needs an Anthropic API key" in capsys.readouterr().err
    assert main([*nowhere, "--model", "gpt-9"]) == 2
    assert "model 'gpt-9': is not a built-in model and has no base URL" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()
