"""The local Chat Completions server, spoken to by the real openai client and by raw HTTP."""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from actline.llm.fake_anthropic import EchoPolicy
from actline.llm.fake_anthropic.policy import ECHO_TEXT
from actline.llm.fake_openai import FakeOpenAIServer, PrefixCache, prompt_text
from actline.llm.protocol import Chunk
from actline.llm.replay import ReplayModel
from actline.messages import GenerateRequest
from actline.timeline.tokens import DEFAULT_COUNTER

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": [{"type": "text", "text": "Hello there."}]},
]


class Seen:
    """A policy that keeps the requests it was given and echoes."""

    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        self.requests.append(request)
        return EchoPolicy().stream(request)


@pytest.fixture
async def server() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
async def client(server: FakeOpenAIServer) -> AsyncIterator[openai.AsyncOpenAI]:
    api = openai.AsyncOpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)
    try:
        yield api
    finally:
        await api.close()


@dataclass(frozen=True)
class Reply:
    status_code: int
    headers: Mapping[str, str]
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def _post(url: str, body: bytes, headers: dict[str, str]) -> Reply:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return Reply(response.status, dict(response.headers), response.read().decode())
    except urllib.error.HTTPError as refused:
        return Reply(refused.code, dict(refused.headers), refused.read().decode())


async def raw(
    server: FakeOpenAIServer, body: Any, *, path: str = "/chat/completions", key: str = "sk-test"
) -> Reply:
    """POST ``body`` with plain HTTP (a thread: the server runs on this loop)."""
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode()
    reply = await asyncio.to_thread(_post, server.base_url + path, data, headers)
    return Reply(reply.status_code, {k.lower(): v for k, v in reply.headers.items()}, reply.text)


async def test_a_stream_is_role_deltas_finish_usage_then_done(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    stream = await client.chat.completions.create(
        model="local",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=500,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == ECHO_TEXT
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "stop" and set(finish[:-1]) == {None}
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == DEFAULT_COUNTER.count(ECHO_TEXT)
    assert last.usage.prompt_tokens == DEFAULT_COUNTER.count(prompt_text({"messages": MESSAGES}))
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert last.usage.prompt_tokens_details is None  # no cache details by default
    assert all(c.usage is None for c in chunks[:-1])


async def test_the_sse_body_ends_with_done_and_has_no_usage_unless_asked(
    server: FakeOpenAIServer,
) -> None:
    reply = await raw(server, {"model": "local", "messages": MESSAGES, "stream": True})
    events = [line for line in reply.text.split("\n\n") if line]
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "data: [DONE]"
    bodies = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all(b["object"] == "chat.completion.chunk" and b["choices"] for b in bodies)
    assert all("usage" not in b for b in bodies)


async def test_a_whole_completion_has_its_message_finish_reason_and_usage(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    reply = await client.chat.completions.create(model="local", messages=MESSAGES)  # type: ignore[arg-type]
    assert reply.object == "chat.completion" and reply.model == "local"
    assert reply.choices[0].message.content == ECHO_TEXT
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert server.requests[-1].status == 200 and not server.requests[-1].stream


async def test_a_reply_is_cut_at_max_tokens_with_finish_reason_length(
    server: FakeOpenAIServer, client: openai.AsyncOpenAI
) -> None:
    reply = await client.chat.completions.create(
        model="local",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_completion_tokens=5,
    )
    text = reply.choices[0].message.content or ""
    assert reply.choices[0].finish_reason == "length" and ECHO_TEXT.startswith(text)
    assert reply.usage is not None and reply.usage.completion_tokens == 5


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (
            {"model": "m", "messages": [{"role": "robot", "content": "hi"}]},
            "messages[0].role",
            "invalid_value",
        ),
        ({"model": "m", "messages": []}, "messages", "empty_array"),
        ({"model": "m"}, "messages", "missing_required_parameter"),
        ({"model": "m", "messages": MESSAGES, "max_tokens": "10"}, "max_tokens", "invalid_type"),
        (
            {"model": "m", "messages": MESSAGES, "max_tokens": 0},
            "max_tokens",
            "integer_below_min_value",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": 7}]},
            "messages[0].content",
            "invalid_type",
        ),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages[0].content[0].type",
            "invalid_value",
        ),
        (
            {"model": "m", "messages": MESSAGES, "stream_options": {"include_usage": True}},
            "stream_options",
            None,
        ),
    ],
)
async def test_a_bad_request_is_refused_with_the_apis_error_shape(
    server: FakeOpenAIServer, body: dict[str, Any], param: str, code: str | None
) -> None:
    reply = await raw(server, body)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)
    assert server.requests[-1].status == 400


