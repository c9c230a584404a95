"""Diagnostic logs: one structured line per model request, reply, tool decision, tool run,
bus message and store commit (``[AI-REQ]``, ``[AI-RESP]``, ``[AI-FnCall]``,
``[AI-TOOL]``, plus ``[BUS]`` and ``[STORE]``).

Each category is a stdlib logger, ``actline.diag.<CATEGORY>``, so every package logs
through it without importing anything above ``messages``. A line is ``key=value`` fields;
the record carries them as ``record.category`` and ``record.fields`` for the JSON format.

The rule: INFO lines carry ids, names, sizes, counts and timings only, never a prompt, an
answer or a tool's params or result. ``debug`` lines may carry those bodies (DEBUG is for
a developer's own machine; the README says so). ``BUS`` lines are DEBUG only: every stream
delta is a publish, so INFO would flood.

``configure(level, fmt)`` installs one handler on the root logger: ``text``
(``2026-11-24T12:00:00Z INFO [AI-REQ] conv=c1 turn=t1 ...``) or ``json`` (one object per line
with ``ts``, ``level``, ``category``, ``logger``, ``message`` and ``fields``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any

from .errors import LogConfigError

AI_REQ = "AI-REQ"
AI_RESP = "AI-RESP"
AI_FNCALL = "AI-FnCall"
AI_TOOL = "AI-TOOL"
BUS = "BUS"
STORE = "STORE"
CATEGORIES = (AI_REQ, AI_RESP, AI_FNCALL, AI_TOOL, BUS, STORE)
PREFIX = "actline.diag"
FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


_LOGGERS: dict[str, logging.Logger] = {}


def logger(category: str) -> logging.Logger:
    """The logger of one category (``actline.diag.AI-REQ``, ...)."""
    found = _LOGGERS.get(category)
    if found is None:  # loggers live for the process: keeping them here costs nothing
        found = _LOGGERS[category] = logging.getLogger(f"{PREFIX}.{category}")
    return found


def enabled(category: str, level: int = logging.INFO) -> bool:
    """Whether a line of ``category`` at ``level`` would go anywhere (skip the work if not)."""
    return logger(category).isEnabledFor(level)


def emit(category: str, level: int, **fields: Any) -> None:
    """One line of ``category``: its fields as ``key=value`` (None fields are left out)."""
    log = logger(category)
    if not log.isEnabledFor(level):
        return
    kept = {k: v for k, v in fields.items() if v is not None}
    text = " ".join(f"{k}={_text(v)}" for k, v in kept.items())
    log.log(level, "%s", text, extra={"category": category, "fields": kept}, stacklevel=3)


def info(category: str, **fields: Any) -> None:
    """An INFO line: ids, names, sizes, counts, timings; never a body."""
    emit(category, logging.INFO, **fields)


def debug(category: str, **fields: Any) -> None:
    """A DEBUG line; it may carry bodies (prompt text, tool params and results)."""
    emit(category, logging.DEBUG, **fields)


def ms_since(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.monotonic()``), rounded to 0.1."""
    return round((time.monotonic() - started) * 1000, 1)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value and '"' not in value else json.dumps(value)
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def _ts(record: logging.LogRecord) -> str:
    when = datetime.fromtimestamp(record.created, UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(record.msecs):03d}Z"


def _category(record: logging.LogRecord) -> str:
    category = getattr(record, "category", None)
    return category if isinstance(category, str) else record.name


class TextFormatter(logging.Formatter):
    """``TS LEVEL [CATEGORY] key=value ...``; other loggers: ``TS LEVEL name: message``."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"{_ts(record)} {record.levelname}"
        category = getattr(record, "category", None)
        where = f"[{category}]" if isinstance(category, str) else f"{record.name}:"
        line = f"{head} {where} {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``category`` (the logger's name for
    lines outside the diagnostic categories), ``logger``, ``message``, ``fields``."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", None)
        line: dict[str, Any] = {
            "ts": _ts(record),
            "level": record.levelname,
            "category": _category(record),
            "logger": record.name,
            "message": record.getMessage(),
            "fields": dict(fields) if isinstance(fields, Mapping) else {},
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def parse_level(value: str, key: str = "ACTLINE_LOG_LEVEL") -> int:
    """``DEBUG``/``INFO``/... (any case) as a ``logging`` level; else ``LogConfigError``."""
    name = value.strip().upper()
    if name not in LEVELS:
        raise LogConfigError(key, value, LEVELS)
    return int(logging.getLevelName(name))


def parse_format(value: str, key: str = "ACTLINE_LOG_FORMAT") -> str:
    """``text`` or ``json``; else ``LogConfigError``."""
    fmt = value.strip().lower()
    if fmt not in FORMATS:
        raise LogConfigError(key, value, FORMATS)
    return fmt


def configure(level: int, fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """A handler on the root logger at ``level`` in ``fmt`` (``text`` or ``json``), on
    ``stream`` (default stderr); returns it. It replaces the one an earlier call installed,
    and leaves other handlers alone (a test's capture, Ray's own)."""
    handler = _Handler(stream if stream is not None else sys.stderr)
    json_lines = parse_format(fmt, "log format") == "json"
    handler.setFormatter(JsonFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure`` installs (so a second call replaces it)."""


def configure_from_env(
    level: int | None = None, fmt: str | None = None, *, default_level: str = "WARNING"
) -> logging.Handler:
    """``configure`` with what is not given taken from ``ACTLINE_LOG_LEVEL`` (else
    ``default_level``) and ``ACTLINE_LOG_FORMAT`` (else ``text``); a bad value raises
    ``LogConfigError`` naming the variable."""
    if level is None:
        level = parse_level(os.environ.get("ACTLINE_LOG_LEVEL", default_level))
    if fmt is None:
        fmt = parse_format(os.environ.get("ACTLINE_LOG_FORMAT", "text"))
    return configure(level, fmt)
