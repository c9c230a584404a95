"""What one interop turn came to, and the checks every turn must pass whatever the model.

A ``TurnRecord`` is read off the turn's wire events (its ``react.progress`` cards, its
``stream.delta`` pieces, its ``turn.result``) or, for ``actline ask`` in a child process,
off the result it printed and the timeline it stored. ``problems`` lists what a turn did
wrong by the runtime's own contract, for any model: it ended in a status a turn may end
in, with an answer, without an error the runtime did not classify, and with no more repair
rounds in a row than ``max_repair_rounds``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from actline.actors.configuration.turn_settings import MAX_REPAIRS
from actline.messages import ReActProgress, ReActResult, StreamDelta, TurnRequest
from actline.timeline.blocks import NOTICE, TOOL_CALL

TURN_TARGET_S = 120.0
"""What a turn should take at most against llama-server on two cores: a figure the bench
reports (turns over it), not a test's assertion."""
STATUSES = ("completed", "protocol_failed", "budget_exhausted", "failed")
"""How a turn of the suite may end (nothing here cancels one)."""
BEST_EFFORT = ("protocol_failed", "budget_exhausted")
"""Statuses whose answer is the best the runtime could salvage."""
VIOLATION = "protocol_violation."
"""How the detail of a notice card (and the code of a notice block) starts when a reply
broke the decision protocol."""
MODEL_FAILURES = (
    "context_window",
    "model_unavailable",
    "model_stream",
    "model_request",
    "model_config",
    "model_timeout",
    "model_error",
)
"""The codes the model streamer gives a failed model call."""
CLASSIFIED = {
    "failed": re.compile(
        rf"^(model call failed: ({'|'.join(MODEL_FAILURES)}): |\d+ decisions in a row were refused)"
    ),
    "protocol_failed": re.compile(r"^the model broke the decision protocol "),
    "budget_exhausted": re.compile(r"^(max_iterations|token budget) \("),
}
"""The error forms of each status that ends a turn short of an answer."""
NEVER = ("Traceback (most recent call last)", "internal_error", "the runtime failed")
"""Marks of an error nothing classified, whatever the status."""


def unclassified(status: str, error: str | None) -> str | None:
    """``error`` when the runtime did not classify it (a crash, an internal error, a form
    no status of the turn protocol gives), else None."""
    if not error:
        return None
    if any(mark in error for mark in NEVER):
        return error
    form = CLASSIFIED.get(status)
    if form is not None and form.search(error) is None:
        return error
    return None


def runs(rounds: Iterable[int]) -> list[list[int]]:
    """``rounds`` split into runs of consecutive numbers, in order."""
    out: list[list[int]] = []
    for number in sorted(set(rounds)):
        if out and number == out[-1][-1] + 1:
            out[-1].append(number)
        else:
            out.append([number])
    return out


@dataclass
class TurnRecord:
    """One turn of a scenario: how it ended, how the model kept to the protocol, timings."""

    scenario: str
    turn: int
    status: str
    answer: str
    error: str | None
    rounds: int
    """Model calls the turn made."""
    violations: int
    """Model calls whose reply got a ``protocol_violation.*`` notice."""
    repair_runs: tuple[int, ...]
    """Per run of such replies in a row, the model calls made to repair them."""
    seconds: float | None = None
    """From the submit to the result (node timestamps)."""
    first_token_s: float | None = None
    """From the submit to the first streamed piece of any channel."""
    sources: tuple[int, ...] = ()
    handed_off: bool | None = None
    """Scenarios with an outside agent: whether the model sent it a task."""
    followup_joined: bool | None = None
    """Scenarios with a followup: whether it joined the running turn."""
    conversation_id: str = ""
    turn_id: str = ""
    notes: list[str] = field(default_factory=list)
    """What the scenario saw besides the figures (a model that never handed off, ...)."""

    @property
    def repair_rounds(self) -> int:
        return sum(self.repair_runs)

    @property
    def parsed_calls(self) -> int:
        """Model calls whose reply kept to the decision protocol."""
        return max(self.rounds - self.violations, 0)

    @property
    def best_effort(self) -> bool:
        return self.status in BEST_EFFORT

    def problems(self) -> list[str]:
        """What the runtime did wrong in this turn, whatever the model said."""
        found: list[str] = []
        where = f"{self.scenario}[{self.turn}]"
        if self.status not in STATUSES:
            found.append(f"{where}: ended {self.status!r} ({self.error})")
        if not self.answer.strip():
            found.append(f"{where}: ended {self.status} without an answer ({self.error})")
        wrong = unclassified(self.status, self.error)
        if wrong is not None:
            found.append(f"{where}: unclassified error: {wrong[:500]}")
        run = max(self.repair_runs, default=0)
        if run > MAX_REPAIRS:
            found.append(f"{where}: {run} repair rounds in a row (at most {MAX_REPAIRS})")
        return found

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["repair_rounds"] = self.repair_rounds
        out["parsed_calls"] = self.parsed_calls
        return out


