"""What a kill run came to: ``compare`` it with the same batch run without kills, and sum it
up in a ``Report`` (the figures: kills, turns compared, mismatches, what was lost,
kill-to-result times).

``compare`` checks per conversation that the stored turn order equals the submission order
with each turn's blocks contiguous (no interleaving) and each turn stored once (one header,
one prompt), and per turn that it got exactly one distinct result (the same result again is
counted as a duplicate) equal in status, answer, sources and follow-ups to the reference's,
with the same stored status and the same stored notices (paths and texts, in order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from actline.messages import ReActResult

from .killloop import Mode, RunRecord


@dataclass(frozen=True, slots=True)
class Mismatch:
    conversation_id: str
    turn_id: str
    what: str
    expected: str
    got: str

    def __str__(self) -> str:
        return f"{self.turn_id or self.conversation_id}: {self.what}: {self.expected} != {self.got}"


def _outcome(result: ReActResult) -> tuple[str, str, tuple[int, ...], tuple[str, ...]]:
    return (
        result.status,
        result.answer,
        tuple(result.sources_used),
        tuple(result.followups),
    )


def _first_difference(want: ReActResult, got: ReActResult) -> tuple[str, str]:
    """The first line of the answer that differs (else the sources or follow-ups), shortened."""
    ours, theirs = want.answer.splitlines(), got.answer.splitlines()
    for a, b in zip([*ours, ""], [*theirs, ""], strict=False):
        if a != b:
            return repr(a[:90]), repr(b[:90])
    if want.sources_used != got.sources_used:
        return f"sources {want.sources_used}", f"sources {got.sources_used}"
    return f"follow-ups {want.followups}", f"follow-ups {got.followups}"


def order_problems(record: RunRecord) -> list[Mismatch]:
    """Conversations whose stored turns are not the submission order, contiguous, once."""
    out = []
    for conv in record.plans:
        want = tuple(t.turn_id for t in conv.turns)
        got = record.stored[conv.conversation_id]
        cid = conv.conversation_id
        if got.runs != want:
            out.append(Mismatch(cid, "", "stored turn order", " ".join(want), " ".join(got.runs)))
        for tid in want:
            counts = (got.headers.get(tid, 0), got.prompts.get(tid, 0))
            if counts != (1, 1):
                out.append(Mismatch(cid, tid, "stored headers, prompts", "(1, 1)", str(counts)))
    return out


def compare(reference: RunRecord, run: RunRecord) -> list[Mismatch]:
    """Every way ``run`` differs from ``reference`` (the same batch without kills)."""
    out = order_problems(run)
    for conv in run.plans:
        for turn in conv.turns:
            cid, tid = conv.conversation_id, turn.turn_id
            want = reference.traces[tid].first_result
            trace = run.traces[tid]
            if want is None:
                raise AssertionError(f"the reference run has no result for {tid}")
            if not trace.results:
                out.append(Mismatch(cid, tid, "result", want.status, "lost"))
                continue
            distinct = {_outcome(r) for _, r in trace.results}
            if len(distinct) > 1:
                statuses = ", ".join(r.status for _, r in trace.results)
                out.append(Mismatch(cid, tid, "answered differently", "one result", statuses))
            got = trace.results[0][1]
            if got.status != want.status:
                out.append(Mismatch(cid, tid, "status", want.status, got.status))
            if _outcome(got)[1:] != _outcome(want)[1:]:
                out.append(Mismatch(cid, tid, "answer", *_first_difference(want, got)))
            stored = run.stored[cid].statuses.get(tid, "missing")
            expected = reference.stored[conv.conversation_id].statuses.get(tid, "missing")
            if stored != expected:
                out.append(Mismatch(cid, tid, "stored status", expected, stored))
            said = reference.stored[cid].notices.get(tid, ())
            heard = run.stored[cid].notices.get(tid, ())
            if heard != said:
                out.append(Mismatch(cid, tid, "notices", *_first_other(said, heard)))
    return out


def _first_other(want: tuple[str, ...], got: tuple[str, ...]) -> tuple[str, str]:
    """The first notice that differs (or the missing one), shortened."""
    for a, b in zip([*want, "(none)"], [*got, "(none)"], strict=False):
        if a != b:
            return repr(a[:120]), repr(b[:120])
    return f"{len(want)} notices", f"{len(got)} notices"


def percentile(samples: Sequence[float], q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass
class Report:
    """What a kill run came to, against its reference."""

    mode: Mode
    kills: int
    kills_mid_turn: int
    turns: int
    conversations: int
    mismatches: list[Mismatch]
    mismatched_turns: list[str]
    """Turns lost, answered twice differently, or with another status, answer or record."""
    lost: list[str]
    duplicates: int
    answered_twice_differently: list[str]
    conversations_out_of_order: list[str]
    kill_to_resume_s: list[float]
    quiet_kill_to_resume_s: list[float]
    """Resumes that no other kill came before (the resume-time target is about these)."""
    kill_to_result_s: list[float]
    """From the last kill that interrupted a turn to its result, later kills included."""
    quiet_kill_to_result_s: list[float]
    """The same, for kills that no other kill followed before the result."""
    restart_to_result_s: list[float]
    node_start_s: list[float]
    wall_s: float
    reference_wall_s: float
    drained: bool
    workdir: str

    @classmethod
    def of(cls, reference: RunRecord, run: RunRecord) -> Report:
        mismatches = compare(reference, run)
        times = _kill_times(run)
        return cls(
            mode=run.mode,
            kills=len(run.kills),
            kills_mid_turn=sum(1 for k in run.kills if k.running),
            turns=len(run.traces),
            conversations=len(run.plans),
            mismatches=mismatches,
            mismatched_turns=sorted({m.turn_id for m in mismatches if m.turn_id}),
            lost=[tid for tid, t in run.traces.items() if not t.results],
            duplicates=sum(max(0, len(t.results) - 1) for t in run.traces.values()),
            answered_twice_differently=sorted(
                {m.turn_id for m in mismatches if m.what == "answered differently"}
            ),
            conversations_out_of_order=sorted(
                {m.conversation_id for m in mismatches if m.what == "stored turn order"}
            ),
            kill_to_resume_s=times.resume,
            quiet_kill_to_resume_s=times.quiet_resume,
            kill_to_result_s=times.result,
            quiet_kill_to_result_s=times.quiet_result,
            restart_to_result_s=times.restart,
            node_start_s=list(run.start_s),
            wall_s=run.wall_s,
            reference_wall_s=reference.wall_s,
            drained=run.drained,
            workdir=str(run.workdir),
        )

    @property
    def mismatch_count(self) -> int:
        """Turns answered otherwise plus conversations stored out of order."""
        return len(self.mismatched_turns) + len(self.conversations_out_of_order)

    def summary(self) -> dict[str, Any]:
        """The figures, JSON-ready (seconds)."""

        def stats(samples: list[float]) -> dict[str, Any]:
            p50, top = percentile(samples, 0.5), max(samples) if samples else None
            return {"n": len(samples), "p50_s": p50, "max_s": top}

        return {
            "mode": self.mode,
            "kills": self.kills,
            "kills_mid_turn": self.kills_mid_turn,
            "turns_compared": self.turns,
            "conversations_compared": self.conversations,
            "mismatches": self.mismatch_count,
            "mismatched_turns": len(self.mismatched_turns),
            "lost": len(self.lost),
            "duplicates": self.duplicates,
            "answered_twice_differently": len(self.answered_twice_differently),
            "conversations_out_of_order": len(self.conversations_out_of_order),
            "kill_to_resume": stats(self.kill_to_resume_s),
            "quiet_kill_to_resume": stats(self.quiet_kill_to_resume_s),
            "kill_to_result": stats(self.kill_to_result_s),
            "quiet_kill_to_result": stats(self.quiet_kill_to_result_s),
            "restart_to_result": stats(self.restart_to_result_s),
            "node_start": stats(self.node_start_s),
            "wall_s": self.wall_s,
            "reference_wall_s": self.reference_wall_s,
            "drained": self.drained,
            "examples": [str(m) for m in self.mismatches[:10]],
        }

    def describe(self) -> str:
        """One paragraph for an assertion message."""
        s = self.summary()

        def secs(key: str) -> str:
            p50, top = s[key]["p50_s"], s[key]["max_s"]
            return "-" if p50 is None else f"p50 {p50:.1f} s, max {top:.1f} s"

        lines = [
            f"{self.mode}: {s['kills']} kills ({s['kills_mid_turn']} mid-turn), "
            f"{s['turns_compared']} turns compared, {s['mismatches']} mismatches "
            f"({s['mismatched_turns']} turns answered otherwise, "
            f"{s['conversations_out_of_order']} of {s['conversations_compared']} conversations "
            f"out of order), {s['lost']} lost, {s['duplicates']} duplicate results",
            f"kill to resume {secs('kill_to_resume')} (no other kill before it: "
            f"{secs('quiet_kill_to_resume')}); kill to result {secs('kill_to_result')} "
            f"(no other kill before it: {secs('quiet_kill_to_result')}); "
            f"restart to result {secs('restart_to_result')}; node start {secs('node_start')}",
            f"node logs and trace.json (the client's view) in {self.workdir}",
            *s["examples"],
        ]
        return "\n".join(lines)


@dataclass
class KillTimes:
    """Seconds, per kill and per turn it interrupted (last taken by the killed process):

    - resume: from the kill to the turn's next ``turn.accepted``;
    - result: from the kill to the turn's result, unless a later kill interrupted the turn
      again first (that kill's sample counts instead); later kills that only delayed it
      (the process that would resume it killed too) are included;
    - quiet_*: the samples that no other kill came before;
    - restart: from the restarted node's ready line to the result, when the result came
      after it (in cluster mode another node may finish first).
    """

    resume: list[float] = field(default_factory=list)
    quiet_resume: list[float] = field(default_factory=list)
    result: list[float] = field(default_factory=list)
    quiet_result: list[float] = field(default_factory=list)
    restart: list[float] = field(default_factory=list)


def _kill_times(run: RunRecord) -> KillTimes:
    out = KillTimes()
    for i, kill in enumerate(run.kills):
        later = run.kills[i + 1 :]
        calm_until = later[0].at if later else float("inf")
        for tid in kill.running:
            trace = run.traces[tid]
            again = next((at for at, _ in trace.accepted if at > kill.at), None)
            if again is not None:
                out.resume.append(again - kill.at)
                if again < calm_until:
                    out.quiet_resume.append(again - kill.at)
            answered = next((at for at, _ in trace.results if at > kill.at), None)
            if answered is None or any(tid in k.running and k.at < answered for k in later):
                continue
            out.result.append(answered - kill.at)
            if answered < calm_until:
                out.quiet_result.append(answered - kill.at)
            if answered > kill.ready_at:
                out.restart.append(answered - kill.ready_at)
    return out


__all__ = ["KillTimes", "Mismatch", "Report", "compare", "order_problems", "percentile"]
