"""Validation at the edge: what a turn request, followup, feedback or DONE may carry.

Every number of a turn's ``config`` is of its type, finite and within its bound
(``CONFIG``); every text within a size bound of the node's settings (``InputSizes``,
``ACTLINE_MAX_*``); every timestamp within a window of the node's clock (``TS_PAST_S``
back, ``TS_FUTURE_S`` ahead), or replaced by the node's clock with the sender's kept as
``client_ts``. A refusal is ``InputRefused`` (a ``SettingsError``), whose ``field`` and
``limit`` the node puts in the ``turn.result`` or ``ErrorReply`` it answers with.
docs/input-checks.md is the table of every bound.

Pure: nothing here does I/O; the node's clock is passed in as ``now`` (epoch seconds).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from actline.actors.errors import InputRefused
from actline.messages import (
    ArtifactRef,
    Attachment,
    DoneSignal,
    ErrorReply,
    Feedback,
    Followup,
    ReActResult,
    TurnRequest,
    UtcDatetime,
)
from actline.timeline import PathError
from actline.timeline.paths import fi_path

from .profiles import check_table

log = logging.getLogger(__name__)

TS_PAST_S = 86_400.0
"""A timestamp older than this (one day) before the node's clock is replaced by it."""
TS_FUTURE_S = 300.0
"""A timestamp further than this (five minutes) after the node's clock is replaced by it."""

MAX_NAME_BYTES = 255
"""An attachment's name or MIME type."""
MAX_REF_BYTES = 2048
"""An attachment's storage reference, an artifact's path."""
MAX_USER_ID_BYTES = 256
MAX_TIMEZONE_BYTES = 64
MAX_MODEL_CHARS = 128
RATINGS = (-1, 0, 1)
"""What a feedback's ``rating`` may be."""


def refusal(exc: InputRefused) -> ErrorReply:
    """The reply to a followup, feedback or DONE that ``exc`` refused."""
    return ErrorReply(
        code="invalid_input",
        message=f"refused: {exc}; nothing was applied",
        detail={"field": exc.field, "limit": exc.limit},
    )


def not_running(turn_id: str, conversation_id: str | None = None, why: str = "") -> ErrorReply:
    """The reply to a followup for a turn that is not running (``why``: how it ended)."""
    where = f" in conversation {conversation_id}" if conversation_id else ""
    because = f" ({why})" if why else ""
    return ErrorReply(
        code="turn_not_running",
        message=f"turn {turn_id} is not running{where}{because}; nothing of the followup "
        "joined it: send the text as a new turn.request",
    )


def refused_turn(request: TurnRequest, exc: InputRefused) -> ReActResult:
    """The ``turn.result`` of a turn request that ``exc`` refused."""
    error = f"the turn request was refused: {exc}"
    return ReActResult(
        conversation_id=request.conversation_id,
        turn_id=request.turn_id,
        status="failed",
        error=error,
    )


# --- a turn's config -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Number:
    """A bound of a numeric setting: ``integer`` (ints only) or any finite int or float,
    ``low`` to ``high`` inclusive (``low`` excluded when ``above``)."""

    integer: bool
    low: float
    high: float
    above: bool = False
    unit: str = ""

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        unit = f" {self.unit}" if self.unit else ""
        low, high = _plain(self.low), _plain(self.high)
        if self.above:
            return f"{kind}{unit} > {low} and <= {high}"
        return f"{kind}{unit} from {low} to {high}"

    def check(self, field: str, value: object) -> int | float:
        """``value`` as an int (``integer``) or a float; ``InputRefused`` otherwise."""
        number_types = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, number_types):
            raise InputRefused(field, _show(value), self.describe())
        assert isinstance(value, int | float)
        if isinstance(value, float) and not math.isfinite(value):
            raise InputRefused(field, _show(value), self.describe())
        if value < self.low or value > self.high or (self.above and value == self.low):
            raise InputRefused(field, _show(value), self.describe())
        return int(value) if self.integer else float(value)


@dataclass(frozen=True, slots=True)
class Name:
    """A bound of a string setting: non-blank, at most ``max_chars`` characters."""

    max_chars: int

    def describe(self) -> str:
        return f"a non-blank string of at most {self.max_chars} characters"

    def check(self, field: str, value: object) -> str:
        if not isinstance(value, str) or not value.strip() or len(value) > self.max_chars:
            raise InputRefused(field, _show(value), self.describe())
        return value