def seconds_between(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds()


def from_events(
    scenario: str,
    turn: int,
    request: TurnRequest | None,
    events: Sequence[Any],
    result: ReActResult,
) -> TurnRecord:
    """The record of a turn this process followed on the wire."""
    cards = [e for e in events if isinstance(e, ReActProgress)]
    violating = {c.round for c in cards if c.phase == "notice" and c.detail.startswith(VIOLATION)}
    deltas = [e for e in events if isinstance(e, StreamDelta)]
    seconds = first = None
    if request is not None:
        seconds = seconds_between(request.ts, result.ts)
        if deltas:
            first = seconds_between(request.ts, min(d.ts for d in deltas))
    return TurnRecord(
        scenario=scenario,
        turn=turn,
        status=result.status,
        answer=result.answer,
        error=result.error,
        rounds=result.rounds,
        violations=len(violating),
        repair_runs=tuple(sum(1 for r in run if r < result.rounds) for run in runs(violating)),
        seconds=seconds,
        first_token_s=first,
        sources=tuple(result.sources_used),
        conversation_id=result.conversation_id,
        turn_id=result.turn_id,
    )


def repair_runs_stored(blocks: Sequence[Any], status: str) -> tuple[int, tuple[int, ...]]:
    """The broken replies of a stored turn and the repair runs after them, from its blocks.

    A notice block's path names the round the turn was in when it was written (for a
    repair round, already the next one), so replies are counted in order instead: the
    ``protocol_violation.*`` notices between two accepted decisions (their tool calls) are
    one run; each was repaired unless it was the turn's last word (it ended without an
    answer after it)."""
    marks = [
        "V" if str(b.meta.get("code", "")).startswith(VIOLATION) else "D"
        for b in blocks
        if b.type == TOOL_CALL
        or (b.type == NOTICE and str(b.meta.get("code", "")).startswith(VIOLATION))
    ]
    found = [len(run) for run in "".join(marks).split("D") if run]
    if found and marks[-1] == "V" and status != "completed":
        found[-1] -= 1
    return marks.count("V"), tuple(found)


RECORDS_ENV = "ACTLINE_INTEROP_RECORDS"
"""A JSON-lines file the llama tests append their turns and the server's facts to (``make
interop`` sets it), so that ``python -m bench.interop --records FILE`` reports the run the
tests made instead of running every turn again."""
_TIMING = re.compile(r"(prompt eval|eval) time =\s*([\d.]+) ms /\s*(\d+) tokens")


def keep(line: Mapping[str, Any]) -> None:
    """Append ``line`` to the records file, when one is set."""
    path = os.environ.get(RECORDS_ENV)
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")


def keep_turns(api: str, records: Sequence[TurnRecord]) -> None:
    for record in records:
        keep({"api": api, **record.as_json()})


def from_json(data: Mapping[str, Any]) -> TurnRecord:
    """The record ``as_json`` wrote (its derived figures dropped)."""
    names = {f.name for f in fields(TurnRecord)}
    values = {k: v for k, v in data.items() if k in names}
    values["repair_runs"] = tuple(values.get("repair_runs", ()))
    values["sources"] = tuple(values.get("sources", ()))
    return TurnRecord(**values)


def load(path: Path) -> tuple[dict[str, Any], dict[str, list[TurnRecord]]]:
    """The server facts and the turns per API of a records file."""
    server: dict[str, Any] = {}
    turns: dict[str, list[TurnRecord]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        if "server" in data:
            server = data["server"]
        else:
            turns.setdefault(str(data.pop("api")), []).append(from_json(data))
    return server, turns


def server_timings(log: str) -> dict[str, list[float]]:
    """What llama-server's own log says of each request: the seconds it took to read the
    prompt (its time to the first token) and the tokens per second it wrote."""
    prompt: list[float] = []
    writing: list[float] = []
    for kind, ms, tokens in _TIMING.findall(log):
        seconds = float(ms) / 1000
        if kind == "prompt eval":
            prompt.append(seconds)
        elif seconds > 0 and int(tokens) > 0:
            writing.append(int(tokens) / seconds)
    return {"prompt_s": prompt, "tokens_per_s": writing}
