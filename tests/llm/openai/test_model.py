"""OpenAIChatModel through the real openai client against the local Chat Completions server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from actline.llm import OpenAIChatModel
from actline.llm.config import LLMSettings
from actline.llm.errors import (
    ContextWindowExceeded,
    ModelConfigError,
    ModelRequestError,
    ModelStreamError,
    ModelUnavailable,
)
from actline.llm.fake_openai import FakeOpenAIServer
from actline.llm.openai.model import NO_KEY, chat_context_error, usage_from
from actline.llm.pricing import price
from actline.llm.prompt import DECISION_PROTOCOL
from actline.llm.protocol import complete
from actline.llm.replay import ReplayModel
from actline.messages import GenerateRequest, Usage
from actline.messages.base import TOKEN_FIELDS
from tests.timeline.builders import words

MODEL = "gpt-4o-mini"
REPLY = (
    "<channel:thinking>ok</channel:thinking><channel:answer>Hello from the model.</channel:answer>"
)
CACHE_FIELDS = ["cache_read_tokens", "cache_write_1h_tokens", "cache_write_5m_tokens"]


def request(n: int = 8, **changes: object) -> GenerateRequest:
    blocks = [{"type": "text", "text": f"block {i}: " + words(40, f"w{i}")} for i in range(n)]
    base = GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        system=DECISION_PROTOCOL,
        blocks=blocks,
        cache_marks=[2, 5],
    )
    return base.model_copy(update=changes)


class Sleeps:
    """Records backoff delays instead of sleeping them."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def model_for(
    srv: FakeOpenAIServer, *, retries: int = 0, sleep: Sleeps | None = None
) -> OpenAIChatModel:
    settings = LLMSettings(
        model=MODEL,
        base_url=srv.base_url,
        max_retries=retries,
        backoff_base=0.5,
        backoff_max=4.0,
    )
    return OpenAIChatModel(settings, sleep=sleep or Sleeps(), env={})


def policy(*outputs: str, **kwargs: object) -> ReplayModel:
    return ReplayModel.of(list(outputs or [REPLY] * 10), chunk_chars=8, **kwargs)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(policy()) as srv:
        yield srv


async def test_text_streams_in_order_then_one_usage_naming_the_cache_fields_unknown(
    server: FakeOpenAIServer,
) -> None:
    model = model_for(server)
    try:
        chunks = [c async for c in model.stream(request())]
    finally:
        await model.aclose()
    texts = [c for c in chunks if isinstance(c, str)]
    assert len(texts) > 3 and "".join(texts) == REPLY
    assert [isinstance(c, Usage) for c in chunks].count(True) == 1
    usage = chunks[-1]
    assert isinstance(usage, Usage)
    reported = server.requests[-1].usage
    assert reported is not None
    assert usage.input_tokens == reported.input_tokens > 0
    assert usage.output_tokens == reported.output_tokens > 0
    assert usage.cache_read_tokens == 0 and usage.unknown == CACHE_FIELDS
    assert usage.model == MODEL and usage.request_id == server.requests[-1].request_id
    assert usage.stop_reason == "end_turn" and model.attempts == 1
    assert price(usage).estimated


async def test_cached_prompt_tokens_are_read_from_the_server_when_it_reports_them() -> None:
    async with FakeOpenAIServer(policy(), report_cached=True) as srv:
        model = model_for(srv)
        try:
            first = (await complete(model, request())).usage
            second = (await complete(model, request(n=9))).usage  # the same prefix, one more
        finally:
            await model.aclose()
    assert first.cache_read_tokens == 0  # nothing cached before the first request
    assert first.unknown == ["cache_write_1h_tokens", "cache_write_5m_tokens"]
    assert second.cache_read_tokens > first.input_tokens // 2
    record = srv.requests[-1]
    assert record.usage is not None
    assert second.total_input_tokens == record.usage.total_input_tokens
    assert second.input_tokens == record.usage.total_input_tokens - record.cached_tokens > 0
    assert second.unknown == ["cache_write_1h_tokens", "cache_write_5m_tokens"]


