"""The decision channel's contract: ``ReactDecision``, its validation and the per-turn guards.

Pure code. ``check_decision`` turns the raw decision channel into the calls to
run plus ``Notice``s the model sees next round as ``react.notice`` blocks with
code ``protocol_violation.<code>``. Nothing here raises on model output: a bad
decision is a notice, never a crash. ``CallLedger`` refuses the fourth identical
call of a turn (same tool, same canonical arguments with sorted keys).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from actline.channels import strip_fence
from actline.tools.react.base import write_order_notice

from .events import ToolSpec

MAX_CALLS_PER_DECISION = 5
MAX_IDENTICAL_CALLS = 3

REACT_PARAMS: Mapping[str, tuple[str, ...]] = {
    "react.read": ("paths",),
    "react.write": ("path", "channel", "content", "kind", "scratchpad"),
    "react.pull": ("paths",),
    "react.patch": ("path", "patch", "channel", "kind"),
    "react.checkout": ("paths", "mode"),
    "react.hide": ("path", "replacement"),
    "react.memsearch": ("query", "targets", "top_k", "days"),
    "react.search_files": ("root", "name_regex", "content_regex", "max_bytes", "max_hits"),
    "react.search_knowledge": ("query", "top_k"),
    "react.plan": ("mode", "steps", "plan_id"),
    "agent.send": ("name", "text"),
}
"""The in-loop tools and the parameters each accepts."""
REQUIRED: Mapping[str, tuple[str, ...]] = {
    "react.read": ("paths",),
    "react.write": ("path", "channel", "content"),
    "react.pull": ("paths",),
    "react.patch": ("path", "patch"),
    "react.checkout": ("paths",),
    "react.hide": ("path",),
    "react.memsearch": ("query",),
    "react.search_knowledge": ("query",),
    "react.plan": ("mode",),
    "agent.send": ("name", "text"),
}


class _CallSchema(BaseModel):
    """The JSON schema of one call in the decision channel (parsed into ``ToolSpec``)."""

    model_config = ConfigDict(extra="ignore")

    tool: str = Field(min_length=1, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict)


class ReactDecision(BaseModel):
    """What the decision channel must hold: one JSON object."""

    model_config = ConfigDict(extra="ignore")

    action: Literal["call_tools", "complete", "exit"]
    calls: list[_CallSchema] = Field(default_factory=list)
    notes: str = ""


@dataclass(frozen=True, slots=True)
class Notice:
    """A protocol violation or refusal the model sees next round."""

    code: str
    message: str
    tool: str | None = None

    @property
    def full_code(self) -> str:
        return f"protocol_violation.{self.code}"


@dataclass(frozen=True, slots=True)
class Checked:
    """The outcome of one decision: what to do, and what to tell the model."""

    action: Literal["call_tools", "complete", "exit"] | None
    calls: tuple[ToolSpec, ...] = ()
    notes: str = ""
    notices: tuple[Notice, ...] = ()

    @property
    def valid(self) -> bool:
        """False when the decision could not be used at all (the round is retried)."""
        return self.action is not None and (self.action != "call_tools" or bool(self.calls))


def canonical(tool: str, params: Mapping[str, Any]) -> str:
    """The identity of a call: tool plus its arguments as JSON with sorted keys."""
    return tool + " " + json.dumps(params, sort_keys=True, ensure_ascii=False, default=str)


def _schema_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "decision"
    return f"{where}: {first.get('msg', 'invalid')}"


def check_call(call: ToolSpec, external: Iterable[str] = ()) -> Notice | None:
    """Why ``call`` cannot run, or None. ``external`` names the registry's tools."""
    tool = call.tool
    allowed = REACT_PARAMS.get(tool)
    if allowed is None:
        if tool in set(external):
            return None
        return Notice(
            "unknown_tool_id",
            f"Tool {tool!r} does not exist. Use one of the tools listed in the system prompt.",
            tool,
        )
    extra = sorted(set(call.params) - set(allowed))
    if extra:
        return Notice(
            "bad_params",
            f"{tool} does not take {', '.join(extra)}; it takes {', '.join(allowed)}.",
            tool,
        )
    missing = [p for p in REQUIRED.get(tool, ()) if p not in call.params]
    if missing:
        return Notice("bad_params", f"{tool} needs {', '.join(missing)}.", tool)
    if tool in ("react.read", "react.pull", "react.checkout") and not (
        isinstance(call.params["paths"], list)
        and call.params["paths"]
        and all(isinstance(p, str) for p in call.params["paths"])
    ):
        return Notice("bad_params", f"{tool}: paths must be a non-empty list of strings.", tool)
    if tool == "react.write":
        order = write_order_notice(call.params)
        return None if order is None else Notice(order.code, order.message, tool)
    return None