@dataclass(frozen=True, slots=True)
class ProfileChoice:
    """A turn's profile: a profile's name, or a table of profile keys with ``extends``
    (``actline.actors.configuration.profiles``: every key checked against its bound)."""

    def describe(self) -> str:
        return "a profile name or a table of profile keys (actline profiles)"

    def check(self, field: str, value: object) -> str | dict[str, Any]:
        if isinstance(value, str):
            return Name(MAX_MODEL_CHARS).check(field, value)
        return check_table(value, field)


CONFIG: Mapping[str, Number | Name | ProfileChoice] = {
    "max_iterations": Number(True, 1, 1000),
    "max_tokens": Number(True, 0, 100_000_000),
    "max_consecutive_refusals": Number(True, 1, 50),
    "max_repair_rounds": Number(True, 0, 20),
    "max_tool_calls_per_decision": Number(True, 1, 50),
    "wait_timeout_s": Number(False, 0.001, 86_400, unit="of seconds"),  # a profile's bound
    "followup_grace_s": Number(False, 0, 60, unit="of seconds"),
    "tool_timeout_s": Number(False, 0, 3_600, above=True, unit="of seconds"),
    "model": Name(MAX_MODEL_CHARS),
    "profile": ProfileChoice(),
}
"""Every key a turn request's ``config`` may set, and its bound (docs/input-checks.md)."""

CHECKED_ELSEWHERE = ("approve_tools",)
"""Config keys that are not bounded numbers or names: ``approve_tools`` is checked by
``actline.actors.turn.approvals`` (``TurnSettings.parse``), and skipped here."""

DEFAULTS: Mapping[str, tuple[str, str]] = {
    "max_iterations": ("max_iterations", "ACTLINE_MAX_ITERATIONS"),
    "max_tokens": ("token_budget", "ACTLINE_TOKEN_BUDGET"),
    "wait_timeout_s": ("wait_timeout_s", "ACTLINE_WAIT_TIMEOUT"),
    "followup_grace_s": ("followup_grace_s", "ACTLINE_FOLLOWUP_GRACE"),
    "tool_timeout_s": ("tool_timeout_s", "ACTLINE_TOOL_TIMEOUT"),
    "model": ("model", "ACTLINE_MODEL"),
}
"""Config key -> the node setting that is its default, and that setting's variable."""


@dataclass(frozen=True, slots=True)
class TurnConfig:
    """A turn's ``config``, checked: None where the request leaves the node's default."""

    max_iterations: int | None = None
    max_tokens: int | None = None
    max_consecutive_refusals: int | None = None
    max_repair_rounds: int | None = None
    max_tool_calls_per_decision: int | None = None
    wait_timeout_s: float | None = None
    followup_grace_s: float | None = None
    tool_timeout_s: float | None = None
    model: str | None = None
    profile: str | dict[str, Any] | None = None


def check_config(config: Mapping[Any, Any]) -> TurnConfig:
    """The checked ``config``; ``InputRefused`` names the first key that is unknown, of
    the wrong type, not finite or out of its bound (``config.<key>``)."""
    values: dict[str, Any] = {}
    for key, value in config.items():
        if key in CHECKED_ELSEWHERE:
            continue
        bound = CONFIG.get(key) if isinstance(key, str) else None
        if bound is None:
            known = ", ".join([*CONFIG, *CHECKED_ELSEWHERE])
            raise InputRefused(f"config.{_key(key)}", "not a turn setting", f"one of {known}")
        values[key] = bound.check(f"config.{key}", value)
    return TurnConfig(**values)


def check_defaults(settings: object) -> None:
    """The node settings a turn's config falls back to are within the same bounds;
    ``InputRefused`` names the ``ACTLINE_*`` variable otherwise."""
    for key, (name, var) in DEFAULTS.items():
        CONFIG[key].check(var, getattr(settings, name))


# --- sizes ----------------------------------------------------------------------------------


class InputSizes(Protocol):
    """The size bounds of the node's settings (``NodeSettings`` is one)."""

    @property
    def max_text_bytes(self) -> int: ...
    @property
    def max_feedback_bytes(self) -> int: ...
    @property
    def max_attachment_bytes(self) -> int: ...
    @property
    def max_attachments(self) -> int: ...
    @property
    def max_attachments_bytes(self) -> int: ...
    @property
    def max_summary_bytes(self) -> int: ...
    @property
    def max_artifacts(self) -> int: ...


