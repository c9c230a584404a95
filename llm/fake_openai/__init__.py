"""A local server that speaks the OpenAI Chat Completions API, for tests and offline runs.

``FakeOpenAIServer`` answers ``POST /v1/chat/completions`` over HTTP/1.1 on 127.0.0.1
(the framing of ``actline.llm.fake_anthropic._http``) so the real ``openai`` client runs
offline: streamed ``data:`` chunks ending in ``[DONE]``, or whole completions. Replies
come from the same ``Policy`` objects the Messages API server takes (``EchoPolicy``,
``ReplayModel``, ``ExtractiveModel``). Requests are validated as the API does and refused
with its ``{"error": {"message", "type", "param", "code"}}`` shape; ``fail_next`` injects
a 429 with ``retry-after``, a 500, a context-length 400 and a stream dropped mid-way.
Usage reports prompt and completion tokens, and cached prompt tokens from a prefix cache
when asked to. ``python -m actline.llm.fake_openai --port N`` runs it by hand.

Modules: ``server`` (the server and its request records), ``api`` (validation, error,
chunk and completion shapes), ``prefix`` (prompt tokens and the prefix cache).
"""

from .api import ApiError, error_body, validate_body
from .prefix import PrefixCache, prompt_text
from .server import FAILURE_KINDS, FailureKind, FakeOpenAIServer, RequestRecord

__all__ = [
    "FAILURE_KINDS",
    "ApiError",
    "FailureKind",
    "FakeOpenAIServer",
    "PrefixCache",
    "RequestRecord",
    "error_body",
    "prompt_text",
    "validate_body",
]
