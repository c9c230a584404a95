"""Working memory: plans, plan acknowledgements in notes, and tags of internal notes.

A conversation keeps its plans in a ``PlanBook``. At most one plan is current;
``react.plan`` with mode ``new`` or ``replace`` makes a plan current at once,
``activate`` makes an open plan current again, and ``close`` ends a plan. Open
plans never become current on their own, and only the current plan accepts
acknowledgements.

A plan is complete when every step is done or failed: it stays current but is no
longer active (``PlanBook.active``), so ANNOUNCE stops showing it.

Acknowledgements are note lines such as ``✓ 1. Gather sources`` or ``- [x] [2]``:
a marker (``✓ ✔ [x]`` done, ``✗ ✘`` failed, ``… ...`` in progress, ``□ [ ]``
pending), then the step number as ``[n]``, ``n``, ``n.``, ``n:`` or ``n)``.

``revision`` counts the snapshots of one plan: every call that changes a plan
returns a new snapshot with ``revision + 1``. Demoting the previous current
plan to ``open`` is a side effect that writes no snapshot and keeps its
revision, so replaying the returned snapshots through ``PlanBook.load`` in
order rebuilds the same book. This module builds no blocks and does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from .errors import PlanError

StepStatus = Literal["pending", "in_progress", "done", "failed"]
PlanState = Literal["open", "current", "closed"]

STEP_STATUSES: Final[tuple[StepStatus, ...]] = ("pending", "in_progress", "done", "failed")
PLAN_STATES: Final[tuple[PlanState, ...]] = ("open", "current", "closed")
PLAN_MODES: Final[tuple[str, ...]] = ("new", "activate", "replace", "close")
MARKS: Final[Mapping[StepStatus, str]] = {
    "done": "\u2713",
    "failed": "\u2717",
    "in_progress": "\u2026",
    "pending": "\u25a1",
}
MAX_STEPS: Final = 50
MAX_LABEL: Final = 500
NOTE_TAGS: Final[Mapping[str, str]] = {
    "P": "preference",
    "D": "decision",
    "S": "technical structure",
    "A": "achievement",
    "K": "key artifact",
}

_ID_RE = re.compile(r"[A-Za-z0-9_\-:]{1,128}")  # the id grammar of actline.timeline.paths
_MARK_STATUS: Final[Mapping[str, StepStatus]] = {
    **{"\u2713": "done", "\u2714": "done", "[x]": "done", "\u2717": "failed", "\u2718": "failed"},
    **{"\u2026": "in_progress", "...": "in_progress", "\u25a1": "pending", "[ ]": "pending"},
}
_ACK_RE = re.compile(
    r"\s*(?:[-*]\s+)?"
    r"(?P<mark>[\u2713\u2714\u2717\u2718\u2026\u25a1]|\[[xX ]\]|\.\.\.)\ufe0f?"
    r"\s*(?:\[\s*(?P<bracketed>\d{1,6})\s*\]|(?P<bare>\d{1,6})(?:[.:)]|(?=\s|$)))"
)
_TAG_RE = re.compile(r"\s*(?:[-*]\s+)?\[([PDSAK])\]\s*(.*)")


def _bad(detail: str) -> PlanError:
    return PlanError("plan_steps", detail)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class PlanStep:
    """One step of a plan; ``n`` is its 1-based position."""

    n: int
    label: str
    status: StepStatus = "pending"

    def __post_init__(self) -> None:
        if not _is_int(self.n) or self.n < 1:
            raise _bad(f"step number {self.n!r} is not a positive integer")
        if not isinstance(self.label, str) or not self.label.strip():
            raise _bad(f"step {self.n} has no label")
        if self.status not in STEP_STATUSES:
            raise _bad(f"step {self.n} has unknown status {self.status!r}")

    @property
    def line(self) -> str:
        """The announce line, e.g. ``✓ 1. Gather sources``."""
        return f"{MARKS[self.status]} {self.n}. {self.label}"


@dataclass(frozen=True, slots=True)
class Plan:
    """One snapshot of a plan: what a ``react.plan`` block stores."""

    plan_id: str
    origin_turn_id: str
    steps: tuple[PlanStep, ...]
    state: PlanState = "current"
    revision: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.plan_id, str) or not _ID_RE.fullmatch(self.plan_id):
            raise _bad(f"plan_id {self.plan_id!r} is not a valid id")
        if not isinstance(self.origin_turn_id, str):
            raise _bad("origin_turn_id must be a string")
        if not isinstance(self.steps, tuple) or not self.steps:
            raise _bad("a plan needs a non-empty tuple of steps")
        for n, step in enumerate(self.steps, start=1):
            if not isinstance(step, PlanStep) or step.n != n:
                raise _bad(f"step {n} is missing or out of order")
        if self.state not in PLAN_STATES:
            raise _bad(f"unknown plan state {self.state!r}")
        if not _is_int(self.revision) or self.revision < 1:
            raise _bad(f"revision {self.revision!r} is not a positive integer")

    def to_dict(self) -> dict[str, Any]:
        """The JSON-safe data of the ``react.plan`` block."""
        return {
            "plan_id": self.plan_id,
            "origin_turn_id": self.origin_turn_id,
            "state": self.state,
            "revision": self.revision,
            "steps": [{"n": s.n, "label": s.label, "status": s.status} for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Plan:
        """Validate and rebuild a snapshot; ``state`` and ``revision`` default as in a new plan."""
        if not isinstance(d, Mapping):
            raise _bad("a plan snapshot must be an object")
        raw = d.get("steps")
        if not isinstance(raw, list | tuple):
            raise _bad("steps must be a list")
        steps: list[PlanStep] = []
        for item in raw:
            if not isinstance(item, Mapping):
                raise _bad("every step must be an object")
            steps.append(
                PlanStep(item.get("n", 0), item.get("label", ""), item.get("status", "pending"))
            )
        return cls(
            plan_id=d.get("plan_id", ""),
            origin_turn_id=d.get("origin_turn_id", ""),
            steps=tuple(steps),
            state=d.get("state", "current"),
            revision=d.get("revision", 1),
        )

    def lines(self) -> list[str]:
        """Announce lines, one per step: ``✓ 1. Gather sources``, ``□ 2. Draft``."""
        return [step.line for step in self.steps]

    @property
    def complete(self) -> bool:
        """True when every step is done or failed."""
        return all(step.status in ("done", "failed") for step in self.steps)

    def completed_line(self) -> str:
        """The one-time notice of a completed plan, e.g. ``plan p1 completed: all 3 steps
        done`` or ``plan p1 completed: 2 of 3 steps done, 1 failed``."""
        total = len(self.steps)
        done = sum(step.status == "done" for step in self.steps)
        steps = f"{total} step{'s' if total != 1 else ''}"
        if done == total:
            counted = f"all {steps} done" if total > 1 else "its one step done"
        else:
            counted = f"{done} of {steps} done, {total - done} failed"
        return f"plan {self.plan_id} completed: {counted}"


@dataclass(frozen=True, slots=True)
class AckUpdate:
    """A step status read from one acknowledgement line of the notes."""

    n: int
    status: StepStatus
    line: str


def parse_ack_lines(notes: str) -> list[AckUpdate]:
    """Read acknowledgement lines from notes; other lines are ignored.

    When a step appears twice the last line wins and keeps the first one's position.
    """
    found: dict[int, AckUpdate] = {}
    for raw in notes.splitlines():
        match = _ACK_RE.match(raw)
        if match is None:
            continue
        n = int(match["bracketed"] or match["bare"])
        found[n] = AckUpdate(n, _MARK_STATUS[match["mark"].lower()], raw.strip())
    return list(found.values())


def ack_text(plan: Plan, updates: Sequence[AckUpdate]) -> str:
    """The text of a ``react.plan.ack`` block: ``plan plan_1: ✓ 1. Gather · … 2. Draft``."""
    parts = [
        PlanStep(u.n, plan.steps[u.n - 1].label, u.status).line
        for u in updates
        if 1 <= u.n <= len(plan.steps)
    ]
    return f"plan {plan.plan_id}: " + (" \u00b7 ".join(parts) if parts else "no step updates")


def _labels(steps: Sequence[str] | None, mode: str) -> list[str]:
    """Validated step labels; runs of whitespace become one space."""
    if steps is None:
        raise _bad(f"steps are required for mode={mode}")
    if isinstance(steps, str) or not isinstance(steps, Sequence):
        raise _bad("steps must be a list of strings")
    if not steps:
        raise _bad("steps must not be empty")
    if len(steps) > MAX_STEPS:
        raise _bad(f"{len(steps)} steps; at most {MAX_STEPS} are allowed")
    labels = []
    for n, raw in enumerate(steps, start=1):
        if not isinstance(raw, str):
            raise _bad(f"step {n} is not a string")
        label = " ".join(raw.split())
        if not label:
            raise _bad(f"step {n} is empty")
        if len(label) > MAX_LABEL:
            raise _bad(f"step {n} is longer than {MAX_LABEL} characters")
        labels.append(label)
    return labels


class PlanBook:
    """All plans of a conversation and which one is current (at most one)."""

    def __init__(self) -> None:
        self._plans: dict[str, Plan] = {}
        self._current: str | None = None
        self._dirty: dict[str, None] = {}

    @property
    def current(self) -> Plan | None:
        """The plan that accepts acknowledgements, if any."""
        return None if self._current is None else self._plans[self._current]

    @property
    def active(self) -> Plan | None:
        """The current plan while a step of it is left (pending or in progress): the plan
        ANNOUNCE shows. A complete plan stays current (a later acknowledgement can reopen a
        step) but is no longer announced."""
        plan = self.current
        return None if plan is None or plan.complete else plan

    def get(self, plan_id: str) -> Plan | None:
        """The latest snapshot of ``plan_id``."""
        return self._plans.get(plan_id)

    def plans(self) -> list[Plan]:
        """Every plan, in order of creation."""
        return list(self._plans.values())

    def apply(
        self,
        mode: str,
        *,
        turn_id: str,
        plan_id: str | None = None,
        steps: Sequence[str] | None = None,
        new_id: Callable[[], str] | None = None,
    ) -> Plan:
        """Run one ``react.plan`` call and return the snapshot to record.

        Activating the current plan or closing a closed one changes nothing and
        returns the plan as it is (same revision). Raises ``PlanError``.
        """
        op = mode.strip().lower() if isinstance(mode, str) else ""
        if op not in PLAN_MODES:
            modes = " | ".join(PLAN_MODES)
            raise PlanError("plan_mode", f"unknown mode {mode!r}; use {modes}")
        if op == "new":
            labels = _labels(steps, op)
            if plan_id and not (isinstance(plan_id, str) and _ID_RE.fullmatch(plan_id)):
                detail = f"plan_id {plan_id!r} must be 1-128 of A-Z a-z 0-9 _ - : (no dots)"
                raise PlanError("plan_target_required", detail)
            if plan_id and plan_id in self._plans:
                raise PlanError("plan_mode", f"plan {plan_id} exists; use mode=replace")
            chosen = plan_id or self._fresh_id(new_id)
            new_steps = tuple(PlanStep(n, label) for n, label in enumerate(labels, start=1))
            return self._store(Plan(chosen, turn_id, new_steps))
        if not plan_id:
            raise PlanError("plan_target_required", f"plan_id is required for mode={op}")
        target = self._plans.get(plan_id)
        if target is None:
            raise PlanError("plan_target_missing", f"no plan {plan_id!r}")
        if op == "activate":
            if target.state == "closed":
                raise PlanError("plan_target_missing", f"plan {plan_id} is closed")
            if target.state == "current":
                return target
            return self._store(replace(target, state="current", revision=target.revision + 1))
        if op == "replace":
            kept = {(s.n, s.label): s.status for s in target.steps}
            new_steps = tuple(
                PlanStep(n, label, kept.get((n, label), "pending"))
                for n, label in enumerate(_labels(steps, op), start=1)
            )
            revision = target.revision + 1
            return self._store(replace(target, steps=new_steps, state="current", revision=revision))
        if target.state == "closed":
            return target
        return self._store(replace(target, state="closed", revision=target.revision + 1))

    def _fresh_id(self, new_id: Callable[[], str] | None) -> str:
        candidate = new_id() if new_id is not None else ""
        if _ID_RE.fullmatch(candidate) and candidate not in self._plans:
            return candidate
        k = len(self._plans) + 1
        while f"plan_{k}" in self._plans:
            k += 1
        return f"plan_{k}"

    def ack(self, updates: Sequence[AckUpdate]) -> tuple[Plan | None, list[str]]:
        """Apply acknowledgements to the current plan.

        Returns the new snapshot (None when nothing changed) and why updates were
        ignored. Raises ``PlanError("plan_ack_updates")`` for malformed updates.
        """
        for u in updates:
            if not isinstance(u, AckUpdate) or not _is_int(u.n) or u.status not in STEP_STATUSES:
                raise PlanError("plan_ack_updates", f"not a valid acknowledgement: {u!r}")
        if not updates:
            return None, []
        plan = self.current
        if plan is None:
            return None, ["no current plan"]
        steps = list(plan.steps)
        size = f"{len(steps)} step{'s' if len(steps) != 1 else ''}"
        ignored: list[str] = []
        changed = False
        for u in updates:
            if not 1 <= u.n <= len(steps):
                ignored.append(f"step {u.n} out of range (plan has {size})")
            elif steps[u.n - 1].status != u.status:
                steps[u.n - 1] = replace(steps[u.n - 1], status=u.status)
                changed = True
        if not changed:
            return None, ignored
        return self._store(replace(plan, steps=tuple(steps), revision=plan.revision + 1)), ignored

    def load(self, plan: Plan) -> None:
        """Replay a stored snapshot; its state wins (``current`` demotes the previous current)."""
        if not isinstance(plan, Plan):
            raise _bad(f"not a plan snapshot: {plan!r}")
        self._store(plan)

    def _store(self, plan: Plan) -> Plan:
        pid = plan.plan_id
        if plan.state == "current":
            if self._current is not None and self._current != pid:
                previous = self._plans[self._current]
                self._plans[self._current] = replace(previous, state="open")
                self._dirty[self._current] = None
            self._current = pid
        elif self._current == pid:
            self._current = None
        self._plans[pid] = plan
        self._dirty[pid] = None
        return plan

    def take_dirty(self) -> list[tuple[int, Plan]]:
        """Plans stored or demoted since the last take, with their creation position.

        The position orders the plans when a book is rebuilt from these rows
        (``from_rows``). A book from ``from_rows`` or ``from_dict`` starts clean.
        """
        dirty, self._dirty = self._dirty, {}
        order = {pid: i for i, pid in enumerate(self._plans)}
        return [(order[pid], self._plans[pid]) for pid in dirty if pid in self._plans]

    def mark_dirty(self, plan_ids: Iterable[str] | None = None) -> None:
        """Report ``plan_ids`` (every plan when None) again on the next ``take_dirty``."""
        ids = self._plans if plan_ids is None else [p for p in plan_ids if p in self._plans]
        self._dirty.update(dict.fromkeys(ids))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe state: the current plan id and every plan's latest snapshot."""
        return {"current": self._current, "plans": [p.to_dict() for p in self._plans.values()]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PlanBook:
        """Rebuild a book from ``to_dict`` output; raises ``PlanError("plan_steps")``."""
        if not isinstance(d, Mapping) or not isinstance(d.get("plans"), list | tuple):
            raise _bad("a plan book must be an object with a list of plans")
        book = cls()
        for raw in d["plans"]:
            book.load(Plan.from_dict(raw))
        if d.get("current", book._current) != book._current:
            raise _bad(f"current {d.get('current')!r} does not match the plan states")
        book._dirty = {}
        return book

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, Mapping[str, Any]]]) -> PlanBook:
        """Rebuild a book from ``(position, plan dict)`` rows (see ``take_dirty``), any order.

        Loading by position replays the plans in creation order; with every plan's
        latest snapshot at most one is current. Raises ``PlanError("plan_steps")``.
        """
        book = cls()
        for _, raw in sorted(rows, key=lambda row: row[0]):
            book.load(Plan.from_dict(raw))
        book._dirty = {}
        return book


@dataclass(frozen=True, slots=True)
class NoteLine:
    """One line of an internal note; ``tag`` is a key of ``NOTE_TAGS`` or None."""

    tag: str | None
    text: str


def parse_note(text: str) -> list[NoteLine]:
    """One entry per non-empty line; a tag is ``[P]`` etc. at the start, after a bullet."""
    result: list[NoteLine] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        match = _TAG_RE.match(raw)
        if match is None:
            result.append(NoteLine(None, raw.strip()))
        else:
            result.append(NoteLine(match[1], match[2].strip()))
    return result


def note_tags(text: str) -> list[str]:
    """The tags of a note, each once, in order of first appearance."""
    return list(dict.fromkeys(line.tag for line in parse_note(text) if line.tag is not None))


def format_note(lines: Sequence[NoteLine]) -> str:
    """Write note lines back as text; ``parse_note`` reads the result as ``lines``."""
    out: list[str] = []
    for line in lines:
        if line.tag is None:
            out.append(line.text)
        else:
            out.append(f"[{line.tag}] {line.text}" if line.text else f"[{line.tag}]")
    return "\n".join(out)