async def test_a_rate_limit_is_retried_after_the_time_the_server_asks(
    server: FakeOpenAIServer,
) -> None:
    sleeps = Sleeps()
    model = model_for(server, retries=3, sleep=sleeps)
    server.fail_next("rate_limit")
    server.fail_next("server_error")
    try:
        result = await complete(model, request())
    finally:
        await model.aclose()
    assert result.text == REPLY and model.attempts == 3
    assert [r.status for r in server.requests] == [429, 500, 200]
    assert len(sleeps.delays) == 2
    assert sleeps.delays[0] == 1.0  # retry-after: 1 beats the 0.25-0.5 s backoff
    assert 0.5 <= sleeps.delays[1] <= 1.0


async def test_server_errors_until_the_budget_is_spent_raise_model_unavailable(
    server: FakeOpenAIServer,
) -> None:
    server.fail_next("server_error", times=3)
    model = model_for(server, retries=2)
    with pytest.raises(ModelUnavailable) as caught:
        await complete(model, request())
    await model.aclose()
    assert caught.value.status == 500 and caught.value.attempts == 3
    assert len(server.requests) == 3


async def test_a_context_length_error_is_typed_with_its_numbers_and_not_retried(
    server: FakeOpenAIServer,
) -> None:
    server.fail_next("context_length")
    model = model_for(server, retries=3)
    with pytest.raises(ContextWindowExceeded) as caught:
        await complete(model, request())
    await model.aclose()
    assert len(server.requests) == 1
    assert caught.value.tokens and caught.value.limit and caught.value.tokens > caught.value.limit


async def test_a_prompt_over_the_servers_window_is_a_context_window_error() -> None:
    async with FakeOpenAIServer(policy(), context_window=100) as srv:
        model = model_for(srv)
        with pytest.raises(ContextWindowExceeded) as caught:
            await complete(model, request())
        await model.aclose()
    assert caught.value.limit == 100 and (caught.value.tokens or 0) > 100
    assert srv.requests[0].error_code == "context_length_exceeded"


def test_context_length_messages_of_openai_and_llama_cpp_are_recognised() -> None:
    openai = chat_context_error(
        "context_length_exceeded",
        "invalid_request_error",
        "This model's maximum context length is 8,192 tokens. However, your messages "
        "resulted in 9,000 tokens. Please reduce the length of the messages.",
    )
    assert openai is not None and (openai.tokens, openai.limit) == (9000, 8192)
    llama = chat_context_error(
        "", "exceed_context_size_error", "the request exceeds the available context size"
    )
    assert isinstance(llama, ContextWindowExceeded)
    assert chat_context_error("invalid_value", "invalid_request_error", "bad role") is None


async def test_a_stream_dropped_after_text_raises_a_stream_error_without_retrying(
    server: FakeOpenAIServer,
) -> None:
    server.fail_next("dropped")
    model = model_for(server, retries=3)
    with pytest.raises(ModelStreamError) as caught:
        await complete(model, request())
    await model.aclose()
    assert caught.value.partial_chars > 0 and len(server.requests) == 1
    assert server.requests[0].finish_reason is None


async def test_a_completion_cut_at_max_tokens_ends_with_finish_reason_length() -> None:
    long = " ".join(["word"] * 200)
    async with FakeOpenAIServer(policy(long)) as srv:
        model = model_for(srv)
        try:
            result = await complete(model, request(max_output_tokens=10))
        finally:
            await model.aclose()
    assert srv.requests[-1].body["max_tokens"] == 10
    assert result.usage.stop_reason == "max_tokens" and srv.requests[-1].finish_reason == "length"
    assert long.startswith(result.text) and 30 <= len(result.text) <= 40
    assert result.usage.output_tokens == 10


async def test_an_empty_completion_yields_only_its_usage() -> None:
    async with FakeOpenAIServer(policy("")) as srv:
        model = model_for(srv)
        try:
            chunks = [c async for c in model.stream(request())]
        finally:
            await model.aclose()
    assert len(chunks) == 1 and isinstance(chunks[0], Usage)
    assert chunks[0].output_tokens == 0 and chunks[0].input_tokens > 0
    assert chunks[0].stop_reason == "end_turn"


