"""Retries of a model server's client, and context-window recovery.

``Retrying`` is what the network models share (``AnthropicModel``, ``OpenAIChatModel``):
one call is a loop of attempts; an attempt that fails with ``Retry`` before any text was
delivered is tried again after a jittered exponential backoff (at least the server's
``retry-after``, capped at ``backoff_max``) until ``settings.max_retries`` retries are
spent (then ``ModelUnavailable``); a failure after text was delivered is a
``ModelStreamError``, never retried (the text is already out).

``stream_with_compaction``: on a context-window error, a forced compaction and exactly one
retry.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import Any

from actline.messages import GenerateRequest

from .config import LLMSettings, ModelSpec
from .errors import ContextWindowExceeded, ModelStreamError, ModelUnavailable
from .protocol import Chunk, Model, opened

log = logging.getLogger("actline.llm.retry")


class Retry(Exception):
    """One failed attempt that may be retried (``status`` None: the connection failed)."""

    def __init__(self, status: int | None, detail: str, retry_after: float | None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


def retry_after(response: Any) -> float | None:
    """The seconds a response's ``retry-after`` header asks for (None: absent or not a
    number)."""
    header = response.headers.get("retry-after") if response is not None else None
    if not header:
        return None
    try:
        return float(header)
    except ValueError:
        return None


class Retrying:
    """The attempt loop of a network model: subclasses give ``params`` and ``_attempt``."""

    settings: LLMSettings
    attempts: int
    """Attempts made by the last call (1 when the first one succeeded)."""
    _sleep: Callable[[float], Awaitable[None]]
    _rng: random.Random
    spec: ModelSpec
    _client: Any
    """The API client, made at the first call (None until then, and after ``aclose``)."""

    def params(self, request: GenerateRequest) -> dict[str, Any]:
        raise NotImplementedError

    def output_limit(self, request: GenerateRequest) -> int:
        """The request's output tokens (else the settings'), within the model's own limit."""
        asked = request.max_output_tokens or self.settings.max_output_tokens
        return min(asked, self.spec.max_output_tokens)

    async def aclose(self) -> None:
        """Close the HTTP client (its connections) if this model created one."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _attempt(self, params: dict[str, Any], delivered: list[int]) -> AsyncGenerator[Chunk, None]:
        """One attempt: text chunks (counting the characters in ``delivered[0]``), then one
        ``Usage``; ``Retry`` when it may be tried again."""
        raise NotImplementedError

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1``: exponential, jittered, capped."""
        s = self.settings
        ceiling = min(s.backoff_max, s.backoff_base * float(2 ** max(0, attempt - 1)))
        delay = ceiling / 2 + self._rng.random() * ceiling / 2
        if retry_after:
            delay = max(delay, min(retry_after, s.backoff_max))
        return delay

    async def stream(self, request: GenerateRequest) -> AsyncGenerator[Chunk, None]:
        params = self.params(request)
        budget = self.settings.max_retries + 1
        self.attempts = 0
        while True:
            self.attempts += 1
            delivered = [0]
            try:
                async with contextlib.aclosing(self._attempt(params, delivered)) as attempt:
                    async for chunk in attempt:
                        yield chunk
                return
            except Retry as failure:
                if delivered[0]:
                    raise ModelStreamError(failure.detail, delivered[0]) from None
                if self.attempts >= budget:
                    raise ModelUnavailable(failure.status, self.attempts, failure.detail) from None
                delay = self.backoff(self.attempts, failure.retry_after)
                log.info(
                    "model %s attempt %d failed (%s); retrying in %.2fs",
                    params["model"],
                    self.attempts,
                    failure.status or "connection",
                    delay,
                )
                await self._sleep(delay)


Render = Callable[[bool], Awaitable[GenerateRequest]]
"""Renders the round's request; ``True`` asks for a forced compaction first."""


async def stream_with_compaction(model: Model, render: Render) -> AsyncIterator[Chunk]:
    """Stream one round; on ``ContextWindowExceeded`` re-render compacted and retry once.

    A second context-window error propagates (the compacted context still does
    not fit: the caller ends the turn with that error).
    """
    request = await render(False)
    try:
        async with opened(model.stream(request)) as first:
            async for chunk in first:
                yield chunk
        return
    except ContextWindowExceeded as exc:
        log.warning("context window exceeded (%s): compacting and retrying once", exc.detail)
    request = await render(True)
    async with opened(model.stream(request)) as second:
        async for chunk in second:
            yield chunk
