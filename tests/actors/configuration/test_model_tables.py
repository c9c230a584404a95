"""``[models.NAME]`` of actline.toml: checked key by key, registered, and served by a node.

A configured model is served through its own API and base URL; the messages API with
``cache = "automatic"`` sends no ``cache_control`` (the server caches prefixes itself).
The node turn runs on the real nats-server against the local Messages API server.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from actline.actors.client.client import Client
from actline.actors.configuration.models import NodeModels
from actline.actors.configuration.settings_file import load_settings
from actline.actors.errors import SettingsFileError
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import (
    AnthropicModel,
    ExtractiveModel,
    LLMSettings,
    ModelConfigError,
    ReplayModel,
    model_spec,
    register_models,
)
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.tools import KnowledgeSpace
from tests.actors.harness import KB, Scripted, run_turn, say, settings


@pytest.fixture(autouse=True)
def no_configured_models() -> Iterator[None]:
    register_models(())
    yield
    register_models(())


def toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "actline.toml"
    path.write_text(text, encoding="utf-8")
    return path


LOCAL_TABLE = """
model = "my-local"

[models.my-local]
api = "messages"
base_url = "{url}"
context_window = 32768
max_output_tokens = 2048
input_price = 0.5
output_price = 1.5
cache = "automatic"
stop_sequences = ["<|im_end|>"]
"""


def test_a_models_table_builds_the_spec_model_spec_returns(tmp_path: Path) -> None:
    path = toml(tmp_path, LOCAL_TABLE.format(url="http://127.0.0.1:8080"))
    loaded = load_settings(path, env={})
    spec = model_spec("my-local")
    assert (spec.context_window, spec.max_output_tokens) == (32_768, 2048)
    assert (spec.input_price, spec.output_price, spec.cache) == (0.5, 1.5, "automatic")
    assert (spec.api, spec.base_url, spec.known) == ("messages", "http://127.0.0.1:8080", True)
    assert spec.stop_sequences == ("<|im_end|>",)
    assert loaded.llm.models == (spec,)
    assert (loaded.llm.model, loaded.llm.base_url) == ("my-local", "http://127.0.0.1:8080")


def test_a_claude_model_table_keeps_the_built_in_constants_it_does_not_set(
    tmp_path: Path,
) -> None:
    path = toml(tmp_path, '[models.claude-haiku-4-5]\nbase_url = "https://gw.example"\n')
    load_settings(path, env={})
    spec = model_spec("claude-haiku-4-5")
    assert (spec.min_cache_tokens, spec.input_price, spec.cache) == (4096, 1.0, "anthropic")
    assert spec.base_url == "https://gw.example"


def test_the_file_the_environment_and_the_flags_set_the_api_and_base_url_in_that_order(
    tmp_path: Path,
) -> None:
    path = toml(tmp_path, LOCAL_TABLE.format(url="http://file:1"))
    assert load_settings(path, env={}).llm.base_url == "http://file:1"
    env = {"ACTLINE_BASE_URL": "http://env:2", "ACTLINE_API": "openai"}
    from_env = load_settings(path, env=env).llm
    assert (from_env.api, from_env.base_url) == ("openai", "http://env:2")
    flags = {"api": "messages", "base_url": "http://flag:3", "model": "other"}
    from_flags = load_settings(path, env=env, overrides=flags).llm
    assert (from_flags.api, from_flags.base_url, from_flags.model) == (
        "messages",
        "http://flag:3",
        "other",
    )


def test_the_llm_table_names_the_api_and_an_unknown_one_is_refused(tmp_path: Path) -> None:
    path = toml(tmp_path, '[llm]\napi = "openai"\nbase_url = "http://x:1/v1"\n')
    assert load_settings(path, env={}).llm.api == "openai"
    bad = toml(tmp_path, '[llm]\napi = "soap"\n')
    with pytest.raises(SettingsFileError, match="api: 'soap' is unknown: use one of messages"):
        load_settings(bad, env={})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('prompt = "x"', "[models.m]: unknown key 'prompt'; known: api, base_url, cache"),
        ('api = "grpc"', "[models.m] api = 'grpc' is unknown: use one of messages, openai"),
        ('cache = "lru"', "[models.m] cache = 'lru' is unknown: use one of anthropic, automatic"),
        ('base_url = "localhost:8080"', "[models.m] base_url must be an http:// or https:// URL"),
        ("context_window = 0", "[models.m] context_window must be a whole number >= 1"),
        ("max_output_tokens = 1.5", "[models.m] max_output_tokens must be a whole number >= 1"),
        ('input_price = "free"', "[models.m] input_price must be a number >= 0"),
        ("output_price = -1", "[models.m] output_price must be a number >= 0"),
        ('stop_sequences = "END"', "[models.m] stop_sequences must be a list of at most 4"),
        ('stop_sequences = ["a", " "]', "[models.m] stop_sequences must be a list of at most 4"),
        ("stop_sequences = ['1', '2', '3', '4', '5']", "[models.m] stop_sequences must be a list"),
    ],
)
def test_each_models_key_is_checked_and_named(tmp_path: Path, line: str, message: str) -> None:
    path = toml(tmp_path, f"[models.m]\n{line}\n")
    with pytest.raises(SettingsFileError) as caught:
        load_settings(path, env={})
    assert f"config file {path}: {message}" in str(caught.value)


def test_models_must_be_tables(tmp_path: Path) -> None:
    with pytest.raises(SettingsFileError, match=r"\[models.m\] must be a table"):
        load_settings(toml(tmp_path, "[models]\nm = 1\n"), env={})


def test_a_configured_model_is_served_through_its_own_api_and_base_url(tmp_path: Path) -> None:
    load_settings(toml(tmp_path, LOCAL_TABLE.format(url="http://127.0.0.1:9")), env={})
    models = NodeModels(ExtractiveModel(), default_name="extractive", llm=LLMSettings())
    local = models("my-local")
    assert isinstance(local, AnthropicModel) and models("my-local") is local
    assert local.settings.base_url == "http://127.0.0.1:9"
    assert "my-local" in models.served()


def test_a_configured_model_it_cannot_reach_is_refused_with_what_the_node_serves(
    tmp_path: Path,
) -> None:
    load_settings(toml(tmp_path, "[models.bare]\ncontext_window = 8192\n"), env={})
    models = NodeModels(ExtractiveModel(), default_name="extractive", llm=LLMSettings())
    with pytest.raises(ModelConfigError) as caught:
        models("bare")
    message = str(caught.value)
    assert "is not a built-in model and has no base URL" in message
    assert message.endswith("this node serves extractive")


@pytest.fixture
async def local_server() -> AsyncIterator[FakeAnthropicServer]:
    policy = ReplayModel.of([say("local", answer="Answered by the local model.")] * 2)
    async with FakeAnthropicServer(policy) as srv:
        yield srv


async def test_a_turn_on_a_configured_local_model_sends_no_cache_control(
    bus: Bus, client: Client, tmp_path: Path, local_server: FakeAnthropicServer
) -> None:
    path = toml(tmp_path, LOCAL_TABLE.format(url=local_server.base_url))
    loaded = load_settings(path, env={})  # model = "my-local", no key anywhere
    node = Node(
        bus,
        settings(tmp_path / "home", model=loaded.node.model),
        llm=loaded.llm,
        knowledge=KnowledgeSpace(KB),
    )
    await node.start()
    try:
        handle = await run_turn(client, "hello", "c1")
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed", result.error
    assert result.answer == "Answered by the local model."
    assert [r.body["model"] for r in local_server.requests] == ["my-local"]
    assert all("cache_control" not in str(r.body) for r in local_server.requests)
    assert local_server.requests[0].body["max_tokens"] <= 2048


async def test_a_turn_naming_a_configured_model_is_served_by_it_not_the_default(
    bus: Bus, client: Client, tmp_path: Path, local_server: FakeAnthropicServer
) -> None:
    load_settings(toml(tmp_path, LOCAL_TABLE.format(url=local_server.base_url)), env={})
    offline = Scripted({"c1": [say(answer="never")]})
    node = Node(
        bus,
        settings(tmp_path / "home"),
        model=offline,
        llm=LLMSettings(max_retries=0),
        knowledge=KnowledgeSpace(KB),
    )
    await node.start()
    try:
        handle = await run_turn(client, "hello", "c1", config={"model": "my-local"})
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed", result.error
    assert result.answer == "Answered by the local model."
    assert all("cache_control" not in str(r.body) for r in local_server.requests)
    assert offline.models["c1"].calls == 0


def test_the_readme_models_example_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    (example,) = [b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if "[models." in b]
    loaded = load_settings(toml(tmp_path, example), env={})
    assert (loaded.llm.model, loaded.llm.base_url) == ("my-local", "http://127.0.0.1:8080")
    assert model_spec("my-local").cache == "automatic"


def test_loading_again_builds_from_the_built_in_constants_not_the_last_load(
    tmp_path: Path,
) -> None:
    first = toml(tmp_path, '[models.claude-haiku-4-5]\ncache = "none"\ninput_price = 9.0\n')
    load_settings(first, env={})
    assert model_spec("claude-haiku-4-5").cache == "none"
    second = toml(tmp_path, '[models.claude-haiku-4-5]\nbase_url = "https://gw.example"\n')
    load_settings(second, env={})
    spec = model_spec("claude-haiku-4-5")
    assert (spec.cache, spec.input_price) == ("anthropic", 1.0)