async def test_closing_the_stream_mid_way_closes_the_connection() -> None:
    slow = ReplayModel.of(["x" * 400], chunk_chars=1, delay=0.005)
    async with FakeOpenAIServer(slow) as srv:
        model = model_for(srv)
        stream = model.stream(request())
        first = await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        await asyncio.wait_for(srv.disconnected.wait(), 10)
        await model.aclose()
    assert first == "x" and srv.disconnects == 1
    assert srv.requests[-1].disconnected


async def test_cancelling_the_consuming_task_closes_the_connection_too() -> None:
    slow = ReplayModel.of(["y" * 400], chunk_chars=1, delay=0.005)
    async with FakeOpenAIServer(slow) as srv:
        model = model_for(srv)
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in model.stream(request()):
                started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(srv.disconnected.wait(), 10)
        await model.aclose()
    assert srv.disconnects == 1


async def test_a_request_the_api_refuses_is_a_request_error_and_not_retried(
    server: FakeOpenAIServer,
) -> None:
    model = model_for(server, retries=3)
    with pytest.raises(ModelRequestError, match="max_tokens") as caught:
        await complete(model, request(max_output_tokens=-5))
    await model.aclose()
    assert caught.value.status == 400 and caught.value.error_type == "invalid_request_error"
    assert not isinstance(caught.value, ContextWindowExceeded)
    assert len(server.requests) == 1


async def test_a_local_server_gets_a_placeholder_key_and_a_configured_key_is_sent(
    server: FakeOpenAIServer,
) -> None:
    local = model_for(server)
    keyed = OpenAIChatModel(
        LLMSettings(model=MODEL, base_url=server.base_url, max_retries=0),
        env={"OPENAI_API_KEY": "sk-env"},
    )
    try:
        await complete(local, request())
        await complete(keyed, request())
    finally:
        await local.aclose()
        await keyed.aclose()
    auth = [r.headers["authorization"] for r in server.requests]
    assert auth == [f"Bearer {NO_KEY}", "Bearer sk-env"]


def test_without_a_key_or_a_base_url_the_error_names_the_fix() -> None:
    with pytest.raises(ModelConfigError, match=r"OPENAI_API_KEY.*local server"):
        OpenAIChatModel(LLMSettings(model=MODEL), env={})


def test_a_stream_without_a_usage_chunk_has_every_token_field_unknown() -> None:
    usage = usage_from(None, model=MODEL, request_id="r1")
    assert usage.unknown == sorted(TOKEN_FIELDS) and usage.total_input_tokens == 0
    assert (usage + Usage(input_tokens=3)).unknown == sorted(TOKEN_FIELDS)


async def test_a_refused_key_is_a_request_error_and_not_retried(server: FakeOpenAIServer) -> None:
    import openai

    unkeyed = openai.AsyncOpenAI(
        api_key="sk-x",
        base_url=server.base_url,
        max_retries=0,
        default_headers={"Authorization": "Basic c2steA=="},  # no bearer key: refused
    )
    settings = LLMSettings(model=MODEL, base_url=server.base_url, max_retries=3)
    model = OpenAIChatModel(settings, client=unkeyed, sleep=Sleeps(), env={})
    with pytest.raises(ModelRequestError) as caught:
        await complete(model, request())
    await unkeyed.close()
    assert caught.value.status == 401 and len(server.requests) == 1


def test_make_model_builds_a_chat_completions_model_for_the_openai_api() -> None:
    from actline.llm import make_model, writes_summaries

    settings = LLMSettings(model=MODEL, api="openai", base_url="http://127.0.0.1:9/v1")
    model = make_model(settings)
    assert isinstance(model, OpenAIChatModel) and model.name == MODEL
    # a model the table does not know, served by a real server: it writes the summaries
    unknown = make_model(replace(settings, model="my-local-model"))
    assert writes_summaries(unknown)
    assert not writes_summaries(ReplayModel([]))
