"""A local server that speaks the Anthropic Messages API, with prompt-cache accounting.

``FakeAnthropicServer`` answers ``POST /v1/messages`` over HTTP/1.1 on
127.0.0.1 (keep-alive, Content-Length or chunked request bodies, chunked SSE
replies) so the real ``anthropic`` client runs offline. Replies come from a
pluggable policy; usage is accounted by ``actline.llm.cache_sim`` by the
provider's prompt-caching rules. Requests are validated the way the API does and refused with its
error shape; ``fail_next`` injects 429/529/500/context-window errors and a
mid-stream overload. ``python -m actline.llm.fake_anthropic --port N`` runs it by hand.

Modules: ``server`` (the server and its request records), ``api`` (validation,
error and event shapes), ``policy`` (the policy protocol, the echo policy),
``serving`` (listening and connections, shared with ``actline.llm.fake_openai``),
``thread`` (running it in a daemon thread), ``_http`` (the HTTP/1.1 framing).
"""

from .api import api_usage, error_body, validate_body
from .policy import EchoPolicy, Policy, load_policy
from .server import FAILURES, FailureKind, FakeAnthropicServer, RequestRecord
from .thread import ServerThread

__all__ = [
    "FAILURES",
    "EchoPolicy",
    "FailureKind",
    "FakeAnthropicServer",
    "Policy",
    "RequestRecord",
    "ServerThread",
    "api_usage",
    "error_body",
    "load_policy",
    "validate_body",
]
