"""The Messages API's shapes: request validation, errors, usage and stream events.

``validate_body`` refuses what the API refuses, with its ``invalid_request_error``
messages; the builders give the JSON of a Message and of each SSE event.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..anthropic.wire import MAX_MARKS
from ..cache_sim import CacheUsage
from ..errors import ModelRequestError
from ._http import chunk


def _invalid(message: str) -> ModelRequestError:
    return ModelRequestError(400, "invalid_request_error", message)


def _check_mark(block: Mapping[str, Any], where: str) -> int:
    mark = block.get("cache_control")
    if mark is None:
        return 0
    if not isinstance(mark, Mapping) or mark.get("type") != "ephemeral":
        raise _invalid(f"{where}.cache_control.type: Input should be 'ephemeral'")
    if mark.get("ttl", "5m") not in ("5m", "1h"):
        raise _invalid(f"{where}.cache_control.ttl: Input should be '5m' or '1h'")
    return 1


def _check_blocks(blocks: Sequence[Any], where: str, *, text_only: bool = False) -> int:
    marks = 0
    for j, block in enumerate(blocks):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise _invalid(f"{where}.{j}: Input should be a content block with a 'type'")
        if text_only and block["type"] != "text":
            raise _invalid(f"{where}.{j}.type: Input should be 'text'")
        if block["type"] == "text":
            if not isinstance(block.get("text"), str):
                raise _invalid(f"{where}.{j}.text: Input should be a valid string")
            if not block["text"]:
                raise _invalid(f"{where.split('.')[0]}: text content blocks must be non-empty")
        marks += _check_mark(block, f"{where}.{j}")
    return marks


def validate_body(body: Any) -> None:
    """Raise ``ModelRequestError`` (400 invalid_request_error) where the API would refuse."""
    if not isinstance(body, Mapping):
        raise _invalid("the request body must be a JSON object")
    for name in ("model", "max_tokens", "messages"):
        if name not in body:
            raise _invalid(f"{name}: Field required")
    if not isinstance(body["model"], str) or not body["model"]:
        raise _invalid("model: Input should be a non-empty string")
    max_tokens = body["max_tokens"]
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise _invalid("max_tokens: Input should be a valid integer")
    if max_tokens < 1:
        raise _invalid("max_tokens: Input should be greater than or equal to 1")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _invalid("stream: Input should be a valid boolean")
    stop = body.get("stop_sequences")
    if stop is not None and not (
        isinstance(stop, list) and all(isinstance(s, str) and s for s in stop)
    ):
        raise _invalid("stop_sequences: Input should be a valid list of non-empty strings")
    marks = 0
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _invalid("tools: Input should be a valid list")
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping) or not isinstance(tool.get("name"), str):
                raise _invalid(f"tools.{i}.name: Field required")
            marks += _check_mark(tool, f"tools.{i}")
    system = body.get("system")
    if isinstance(system, list):
        marks += _check_blocks(system, "system", text_only=True)
    elif system is not None and not isinstance(system, str):
        raise _invalid("system: Input should be a valid string or a list of text blocks")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise _invalid("messages: Input should be a valid list")
    if not messages:
        raise _invalid("messages: at least one message is required")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise _invalid(f"messages.{i}: Input should be a valid dictionary")
        if message.get("role") not in ("user", "assistant"):
            raise _invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        content = message.get("content")
        if not isinstance(content, str | list):
            raise _invalid(f"messages.{i}.content: Input should be a valid string or list")
        final_assistant = i == len(messages) - 1 and message["role"] == "assistant"
        if not content and not final_assistant:
            raise _invalid(
                f"messages.{i}: all messages must have non-empty content "
                "except for the optional final assistant message"
            )
        if isinstance(content, list):
            marks += _check_blocks(content, f"messages.{i}.content")
    if messages[0]["role"] != "user":
        raise _invalid('messages: first message must use the "user" role')
    if marks > MAX_MARKS:
        raise _invalid(
            f"A maximum of {MAX_MARKS} blocks with cache_control may be provided. Found {marks}."
        )


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """The API's error shape."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def api_usage(cache: CacheUsage, output_tokens: int) -> dict[str, Any]:
    """The ``usage`` object of a Message for ``cache`` and ``output_tokens``."""
    return {
        "input_tokens": cache.input_tokens,
        "cache_creation_input_tokens": cache.cache_creation_input_tokens,
        "cache_read_input_tokens": cache.cache_read_input_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": cache.ephemeral_5m_input_tokens,
            "ephemeral_1h_input_tokens": cache.ephemeral_1h_input_tokens,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }


def message(
    message_id: str,
    model: str,
    text: str | None,
    usage: Mapping[str, Any],
    stop: tuple[str, str | None] = ("end_turn", None),
) -> dict[str, Any]:
    """A Message; ``text=None`` gives the empty one that opens a stream. ``stop``: its
    ``stop_reason`` and ``stop_sequence``."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [] if text is None else [{"type": "text", "text": text}],
        "stop_reason": None if text is None else stop[0],
        "stop_sequence": None if text is None else stop[1],
        "usage": usage,
    }


def sse(event: str, data: Mapping[str, Any]) -> bytes:
    """One server-sent event, framed as one chunk of a chunked body."""
    payload = f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"
    return chunk(payload.encode())


def stream_head(message_id: str, model: str, cache: CacheUsage) -> bytes:
    """message_start (output_tokens 1, as the API sends it), content_block_start, ping."""
    start = {
        "type": "message_start",
        "message": message(message_id, model, None, api_usage(cache, 1)),
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    return (
        sse("message_start", start)
        + sse("content_block_start", block)
        + sse("ping", {"type": "ping"})
    )


def text_delta(text: str) -> bytes:
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }
    return sse("content_block_delta", delta)


def stream_tail(
    cache: CacheUsage, output_tokens: int, stop: tuple[str, str | None] = ("end_turn", None)
) -> bytes:
    """content_block_stop, message_delta (cumulative usage, ``stop``: its stop reason and
    stop sequence), message_stop."""
    final = {
        "type": "message_delta",
        "delta": {"stop_reason": stop[0], "stop_sequence": stop[1]},
        "usage": {
            "input_tokens": cache.input_tokens,
            "cache_creation_input_tokens": cache.cache_creation_input_tokens,
            "cache_read_input_tokens": cache.cache_read_input_tokens,
            "output_tokens": output_tokens,
        },
    }
    return (
        sse("content_block_stop", {"type": "content_block_stop", "index": 0})
        + sse("message_delta", final)
        + sse("message_stop", {"type": "message_stop"})
    )
