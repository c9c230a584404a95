"""Reading the HTTP API's request bodies and parameters: each problem is a ``BadInput``
naming the field and what to send instead."""

from __future__ import annotations

import base64
import binascii
import json
import mimetypes
from typing import Any

from starlette.requests import Request

from actline.actors.configuration.checks import InputSizes, check_config
from actline.actors.errors import InputRefused
from actline.messages import Attachment
from actline.messages.ids import is_valid_id

from .errors import ApiError, BadInput

__all__ = [
    "TooLarge",
    "attachments",
    "body",
    "ident",
    "max_body",
    "optional_text",
    "text",
    "turn_config",
]

BODY_SLACK = 1 << 20
"""Bytes a body may hold besides its attachments' base64 (the question, the settings)."""


class TooLarge(ApiError):
    """A body over ``max_body`` (413)."""

    status = 413


def max_body(sizes: InputSizes) -> int:
    """The largest body the API reads: every attachment's bytes in base64, and some."""
    return sizes.max_attachments_bytes * 4 // 3 + 4 + BODY_SLACK


async def body(request: Request, limit: int, *, fields: tuple[str, ...]) -> dict[str, Any]:
    """The request's JSON object (an empty body: ``{}``); ``BadInput`` for anything else
    or a field the route does not take, ``TooLarge`` over ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise TooLarge("body_too_large", f"the body is {declared} bytes, over {limit}")
    raw = await request.body()
    if len(raw) > limit:
        raise TooLarge("body_too_large", f"the body is {len(raw)} bytes, over {limit}")
    if not raw.strip():
        return {}
    try:
        parsed = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise BadInput("bad_json", "the body is not JSON: send a JSON object") from None
    if not isinstance(parsed, dict):
        raise BadInput("bad_json", "the body must be a JSON object")
    unknown = sorted(set(parsed) - set(fields))
    if unknown:
        raise BadInput(
            "unknown_field", f"unknown field {unknown[0]!r}: this route takes {', '.join(fields)}"
        )
    return parsed


def text(data: dict[str, Any], key: str) -> str:
    """A required non-empty string field."""
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadInput("bad_input", f"{key!r} is required: a non-empty string (got {value!r})")
    return value


def optional_text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadInput("bad_input", f"{key!r} must be a string (got {value!r})")
    return value


def ident(value: Any, key: str) -> str:
    """An id (turn, conversation, approval): letters, digits, ``_ : -``."""
    if not isinstance(value, str) or not is_valid_id(value):
        raise BadInput("bad_id", f"{key} {value!r} is not an id (letters, digits, _ : -)")
    return value


def turn_config(data: dict[str, Any]) -> dict[str, Any]:
    """A turn's settings: ``config`` (checked as the node checks it) with ``profile``."""
    raw = data.get("config")
    if raw is not None and not isinstance(raw, dict):
        raise BadInput("bad_input", f"'config' must be an object of turn settings (got {raw!r})")
    config = dict(raw or {})
    profile = optional_text(data, "profile")
    if profile is not None:
        config["profile"] = profile
    try:
        check_config(config)
    except InputRefused as exc:
        raise BadInput("bad_input", f"'config' refused: {exc}") from None
    return config


def attachments(raw: Any, sizes: InputSizes) -> list[Attachment]:
    """``[{name, media_type?, data_base64}]`` as attachments, within the node's limits."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadInput("bad_input", "'attachments' must be a list of {name, data_base64}")
    if len(raw) > sizes.max_attachments:
        raise BadInput(
            "too_many_attachments",
            f"'attachments' has {len(raw)} files, over the limit of {sizes.max_attachments}",
        )
    out: list[Attachment] = []
    total = 0
    for i, item in enumerate(raw):
        where = f"attachments[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise BadInput("bad_input", f"{where} needs a 'name' string and 'data_base64'")
        extra = sorted(set(item) - {"name", "media_type", "data_base64"})
        if extra:
            raise BadInput("unknown_field", f"{where}: unknown field {extra[0]!r}")
        try:
            data = base64.b64decode(str(item.get("data_base64", "")), validate=True)
        except (binascii.Error, ValueError):
            raise BadInput("bad_input", f"{where}.data_base64 is not base64") from None
        if len(data) > sizes.max_attachment_bytes:
            raise BadInput(
                "attachment_too_large",
                f"{where} ({item['name']}) is {len(data)} bytes, over the limit of "
                f"{sizes.max_attachment_bytes} per file",
            )
        total += len(data)
        if total > sizes.max_attachments_bytes:
            raise BadInput(
                "attachment_too_large",
                f"'attachments' are over {sizes.max_attachments_bytes} bytes together",
            )
        media = item.get("media_type") or mimetypes.guess_type(item["name"])[0]
        if not isinstance(media, str | None):
            raise BadInput("bad_input", f"{where}.media_type must be a string")
        mime = media or "application/octet-stream"
        out.append(Attachment(name=item["name"], mime=mime, data=data, size=len(data)))
    names = [a.name for a in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadInput("bad_input", f"two attachments are named {twice[0]!r}: rename one")
    return out