SIZE_VARS: Mapping[str, str] = {
    "max_text_bytes": "ACTLINE_MAX_TEXT_BYTES",
    "max_feedback_bytes": "ACTLINE_MAX_FEEDBACK_BYTES",
    "max_attachment_bytes": "ACTLINE_MAX_ATTACHMENT_BYTES",
    "max_attachments": "ACTLINE_MAX_ATTACHMENTS",
    "max_attachments_bytes": "ACTLINE_MAX_ATTACHMENTS_BYTES",
    "max_summary_bytes": "ACTLINE_MAX_SUMMARY_BYTES",
    "max_artifacts": "ACTLINE_MAX_ARTIFACTS",
}
"""Each size bound of ``InputSizes`` and its variable."""

_SIZE = Number(True, 1, 1 << 40)


def check_settings(settings: object) -> None:
    """A node's turn defaults and size bounds can work (``NodeSettings`` checks itself)."""
    check_defaults(settings)
    for name, var in SIZE_VARS.items():
        _SIZE.check(var, getattr(settings, name))


def validate_request(request: TurnRequest, sizes: InputSizes, now: float) -> TurnRequest:
    """The turn request as the node takes it, or ``InputRefused``: its config checked
    (``check_config``), its texts and attachments within ``sizes``, its ``ts`` within the
    window of ``now`` (else ``now``, the sender's kept: ``client_ts``)."""
    check_config(request.config)
    _bytes("text", request.text, sizes.max_text_bytes, "ACTLINE_MAX_TEXT_BYTES")
    _bytes("user_id", request.user_id, MAX_USER_ID_BYTES)
    _bytes("timezone", request.timezone, MAX_TIMEZONE_BYTES)
    _attachments(request.attachments, sizes)
    return stamped(request, now)


def validate_input(msg: Followup | Feedback, sizes: InputSizes, now: float) -> Followup | Feedback:
    """A followup or feedback as the node takes it, or ``InputRefused``."""
    if isinstance(msg, Followup):
        _bytes("text", msg.text, sizes.max_text_bytes, "ACTLINE_MAX_TEXT_BYTES")
        _attachments(msg.attachments, sizes)
        return stamped(msg, now)
    _bytes("text", msg.text, sizes.max_feedback_bytes, "ACTLINE_MAX_FEEDBACK_BYTES")
    if msg.rating not in RATINGS:
        raise InputRefused("rating", _show(msg.rating), "-1, 0 or 1")
    return stamped(msg, now)


def validate_done(msg: DoneSignal, sizes: InputSizes, now: float) -> DoneSignal:
    """A DONE as the node takes it, or ``InputRefused``: its summary and its artifacts'
    texts within ``max_summary_bytes`` together, at most ``max_artifacts`` artifacts."""
    var = "ACTLINE_MAX_SUMMARY_BYTES"
    total = _bytes("summary", msg.summary, sizes.max_summary_bytes, var)
    _count("artifacts", msg.artifacts, sizes.max_artifacts, "ACTLINE_MAX_ARTIFACTS")
    for i, artifact in enumerate(msg.artifacts):
        _artifact(f"artifacts[{i}]", artifact)
        total += _size(artifact.text or "")
    if total > sizes.max_summary_bytes:
        raise InputRefused(
            "summary",
            f"{total} bytes with its artifacts' texts",
            f"{sizes.max_summary_bytes} bytes together ({var})",
        )
    return stamped(msg, now)


# --- timestamps -----------------------------------------------------------------------------


class TakenRequest(TurnRequest):
    """A turn request whose ``ts`` was outside the window: ``ts`` is the node's clock and
    ``client_ts`` the sender's. Made by ``stamped``; never sent on the wire."""

    client_ts: UtcDatetime


class TakenFollowup(Followup):
    """A followup whose ``ts`` was replaced by the node's clock (see ``TakenRequest``)."""

    client_ts: UtcDatetime


class TakenFeedback(Feedback):
    """A feedback whose ``ts`` was replaced by the node's clock (see ``TakenRequest``)."""

    client_ts: UtcDatetime


M = TypeVar("M", TurnRequest, Followup, Feedback, DoneSignal)

_TAKEN: Mapping[type[Any], type[Any]] = {
    TurnRequest: TakenRequest,
    Followup: TakenFollowup,
    Feedback: TakenFeedback,
}


