"""Does the model server at a base URL answer? Asked once when a node starts, so that a
server that is down or a mistyped URL is an error naming the setting before any turn is
taken, not a failed turn after retries.

Any HTTP response counts as an answer (a 404 or a 401 too: the API's own paths and keys
are the client's business); a refused or timed-out connection, a failed TLS handshake or
bytes that are not HTTP do not.
"""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit

from .config import LLMSettings
from .errors import ModelConfigError

TIMEOUT_S = 5.0
"""How long the server has to answer the probe."""


async def check_reachable(settings: LLMSettings, timeout_s: float = TIMEOUT_S) -> None:
    """``ModelConfigError`` naming the base URL when the server there does not answer HTTP;
    nothing to check without a base URL (the provider's own API)."""
    url = settings.base_url
    if not url:
        return
    try:
        status = await asyncio.wait_for(_probe(url), timeout_s)
    except (OSError, ssl.SSLError, ValueError, TimeoutError) as exc:
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            detail = f"no answer within {timeout_s:g} s"
        raise ModelConfigError(
            f"base URL {url}",
            f"the model server for {settings.model!r} ({settings.api} API) does not answer "
            f"({detail}): start it, or fix --base-url / ACTLINE_BASE_URL",
        ) from None
    if status is None:
        raise ModelConfigError(
            f"base URL {url}",
            "what answers there is not an HTTP server: fix --base-url / ACTLINE_BASE_URL",
        )


async def _probe(url: str) -> int | None:
    """The HTTP status of ``GET url`` (None: the reply is not HTTP)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http:// or https:// URL: {url!r}")
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    context = ssl.create_default_context() if secure else None
    reader, writer = await asyncio.open_connection(parts.hostname, port, ssl=context)
    try:
        host = parts.netloc.rsplit("@", 1)[-1]
        request = f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        writer.write(request.encode("ascii", "replace"))
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass
    words = line.split()
    if len(words) >= 2 and words[0].startswith(b"HTTP/") and words[1].isdigit():
        return int(words[1])
    return None
