"""Where a model server stops a reply, through both APIs and their official clients: at
``max_tokens`` (``stop_reason`` ``max_tokens``) and before a configured stop sequence
(``stop_sequence``; its text is never sent, even split across chunks), with the stop
reason on the call's ``Usage``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actline.llm import AnthropicModel, LLMSettings, OpenAIChatModel, ReplayModel
from actline.llm.config import ModelSpec, register_models
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.fake_anthropic.limits import ReplyLimit
from actline.llm.fake_openai import FakeOpenAIServer
from actline.llm.protocol import complete
from actline.messages import GenerateRequest

MODEL = "stopper"
STOP = "<|im_end|>"
REPLY = "<channel:thinking>short</channel:thinking>" + STOP + "\nuser: and now I ramble on"


@pytest.fixture(autouse=True)
def stopper() -> Iterator[None]:
    register_models(
        [ModelSpec(MODEL, 8192, 0, 0.0, 0.0, 512, cache="automatic", stop_sequences=(STOP,))]
    )
    yield
    register_models(())


def request(max_tokens: int = 256) -> GenerateRequest:
    return GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        system="You answer.",
        blocks=[{"type": "text", "text": "Say something."}],
        max_output_tokens=max_tokens,
    )


def test_a_stop_sequence_split_across_chunks_is_held_back_and_cut() -> None:
    limit = ReplyLimit(None, (STOP,))
    sent = [limit.feed(c) for c in ("abc<|im", "_e", "nd|>tail")]
    assert "".join(sent) == "abc" and limit.cut == "stop_sequence" and limit.matched == STOP
    assert limit.feed("more") == "" and limit.finish() == ""


def test_text_that_only_looked_like_a_stop_sequence_is_sent_at_the_end() -> None:
    limit = ReplyLimit(None, (STOP,))
    assert limit.feed("a <|im") == "a " and limit.finish() == "<|im"
    assert limit.cut is None


def test_max_tokens_cuts_and_says_so() -> None:
    limit = ReplyLimit(5, ())
    text = limit.feed("word " * 50)
    assert 0 < len(text) < 40 and limit.cut == "max_tokens"


async def test_the_messages_api_stops_at_a_stop_sequence_and_says_which() -> None:
    async with FakeAnthropicServer(ReplayModel.of([REPLY], chunk_chars=3)) as srv:
        model = AnthropicModel(LLMSettings(model=MODEL, base_url=srv.base_url, max_retries=0))
        try:
            result = await complete(model, request())
        finally:
            await model.aclose()
    assert srv.requests[-1].body["stop_sequences"] == [STOP]
    assert result.text == "<channel:thinking>short</channel:thinking>"
    assert result.usage.stop_reason == "stop_sequence"


async def test_chat_completions_stop_at_a_stop_sequence() -> None:
    async with FakeOpenAIServer(ReplayModel.of([REPLY], chunk_chars=3)) as srv:
        settings = LLMSettings(model=MODEL, api="openai", base_url=srv.base_url, max_retries=0)
        model = OpenAIChatModel(settings)
        try:
            result = await complete(model, request())
        finally:
            await model.aclose()
    assert srv.requests[-1].body["stop"] == [STOP]
    assert result.text == "<channel:thinking>short</channel:thinking>"
    assert result.usage.stop_reason == "end_turn"  # the API does not tell a stop sequence apart


async def test_the_messages_api_cuts_at_max_tokens_and_says_so() -> None:
    long = " ".join(["word"] * 300)
    async with FakeAnthropicServer(ReplayModel.of([long], chunk_chars=16)) as srv:
        model = AnthropicModel(LLMSettings(model=MODEL, base_url=srv.base_url, max_retries=0))
        try:
            result = await complete(model, request(max_tokens=10))
        finally:
            await model.aclose()
    assert long.startswith(result.text) and 0 < len(result.text) < 60
    assert result.usage.stop_reason == "max_tokens" and result.usage.output_tokens == 10
