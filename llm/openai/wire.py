"""The rendered context as a Chat Completions request body, and back.

The mapping is byte-stable: the same ``GenerateRequest`` always gives the same body.
The system prompt is a ``system`` message; the timeline's rendered parts become the
content parts of one ``user`` message, in order, as the Messages conversion groups
them (``actline.llm.anthropic.wire``). An image part is its caption (a text part) followed by an
``image_url`` part carrying a data URL; a document whose source is text is sent as
text, a PDF as a ``file`` part with a data URL. Cache marks mean nothing on this API
(servers cache prompt prefixes on their own): they are dropped.

``from_chat_params`` is the inverse the local server uses to hand a request to an
offline policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from actline.messages import GenerateRequest

from ..errors import ModelRequestError


def _invalid(message: str) -> ModelRequestError:
    return ModelRequestError(400, "invalid_request_error", message)


def data_url(source: Mapping[str, Any]) -> str:
    """``data:<media type>;base64,<data>`` of a base64 source."""
    return f"data:{source.get('media_type', 'application/octet-stream')};base64,{source['data']}"


def content_parts(parts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Chat Completions content parts of rendered ``parts``."""
    out: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        kind = part.get("type")
        if kind == "text":
            out.append({"type": "text", "text": part.get("text") or " "})
            continue
        if kind not in ("image", "document"):
            raise _invalid(f"part {i} has type {kind!r}")
        caption = part.get("caption")
        if caption:
            out.append({"type": "text", "text": caption})
        source = part.get("source") or {}
        if source.get("type") == "text":
            out.append({"type": "text", "text": str(source.get("data") or " ")})
        elif source.get("type") != "base64":
            raise _invalid(f"part {i}: a {source.get('type')!r} source cannot be sent inline")
        elif kind == "image":
            out.append({"type": "image_url", "image_url": {"url": data_url(source)}})
        else:
            out.append(
                {
                    "type": "file",
                    "file": {"filename": f"part-{i}.pdf", "file_data": data_url(source)},
                }
            )
    return out


def to_chat_params(
    request: GenerateRequest,
    *,
    model: str,
    max_tokens: int,
    temperature: float | None = None,
    stop: Sequence[str] = (),
) -> dict[str, Any]:
    """The keyword arguments of ``chat.completions.create`` for ``request`` (streaming,
    with the usage chunk asked for)."""
    if not request.blocks:
        raise _invalid("the rendered context is empty")
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages.append({"role": "user", "content": content_parts(request.blocks)})
    params: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if temperature is not None:
        params["temperature"] = temperature
    if stop:
        params["stop"] = list(stop)
    return params


def _part(part: Mapping[str, Any]) -> dict[str, Any]:
    kind = part.get("type")
    if kind == "image_url":
        url = str((part.get("image_url") or {}).get("url", ""))
        media, _, data = url.removeprefix("data:").partition(";base64,")
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    if kind == "file":
        url = str((part.get("file") or {}).get("file_data", ""))
        media, _, data = url.removeprefix("data:").partition(";base64,")
        return {"type": "document", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "text", "text": str(part.get("text") or "")}


def from_chat_params(body: Mapping[str, Any]) -> GenerateRequest:
    """A ``GenerateRequest`` equivalent to a (validated) Chat Completions body.

    System (and developer) messages make the system prompt; every content part of the
    other messages becomes one rendered part, roles flattened, as offline policies read
    the context as one document. There are no cache marks.
    """
    system: list[str] = []
    parts: list[dict[str, Any]] = []
    for message in body.get("messages", []):
        content = message.get("content")
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if message.get("role") in ("system", "developer"):
            system += [str(p.get("text", "")) for p in items if isinstance(p, Mapping)]
            continue
        parts += [_part(p) for p in items if isinstance(p, Mapping)]
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
    return GenerateRequest(
        conversation_id="fake",
        turn_id="fake",
        model=str(body.get("model", "")),
        system="\n\n".join(system),
        blocks=parts,
        max_output_tokens=int(limit),
    )
