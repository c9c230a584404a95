"""The Chat Completions API's shapes: request validation, errors, chunks and completions.

``validate_body`` refuses what the API refuses, with its messages, ``param`` and
``code``; the builders give the JSON of a completion, of each streamed chunk and of
the ``usage`` object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..fake_anthropic._http import chunk

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
PART_TYPES = {
    "system": ("text",),
    "developer": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
    "function": ("text",),
}


UNPARSABLE = "We could not parse the JSON body of your request."


class ApiError(Exception):
    """A refusal in the API's shape: HTTP ``status`` and the ``error`` object's fields."""

    def __init__(
        self,
        status: int,
        message: str,
        error_type: str = "invalid_request_error",
        *,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, param=self.param, code=self.code)


def error_body(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The API's error shape."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "null"
    return "an object"


def _wrong_type(param: str, expected: str, value: Any) -> ApiError:
    return ApiError(
        400,
        f"Invalid type for '{param}': expected {expected}, but got {_type_name(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _check_content(message: Mapping[str, Any], where: str) -> None:
    role = message["role"]
    content = message.get("content")
    if content is None:
        if role == "assistant":
            return
        raise ApiError(
            400,
            f"Missing required parameter: '{where}.content'.",
            param=f"{where}.content",
            code="missing_required_parameter",
        )
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _wrong_type(f"{where}.content", "one of an array of objects or string", content)
    allowed = PART_TYPES[role]
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(part, Mapping):
            raise _wrong_type(at, "an object", part)
        kind = part.get("type")
        if kind not in allowed:
            supported = ", ".join(f"'{t}'" for t in allowed)
            raise ApiError(
                400,
                f"Invalid value: '{kind}'. Supported values are: {supported}.",
                param=f"{at}.type",
                code="invalid_value",
            )
        if kind == "text" and not isinstance(part.get("text"), str):
            raise _wrong_type(f"{at}.text", "a string", part.get("text"))
        if kind == "image_url":
            url = (part.get("image_url") or {}).get("url")
            if not isinstance(url, str) or not url:
                raise _wrong_type(f"{at}.image_url.url", "a string", url)


def validate_body(body: Any) -> None:
    """Raise ``ApiError`` (400 ``invalid_request_error``) where the API would refuse."""
    if not isinstance(body, Mapping):
        raise ApiError(400, UNPARSABLE)
    if "model" not in body:
        raise ApiError(400, "you must provide a model parameter")
    if not isinstance(body["model"], str):
        raise _wrong_type("model", "a string", body["model"])
    if "messages" not in body:
        raise ApiError(
            400,
            "Missing required parameter: 'messages'.",
            param="messages",
            code="missing_required_parameter",
        )
    messages = body["messages"]
    if not isinstance(messages, list):
        raise _wrong_type("messages", "an array", messages)
    if not messages:
        raise ApiError(
            400,
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param="messages",
            code="empty_array",
        )
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise _wrong_type(where, "an object", message)
        role = message.get("role")
        if role is None:
            raise ApiError(
                400,
                f"Missing required parameter: '{where}.role'.",
                param=f"{where}.role",
                code="missing_required_parameter",
            )
        if role not in ROLES:
            supported = ", ".join(f"'{r}'" for r in ROLES[:-1]) + f", and '{ROLES[-1]}'"
            raise ApiError(
                400,
                f"Invalid value: '{role}'. Supported values are: {supported}.",
                param=f"{where}.role",
                code="invalid_value",
            )
        _check_content(message, where)
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _wrong_type(name, "an integer", value)
        if value < 1:
            raise ApiError(
                400,
                f"Invalid '{name}': integer below minimum value. Expected a value >= 1, "
                f"but got {value} instead.",
                param=name,
                code="integer_below_min_value",
            )
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str):
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _wrong_type("stop", "a string or an array of strings", stop)
        if len(stop) > 4:
            raise ApiError(
                400,
                f"Invalid 'stop': array too long. Expected an array with maximum length 4, "
                f"but got an array with length {len(stop)} instead.",
                param="stop",
                code="array_above_max_length",
            )
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _wrong_type("stream", "a boolean", stream)
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    if options is not None and not isinstance(options, Mapping):
        raise _wrong_type("stream_options", "an object", options)
    temperature = body.get("temperature")
    if temperature is not None:
        if not isinstance(temperature, int | float) or isinstance(temperature, bool):
            raise _wrong_type("temperature", "a number", temperature)
        if not 0 <= temperature <= 2:
            raise ApiError(
                400,
                f"Invalid 'temperature': decimal above maximum value. Expected a value <= 2, "
                f"but got {temperature} instead.",
                param="temperature",
                code="decimal_above_max_value" if temperature > 2 else "decimal_below_min_value",
            )


def usage_body(prompt: int, completion: int, cached: int | None) -> dict[str, Any]:
    """The ``usage`` object; ``cached=None`` leaves out ``prompt_tokens_details``."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def completion(
    completion_id: str,
    created: int,
    model: str,
    text: str,
    finish_reason: str,
    usage: Mapping[str, Any],
) -> dict[str, Any]:
    """A whole (non-streaming) ``chat.completion``."""
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": dict(usage),
        "system_fingerprint": None,
    }


def chunk_body(
    completion_id: str,
    created: int,
    model: str,
    delta: Mapping[str, Any] | None,
    *,
    finish_reason: str | None = None,
    usage: Mapping[str, Any] | None = None,
    with_usage: bool = False,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``: a delta (``delta=None`` gives the usage chunk, whose
    ``choices`` is empty); ``with_usage`` adds ``"usage": null`` as the API does on every
    chunk before the usage one when the usage was asked for."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": dict(delta), "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = dict(usage)
    elif with_usage:
        body["usage"] = None
    return body


def sse(data: Mapping[str, Any] | str) -> bytes:
    """One ``data:`` event, framed as one chunk of a chunked body."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return chunk(f"data: {text}\n\n".encode())
