"""Where trace spans go: a JSONL file under the home, OpenTelemetry (OTLP/HTTP).

``JsonlSink``: ``HOME/traces/traces-YYYYMMDD.jsonl``, one span per line and one
``session`` line per turn (its status: ``ok``, ``error`` or ``partial``); a new file each
day, and ``traces-YYYYMMDD.N.jsonl`` once a file passes ``max_bytes``. On by default,
``ACTLINE_TRACE=0`` turns it off.

``OtelSink``: the official OpenTelemetry SDK's OTLP/HTTP exporter, on when
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (the
exporter reads the standard ``OTEL_EXPORTER_OTLP_*`` variables itself). Set without the
``otel`` extra installed is a ``SettingsError`` naming the fix. A span attribute whose key
has no namespace (``input_tokens``) goes out as ``actline.<key>``; a namespaced one
(``gen_ai.usage.input_tokens``, ``actline.cost.usd``, ``error.type``) as it is. Span
events go out as OpenTelemetry span events, their attributes as they are. OpenTelemetry
takes scalars and lists of scalars only: any other value goes out as its string, a None
not at all. A span with ``gen_ai.operation.name`` (a model call) is of kind ``CLIENT``,
the others ``INTERNAL``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from actline.actors.configuration.settings import NodeSettings
from actline.actors.errors import SettingsError

from .spans import Sink, Span, Tracer

__all__ = [
    "JsonlSink",
    "OtelSink",
    "Tracer",
    "otel_attributes",
    "otel_value",
    "read",
    "sinks",
    "tracer",
]

MAX_BYTES = 64 * 1024 * 1024
_JSON = json.JSONEncoder(default=str, ensure_ascii=False)
"""One encoder for every line (``json.dumps`` with options builds one per call)."""
OTEL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


class JsonlSink:
    """Spans and sessions as JSON lines in ``folder``, rotated by day and size."""

    def __init__(self, folder: Path, *, max_bytes: int = MAX_BYTES) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._current: tuple[str, BinaryIO, int] | None = None
        """The day, the open file and its size after our last line: the next line goes
        there without opening it or listing the folder while the day and the size allow."""

    def path(self, when: float | None = None) -> Path:
        """The file the next line goes to."""
        day = time.strftime("%Y%m%d", time.gmtime(time.time() if when is None else when))
        path, n = self.folder / f"traces-{day}.jsonl", 0
        while path.exists() and path.stat().st_size >= self.max_bytes:
            n += 1
            path = self.folder / f"traces-{day}.{n}.jsonl"
        return path

    def _write(self, records: Sequence[Mapping[str, Any]]) -> None:
        data = "".join(_JSON.encode(r) + "\n" for r in records).encode("utf-8")
        now = time.time()
        day = time.strftime("%Y%m%d", time.gmtime(now))
        with self._lock:
            current = self._current
            if current is None or current[0] != day or current[2] >= self.max_bytes:
                if current is not None:
                    current[1].close()
                self._current = None
                self.folder.mkdir(parents=True, exist_ok=True)
                current = (day, self.path(now).open("ab", buffering=0), 0)
            _, file, _ = current
            file.write(data)  # unbuffered: the line is in the file when this returns
            self._current = (day, file, file.tell())  # other writers to the file count too

    def close(self) -> None:
        """Close the file lines go to (the next line opens it again)."""
        with self._lock:
            if self._current is not None:
                self._current[1].close()
                self._current = None

    def export(self, spans: Sequence[Span]) -> None:
        self._write([s.record() for s in spans])

    def session(self, record: Mapping[str, Any]) -> None:
        self._write([record])


class OtelSink:
    """Spans exported through the OpenTelemetry SDK's OTLP/HTTP span exporter."""

    def __init__(self, node: str = "") -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource

        self.exporter = OTLPSpanExporter()
        self.resource = Resource.create({"service.name": "actline", "actline.node": node})

    def export(self, spans: Sequence[Span]) -> None:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.trace.export import SpanExportResult
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        def ctx(trace_id: str, span_id: str) -> SpanContext:
            return SpanContext(int(trace_id, 16), int(span_id, 16), False, TraceFlags(1))

        out = []
        for s in spans:
            attrs = otel_attributes(
                {"turn_id": s.turn_id, "node": s.node, **s.attrs}, namespace="actline."
            )
            events = [
                Event(e["name"], otel_attributes(e.get("attrs") or {}), int(e["ts"] * 1e9))
                for e in s.events
            ]
            end = s.start if s.end is None else s.end
            client = "gen_ai.operation.name" in s.attrs
            out.append(
                ReadableSpan(
                    name=s.name,
                    context=ctx(s.trace_id, s.span_id),
                    parent=None if s.parent_id is None else ctx(s.trace_id, s.parent_id),
                    resource=self.resource,
                    attributes=attrs,
                    events=events,
                    kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
                    status=Status(StatusCode.OK if s.status == "ok" else StatusCode.ERROR),
                    start_time=int(s.start * 1e9),
                    end_time=int(end * 1e9),
                )
            )
        result = self.exporter.export(out)
        if result is not SpanExportResult.SUCCESS:
            raise OSError(f"the OTLP exporter reported {result.name}")

    def session(self, record: Mapping[str, Any]) -> None:
        """OTLP has no session record: the status is on the root span."""


def otel_value(value: Any) -> Any:
    """``value`` as OpenTelemetry takes it: a scalar or a list of scalars of one type as
    they are, anything else as its string (None: None, left out by ``otel_attributes``)."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, list | tuple):
        kinds = {type(v) for v in value}
        if len(kinds) == 1 and kinds <= {str, bool, int, float}:
            return list(value)
    return str(value)


def otel_attributes(attrs: Mapping[str, Any], namespace: str = "") -> dict[str, Any]:
    """``attrs`` as OpenTelemetry attributes: ``namespace`` put before keys without a dot,
    values by ``otel_value``, Nones left out."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        shown = otel_value(value)
        if shown is not None:
            out[key if "." in key else f"{namespace}{key}"] = shown
    return out


def sinks(settings: NodeSettings, env: Mapping[str, str] | None = None) -> list[Sink]:
    """The sinks the settings and the ``OTEL_EXPORTER_OTLP_*`` variables ask for."""
    source = os.environ if env is None else env
    out: list[Sink] = []
    if settings.trace:
        out.append(JsonlSink(settings.home / "traces"))
    var = next((v for v in OTEL_VARS if source.get(v)), None)
    if var is not None:
        try:
            out.append(OtelSink(settings.node_id))
        except ImportError as exc:
            raise SettingsError(
                var,
                source[var],
                f"{var} is set but the OpenTelemetry SDK is missing ({exc.name}): "
                "pip install 'actline[otel]', or unset it",
            ) from None
    return out


def tracer(settings: NodeSettings, env: Mapping[str, str] | None = None) -> Tracer:
    return Tracer(sinks(settings, env), node=settings.node_id)


def read(home: Path) -> list[dict[str, Any]]:
    """Every record of the JSONL sink under ``home``, file by file (oldest first)."""
    folder = Path(home) / "traces"
    records: list[dict[str, Any]] = []
    if not folder.is_dir():
        return records

    def order(p: Path) -> tuple[str, int]:
        parts = p.name.split(".")
        return parts[0], int(parts[1]) if len(parts) == 3 else 0

    for path in sorted(folder.glob("traces-*.jsonl"), key=order):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash
    return records
