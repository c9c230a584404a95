"""OpenAIChatModel: Chat Completions through the official ``openai`` client, streaming.

Speaks to OpenAI or to anything that serves ``POST /v1/chat/completions`` (llama.cpp,
vLLM, a gateway): ``settings.base_url`` is the API root including ``/v1``. The request
is ``wire.to_chat_params``; the stream asks for its usage chunk. Retries follow the same
rules as ``actline.llm.anthropic``: the client runs with ``max_retries=0`` and this model
retries 429, 5xx and connection errors with exponential backoff and jitter, honouring
``retry-after``, until ``settings.max_retries`` is spent (then ``ModelUnavailable``). A
prompt longer than the window raises ``ContextWindowExceeded``; other 4xx raise
``ModelRequestError``. A failure after text was delivered, a stream that drops or ends
before its ``finish_reason``, raises ``ModelStreamError`` instead of retrying.

Usage: Chat Completions reports prompt and completion tokens and, on some servers,
``prompt_tokens_details.cached_tokens``. Cache writes are never reported, so they are
named in ``Usage.unknown``, as cache reads are when ``cached_tokens`` is absent; a stream
that ended without a usage chunk has every field unknown.

Cancellation: closing the iterator or cancelling its task exits the client's stream
context, which closes the HTTP response before the call returns.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import random
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from actline.messages import GenerateRequest, Usage
from actline.messages.base import TOKEN_FIELDS

from ..anthropic import context_window_error
from ..config import LLMSettings
from ..errors import (
    ContextWindowExceeded,
    ModelConfigError,
    ModelError,
    ModelRequestError,
)
from ..protocol import Chunk
from ..retry import Retry, Retrying, retry_after
from .wire import to_chat_params

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger("actline.llm.openai")

NO_KEY = "sk-no-key-required"
"""The key sent to a local server when none is configured (the client requires one)."""
CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_OPENAI_WINDOW = re.compile(
    r"maximum context length is (\d[\d,]*) tokens.*?(?:resulted in|requested) (\d[\d,]*) tokens",
    re.IGNORECASE | re.DOTALL,
)


def chat_context_error(code: str, kind: str, detail: str) -> ContextWindowExceeded | None:
    """The typed error when a 400 says the prompt does not fit (OpenAI's
    ``context_length_exceeded``, llama.cpp's ``exceed_context_size_error``, or the words)."""
    found = _OPENAI_WINDOW.search(detail)
    if found is not None:
        limit, tokens = (int(g.replace(",", "")) for g in found.groups())
        return ContextWindowExceeded(detail, tokens, limit)
    typed = context_window_error(detail)
    if typed is not None:
        return typed
    if code in CONTEXT_CODES or kind in CONTEXT_CODES:
        return ContextWindowExceeded(detail)
    return None


STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
    "tool_calls": "tool_use",
}
"""A Chat Completions ``finish_reason`` -> the stop reason ``Usage`` names (the Messages
API's words; ``stop`` is also what a matched stop sequence gives)."""