async def test_the_openai_client_sees_a_refusal_as_a_bad_request_error(
    client: openai.AsyncOpenAI,
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(
            model="local",
            messages=[{"role": "robot", "content": "hi"}],  # type: ignore[list-item]
        )
    assert caught.value.code == "invalid_value" and caught.value.param == "messages[0].role"


async def test_a_request_without_a_key_or_on_another_path_is_refused(
    server: FakeOpenAIServer,
) -> None:
    unkeyed = await raw(server, {"model": "m", "messages": MESSAGES}, key="")
    elsewhere = await raw(server, {}, path="/completions")
    assert unkeyed.status_code == 401 and unkeyed.json()["error"]["type"] == "invalid_request_error"
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "unknown_url"


async def test_injected_failures_have_the_apis_statuses_and_shapes(
    server: FakeOpenAIServer,
) -> None:
    body = {"model": "m", "messages": MESSAGES}
    server.fail_next("rate_limit")
    server.fail_next("server_error")
    server.fail_next("context_length")
    limited, broken, too_long = [await raw(server, body) for _ in range(3)]
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert broken.status_code == 500 and broken.json()["error"]["type"] == "server_error"
    assert too_long.status_code == 400
    assert too_long.json()["error"]["code"] == "context_length_exceeded"
    assert (await raw(server, body)).status_code == 200  # the queue is spent
    with pytest.raises(ValueError, match="unknown failure kind"):
        server.fail_next("overloaded")  # type: ignore[arg-type]


async def test_a_dropped_stream_ends_without_finish_reason_or_done(
    server: FakeOpenAIServer,
) -> None:
    server.fail_next("dropped")
    with pytest.raises(http.client.IncompleteRead):
        await raw(server, {"model": "m", "messages": MESSAGES, "stream": True})
    assert server.requests[-1].error_code == "dropped"


async def test_the_policy_reads_the_request_as_system_prompt_and_parts() -> None:
    seen = Seen()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    messages = [*MESSAGES[:1], {"role": "user", "content": [MESSAGES[1]["content"][0], image]}]
    async with FakeOpenAIServer(seen) as srv:
        await raw(srv, {"model": "local", "messages": messages, "max_tokens": 77})
    (request,) = seen.requests
    assert request.system == "You are terse." and request.max_output_tokens == 77
    assert request.blocks == [
        {"type": "text", "text": "Hello there."},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
    ]


async def test_cached_tokens_count_the_prefix_shared_with_an_earlier_request() -> None:
    long = " ".join(["context"] * 400)
    policy = ReplayModel.of(["ok"] * 4)
    async with FakeOpenAIServer(policy, report_cached=True) as srv:
        first = [{"role": "system", "content": long}, {"role": "user", "content": "one"}]
        second = [{"role": "system", "content": long}, {"role": "user", "content": "two"}]
        replies = [await raw(srv, {"model": "m", "messages": m}) for m in (first, second, second)]
    usages = [r.json()["usage"] for r in replies]
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usages]
    assert cached[0] == 0
    shared = DEFAULT_COUNTER.count(prompt_text({"messages": first})[: len(long) + 20])
    assert shared - 2 <= cached[1] < usages[1]["prompt_tokens"]
    assert cached[2] == usages[2]["prompt_tokens"] - 1  # one token is always evaluated
    assert [r.cached_tokens for r in srv.requests] == cached


def test_the_prefix_cache_keeps_the_last_slots_prompts() -> None:
    cache = PrefixCache(slots=2)
    for prompt in ("a" * 400, "b" * 400, "c" * 400):
        cache.store(prompt)
    assert cache.cached("a" * 400) == 0  # its slot was taken
    assert cache.cached("b" * 200 + "x" * 200) == 50
    assert cache.cached("") == 0