def check_decision(
    raw: str,
    *,
    external: Iterable[str] = (),
    max_calls: int = MAX_CALLS_PER_DECISION,
    answer: str = "",
    round_: int = 0,
) -> Checked:
    """Validate the raw decision channel; never raises on model output.

    Calls beyond ``max_calls`` are refused with a notice and the first ones run;
    a call that fails its checks is refused alone. ``complete`` with calls drops
    the calls (notice ``final_answer_with_tool_call``); ``call_tools`` together
    with a non-empty ``answer`` channel completes instead, as the original did.
    """
    text = strip_fence(raw).strip()
    if not text:
        return Checked(
            None,
            notices=(Notice("missing_decision", "Write one JSON object in the decision channel."),),
        )
    try:
        data = json.loads(text)
    except ValueError as exc:
        return Checked(None, notices=(Notice("schema_error", f"The decision is not JSON: {exc}."),))
    if (
        isinstance(data, dict)
        and isinstance(data.get("action"), str)
        and data["action"]
        not in (
            "call_tools",
            "complete",
            "exit",
        )
    ):
        message = (
            f"Action {data['action']!r} is not allowed. Allowed: call_tools | complete | exit."
        )
        return Checked(None, notices=(Notice(f"invalid_action:{data['action']}"[:120], message),))
    try:
        decision = ReactDecision.model_validate(data)
    except ValidationError as exc:
        return Checked(
            None, notices=(Notice("schema_error", f"Bad decision: {_schema_error(exc)}."),)
        )
    notices: list[Notice] = []
    if decision.action != "call_tools":
        if decision.calls:
            notices.append(
                Notice(
                    "final_answer_with_tool_call",
                    "A final decision carries no calls; they were dropped.",
                )
            )
        return Checked(decision.action, notes=decision.notes, notices=tuple(notices))
    if answer.strip():
        notices.append(
            Notice(
                "final_answer_with_tool_call",
                "The answer channel was written with tool calls; "
                "the turn completes with that answer.",
            )
        )
        return Checked("complete", notes=decision.notes, notices=tuple(notices))
    if not decision.calls:
        notices.append(Notice("missing_tool_id", "call_tools needs 1 to 5 calls."))
        return Checked(None, notes=decision.notes, notices=tuple(notices))
    runnable: list[ToolSpec] = []
    for index, call in enumerate(decision.calls):
        if index >= max_calls:
            notices.append(
                Notice(
                    "too_many_calls",
                    f"At most {max_calls} calls per decision; "
                    f"call {index + 1} ({call.tool}) was not run.",
                    call.tool,
                )
            )
            continue
        spec = ToolSpec(f"c{round_}-{len(runnable) + 1}", call.tool, dict(call.params))
        problem = check_call(spec, external)
        if problem is not None:
            notices.append(problem)
        else:
            runnable.append(spec)
    return Checked("call_tools", tuple(runnable), decision.notes, tuple(notices))


@dataclass
class CallLedger:
    """Counts identical calls in one turn and refuses the fourth.

    A call is counted by a digest of its ``canonical`` form, so that a turn's checkpoint
    keeps the counts small (``counts``) and a resumed turn goes on counting (``of``)."""

    limit: int = MAX_IDENTICAL_CALLS
    seen: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, counts: Mapping[str, int] | None) -> CallLedger:
        """A ledger holding ``counts`` (as ``counts`` gave them; None: nothing counted)."""
        return cls(seen=Counter({str(k): int(n) for k, n in (counts or {}).items()}))

    def counts(self) -> dict[str, int]:
        """The calls counted so far, by digest."""
        return dict(self.seen)

    def admit(self, call: ToolSpec) -> Notice | None:
        key = _digest(canonical(call.tool, call.params))
        if self.seen[key] >= self.limit:
            return Notice(
                "repeated_call",
                f"{call.tool} was already called {self.limit} times with these exact parameters "
                "in this turn; use the results you have or change the parameters.",
                call.tool,
            )
        self.seen[key] += 1
        return None


def _digest(key: str) -> str:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
