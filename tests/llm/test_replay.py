"""ReplayModel: scripted outputs in order, clear failures, cancellation."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from actline.llm import errors
from actline.llm.errors import ModelConfigError, ScriptExhausted
from actline.llm.protocol import complete
from actline.llm.replay import ReplayModel, load_script
from actline.messages import GenerateRequest, Usage


def request(text: str = "hello") -> GenerateRequest:
    return GenerateRequest(
        conversation_id="c1", turn_id="t1", system="sys", blocks=[{"type": "text", "text": text}]
    )


async def test_outputs_are_played_in_order_in_small_chunks() -> None:
    model = ReplayModel.of(["first output", "second"], chunk_chars=4)
    chunks = [c async for c in model.stream(request())]
    assert chunks[:-1] == ["firs", "t ou", "tput"]
    assert isinstance(chunks[-1], Usage) and chunks[-1].output_tokens == 3
    assert (await complete(model, request())).text == "second"
    assert model.calls == 2 and model.remaining == 0
    assert model.requests[0].blocks[0]["text"] == "hello"


async def test_running_past_the_script_names_the_call_and_the_length() -> None:
    model = ReplayModel.of(["only"], source="s.jsonl")
    await complete(model, request())
    with pytest.raises(ScriptExhausted, match=r"s\.jsonl has 1 output but call 2 was made"):
        await complete(model, request())


async def test_a_jsonl_script_carries_outputs_and_recorded_usage(tmp_path: Path) -> None:
    script = tmp_path / "script.jsonl"
    lines = [
        json.dumps("plain output"),
        "",
        json.dumps({"output": "with usage", "usage": {"input_tokens": 7, "output_tokens": 2}}),
    ]
    script.write_text("\n".join(lines), encoding="utf-8")
    model = ReplayModel.from_file(script)
    assert (await complete(model, request())).text == "plain output"
    second = await complete(model, request())
    assert second.usage.input_tokens == 7 and second.usage.output_tokens == 2


def test_a_bad_script_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    script = tmp_path / "bad.jsonl"
    script.write_text('"ok"\n{"no_output": 1}\n', encoding="utf-8")
    with pytest.raises(ModelConfigError, match=r"bad\.jsonl:2"):
        load_script(script)
    with pytest.raises(ModelConfigError, match="cannot read"):
        load_script(tmp_path / "missing.jsonl")


async def test_closing_the_stream_stops_the_replay() -> None:
    model = ReplayModel.of(["x" * 100], chunk_chars=1, delay=0.001)
    stream = model.stream(request())
    got = [await anext(stream) for _ in range(3)]
    await stream.aclose()  # type: ignore[attr-defined]
    assert got == ["x", "x", "x"]
    with pytest.raises(StopAsyncIteration):
        await anext(stream)


@pytest.mark.parametrize(
    "error",
    [
        errors.ModelUnavailable(529, 5, "overloaded_error: Overloaded"),
        errors.ModelRequestError(400, "invalid_request_error", "bad"),
        errors.ContextWindowExceeded("prompt is too long: 9 tokens > 8 maximum", 9, 8),
        errors.ModelStreamError("overloaded", 120),
        errors.ModelConfigError("ANTHROPIC_API_KEY", "set it"),
        errors.ScriptExhausted("s.jsonl", 3, 2),
    ],
)
def test_every_model_error_pickles_with_its_fields(error: errors.ModelError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)
