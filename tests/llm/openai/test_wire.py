"""The rendered context as a Chat Completions body, and back."""

from __future__ import annotations

import pytest

from actline.llm.errors import ModelRequestError
from actline.llm.fake_openai import validate_body
from actline.llm.openai import from_chat_params, to_chat_params
from actline.messages import GenerateRequest

PNG = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
PDF = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}


def request(**changes: object) -> GenerateRequest:
    base = GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        system="You answer from the timeline.",
        blocks=[
            {"type": "text", "text": "[TURN] t1"},
            {"type": "image", "source": PNG, "caption": "[IMAGE] chart.png"},
            {"type": "document", "source": PDF, "caption": "[FILE] spec.pdf"},
            {"type": "document", "source": {"type": "text", "data": "plain notes"}},
            {"type": "text", "text": ""},
        ],
        cache_marks=[0, 2],
    )
    return base.model_copy(update=changes)


def test_the_system_prompt_is_a_system_message_and_the_parts_one_user_message() -> None:
    params = to_chat_params(request(), model="local", max_tokens=256, temperature=0.2)
    assert params["model"] == "local" and params["max_tokens"] == 256
    assert params["temperature"] == 0.2
    assert params["stream"] is True and params["stream_options"] == {"include_usage": True}
    system, user = params["messages"]
    assert system == {"role": "system", "content": "You answer from the timeline."}
    assert user["role"] == "user"
    assert user["content"] == [
        {"type": "text", "text": "[TURN] t1"},
        {"type": "text", "text": "[IMAGE] chart.png"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "text", "text": "[FILE] spec.pdf"},
        {
            "type": "file",
            "file": {"filename": "part-2.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"},
        },
        {"type": "text", "text": "plain notes"},
        {"type": "text", "text": " "},  # an empty part still holds its place
    ]
    assert "cache_control" not in str(params)  # marks mean nothing on this API
    validate_body(params)


def test_the_body_is_byte_stable_and_has_no_temperature_unless_set() -> None:
    a = to_chat_params(request(), model="m", max_tokens=10)
    assert a == to_chat_params(request(), model="m", max_tokens=10)
    assert "temperature" not in a
    assert [
        m["role"] for m in to_chat_params(request(system=""), model="m", max_tokens=1)["messages"]
    ] == ["user"]


def test_the_server_reads_a_body_back_as_the_same_context() -> None:
    text_only = request(blocks=[{"type": "text", "text": f"block {i}"} for i in range(3)])
    back = from_chat_params(to_chat_params(text_only, model="m", max_tokens=99))
    assert back.system == text_only.system and back.blocks == text_only.blocks
    assert back.max_output_tokens == 99 and back.cache_marks == [] and back.model == "m"
    images = from_chat_params(to_chat_params(request(), model="m", max_tokens=9)).blocks
    assert images[2] == {"type": "image", "source": PNG}
    assert images[4] == {"type": "document", "source": PDF}


def test_an_empty_context_or_an_unknown_part_is_refused() -> None:
    with pytest.raises(ModelRequestError, match="empty"):
        to_chat_params(request(blocks=[]), model="m", max_tokens=1)
    with pytest.raises(ModelRequestError, match="audio"):
        to_chat_params(request(blocks=[{"type": "audio"}]), model="m", max_tokens=1)
    url = {"type": "url", "url": "https://example.com/a.png"}
    with pytest.raises(ModelRequestError, match="inline"):
        to_chat_params(request(blocks=[{"type": "image", "source": url}]), model="m", max_tokens=1)
