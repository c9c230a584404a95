"""AnthropicModel: the Messages API through the official client, streaming, with prompt caching.

The rendered context becomes a request whose system prompt and timeline marks
carry ``cache_control`` (``actline.llm.anthropic.wire``), unless the model's ``cache`` is not
``anthropic`` (a server that caches prefixes itself, or none): then no marks are sent.
The client is created lazily (importing ``anthropic`` takes over a second) with
``max_retries=0``: retries are ours, with exponential backoff and jitter on 429, 529,
5xx, mid-stream overload errors and connection errors, honouring ``retry-after``; when
the budget is spent the call raises ``ModelUnavailable``. A prompt longer than the window raises
``ContextWindowExceeded`` (``actline.llm.retry.stream_with_compaction`` compacts and
retries once). A failure after text was delivered raises ``ModelStreamError``
instead of retrying, so a consumer never sees text twice.

Cancellation: closing the iterator or cancelling its task exits the client's
stream context, which closes the HTTP response before the call returns.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from actline.messages import GenerateRequest, Usage

from ..config import LLMSettings
from ..errors import (
    ContextWindowExceeded,
    ModelConfigError,
    ModelError,
    ModelRequestError,
)
from ..protocol import Chunk
from ..retry import Retry, Retrying, retry_after
from .wire import to_messages_params

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

log = logging.getLogger("actline.llm.anthropic")

RETRYABLE_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
_TOO_LONG = re.compile(
    r"prompt is too long|context (?:window|length)|too many (?:input )?tokens|"
    r"exceeds? the (?:model's )?(?:maximum|context)",
    re.IGNORECASE,
)
NO_KEY = "no-key"
"""The key sent to a server at a base URL when none is set (local servers check none)."""
_TOKENS = re.compile(r"(\d[\d,]*)\s*tokens?\s*>\s*(\d[\d,]*)")


def context_window_error(detail: str) -> ContextWindowExceeded | None:
    """The typed error when ``detail`` is the API's "prompt is too long" message."""
    if not _TOO_LONG.search(detail):
        return None
    found = _TOKENS.search(detail)
    if found is None:
        return ContextWindowExceeded(detail)
    tokens, limit = (int(g.replace(",", "")) for g in found.groups())
    return ContextWindowExceeded(detail, tokens, limit)


def usage_from(raw: Any, *, model: str, request_id: str, ttl: str = "5m") -> Usage:
    """Our ``Usage`` from the API's usage object (missing cache fields count as 0)."""
    read = getattr(raw, "cache_read_input_tokens", None) or 0
    created = getattr(raw, "cache_creation_input_tokens", None) or 0
    split = getattr(raw, "cache_creation", None)
    if split is not None:
        w5 = getattr(split, "ephemeral_5m_input_tokens", 0) or 0
        w1 = getattr(split, "ephemeral_1h_input_tokens", 0) or 0
    else:
        w5, w1 = (created, 0) if ttl == "5m" else (0, created)
    return Usage(
        input_tokens=getattr(raw, "input_tokens", 0) or 0,
        output_tokens=getattr(raw, "output_tokens", 0) or 0,
        cache_read_tokens=read,
        cache_write_5m_tokens=w5,
        cache_write_1h_tokens=w1,
        model=model,
        request_id=request_id,
    )


def _events(types: list[str]) -> str:
    """What a stream held, for an error: its event count and the last few types."""
    return f"{len(types)} events, last: {', '.join(types[-3:]) or 'none'}"


class AnthropicModel(Retrying):
    """A ``Model`` backed by the Messages API (or anything that speaks it)."""

    _client: AsyncAnthropic | None

    def __init__(
        self,
        settings: LLMSettings,
        *,
        client: AsyncAnthropic | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if client is None and not settings.api_key and not settings.base_url:
            raise ModelConfigError(
                "ANTHROPIC_API_KEY",
                f"model {settings.model!r} needs an API key: export ANTHROPIC_API_KEY "
                "(and ANTHROPIC_BASE_URL for a gateway), or use the offline model 'extractive'",
            )
        self.settings = settings
        self.name = settings.model
        self.spec = settings.spec
        self._client = client
        self._sleep = sleep
        self._rng = rng or random.Random()
        self.attempts = 0
        """Attempts made by the last call (1 when the first one succeeded)."""

    @property
    def client(self) -> AsyncAnthropic:
        if self._client is None:
            from anthropic import AsyncAnthropic  # lazy: the import costs over a second

            self._client = AsyncAnthropic(
                # a server at a base URL may check no key; the client insists on one
                api_key=self.settings.api_key or NO_KEY,
                base_url=self.settings.base_url,
                max_retries=0,
                timeout=self.settings.timeout,
            )
        return self._client

    def params(self, request: GenerateRequest) -> dict[str, Any]:
        """The Messages API keyword arguments for ``request`` (byte-stable)."""
        s = self.settings
        return to_messages_params(
            request,
            model=request.model or self.name,
            max_tokens=self.output_limit(request),
            cache_ttl=s.cache_ttl,
            system_cache_ttl=s.system_cache_ttl,
            temperature=s.temperature,
            cache_system=s.cache_system,
            marks=self.spec.cache == "anthropic",
            stop=self.spec.stop_sequences,
        )

    async def _attempt(
        self, params: dict[str, Any], delivered: list[int]
    ) -> AsyncGenerator[Chunk, None]:
        import anthropic

        started = time.perf_counter()
        seen: list[str] = []
        try:
            async with self.client.messages.stream(**params) as stream:
                async for event in stream:
                    seen.append(event.type)
                    if event.type == "text" and event.text:
                        delivered[0] += len(event.text)
                        yield event.text
                if "message_start" not in seen or "message_stop" not in seen:
                    # the client has no message to give: a server that ended the stream early
                    raise Retry(
                        None, f"the stream ended without its message ({_events(seen)})", None
                    )
                final = await stream.get_final_message()
                request_id = stream.request_id or final.id
        except anthropic.APIStatusError as exc:
            raise self._classify(exc) from None
        except anthropic.APIConnectionError as exc:
            raise Retry(None, str(exc), None) from None
        usage = usage_from(
            final.usage,
            model=final.model or params["model"],
            request_id=request_id,
            ttl=self.settings.cache_ttl,
        )
        usage = usage.model_copy(update={"stop_reason": final.stop_reason or ""})
        log.info(
            "model %s request %s: in=%d read=%d write=%d out=%d in %.0f ms",
            usage.model,
            request_id,
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_5m_tokens + usage.cache_write_1h_tokens,
            usage.output_tokens,
            (time.perf_counter() - started) * 1000,
        )
        yield usage

    def _classify(self, exc: Any) -> ModelError | Retry:
        status = int(getattr(exc, "status_code", 0) or 0)
        kind = str(getattr(exc, "type", None) or "")
        detail = str(getattr(exc, "api_message", None) or getattr(exc, "message", exc))
        if status in (429, 529) or status >= 500 or kind in RETRYABLE_TYPES:
            return Retry(
                status if status >= 400 else 529,
                f"{kind or 'error'}: {detail}",
                retry_after(exc.response),
            )
        too_long = context_window_error(detail)
        if too_long is not None and status in (400, 413):
            return too_long
        return ModelRequestError(status, kind or "error", detail)
