"""What a Ray job's batch of turns came to, by kind of answer: the job's closing lines.

Every ``turn.result`` is one of:

- ``sourced``: completed, and its answer cites at least one source (``sources_used``: the
  SIDs it cites that resolved against the turn's sources);
- ``unsourced``: completed without citing a source: the model answered from nothing it
  read, or declined (the offline model's "The documents do not cover …", counted apart as
  ``declined``). Many of these in a batch mean the knowledge folder is wrong or missing;
- ``best_effort``: the turn ran out of its budget or the model kept breaking the decision
  protocol, and it ended with a best-effort answer (``budget_exhausted``,
  ``protocol_failed``);
- ``failed``: failed or cancelled, with its ``error``;
- ``timed_out``: no result came within the job's ``--timeout`` (the driver records it as a
  failed result whose error starts with ``TIMED_OUT``).

The job exits 0 only when every turn completed (``sourced`` or ``unsourced``). Pure: it
reads result objects, or the results file's lines decoded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from actline.llm.extractive import DECLINE
from actline.messages import ReActResult

__all__ = ["TIMED_OUT", "AnswerKind", "Summary", "answer_kind", "summarise"]

AnswerKind = Literal["sourced", "unsourced", "best_effort", "failed", "timed_out"]
TIMED_OUT = "no result within"
"""How the error of a turn whose result did not come in time starts."""
BEST_EFFORT = frozenset({"budget_exhausted", "protocol_failed"})
ANSWERED = frozenset({"sourced", "unsourced", "best_effort"})
"""The kinds that end with an answer."""


def answer_kind(result: ReActResult) -> AnswerKind:
    """Which of the kinds above ``result`` is."""
    if result.status == "completed":
        return "sourced" if result.sources_used else "unsourced"
    if result.status in BEST_EFFORT:
        return "best_effort"
    if result.status == "failed" and (result.error or "").startswith(TIMED_OUT):
        return "timed_out"
    return "failed"


def declined(result: ReActResult) -> bool:
    """Whether the answer is the notice that the documents do not cover the question."""
    return result.answer.lstrip().startswith(DECLINE)


@dataclass(frozen=True, slots=True)
class Summary:
    """How many turns of a batch are of each kind."""

    total: int = 0
    sourced: int = 0
    unsourced: int = 0
    declined: int = 0
    """Of ``unsourced``: the answers that say the documents do not cover the question."""
    best_effort: int = 0
    failed: int = 0
    timed_out: int = 0
    uncited: int = 0
    """The answers (completed or best effort) that cite no source."""

    @property
    def completed(self) -> int:
        return self.sourced + self.unsourced

    @property
    def all_completed(self) -> bool:
        """Every turn completed: the job's exit status is 0."""
        return self.completed == self.total

    @property
    def answers(self) -> int:
        """The turns that ended with an answer: completed or best effort."""
        return self.completed + self.best_effort

    def lines(self, docs: Path | None) -> list[str]:
        """The job's closing lines; ``docs``: the job's knowledge folder (None: none)."""
        declines = f" ({self.declined} declined: {DECLINE} …)" if self.declined else ""
        out = [
            f"{self.completed}/{self.total} turns completed: {self.sourced} citing sources, "
            f"{self.unsourced} citing none{declines}; {self.best_effort} best-effort "
            f"(budget or protocol spent), {self.failed} failed, {self.timed_out} timed out"
        ]
        uncited = self.uncited
        if uncited and docs is None:
            out.append(
                f"{uncited} of {self.answers} answers cite no source: the job has no "
                "knowledge folder (--no-docs); give it one with --docs DIR"
            )
        elif uncited:
            out.append(
                f"{uncited} of {self.answers} answers cite no source: is the knowledge folder "
                f"right? ({docs})"
            )
        return out


def summarise(results: Sequence[ReActResult]) -> Summary:
    """The counts of ``results`` by kind."""
    kinds = [answer_kind(r) for r in results]
    pairs = list(zip(results, kinds, strict=True))
    return Summary(
        total=len(results),
        sourced=kinds.count("sourced"),
        unsourced=kinds.count("unsourced"),
        declined=sum(1 for r, k in pairs if k == "unsourced" and declined(r)),
        best_effort=kinds.count("best_effort"),
        failed=kinds.count("failed"),
        timed_out=kinds.count("timed_out"),
        uncited=sum(1 for r, k in pairs if k in ANSWERED and not r.sources_used),
    )
