"""AnthropicModel through the real anthropic client against the local Messages API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from actline.llm.anthropic import AnthropicModel, context_window_error
from actline.llm.config import LLMSettings
from actline.llm.errors import (
    ContextWindowExceeded,
    ModelConfigError,
    ModelRequestError,
    ModelStreamError,
    ModelUnavailable,
)
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.prompt import DECISION_PROTOCOL
from actline.llm.protocol import complete
from actline.llm.replay import ReplayModel
from actline.llm.retry import stream_with_compaction
from actline.messages import GenerateRequest, Usage
from actline.timeline import Renderer, TimelineConfig
from tests.timeline.builders import Build, words

REPLY = (
    "<channel:thinking>ok</channel:thinking><channel:answer>Hello from the model.</channel:answer>"
)


def request(n: int = 8, marks: tuple[int, ...] = (2, 5, 6)) -> GenerateRequest:
    blocks = [{"type": "text", "text": f"block {i}: " + words(40, f"w{i}")} for i in range(n)]
    return GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        system=DECISION_PROTOCOL,
        blocks=blocks,
        cache_marks=list(marks),
    )


class Sleeps:
    """Records backoff delays instead of sleeping them."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def model_for(
    srv: FakeAnthropicServer, *, retries: int = 0, sleep: Sleeps | None = None
) -> AnthropicModel:
    settings = LLMSettings(
        model="claude-sonnet-4-6",
        api_key="test-key",
        base_url=srv.base_url,
        max_retries=retries,
        backoff_base=0.5,
        backoff_max=4.0,
    )
    return AnthropicModel(settings, sleep=sleep or Sleeps())


@pytest.fixture
async def server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(ReplayModel.of([REPLY] * 10, chunk_chars=8)) as srv:
        yield srv


async def test_text_is_streamed_in_chunks_and_usage_maps_every_cache_field(
    server: FakeAnthropicServer,
) -> None:
    model = model_for(server)
    chunks = [c async for c in model.stream(request())]
    texts = [c for c in chunks if isinstance(c, str)]
    assert len(texts) > 3 and "".join(texts) == REPLY
    usage = chunks[-1]
    assert isinstance(usage, Usage)
    reported = server.requests[-1].usage
    assert reported is not None
    assert usage.input_tokens == reported.input_tokens > 0
    assert usage.cache_write_5m_tokens == reported.cache_write_5m_tokens > 0
    assert usage.output_tokens == reported.output_tokens > 0
    assert usage.model == "claude-sonnet-4-6" and usage.request_id
    again = await complete(model, request())
    assert again.usage.cache_read_tokens == usage.cache_write_5m_tokens
    assert again.usage.cache_write_5m_tokens == 0


async def test_cache_control_goes_on_the_system_prompt_and_exactly_the_three_marks(
    server: FakeAnthropicServer,
) -> None:
    await complete(model_for(server), request(marks=(2, 5, 6)))
    body = server.requests[-1].body
    assert [("cache_control" in b) for b in body["system"]] == [True]
    content = body["messages"][0]["content"]
    assert [i for i, b in enumerate(content) if "cache_control" in b] == [2, 5, 6]
    assert sum("cache_control" in b for b in [*body["system"], *content]) == 4


async def test_an_overloaded_server_is_retried_with_backoff_then_succeeds(
    server: FakeAnthropicServer,
) -> None:
    sleeps = Sleeps()
    model = model_for(server, retries=3, sleep=sleeps)
    server.fail_next("overloaded")
    server.fail_next("rate_limit")
    result = await complete(model, request())
    assert result.text == REPLY and model.attempts == 3
    assert [r.status for r in server.requests] == [529, 429, 200]
    assert len(sleeps.delays) == 2
    assert 0.25 <= sleeps.delays[0] <= 0.5 and 0.5 <= sleeps.delays[1] <= 1.0


async def test_retry_exhaustion_raises_a_typed_error_with_the_last_status(
    server: FakeAnthropicServer,
) -> None:
    server.fail_next("api_error", times=3)
    model = model_for(server, retries=2)
    with pytest.raises(ModelUnavailable) as caught:
        await complete(model, request())
    assert caught.value.status == 500 and caught.value.attempts == 3
    assert "retry later" in str(caught.value)


async def test_a_bad_request_is_not_retried(server: FakeAnthropicServer) -> None:
    model = model_for(server, retries=3)
    bad = request().model_copy(update={"max_output_tokens": 0})
    model.settings = LLMSettings(model="claude-sonnet-4-6", api_key="k", base_url=server.base_url)
    with pytest.raises(ModelRequestError, match="max_tokens"):
        await complete(model, bad.model_copy(update={"max_output_tokens": -5}))
    assert len(server.requests) == 1


