"""The rendered context as a Messages API request body, and back.

The mapping is byte-stable: the same ``GenerateRequest`` always gives the same
body. The system prompt is one text block with its own cache breakpoint. The
timeline's rendered parts become the content blocks of one user message, in
order; an image or PDF part is sent as its caption (a text block) followed by
the media block. The renderer's marks (CP1/CP2/CP3, at most 3) become
``cache_control`` on exactly those parts (on the media block for a media part),
so a request never carries more than 4 breakpoints. SOURCES POOL and ANNOUNCE
come after the last mark by construction: the renderer never marks its tail.

``from_messages_params`` is the inverse the local server uses to hand a request
to an offline policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actline.messages import GenerateRequest

from ..errors import ModelRequestError

MAX_MARKS = 4
"""The API's limit of cache_control breakpoints per request."""


def cache_control(ttl: str) -> dict[str, str]:
    """A breakpoint; the 5-minute default is sent without a ttl key (as the API documents)."""
    return {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}


def content_blocks(
    parts: Sequence[Mapping[str, Any]], marks: Sequence[int], ttl: str = "5m"
) -> list[dict[str, Any]]:
    """The API content blocks of rendered ``parts``, with breakpoints on the ``marks``."""
    marked = set(marks)
    out: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        kind = part.get("type")
        if kind == "text":
            block: dict[str, Any] = {"type": "text", "text": part.get("text") or " "}
        elif kind in ("image", "document"):
            caption = part.get("caption")
            if caption:
                out.append({"type": "text", "text": caption})
            block = {"type": kind, "source": dict(part["source"])}
        else:
            raise ModelRequestError(400, "invalid_request_error", f"part {i} has type {kind!r}")
        if i in marked:
            block["cache_control"] = cache_control(ttl)
        out.append(block)
    return out


def to_messages_params(
    request: GenerateRequest,
    *,
    model: str,
    max_tokens: int,
    cache_ttl: str = "5m",
    system_cache_ttl: str = "5m",
    temperature: float | None = None,
    cache_system: bool = True,
    marks: bool = True,
    stop: Sequence[str] = (),
) -> dict[str, Any]:
    """The keyword arguments of ``messages.create``/``messages.stream`` for ``request``.

    ``cache_system=False`` leaves the system prompt without a breakpoint (the
    timeline marks are whatever ``request.cache_marks`` says, possibly none).
    ``marks=False`` sends no ``cache_control`` at all: for a server that caches
    prefixes itself (llama.cpp, vLLM) or not at all.
    """
    cache_system = cache_system and marks
    marked = sorted(set(request.cache_marks)) if marks else []
    if any(m < 0 or m >= len(request.blocks) for m in marked):
        raise ModelRequestError(400, "invalid_request_error", f"cache marks {marked} out of range")
    budget = MAX_MARKS - (1 if request.system and cache_system else 0)
    if len(marked) > budget:
        raise ModelRequestError(
            400,
            "invalid_request_error",
            f"{len(marked)} timeline cache marks plus the system mark exceed {MAX_MARKS}",
        )
    if not request.blocks:
        raise ModelRequestError(400, "invalid_request_error", "the rendered context is empty")
    params: dict[str, Any] = {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [
            {"role": "user", "content": content_blocks(request.blocks, marked, cache_ttl)}
        ],
    }
    if request.system:
        block: dict[str, Any] = {"type": "text", "text": request.system}
        if cache_system:
            block["cache_control"] = cache_control(system_cache_ttl)
        params["system"] = [block]
    if temperature is not None:
        params["temperature"] = temperature
    if stop:
        params["stop_sequences"] = list(stop)
    return params


def system_text(body: Mapping[str, Any]) -> str:
    """The system prompt of a request body (a string or a list of text blocks)."""
    system = body.get("system")
    if system is None:
        return ""
    if isinstance(system, str):
        return system
    return "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, Mapping))


def from_messages_params(body: Mapping[str, Any]) -> GenerateRequest:
    """A ``GenerateRequest`` equivalent to a (validated) Messages API body.

    Every content block of every message becomes one rendered part (a caption
    text block stays a text part); marks are the parts that carry
    ``cache_control``. Roles are flattened: offline policies read the context as
    one document, the way the timeline renders it.
    """
    parts: list[dict[str, Any]] = []
    marks: list[int] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content:
            kind = block.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": block.get("text", "")})
            elif kind in ("image", "document"):
                parts.append({"type": kind, "source": dict(block.get("source", {}))})
            else:
                text = block.get("text") or block.get("content") or ""
                parts.append({"type": "text", "text": text if isinstance(text, str) else str(text)})
            if block.get("cache_control"):
                marks.append(len(parts) - 1)
    return GenerateRequest(
        conversation_id="fake",
        turn_id="fake",
        model=str(body.get("model", "")),
        system=system_text(body),
        blocks=parts,
        cache_marks=marks,
        max_output_tokens=int(body.get("max_tokens", 4096)),
    )
