"""The local Messages API server, driven by the real anthropic client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message

from actline.llm.fake_anthropic import FakeAnthropicServer, validate_body
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest, Usage

ROOT = Path(__file__).resolve().parents[2]
MODEL = "claude-sonnet-4-6"  # claude-sonnet-4-5 makes the SDK warn it is deprecated
WINDOW = 5000
SYSTEM_1200 = [{"type": "text", "text": "s" * 4800, "cache_control": {"type": "ephemeral"}}]


class ScriptedPolicy:
    """Yields fixed chunks, then a Usage the server must ignore."""

    def __init__(self, chunks: tuple[str, ...] = ("Hello", ", ", "world")) -> None:
        self.chunks = chunks
        self.requests: list[GenerateRequest] = []

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        self.requests.append(request)
        for chunk in self.chunks:
            yield chunk
        yield Usage(input_tokens=999_999, output_tokens=999_999)


class BlockingPolicy:
    """Yields one chunk, then waits forever: only cancellation ends it."""

    def __init__(self) -> None:
        self.finished = False
        self.closed = False

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        try:
            yield "first"
            await asyncio.Event().wait()
            yield "never"
            self.finished = True
        finally:
            self.closed = True


@pytest.fixture
def policy() -> ScriptedPolicy:
    return ScriptedPolicy()


@pytest.fixture
async def server(policy: ScriptedPolicy) -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(policy, context_window=WINDOW) as srv:
        yield srv


@pytest.fixture
async def client(server: FakeAnthropicServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    api = anthropic.AsyncAnthropic(api_key="test", base_url=server.base_url, max_retries=0)
    try:
        yield api
    finally:
        await api.close()


def params(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "What is up?"}],
    }
    return base | overrides


async def test_a_non_streaming_create_returns_the_policy_text_and_usage(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic, policy: ScriptedPolicy
) -> None:
    message = await client.messages.create(**params())
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello, world"
    assert message.stop_reason == "end_turn"
    # "What is up?" is 11 characters = 3 tokens; "Hello, world" is 12 = 3 tokens.
    assert message.usage.input_tokens == 3
    assert message.usage.output_tokens == 3
    assert message.usage.cache_read_input_tokens == 0
    assert policy.requests[0].blocks == [{"type": "text", "text": "What is up?"}]
    record = server.requests[-1]
    assert record.status == 200
    assert record.headers["authorization"] == "Bearer test"
    assert record.body["messages"] == params()["messages"]
    assert record.usage is not None and record.usage.output_tokens == 3


async def test_streaming_assembles_the_text_and_reports_the_cache_fields(
    client: anthropic.AsyncAnthropic,
) -> None:
    async with client.messages.stream(**params(system=SYSTEM_1200)) as stream:
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "Hello, world"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 3
    assert final.usage.cache_creation_input_tokens == 1200
    assert final.usage.cache_read_input_tokens == 0
    assert final.usage.cache_creation is not None
    assert final.usage.cache_creation.ephemeral_5m_input_tokens == 1200
    assert final.usage.input_tokens == 3


async def test_the_event_stream_has_the_api_frames_in_order(server: FakeAnthropicServer) -> None:
    async with (
        httpx2.AsyncClient(base_url=server.base_url) as http,
        http.stream(
            "POST", "/v1/messages", json=params(stream=True), headers={"x-api-key": "k"}
        ) as response,
    ):
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["transfer-encoding"] == "chunked"
        lines = [line async for line in response.aiter_lines()]
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = json.loads(lines[1].removeprefix("data: "))
    assert start["message"]["usage"]["output_tokens"] == 1
    assert set(start["message"]["usage"]["cache_creation"]) == {
        "ephemeral_5m_input_tokens",
        "ephemeral_1h_input_tokens",
    }


async def test_a_second_identical_call_reads_what_the_first_wrote(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    first = await client.messages.create(**params(system=SYSTEM_1200))
    async with client.messages.stream(**params(system=SYSTEM_1200)) as stream:
        second = await stream.get_final_message()
    assert (first.usage.cache_creation_input_tokens, first.usage.cache_read_input_tokens) == (
        1200,
        0,
    )
    assert (second.usage.cache_creation_input_tokens, second.usage.cache_read_input_tokens) == (
        0,
        1200,
    )
    totals = server.usage_totals
    assert (totals.cache_write_5m_tokens, totals.cache_read_tokens) == (1200, 1200)
    assert totals.output_tokens == 6


async def test_the_cache_expires_by_the_injected_clock(policy: ScriptedPolicy) -> None:
    now = [1_800_000_000.0]
    async with FakeAnthropicServer(policy, clock=lambda: now[0]) as srv:
        api = anthropic.AsyncAnthropic(api_key="k", base_url=srv.base_url, max_retries=0)
        reads = []
        for step in (0.0, 299.0, 301.0 + 299.0 + 1):
            now[0] += step
            message = await api.messages.create(**params(system=SYSTEM_1200))
            reads.append(message.usage.cache_read_input_tokens)
        await api.close()
    assert reads == [0, 1200, 0]


async def test_keep_alive_serves_several_calls_on_one_connection(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    for _ in range(2):
        await client.messages.create(**params())
        async with client.messages.stream(**params()) as stream:
            await stream.get_final_message()
    assert server.connections == 1
    assert [r.stream for r in server.requests] == [False, True, False, True]


async def test_a_chunked_request_body_is_read(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    payload = json.dumps(params()).encode()

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), 7):
            yield payload[i : i + 7]

    message = await client.post(
        "/v1/messages?beta=true",
        cast_to=Message,
        content=pieces(),
        options={"headers": {"Content-Type": "application/json"}},
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello, world"
    assert server.requests[-1].headers["transfer-encoding"] == "chunked"


def marked(text: str = "m") -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


INVALID: list[tuple[str, Any, str]] = [
    (
        "five_marks",
        params(system=[marked()], messages=[{"role": "user", "content": [marked()] * 4}]),
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
    ("no_messages", {"model": MODEL, "max_tokens": 10}, "messages: Field required"),
    ("empty_messages", params(messages=[]), "messages: at least one message is required"),
    (
        "empty_string_content",
        params(messages=[{"role": "user", "content": ""}]),
        "messages.0: all messages must have non-empty content",
    ),
    (
        "empty_list_content",
        params(messages=[{"role": "user", "content": []}]),
        "messages.0: all messages must have non-empty content",
    ),
    (
        "empty_text_block",
        params(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]),
        "messages: text content blocks must be non-empty",
    ),
    (
        "bad_role",
        params(messages=[{"role": "system", "content": "hi"}]),
        "messages.0.role: Input should be 'user' or 'assistant'",
    ),
    (
        "assistant_first",
        params(messages=[{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}]),
        'messages: first message must use the "user" role',
    ),
    (
        "no_max_tokens",
        {"model": MODEL, "messages": params()["messages"]},
        "max_tokens: Field required",
    ),
    (
        "zero_max_tokens",
        params(max_tokens=0),
        "max_tokens: Input should be greater than or equal to 1",
    ),
    ("no_model", {"max_tokens": 5, "messages": params()["messages"]}, "model: Field required"),
    (
        "bad_ttl",
        params(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": "q",
                            "cache_control": {"type": "ephemeral", "ttl": "2h"},
                        }
                    ],
                }
            ]
        ),
        "messages.0.content.0.cache_control.ttl: Input should be '5m' or '1h'",
    ),
    (
        "too_long",
        params(messages=[{"role": "user", "content": "x" * 4 * 6000}]),
        f"prompt is too long: 6000 tokens > {WINDOW} maximum",
    ),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
async def test_an_invalid_request_is_refused_with_the_api_message(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic, body: Any, message: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        await client.post("/v1/messages", cast_to=Message, body=body)
    assert caught.value.type == "invalid_request_error"
    assert caught.value.api_message is not None
    assert message in caught.value.api_message
    assert caught.value.request_id == server.requests[-1].request_id
    assert server.requests[-1].status == 400


async def test_a_malformed_json_body_is_refused(client: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="malformed JSON body"):
        await client.post(
            "/v1/messages",
            cast_to=Message,
            content=b'{"model": ',
            options={"headers": {"Content-Type": "application/json"}},
        )


def test_validation_accepts_an_empty_final_assistant_prefill() -> None:
    validate_body(
        params(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}])
    )


async def test_an_unknown_path_is_not_found(client: anthropic.AsyncAnthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        await client.post("/v1/complete", cast_to=Message, body={})
    assert caught.value.type == "not_found_error"


async def test_a_request_without_a_key_is_unauthenticated(server: FakeAnthropicServer) -> None:
    async with httpx2.AsyncClient(base_url=server.base_url) as http:
        missing = await http.post("/v1/messages", json=params())
        with_key = await http.post("/v1/messages", json=params(), headers={"x-api-key": "k"})
    assert missing.status_code == 401
    assert missing.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "x-api-key header is required"},
    }
    assert missing.headers["request-id"].startswith("req_")
    assert with_key.status_code == 200
    assert with_key.headers["request-id"].startswith("req_")


@pytest.mark.parametrize(
    ("kind", "error", "status"),
    [
        ("rate_limit", anthropic.RateLimitError, 429),
        ("overloaded", anthropic.OverloadedError, 529),
        ("api_error", anthropic.InternalServerError, 500),
        ("context_window", anthropic.BadRequestError, 400),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
async def test_an_injected_failure_raises_its_sdk_error_once(
    server: FakeAnthropicServer,
    client: anthropic.AsyncAnthropic,
    kind: Any,
    error: type[anthropic.APIStatusError],
    status: int,
    stream: bool,
) -> None:
    server.fail_next(kind)
    with pytest.raises(error) as caught:
        if stream:
            async with client.messages.stream(**params()) as events:
                await events.get_final_message()
        else:
            await client.messages.create(**params())
    assert caught.value.status_code == status
    if kind == "rate_limit":
        assert caught.value.response.headers["retry-after"] == "0"
    if kind == "context_window":
        assert caught.value.api_message is not None
        assert caught.value.api_message.startswith("prompt is too long: ")
    message = await client.messages.create(**params())
    assert message.content[0].type == "text"


async def test_injected_failures_are_consumed_in_order(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.fail_next("rate_limit", times=2)
    server.fail_next("overloaded")
    raised = []
    for _ in range(3):
        with pytest.raises(anthropic.APIStatusError) as caught:
            await client.messages.create(**params())
        raised.append(type(caught.value))
    assert raised == [anthropic.RateLimitError, anthropic.RateLimitError, anthropic.OverloadedError]
    assert [r.status for r in server.requests] == [429, 429, 529]
    await client.messages.create(**params())


async def test_an_overload_mid_stream_raises_from_the_iteration(
    server: FakeAnthropicServer, client: anthropic.AsyncAnthropic
) -> None:
    server.fail_next("overloaded_midstream")
    received: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        async with client.messages.stream(**params()) as stream:
            async for text in stream.text_stream:
                received.append(text)
    assert received == ["Hello", ", "]
    assert caught.value.type == "overloaded_error"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert server.requests[-1].error_type == "overloaded_error"
    # The SDK closes the connection on the error event; the server saw no disconnect.
    assert server.disconnects == 0
    await client.messages.create(**params())


async def test_a_client_that_leaves_mid_stream_stops_the_policy() -> None:
    policy = BlockingPolicy()
    async with FakeAnthropicServer(policy) as srv:
        api = anthropic.AsyncAnthropic(api_key="k", base_url=srv.base_url, max_retries=0)
        async with api.messages.stream(**params()) as stream:
            async for event in stream:
                if event.type == "text":
                    break
        await asyncio.wait_for(srv.disconnected.wait(), 5)
        await api.close()
        assert policy.closed
        assert not policy.finished
        assert srv.disconnects == 1
        record = srv.requests[-1]
        assert record.disconnected
        assert record.usage is not None and record.usage.output_tokens == 2  # "first"


def test_the_threaded_server_serves_a_sync_client(policy: ScriptedPolicy) -> None:
    with FakeAnthropicServer(policy).run_in_thread() as running:
        api = anthropic.Anthropic(api_key="k", base_url=running.base_url, max_retries=0)
        try:
            message = api.messages.create(**params())
            with api.messages.stream(**params()) as stream:
                text = "".join(stream.text_stream)
        finally:
            api.close()
    assert message.content[0].type == "text"
    assert message.content[0].text == text == "Hello, world"
    assert len(running.server.requests) == 2


@pytest.fixture
def cli_server() -> Iterator[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "actline.llm.fake_anthropic",
            "--port",
            "0",
            "--log-level",
            "WARNING",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        yield line.split()[-1]
    finally:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_command_line_server_answers_with_the_echo_policy(cli_server: str) -> None:
    with httpx2.Client(base_url=cli_server) as http:
        response = http.post("/v1/messages", json=params(), headers={"x-api-key": "k"})
    assert response.status_code == 200
    assert "<channel:answer>" in response.json()["content"][0]["text"]