async def test_a_failure_after_text_was_delivered_is_not_retried_silently(
    server: FakeAnthropicServer,
) -> None:
    server.fail_next("overloaded_midstream")
    model = model_for(server, retries=3)
    with pytest.raises(ModelStreamError) as caught:
        await complete(model, request())
    assert caught.value.partial_chars > 0 and len(server.requests) == 1


async def test_a_stream_that_ends_without_its_message_is_a_stream_error_not_a_crash(
    server: FakeAnthropicServer,
) -> None:
    """The body ends cleanly after a few deltas, with no message_stop: the client has no
    message to give (it asserts); the model names what it saw instead."""
    server.fail_next("ended_early")
    model = model_for(server, retries=3)
    with pytest.raises(ModelStreamError) as caught:
        await complete(model, request())
    assert caught.value.partial_chars > 0 and len(server.requests) == 1
    assert "the stream ended without its message" in str(caught.value)


async def test_an_empty_stream_that_ends_early_is_retried() -> None:
    async with FakeAnthropicServer(ReplayModel.of(["", "the answer"])) as srv:
        srv.fail_next("ended_early")
        model = model_for(srv, retries=2)
        try:
            result = await complete(model, request())
        finally:
            await model.aclose()
    assert result.text == "the answer" and len(srv.requests) == 2
    assert result.usage.stop_reason == "end_turn"


async def test_a_context_window_error_is_typed_with_its_numbers(
    server: FakeAnthropicServer,
) -> None:
    server.fail_next("context_window")
    with pytest.raises(ContextWindowExceeded) as caught:
        await complete(model_for(server, retries=3), request())
    assert len(server.requests) == 1
    assert caught.value.tokens and caught.value.limit and caught.value.tokens > caught.value.limit
    assert context_window_error("prompt is too long: 210,000 tokens > 200,000 maximum") is not None
    assert context_window_error("max_tokens: must be positive") is None


async def test_a_context_window_error_compacts_the_timeline_and_retries_once(
    server: FakeAnthropicServer,
) -> None:
    b = Build()
    for t in range(1, 7):
        b.turn(f"t{t}", words(60, "question"))
        b.rounds(3, size=120, prefix=f"r{t}-")
        b.completion(words(40, "answer"))
    renderer = Renderer(b.tl, TimelineConfig(max_tokens=60_000))
    renders: list[bool] = []

    async def render(force: bool) -> GenerateRequest:
        renders.append(force)
        result = renderer.render(now=b.at(), system_tokens=1200, force_compaction=force)
        return GenerateRequest(
            conversation_id="c1",
            turn_id="t6",
            system=DECISION_PROTOCOL,
            blocks=result.parts(),
            cache_marks=list(result.marks),
        )

    server.fail_next("context_window")
    model = model_for(server)
    text = "".join([c async for c in stream_with_compaction(model, render) if isinstance(c, str)])
    assert text == REPLY and renders == [False, True]
    first, second = (r.body["messages"][0]["content"] for r in server.requests)
    assert not any("CONVERSATION SUMMARY" in b.get("text", "") for b in first)
    assert any("CONVERSATION SUMMARY" in b.get("text", "") for b in second)
    assert len(second) < len(first)

    server.fail_next("context_window", times=2)
    with pytest.raises(ContextWindowExceeded):
        async for _ in stream_with_compaction(model, render):
            pass
    assert renders[-2:] == [False, True]


async def test_cancelling_mid_stream_closes_the_http_stream() -> None:
    slow = ReplayModel.of(["x" * 400], chunk_chars=1, delay=0.005)
    async with FakeAnthropicServer(slow) as srv:
        stream = model_for(srv).stream(request())
        first = await anext(stream)
        await stream.aclose()  # type: ignore[attr-defined]
        await asyncio.wait_for(srv.disconnected.wait(), 10)
        assert first == "x" and srv.disconnects == 1
        assert srv.requests[-1].disconnected


async def test_cancelling_the_consuming_task_closes_the_http_stream_too() -> None:
    slow = ReplayModel.of(["y" * 400], chunk_chars=1, delay=0.005)
    async with FakeAnthropicServer(slow) as srv:
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in model_for(srv).stream(request()):
                started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(srv.disconnected.wait(), 10)
        assert srv.disconnects == 1


def test_a_claude_model_without_a_key_says_how_to_fix_it() -> None:
    with pytest.raises(ModelConfigError, match=r"ANTHROPIC_API_KEY.*extractive"):
        AnthropicModel(LLMSettings(model="claude-sonnet-4-6"))