def in_window(ts: datetime, now: float) -> bool:
    """Whether ``ts`` is within ``TS_PAST_S`` before and ``TS_FUTURE_S`` after ``now``."""
    return now - TS_PAST_S <= ts.timestamp() <= now + TS_FUTURE_S


def stamped(msg: M, now: float) -> M:
    """``msg`` when its ``ts`` is within the window of ``now``; else a copy whose ``ts``
    is ``now`` and whose ``client_ts`` is the sender's (a DONE's is only logged: a
    DONE's time is not recorded), with a warning."""
    if in_window(msg.ts, now):
        return msg
    clock = datetime.fromtimestamp(now, UTC)
    log.warning(
        "%s from %s: ts %s is outside the node's clock window (-%gs, +%gs); using %s",
        msg.kind,
        getattr(msg, "turn_id", None) or getattr(msg, "agent", ""),
        msg.ts.isoformat(),
        TS_PAST_S,
        TS_FUTURE_S,
        clock.isoformat(),
    )
    taken = _TAKEN.get(type(msg))
    if taken is None:
        return msg.model_copy(update={"ts": clock})
    fields = {name: getattr(msg, name) for name in type(msg).model_fields}
    result: M = taken(**{**fields, "ts": clock, "client_ts": msg.ts})
    return result


def client_ts(msg: object) -> str | None:
    """The sender's timestamp (ISO 8601) when the node replaced it, else None."""
    original = getattr(msg, "client_ts", None)
    return original.isoformat() if isinstance(original, datetime) else None


# --- helpers --------------------------------------------------------------------------------


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _bytes(field: str, text: str, limit: int, var: str = "") -> int:
    """The UTF-8 size of ``text``; ``InputRefused`` when it is over ``limit``."""
    if len(text) > limit:  # at least one byte a character: too big without encoding it
        size = len(text)
        shown = f"at least {size} bytes"
    else:
        size = _size(text)
        shown = f"{size} bytes"
    if size > limit:
        raise InputRefused(field, shown, _per(limit, "bytes", var))
    return size


def _count(field: str, items: Sequence[object], limit: int, var: str) -> None:
    if len(items) > limit:
        raise InputRefused(field, f"{len(items)} items", _per(limit, "items", var))


def _attachments(attachments: Sequence[Attachment], sizes: InputSizes) -> None:
    _count("attachments", attachments, sizes.max_attachments, "ACTLINE_MAX_ATTACHMENTS")
    total = 0
    for i, attachment in enumerate(attachments):
        field = f"attachments[{i}]"
        _bytes(f"{field}.name", attachment.name, MAX_NAME_BYTES)
        _bytes(f"{field}.mime", attachment.mime, MAX_NAME_BYTES)
        _bytes(f"{field}.ref", attachment.ref or "", MAX_REF_BYTES)
        if attachment.data is None:
            continue
        try:
            fi_path("turn", "user.attachments", attachment.name)
        except PathError:
            limit = "one file name: no '/', '..' or control characters, at most 255 characters"
            raise InputRefused(f"{field}.name", _show(attachment.name), limit) from None
        size = len(attachment.data)
        if size > sizes.max_attachment_bytes:
            limit = _per(sizes.max_attachment_bytes, "bytes", "ACTLINE_MAX_ATTACHMENT_BYTES")
            raise InputRefused(f"{field}.data", f"{size} bytes", limit)
        total += size
    if total > sizes.max_attachments_bytes:
        limit = _per(sizes.max_attachments_bytes, "bytes", "ACTLINE_MAX_ATTACHMENTS_BYTES")
        raise InputRefused("attachments", f"{total} bytes of data together", limit)


def _artifact(field: str, artifact: ArtifactRef) -> None:
    _bytes(f"{field}.path", artifact.path, MAX_REF_BYTES)
    _bytes(f"{field}.mime", artifact.mime, MAX_NAME_BYTES)


def _per(limit: int, unit: str, var: str) -> str:
    return f"{limit} {unit} ({var})" if var else f"{limit} {unit}"


def _plain(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


def _key(key: object) -> str:
    if isinstance(key, str) and len(key) <= 40:
        return key
    return _show(key)


def _show(value: object) -> str:
    """A short description of a refused value (never its whole text)."""
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, int):
        if abs(value) >= 10**18:
            return f"a {value.bit_length()}-bit integer"
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"{value[:40]!r}… ({len(value)} characters)"
    return f"a {type(value).__name__}"
