"""The rendered context as a Messages API body: marks, media parts, byte stability, settings."""

from __future__ import annotations

import json

import pytest

from actline.llm.anthropic.wire import from_messages_params, to_messages_params
from actline.llm.config import LLMSettings, model_spec
from actline.llm.errors import ModelConfigError, ModelRequestError
from actline.messages import GenerateRequest


def req(n: int = 6, marks: list[int] | None = None, system: str = "sys") -> GenerateRequest:
    blocks = [{"type": "text", "text": f"block {i}"} for i in range(n)]
    return GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        system=system,
        blocks=blocks,
        cache_marks=[1, 3, 4] if marks is None else marks,
    )


def marked(params: dict[str, object]) -> list[str]:
    """Texts of every block that carries cache_control, system first."""
    out = [b["text"] for b in params.get("system", []) if "cache_control" in b]  # type: ignore[attr-defined]
    for message in params["messages"]:  # type: ignore[attr-defined]
        out += [b.get("text", b["type"]) for b in message["content"] if "cache_control" in b]
    return out


def test_the_system_prompt_and_the_three_marks_carry_cache_control() -> None:
    params = to_messages_params(req(), model="claude-sonnet-4-5", max_tokens=100)
    assert marked(params) == ["sys", "block 1", "block 3", "block 4"]
    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert [m["role"] for m in params["messages"]] == ["user"]


def test_a_one_hour_ttl_is_sent_only_when_asked_for() -> None:
    params = to_messages_params(
        req(), model="m", max_tokens=1, cache_ttl="1h", system_cache_ttl="1h"
    )
    assert params["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert params["messages"][0]["content"][1]["cache_control"]["ttl"] == "1h"


def test_more_marks_than_the_api_allows_are_refused_before_sending() -> None:
    with pytest.raises(ModelRequestError, match="exceed 4"):
        to_messages_params(req(marks=[0, 1, 2, 3]), model="m", max_tokens=1)
    # Without a system prompt the fourth mark is allowed.
    params = to_messages_params(req(marks=[0, 1, 2, 3], system=""), model="m", max_tokens=1)
    assert len(marked(params)) == 4 and "system" not in params
    with pytest.raises(ModelRequestError, match="out of range"):
        to_messages_params(req(marks=[9]), model="m", max_tokens=1)
    with pytest.raises(ModelRequestError, match="empty"):
        to_messages_params(req(n=0, marks=[]), model="m", max_tokens=1)


def test_a_media_part_is_sent_as_its_caption_then_the_media_block_which_carries_the_mark() -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
        "caption": "[USER ATTACHMENT] fi:t1.user.attachments/a.png",
    }
    request = GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        blocks=[{"type": "text", "text": "before"}, image],
        cache_marks=[1],
    )
    content = to_messages_params(request, model="m", max_tokens=1)["messages"][0]["content"]
    assert [b["type"] for b in content] == ["text", "text", "image"]
    assert content[1]["text"].startswith("[USER ATTACHMENT]")
    assert "cache_control" in content[2] and "cache_control" not in content[1]
    assert "caption" not in content[2]


def test_the_same_request_always_serialises_to_the_same_bytes() -> None:
    a = json.dumps(to_messages_params(req(), model="m", max_tokens=5))
    b = json.dumps(to_messages_params(req(), model="m", max_tokens=5))
    assert a == b


def test_a_body_maps_back_to_the_request_it_came_from() -> None:
    original = req()
    back = from_messages_params(to_messages_params(original, model="m", max_tokens=5))
    assert back.blocks == original.blocks
    assert back.cache_marks == original.cache_marks
    assert back.system == "sys" and back.model == "m" and back.max_output_tokens == 5


def test_dated_model_names_resolve_to_their_family_constants() -> None:
    assert model_spec("claude-sonnet-4-5-20250929").min_cache_tokens == 1024
    assert model_spec("claude-haiku-4-5-20251001").min_cache_tokens == 4096
    assert model_spec("claude-3-5-haiku-latest").min_cache_tokens == 2048
    unknown = model_spec("claude-future-9")
    assert not unknown.known and unknown.context_window == 200_000


def test_cost_weights_reads_and_writes_as_the_price_sheet_says() -> None:
    spec = model_spec("claude-sonnet-4-5")
    plain = spec.cost(input_tokens=1_000_000, output_tokens=0)
    assert plain == pytest.approx(3.0)
    cached = spec.cost(input_tokens=0, output_tokens=0, cache_read=1_000_000)
    assert cached == pytest.approx(0.3)
    assert spec.cost(input_tokens=0, output_tokens=0, cache_write_5m=1_000_000) == 3.75


def test_settings_come_from_the_environment_and_bad_values_name_the_variable() -> None:
    env = {
        "ACTLINE_MODEL": "claude-sonnet-4-5",
        "ANTHROPIC_API_KEY": "sk-secret-1",
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "ACTLINE_LLM_MAX_RETRIES": "2",
    }
    s = LLMSettings.from_env(env)
    assert (s.model, s.api_key, s.base_url, s.max_retries) == (
        "claude-sonnet-4-5",
        "sk-secret-1",
        "http://127.0.0.1:9",
        2,
    )
    assert not s.offline and LLMSettings().offline
    assert "sk-secret-1" not in repr(s)
    with pytest.raises(ModelConfigError, match="ACTLINE_LLM_MAX_RETRIES"):
        LLMSettings.from_env({"ACTLINE_LLM_MAX_RETRIES": "many"})
    with pytest.raises(ModelConfigError, match="cache_ttl"):
        LLMSettings(cache_ttl="2h")  # type: ignore[arg-type]
