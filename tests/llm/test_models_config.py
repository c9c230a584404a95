"""Any model by name and endpoint: the API, the base URL, the key, configured models.

``LLMSettings.from_env`` takes the settings file's values as defaults, the environment over
them and the flags over both; ``check_servable`` accepts a model with a base URL without a
key and refuses a name it cannot reach; ``register_models`` makes ``model_spec`` return the
configured models; a model whose ``cache`` is not ``anthropic`` gets no ``cache_control``.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import pytest

from actline.llm import (
    AnthropicModel,
    LLMSettings,
    ModelConfigError,
    ModelSpec,
    check_servable,
    configured_models,
    make_model,
    model_spec,
    register_models,
)
from actline.llm.anthropic.wire import to_messages_params
from actline.messages import GenerateRequest

LOCAL = ModelSpec("my-local", 32_768, 1024, 0.0, 0.0, 2048, cache="automatic")


@pytest.fixture(autouse=True)
def no_configured_models() -> Iterator[None]:
    register_models(())
    yield
    register_models(())


def request() -> GenerateRequest:
    return GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        model="my-local",
        system="You answer.",
        blocks=[{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        cache_marks=[0, 1],
    )


def test_the_api_defaults_to_messages_and_an_unknown_one_is_named_with_the_choices() -> None:
    assert LLMSettings().api == "messages"
    with pytest.raises(ModelConfigError) as caught:
        LLMSettings(api="grpc")  # type: ignore[arg-type]
    assert caught.value.setting == "api"
    assert str(caught.value) == "api: 'grpc' is unknown: use one of messages, openai"


def test_the_environment_names_the_api_the_base_url_and_the_key_of_that_api() -> None:
    env = {
        "ACTLINE_MODEL": "qwen",
        "ACTLINE_API": "openai",
        "ACTLINE_BASE_URL": "http://127.0.0.1:8080/v1",
        "ANTHROPIC_API_KEY": "sk-ant",
        "OPENAI_API_KEY": "sk-openai",
    }
    settings = LLMSettings.from_env(env)
    assert (settings.model, settings.api, settings.base_url) == (
        "qwen",
        "openai",
        "http://127.0.0.1:8080/v1",
    )
    assert settings.api_key == "sk-openai"
    messages = LLMSettings.from_env({**env, "ACTLINE_API": "messages"})
    assert messages.api_key == "sk-ant"


def test_actline_base_url_wins_over_anthropic_base_url_which_still_works() -> None:
    legacy = {"ANTHROPIC_BASE_URL": "http://gateway:1"}
    assert LLMSettings.from_env(legacy).base_url == "http://gateway:1"
    both = {**legacy, "ACTLINE_BASE_URL": "http://local:2"}
    assert LLMSettings.from_env(both).base_url == "http://local:2"
    # ANTHROPIC_BASE_URL is the Messages API's: it does not point the openai API anywhere
    assert LLMSettings.from_env({**legacy, "ACTLINE_API": "openai"}).base_url is None


def test_flags_win_over_the_environment_which_wins_over_the_file() -> None:
    file = {"api": "openai", "base_url": "http://file:1", "timeout": 5.0}
    env = {"ACTLINE_BASE_URL": "http://env:2"}
    from_env = LLMSettings.from_env(env, defaults=file)
    assert (from_env.api, from_env.base_url, from_env.timeout) == ("openai", "http://env:2", 5.0)
    flags = LLMSettings.from_env(env, defaults=file, api="messages", base_url="http://flag:3")
    assert (flags.api, flags.base_url) == ("messages", "http://flag:3")
    unset_flags = LLMSettings.from_env(env, defaults=file, api=None, base_url=None)
    assert unset_flags.base_url == "http://env:2"


def test_a_model_with_a_base_url_needs_no_key() -> None:
    check_servable(LLMSettings(model="my-local", base_url="http://127.0.0.1:8080"))
    check_servable(LLMSettings(model="claude-sonnet-4-6", base_url="http://gateway:1"))
    check_servable(LLMSettings(model="qwen", api="openai", base_url="http://127.0.0.1:8000/v1"))
    check_servable(LLMSettings(model="extractive"))


def test_a_claude_model_without_a_base_url_still_needs_its_key() -> None:
    with pytest.raises(ModelConfigError, match="needs an Anthropic API key"):
        check_servable(LLMSettings(model="claude-sonnet-4-6"))
    check_servable(LLMSettings(model="claude-sonnet-4-6", api_key="sk"))


def test_an_unknown_model_without_a_base_url_is_refused_naming_it_and_the_fix() -> None:
    with pytest.raises(ModelConfigError) as caught:
        check_servable(LLMSettings(model="my-local", api_key="sk"))
    message = str(caught.value)
    assert message.startswith("model 'my-local': is not a built-in model and has no base URL")
    assert "--base-url URL, ACTLINE_BASE_URL or base_url in [models.NAME]" in message
    with pytest.raises(ModelConfigError, match="the openai API needs a base URL"):
        check_servable(LLMSettings(model="gpt-4o", api="openai", api_key="sk"))
    with pytest.raises(ModelConfigError, match="needs a script"):
        check_servable(LLMSettings(model="replay"))


def test_registered_models_are_what_model_spec_returns_until_replaced() -> None:
    assert model_spec("my-local").known is False  # cached as unknown first
    register_models([LOCAL])
    assert model_spec("my-local") is LOCAL
    assert configured_models() == {"my-local": LOCAL}
    register_models(())
    assert model_spec("my-local").known is False
    assert model_spec("claude-sonnet-4-6").cache == "anthropic"


def test_for_model_takes_the_configured_api_and_base_url_and_the_key_of_the_same_api() -> None:
    remote = ModelSpec("qwen", 32_768, 1024, 0.0, 0.0, api="openai", base_url="http://q:1/v1")
    register_models([LOCAL, remote])
    node = LLMSettings(model="claude-sonnet-4-6", api_key="sk-ant", base_url="http://gw:2")
    local = node.for_model("my-local")
    assert (local.api, local.base_url, local.api_key) == ("messages", "http://gw:2", "sk-ant")
    other = node.for_model("qwen")
    assert (other.api, other.base_url, other.api_key) == ("openai", "http://q:1/v1", None)


def test_without_anthropic_caching_the_request_carries_no_cache_control() -> None:
    marked = to_messages_params(request(), model="m", max_tokens=10)
    assert "cache_control" in str(marked)
    plain = to_messages_params(request(), model="m", max_tokens=10, marks=False)
    assert "cache_control" not in str(plain)
    assert [b["text"] for b in plain["messages"][0]["content"]] == ["one", "two"]
    assert plain["system"] == [{"type": "text", "text": "You answer."}]


def test_the_anthropic_adapter_sends_marks_only_for_anthropic_caching() -> None:
    register_models([LOCAL])
    local = AnthropicModel(LLMSettings(model="my-local", base_url="http://127.0.0.1:1"))
    assert "cache_control" not in str(local.params(request()))
    assert local.params(request())["max_tokens"] == 2048  # the configured model's limit
    claude = AnthropicModel(LLMSettings(model="claude-sonnet-4-6", api_key="sk"))
    assert "cache_control" in str(claude.params(request()))


def test_make_model_builds_the_client_of_the_api() -> None:
    messages = make_model(LLMSettings(model="my-local", base_url="http://127.0.0.1:1"))
    assert isinstance(messages, AnthropicModel) and messages.name == "my-local"
    assert make_model(LLMSettings()).name == "extractive"
    with pytest.raises(ModelConfigError, match="needs an API key"):
        make_model(LLMSettings(model="claude-sonnet-4-6"))


def test_make_model_builds_an_openai_chat_model_for_the_openai_api() -> None:
    from actline.llm.openai import OpenAIChatModel

    settings = LLMSettings(model="qwen", api="openai", base_url="http://127.0.0.1:1/v1")
    model = make_model(settings)
    assert isinstance(model, OpenAIChatModel)


def test_settings_with_configured_models_pickle_for_ray_workers() -> None:
    settings = LLMSettings(model="my-local", base_url="http://h:1", models=(LOCAL,))
    assert pickle.loads(pickle.dumps(settings)) == settings
