"""Answer quality of the offline model on eval cases, measured in process (no NATS, no actors).

Each case runs in a fresh ``bench.driver.Driver`` conversation over a ``KnowledgeSpace`` with the
``ExtractiveModel``, and its last answer is scored by ``actline.eval_cases.score_case`` (the
same matching as ``actline eval``). On top of the eval's recall it checks what the eval cannot:

- every citation ``[[S:n]]`` closes text that the document with source ``n`` holds (a cited
  line, a table row's cells, and a code block under a cited line);
- no cited document is unrelated: each holds at least one of the case's expected facts;
- a case tagged ``unanswerable`` is declined ("The documents do not cover …") with no citation;
- a right source is cited: for an answerable case with ``expect_sources`` (paths relative to
  ``examples/kb``), at least one cited document is one of them.

``python -m tests.llm.answer_eval [-v] [--json] [CASES.jsonl ...]`` prints the figures per case
file (``--json``: one JSON object of them per file).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from actline.eval_cases import CaseRun, EvalCase, contains, load_cases, score_case
from actline.llm.extractive import ExtractiveModel
from actline.tools import KnowledgeSpace
from bench.driver import Driver

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "examples" / "kb"
EVAL = ROOT / "examples" / "eval"
ANSWERS = EVAL / "answers.jsonl"
HELD_OUT = EVAL / "answers-heldout.jsonl"
SHIPPED = EVAL / "kb.jsonl"
TUNING = EVAL / "answers-tune2.jsonl"
CASE_FILES = (ANSWERS, HELD_OUT, SHIPPED)
DECLINE = "The documents do not cover"
UNANSWERABLE = "unanswerable"
T0 = 1_800_000_000.0
_CITE = re.compile(r"\[\[S:(\d+)\]\]")
_FENCE = re.compile(r"^\s*```")


def flat(text: str) -> str:
    return " ".join(text.replace("**", "").replace("\\|", "|").split()).casefold()


@dataclass
class CaseResult:
    case: EvalCase
    answer: str
    recall: float
    facts: int
    found: int
    forbidden: list[str]
    declined: bool
    bad_citations: list[str] = field(default_factory=list)
    unrelated: list[str] = field(default_factory=list)
    cited: list[str] = field(default_factory=list)
    """Paths of the documents the answer cites."""

    @property
    def unanswerable(self) -> bool:
        return UNANSWERABLE in self.case.tags

    @property
    def right_source(self) -> bool | None:
        """Whether a cited document is one the case expects; None when it expects none."""
        if self.unanswerable or not self.case.expect_sources:
            return None
        return any(p.removeprefix("ks:") in self.case.expect_sources for p in self.cited)


@dataclass
class Report:
    results: list[CaseResult]

    @property
    def answerable(self) -> list[CaseResult]:
        return [r for r in self.results if not r.unanswerable]

    @property
    def fact_share(self) -> float:
        rows = self.answerable
        return sum(r.found for r in rows) / max(1, sum(r.facts for r in rows))

    @property
    def complete_share(self) -> float:
        rows = self.answerable
        return sum(r.found == r.facts for r in rows) / max(1, len(rows))

    def share(self, tag: str) -> float:
        rows = [r for r in self.answerable if tag in r.case.tags]
        return sum(r.found for r in rows) / max(1, sum(r.facts for r in rows))

    @property
    def declined_unanswerable(self) -> tuple[int, int]:
        rows = [r for r in self.results if r.unanswerable]
        return sum(r.declined for r in rows), len(rows)

    @property
    def right_sources(self) -> tuple[int, int]:
        """(answers citing a right source, answerable cases with ``expect_sources``)."""
        rows = [r.right_source for r in self.answerable if r.right_source is not None]
        return sum(rows), len(rows)

    @property
    def wrongly_declined(self) -> list[str]:
        return [r.case.id for r in self.answerable if r.declined]

    def figures(self) -> dict[str, object]:
        """The summary's figures, for ``--json``."""
        declined, unanswerable = self.declined_unanswerable
        right, expecting = self.right_sources
        return {
            "cases": len(self.results),
            "facts_present": round(self.fact_share, 4),
            "every_fact": round(self.complete_share, 4),
            "right_source": round(right / expecting, 4) if expecting else None,
            "right_source_cases": [right, expecting],
            "unanswerable_declined": [declined, unanswerable],
            "answerable_declined": self.wrongly_declined,
            "forbidden_facts": sum(len(r.forbidden) for r in self.results),
            "unrelated_citations": sum(len(r.unrelated) for r in self.results),
            "bad_citations": sum(len(r.bad_citations) for r in self.results),
        }

    def summary(self) -> str:
        declined, unanswerable = self.declined_unanswerable
        right, expecting = self.right_sources
        sources = f" · right source cited {right / max(1, expecting):.0%} ({right}/{expecting})"
        tags = sorted({t for r in self.answerable for t in r.case.tags})
        return "\n".join(
            [
                f"cases {len(self.results)} · facts present {self.fact_share:.0%} · answers with "
                f"every fact {self.complete_share:.0%}{sources if expecting else ''} · "
                f"unanswerable declined {declined}/{unanswerable} · answerable declined "
                f"{len(self.wrongly_declined)}",
                f"forbidden facts {sum(len(r.forbidden) for r in self.results)} · cited documents "
                f"{sum(len(r.cited) for r in self.results)}, holding no expected fact "
                f"{sum(len(r.unrelated) for r in self.results)} · citations not in their "
                f"document {sum(len(r.bad_citations) for r in self.results)}",
                "by tag: " + ", ".join(f"{t} {self.share(t):.0%}" for t in tags),
            ]
        )


