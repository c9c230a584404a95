"""Errors of the llm package.

Hierarchy::

    ModelError
    ├── ModelUnavailable       retries exhausted on 429/529/5xx or connection errors
    ├── ModelRequestError      the API refused the request: 4xx other than 429 (status, error_type)
    │   └── ContextWindowExceeded   the prompt is longer than the model's window (tokens, limit)
    ├── ModelStreamError       the stream broke after text was already delivered (partial_chars)
    ├── ModelConfigError       a missing key, an unknown model, a bad setting (setting)
    └── ScriptExhausted        a ReplayModel was called more times than its script has outputs

Every error keeps its fields and pickles (errors cross Ray process boundaries).
"""

from __future__ import annotations

from typing import Any


class ModelError(Exception):
    """Base of every error raised by the llm package."""


class ModelUnavailable(ModelError):
    """The model kept failing with retryable errors until the retry budget ran out."""

    def __init__(self, status: int | None, attempts: int, detail: str = "") -> None:
        self.status = status
        self.attempts = attempts
        self.detail = detail
        what = f"HTTP {status}" if status else "a connection error"
        super().__init__(
            f"model unavailable: {what} after {attempts} attempt{'s' * (attempts != 1)}"
            f"{f' ({detail})' if detail else ''}; retry later or raise llm max_retries"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.status, self.attempts, self.detail))


class ModelRequestError(ModelError):
    """The API answered 4xx (not 429): retrying the same request cannot help."""

    def __init__(self, status: int, error_type: str, detail: str = "") -> None:
        self.status = status
        self.error_type = error_type
        self.detail = detail
        super().__init__(f"model request refused: HTTP {status} {error_type}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.status, self.error_type, self.detail))


class ContextWindowExceeded(ModelRequestError):
    """The prompt does not fit the model's context window; compact and retry once."""

    def __init__(
        self, detail: str = "", tokens: int | None = None, limit: int | None = None
    ) -> None:
        self.tokens = tokens
        self.limit = limit
        super().__init__(400, "invalid_request_error", detail or "prompt is too long")
        self.args = (f"context window exceeded: {detail or 'prompt is too long'}",)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail, self.tokens, self.limit))


class ModelStreamError(ModelError):
    """The stream failed after text had been delivered, so it cannot be retried silently."""

    def __init__(self, detail: str, partial_chars: int) -> None:
        self.detail = detail
        self.partial_chars = partial_chars
        super().__init__(
            f"model stream broke after {partial_chars} characters: {detail}; "
            "the round must be retried from its start"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail, self.partial_chars))


class ModelConfigError(ModelError):
    """A model setting is missing or wrong; the message names the fix."""

    def __init__(self, setting: str, detail: str) -> None:
        self.setting = setting
        self.detail = detail
        super().__init__(f"{setting}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.setting, self.detail))


class ScriptExhausted(ModelError):
    """A ReplayModel was asked for call ``call`` but its script has only ``length`` outputs."""

    def __init__(self, source: str, call: int, length: int) -> None:
        self.source = source
        self.call = call
        self.length = length
        super().__init__(
            f"replay script {source} has {length} output{'s' * (length != 1)} "
            f"but call {call} was made; record more outputs or shorten the test"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.source, self.call, self.length))