def usage_from(raw: Any, *, model: str, request_id: str) -> Usage:
    """Our ``Usage`` from a Chat Completions usage object; None gives all-unknown usage."""
    if raw is None:
        return Usage(model=model, request_id=request_id, unknown=sorted(TOKEN_FIELDS))
    prompt = int(getattr(raw, "prompt_tokens", 0) or 0)
    details = getattr(raw, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    unknown = ["cache_write_1h_tokens", "cache_write_5m_tokens"]
    if cached is None:
        unknown.insert(0, "cache_read_tokens")
    read = min(prompt, int(cached or 0))
    return Usage(
        input_tokens=prompt - read,
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
        cache_read_tokens=read,
        model=model,
        request_id=request_id,
        unknown=unknown,
    )


def _transport_errors() -> tuple[type[Exception], ...]:
    """What the client's HTTP library raises when a connection breaks mid-body (the
    client wraps errors of the request, not of reading a stream)."""
    found: list[type[Exception]] = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(found)


class OpenAIChatModel(Retrying):
    """A ``Model`` backed by the Chat Completions API (or anything that speaks it)."""

    _client: AsyncOpenAI | None

    def __init__(
        self,
        settings: LLMSettings,
        *,
        client: AsyncOpenAI | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        environ = os.environ if env is None else env
        key = settings.api_key or environ.get("OPENAI_API_KEY") or None
        if client is None and key is None:
            if not settings.base_url:
                raise ModelConfigError(
                    "OPENAI_API_KEY",
                    f"model {settings.model!r} needs an API key: export OPENAI_API_KEY, "
                    "or give the base URL of a local server, or use the offline model "
                    "'extractive'",
                )
            key = NO_KEY
        self.settings = settings
        self.name = settings.model
        self.spec = settings.spec
        self._key = key
        self._client = client
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.attempts = 0
        """Attempts made by the last call (1 when the first one succeeded)."""

    @property
    def client(self) -> AsyncOpenAI:
        if self._client is None:
            from openai import AsyncOpenAI  # lazy, as the anthropic client is

            self._client = AsyncOpenAI(
                api_key=self._key,
                base_url=self.settings.base_url,
                max_retries=0,
                timeout=self.settings.timeout,
            )
        return self._client

    def params(self, request: GenerateRequest) -> dict[str, Any]:
        """The Chat Completions keyword arguments for ``request`` (byte-stable)."""
        s = self.settings
        return to_chat_params(
            request,
            model=request.model or self.name,
            max_tokens=self.output_limit(request),
            temperature=s.temperature,
            stop=self.spec.stop_sequences,
        )

    async def _attempt(
        self, params: dict[str, Any], delivered: list[int]
    ) -> AsyncGenerator[Chunk, None]:
        import openai

        started = time.perf_counter()
        model, request_id = params["model"], ""
        raw_usage: Any = None
        finish: str | None = None
        try:
            stream = await self.client.chat.completions.create(**params)
            async with stream:
                request_id = stream.response.headers.get("x-request-id", "")
                async for chunk in stream:
                    request_id = request_id or chunk.id
                    model = chunk.model or model
                    if chunk.usage is not None:
                        raw_usage = chunk.usage
                    for choice in chunk.choices:
                        text = choice.delta.content if choice.delta is not None else None
                        if text:
                            delivered[0] += len(text)
                            yield text
                        finish = choice.finish_reason or finish
        except openai.APIStatusError as exc:
            raise self._classify(exc) from None
        except openai.APIConnectionError as exc:
            raise Retry(None, str(exc), None) from None
        except openai.APIError as exc:  # an error event inside the stream
            raise Retry(None, f"{exc.type or 'error'}: {exc.message}", None) from None
        except _transport_errors() as exc:
            raise Retry(None, f"the stream broke: {exc}", None) from None
        if finish is None:
            raise Retry(None, "the stream ended before its finish_reason", None)
        usage = usage_from(raw_usage, model=model, request_id=request_id).model_copy(
            update={"stop_reason": STOP_REASONS.get(finish, finish)}
        )
        log.info(
            "model %s request %s: in=%d read=%d out=%d finish=%s unknown=%s in %.0f ms",
            usage.model,
            request_id,
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.output_tokens,
            finish,
            ",".join(usage.unknown),
            (time.perf_counter() - started) * 1000,
        )
        yield usage

    def _classify(self, exc: Any) -> ModelError | Retry:
        status = int(getattr(exc, "status_code", 0) or 0)
        body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
        kind = str(getattr(exc, "type", None) or "")
        code = str(getattr(exc, "code", None) or "")
        detail = str(body.get("message") or getattr(exc, "message", exc))
        if status == 429 or status >= 500:
            return Retry(status, f"{kind or code or 'error'}: {detail}", retry_after(exc.response))
        if status in (400, 413):
            too_long = chat_context_error(code, kind, detail)
            if too_long is not None:
                return too_long
        return ModelRequestError(status, kind or code or "error", detail)
