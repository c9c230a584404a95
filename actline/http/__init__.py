"""``actline serve --http``: a versioned JSON and server-sent-events API for apps that do
not speak NATS, with bearer tokens issued by ``actline creds http``.

``tokens`` (the token store, stdlib only), ``tenants`` (one NATS client connection per
tenant), ``events`` (the turns followed, as SSE events), ``inputs`` (request bodies),
``app`` (the routes), ``openapi`` (their description) and ``server`` (uvicorn in the
node's process). It may import the facade and every sub-package beneath it, never
``actline.web`` or ``actline.cli``. Names load lazily: ``actline creds http`` needs the
token store without Starlette.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["Gateway", "HttpToken", "TokenStore", "describe", "make_app", "serve_http"]

_WHERE = {
    "Gateway": "tenants",
    "HttpToken": "tokens",
    "TokenStore": "tokens",
    "describe": "openapi",
    "make_app": "app",
    "serve_http": "server",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value