def _cited_texts(answer: str) -> list[tuple[str, int]]:
    """(text, sid): the text each citation closes on its line, and code blocks under it."""
    out: list[tuple[str, int]] = []
    last: int | None = None
    fenced = False
    for line in answer.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            if last is not None and line.strip():
                out.append((line.strip(), last))
            continue
        start = 0
        for found in _CITE.finditer(line):
            text = line[start : found.start()].strip().removeprefix("- ").strip()
            out.append((text, int(found.group(1))))
            last = int(found.group(1))
            start = found.end()
    return out


def _holds(doc: str, text: str) -> bool:
    doc_flat = flat(doc)
    if flat(text) in doc_flat:
        return True
    if " — " in text:  # a table row: "first cell — header: cell, header: cell"
        cells = [text.split(" — ", 1)[0]]
        cells += [pair.split(": ", 1)[-1] for pair in text.split(" — ", 1)[1].split(", ")]
        return all(flat(cell) in doc_flat for cell in cells)
    return False


async def run_case(case: EvalCase, kb: KnowledgeSpace, model: ExtractiveModel) -> CaseResult:
    now = [T0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    d = Driver(model, kb, clock=lambda: now[0], advance=advance)
    answer = ""
    for turn in case.turns:
        answer = (await d.turn(turn.text)).answer
    score = score_case(case, CaseRun(statuses=("completed",), answers=(answer,)))
    found = len(case.expect_facts) - len(score.missing_facts)
    declined = DECLINE.casefold() in answer.casefold()
    docs: dict[int, tuple[str, str]] = {}
    for block in d.tl.blocks:
        head = re.match(r"\[S:(\d+)\] ", block.text) if block.path.startswith("ks:") else None
        if head:
            docs[int(head.group(1))] = (block.path, block.text)
    result = CaseResult(case, answer, score.recall, len(case.expect_facts), found, [], declined)
    result.forbidden = score.forbidden_found
    for text, sid in _cited_texts(answer):
        path, doc = docs.get(sid, ("?", ""))
        if not _holds(doc, text):
            result.bad_citations.append(f"[S:{sid}] {path}: {text[:80]}")
    for sid in sorted({int(s) for s in _CITE.findall(answer)}):
        path, doc = docs.get(sid, ("?", ""))
        result.cited.append(path)
        if not result.unanswerable and len(case.turns) == 1:
            if not any(contains(doc, fact) for fact in case.expect_facts):
                result.unrelated.append(path)
    if result.unanswerable and _CITE.search(answer):
        result.bad_citations.append("a declined answer cites a source")
    return result


async def evaluate(
    cases: list[EvalCase], kb: KnowledgeSpace | None = None, model: ExtractiveModel | None = None
) -> Report:
    kb = kb or KnowledgeSpace(KB)
    model = model or ExtractiveModel()
    return Report([await run_case(c, kb, model) for c in cases])


def main(argv: list[str]) -> int:
    options = {"-v", "--json"}
    files = [Path(a) for a in argv if a not in options] or list(CASE_FILES)
    verbose = "-v" in argv
    for path in files:
        report = asyncio.run(evaluate(load_cases(path)))
        if "--json" in argv:
            print(json.dumps({"file": path.name, **report.figures()}, ensure_ascii=False))
            continue
        print(f"== {path.name}")
        for r in report.results:
            flags = []
            if r.found < r.facts:
                flags.append(f"missing {r.facts - r.found}/{r.facts}")
            if r.declined and not r.unanswerable:
                flags.append("declined")
            if r.unanswerable and not r.declined:
                flags.append("not declined")
            if r.right_source is False:
                flags.append("no right source cited")
            flags += [f"forbidden {f!r}" for f in r.forbidden]
            flags += [f"unrelated {p}" for p in r.unrelated]
            flags += [f"bad citation {c}" for c in r.bad_citations]
            if flags:
                print(f"  {r.case.id}: {'; '.join(flags)}")
                if verbose:
                    print("    " + r.answer.replace("\n", "\n    "))
        print(report.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
