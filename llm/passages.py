"""Choosing what answers a question from the documents the offline model read.

A read document is cut into **units**: headings, prose sentences, list items, table rows (read
as ``first cell — header: cell, …``) and fenced code blocks. Each unit carries its section
heading and the document title as context, and a code block also the sentence that leads into
it (``Inspect and replay dead letters with:``).

``select(analysis, docs)`` scores every unit against the analysed question (``actline.llm.query``):

- a question term found in the unit counts its weight (an inverse unit frequency over the read
  documents), a synonym ``SYNONYM_WEIGHT`` of it, a term only in the unit's heading or title
  ``CONTEXT_WEIGHT`` of it; the sum over the question's weight is the unit's **coverage**;
- the **kind** of question asks for something the unit must show: a figure for ``quantity``, a
  money amount for ``money``, a date for ``when``, a version for ``version``, a command (code)
  for ``howto``; a unit that has it gains ``TYPE_BONUS``, a long unit loses a little.

The answer is the best unit, then units that add question terms the chosen ones do not cover
yet (so a comparison gets both sides) or score almost as well, at most ``max_points``, and never
one below ``KEEP`` of the best: no padding. A chosen lead sentence or heading brings the code
block or the numbered steps under it. It **declines** (``Selection.declined`` says why) when a
salient term of the question (a name, an acronym, a version) is in no read document, when the
best unit covers less than ``MIN_COVERAGE`` of the question, or when no covering unit has what
the kind of question asks for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .query import SYNONYM_WEIGHT, Analysis, QueryTerm, match, matches

__all__ = ["Selection", "Unit", "answers_kind", "select", "units"]

CONTEXT_WEIGHT = 0.5
LEAD_WEIGHT = 0.8
TYPE_BONUS = 0.35
MIN_COVERAGE = 0.35
KEEP = 0.55
CLOSE = 0.8
HEADING_BONUS = 0.3
TITLE_BONUS = 0.2
LEDE_BONUS = 0.25
PER_ENTITY = 2
ADDS = 0.15
HISTORY_WEIGHT = 0.5
ABSENT_WEIGHT = 0.25
BODY_UNITS = 2
SIBLING_PENALTY = 0.25
MAX_POINTS = 4
MAX_STEPS = 8
LONG_CODE_LINES = 12
MAX_ITEM_SENTENCES = 4
MAX_FAMILY = 6

_ITEM = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")
_NUMBERED = re.compile(r"^\d+[.)]\s+")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(*])")
_FIGURE = re.compile(r"\d")
_FACT = re.compile(r"\d|:\s*\S")
"""A heading that states something itself: a figure, or ``Name: what``."""
_MONEY = re.compile(r"\$\s?\d|\b(?:free|USD|dollars?|euros?)\b", re.IGNORECASE)
_MONTHS = "January|February|March|April|May|June|July|August|September|October|November|December"
_DATE = re.compile(rf"\b(?:\d{{1,2}} (?:{_MONTHS})|(?:{_MONTHS}) \d{{4}}|Q[1-4] \d{{4}}|\d{{4}})\b")
_DAY = re.compile(
    rf"\b(?:\d{{1,2}} (?:{_MONTHS})|(?:{_MONTHS}) \d{{1,2}}\b|\d{{4}}-\d{{2}}-\d{{2}}\b)"
)
"""A calendar date to the day: what "what date …?" asks for ("14 January 2025")."""
_NAME = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z]\.)?(?:\s+[A-Z][a-z]+)+\b")
"""A person's or a party's name: two capitalised words or more ("Jane Doe")."""
_PARTY = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|\b(?:team|department|staff)\b", re.IGNORECASE)
"""Who else can answer a "who" question: an address to write to, a team."""
_FREQUENCY = re.compile(
    r"\bevery\s+(?:\d+\s+|other\s+)?(?:second|minute|hour|day|week|month|quarter|year)s?\b"
    r"|\b(?:daily|weekly|monthly|quarterly|yearly|hourly|annually)\b|\bonce an?\b"
    r"|\bper (?:second|minute|hour|day|week|month|quarter|year)\b|\btimes? a\b",
    re.IGNORECASE,
)
_HISTORY = re.compile(
    r"\b(?:before version|previously|formerly|used to|no longer|until \d|was \d|were \d)"
    r"|\(was [^)]*\)",
    re.IGNORECASE,
)
_ASKS_HISTORY = re.compile(
    r"\b(?:chang\w*|before|previous\w*|old(?:er)?|history|earlier|used to|was|were|new|since"
    r"|removed|deprecated|upgrad\w*)\b",
    re.IGNORECASE,
)
_FULL_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_VERSION = re.compile(r"\b\d+\.(?:\d+|x)(?:\.\d+)?\b")
_SETTING = re.compile(r"`[^`\s]*[-_.=][^`]*`")
"""A setting, header or key in backticks (`storage.encryption = true`, `Lumen-Message-Id`): how
to do something can be to set it."""
_COMMAND = re.compile(r"`[a-z][\w.-]* [^`]+`|\b(?:lumenctl|sudo|helm|docker|kubectl)\s+\w")


@dataclass(frozen=True, slots=True)
class Unit:
    """One answerable piece of a read document."""

    doc: int
    """Index of the document in the read order."""
    pos: int
    kind: str
    """``heading``, ``prose``, ``item``, ``step`` (a numbered item), ``row`` or ``code``."""
    text: str
    section: str
    lead: str = ""
    """For code: the sentence or heading right before it."""
    para: int = -1
    """The position of the first sentence of the paragraph or list item the unit is part of."""


@dataclass(frozen=True, slots=True)
class Scored:
    unit: Unit
    score: float
    coverage: float
    covered: frozenset[str]
    """Question terms the unit or its heading, lead or title holds."""
    own: frozenset[str]
    """Question terms the unit itself holds (or a synonym of them)."""
    typed: bool


@dataclass(frozen=True, slots=True)
class Selection:
    """The units that answer, best first, or why nothing does."""

    points: tuple[Unit, ...]
    declined: str = ""
    """Empty when answered; else what the documents do not cover."""


def _flush(out: list[Unit], doc: int, para: list[str], section: str, kind: str) -> None:
    if not para:
        return
    text = " ".join(para).replace("**", "")
    para.clear()
    pieces = _SENTENCE.split(text) if kind in ("prose", "item") else [text]
    first = len(out)
    for piece in pieces:
        piece = piece.strip()
        if len(piece) >= 3:
            out.append(Unit(doc, len(out), kind, piece, section, para=first))


def units(text: str, doc: int = 0, title: str = "") -> list[Unit]:
    """The units of a markdown document, in order (see the module docstring)."""
    out: list[Unit] = []
    para: list[str] = []
    kind = "prose"
    section = title
    header: list[str] = []
    code: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            if code is None:
                _flush(out, doc, para, section, kind)
                code = []
            else:
                lead = out[-1].text if out and out[-1].section == section else section
                if any(c.strip() for c in code):
                    out.append(Unit(doc, len(out), "code", "\n".join(code), section, lead))
                code = None
            continue
        if code is not None:
            code.append(raw.rstrip())
            continue
        heading = _HEADING.match(line)
        if not line or heading:
            _flush(out, doc, para, section, kind)
            kind, header = "prose", []
            if heading:
                section = heading.group(2).strip()
                out.append(Unit(doc, len(out), "heading", section, title))
            continue
        if line.startswith("|"):
            _flush(out, doc, para, section, kind)
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= set("-: ") for c in cells):
                continue
            if not header:
                header = cells
                continue
            pairs = [f"{h}: {c}" for h, c in zip(header[1:], cells[1:], strict=False) if c]
            row = f"{cells[0]} — " + ", ".join(pairs) if pairs and cells[0] else ", ".join(pairs)
            out.append(Unit(doc, len(out), "row", row.replace("**", ""), section))
            continue
        if _ITEM.match(line):
            _flush(out, doc, para, section, kind)
            kind = "step" if _NUMBERED.match(line) else "item"
            line = _ITEM.sub("", line, count=1)
        elif kind != "prose" and not raw.startswith((" ", "\t")):
            _flush(out, doc, para, section, kind)
            kind = "prose"
        para.append(line)
    _flush(out, doc, para, section, kind)
    if code:  # an unclosed fence: keep what it held
        out.append(Unit(doc, len(out), "code", "\n".join(code), section, section))
    return out


_CAPITAL = re.compile(r"(?<![.!?:;]\s)(?<!^)\b[A-Z][a-z]+\b")


def _capitals(text: str) -> set[str]:
    """Capitalised words inside a sentence (names), lower-cased."""
    return {m.group().casefold() for m in _CAPITAL.finditer(text)}


def answers_kind(kind: str, text: str) -> bool:
    """Whether prose ``text`` shows what a question of ``kind`` asks for (a figure, a date …)."""
    return _typed(kind, Unit(0, 0, "prose", text, ""))


def _typed(kind: str, unit: Unit) -> bool:
    text = unit.text
    if kind == "howto":
        return unit.kind in ("code", "step") or bool(_COMMAND.search(text) or _SETTING.search(text))
    if kind == "quantity":
        return bool(_FIGURE.search(text)) or " no " in f" {text.lower()} "
    if kind == "often":
        return bool(_FREQUENCY.search(text))
    if kind == "money":
        return bool(_MONEY.search(text))
    if kind == "when":
        return bool(_DATE.search(text))
    if kind == "date":
        return bool(_DAY.search(text))
    if kind == "who":
        return bool(_PARTY.search(text) or _NAME.search(text))
    if kind == "version":
        return bool(_VERSION.search(text))
    return True


class _Scorer:
    def __init__(self, analysis: Analysis, docs: Sequence[tuple[str, str]]) -> None:
        self.analysis = analysis
        self.units: list[Unit] = []
        for i, (title, text) in enumerate(docs):
            self.units += units(text, i, title)
        self.titles = [title for title, _ in docs]
        self.index = {id(u): i for i, u in enumerate(self.units)}
        self.own = [set(analysis.text_terms(u.text)) for u in self.units]
        self.context = [
            set(analysis.text_terms(f"{u.section} {self.titles[u.doc]}")) for u in self.units
        ]
        self.lead = [set(analysis.text_terms(u.lead)) for u in self.units]
        n = len(self.units) or 1
        self.weights: dict[str, float] = {}
        for t in analysis.terms:
            df = sum(matches(own | ctx, t) for own, ctx in zip(self.own, self.context, strict=True))
            idf = math.log(1 + n / (1 + df))
            if not df and not t.salient:
                idf *= ABSENT_WEIGHT  # a plain word no document uses ("suits") says little
            self.weights[t.term] = idf * t.weight * (1.5 if t.salient else 1.0)
        self.total = sum(self.weights.values()) or 1.0
        self.heading = [self._heading_coverage(u) for u in self.units]
        self.title_cover = [self._covers(title) for title in self.titles]
        self.ledes = self._ledes()
        self.siblings = self._siblings({t.word for t in analysis.salient})
        self.versions = {t.term for t in analysis.terms if _FULL_VERSION.match(t.term)}
        self.history = bool(_ASKS_HISTORY.search(analysis.question)) or bool(self.versions)
        self.asked = {t.term for t in analysis.terms}
        self.focus = [t for t in analysis.terms if t.term in analysis.focus]
        self.doc_terms = [set[str]() for _ in docs]
        for u, own in zip(self.units, self.own, strict=True):
            self.doc_terms[u.doc] |= own
        for i, title in enumerate(self.titles):
            self.doc_terms[i] |= set(analysis.text_terms(title))

    def _ledes(self) -> set[int]:
        """Indexes of the prose before a document's first section (under its title)."""
        out: set[int] = set()
        for i, u in enumerate(self.units):
            if u.kind == "prose" and u.section == self.titles[u.doc]:
                out.add(i)
        return out

    def _siblings(self, entities: set[str]) -> set[str]:
        """Names of the same family as a named entity of the question (the other tiers beside
        "Business"): first cells of table rows and ``Name:`` headings of the read documents."""
        family = {u.text.split(" — ")[0].casefold() for u in self.units if u.kind == "row"}
        family |= {
            u.text.split(":")[0].casefold()
            for u in self.units
            if u.kind == "heading" and ":" in u.text
        }
        return family - entities if entities & family else set()

    def _heading_coverage(self, unit: Unit) -> float:
        """How much of the question the heading over ``unit`` (or the heading itself) covers."""
        heading = unit.text if unit.kind == "heading" else unit.section
        if heading == self.titles[unit.doc]:
            return 0.0
        return self._covers(heading)

    def _covers(self, text: str) -> float:
        """The share of the question's weight that ``text`` (a heading, a title) holds."""
        have = set(self.analysis.text_terms(text))
        got = sum(
            self.weights[t.term] * (match(have, t) or SYNONYM_WEIGHT * bool(t.alternatives & have))
            for t in self.analysis.terms
        )
        return got / self.total

    def credit(self, term: QueryTerm, index: int) -> float:
        own, ctx = self.own[index], self.context[index]
        exact = match(own, term)
        if exact == 1.0:
            return 1.0
        if term.alternatives & own:
            return SYNONYM_WEIGHT
        if exact:
            return exact
        if matches(self.lead[index], term):
            return LEAD_WEIGHT
        if matches(ctx, term) or term.alternatives & ctx:
            return CONTEXT_WEIGHT
        return 0.0

    def score(self, index: int) -> Scored:
        unit = self.units[index]
        covered: set[str] = set()
        own: set[str] = set()
        got = 0.0
        for t in self.analysis.terms:
            c = self.credit(t, index)
            if c:
                got += c * self.weights[t.term]
                covered.add(t.term)
                if c >= SYNONYM_WEIGHT:
                    own.add(t.term)
        coverage = got / self.total
        kind = self.analysis.kind
        typed = _typed(kind, unit) or (
            kind == "howto" and unit.kind == "heading" and bool(_followers(self.units, unit, kind))
        )
        if kind == "who" and typed and not _PARTY.search(unit.text):
            typed = any(
                not self.asked >= set(self.analysis.text_terms(n.group()))
                for n in _NAME.finditer(unit.text)
            )  # a name the question does not give
        score = coverage * (1 + TYPE_BONUS * typed) + HEADING_BONUS * self.heading[index]
        score += TITLE_BONUS * self.title_cover[unit.doc]
        if index in self.ledes:  # a document's opening says what the title is about
            score += LEDE_BONUS * self.title_cover[unit.doc]
        if not self.history and _HISTORY.search(unit.text):
            score *= HISTORY_WEIGHT  # an old value, and the question does not ask for history
        if self.versions and not self.versions & (self.own[index] | self.context[index]):
            others = {t for t in self.own[index] | self.context[index] if _FULL_VERSION.match(t)}
            score /= 1 + len(others)  # about another release than the one asked for
        if self.siblings and unit.kind != "row" and kind != "compare":
            score /= 1 + SIBLING_PENALTY * len(_capitals(unit.text) & self.siblings)
        if unit.kind == "code":
            lines = unit.text.count("\n") + 1
            if self.analysis.kind != "howto":
                score *= 0.6
            if lines > LONG_CODE_LINES:
                score *= LONG_CODE_LINES / lines
        elif unit.kind == "heading" and self.analysis.kind == "howto":
            score *= 0.8
        score -= 0.002 * unit.pos + 0.01 * unit.doc
        return Scored(unit, score, coverage, frozenset(covered), frozenset(own), typed)

    def names_focus(self, index: int) -> bool:
        """Whether the unit (with its heading, lead and title) names the thing whose value the
        question asks for (``Analysis.focus``): "a group of 3 nodes" does not answer how many
        consumer groups, "Team: $490" not what an extra node costs."""
        have = self.own[index] | self.context[index] | self.lead[index]
        return all(matches(have, t) or bool(t.alternatives & have) for t in self.focus)

    def missing_salient(self) -> list[str]:
        every = set().union(*self.doc_terms) if self.doc_terms else set()
        return [t.word for t in self.analysis.salient if not matches(every, t)]


def _followers(units_: list[Unit], unit: Unit, kind: str) -> list[Unit]:
    """What a chosen unit brings along: the code block after a lead, the steps under a heading."""
    after = [u for u in units_ if u.doc == unit.doc and u.pos > unit.pos]
    if not after:
        return []
    nxt = after[0]
    if unit.text.endswith("?") and nxt.section == unit.section and nxt.kind == unit.kind:
        return [nxt]  # a question in a FAQ: its answer follows
    if nxt.kind == "code" and (unit.text.rstrip().endswith(":") or unit.kind == "heading"):
        return [nxt]
    if unit.kind == "heading" and kind == "howto":
        steps = []
        for u in after:
            if u.kind != "step" or u.section != unit.text:
                break
            steps.append(u)
        if steps:
            return steps[:MAX_STEPS]
        if nxt.kind == "prose" and len(after) > 1 and after[1].kind == "code":
            return [nxt, after[1]]
    return []


def _whole_item(units_: list[Unit], unit: Unit) -> Unit:
    """A list item's sentences as one unit: an item is one point ("Maximum size: 1 MiB by
    default. The hard maximum is 8 MiB.")."""
    same = [u for u in units_ if u.doc == unit.doc and u.para == unit.para and u.kind == "item"]
    if len(same) < 2 or len(same) > MAX_ITEM_SENTENCES:
        return unit
    text = " ".join(u.text for u in same)
    return Unit(unit.doc, same[0].pos, "item", text, unit.section, unit.lead, unit.para)


def _body(units_: list[Unit], heading: Unit) -> list[Unit]:
    """The first units under a heading that holds no fact itself ("Pricing tiers")."""
    body = [u for u in units_ if u.doc == heading.doc and u.pos > heading.pos and u.kind != "code"]
    out: list[Unit] = []
    for u in body[:BODY_UNITS]:
        if u.kind == "heading":
            break
        out.append(u)
    return out


def _steps(units_: list[Unit], step: Unit) -> list[Unit]:
    """The numbered steps of the list ``step`` belongs to, in order."""
    run: list[Unit] = []
    for u in units_:
        if u.doc != step.doc or u.section != step.section:
            continue
        if u.kind == "step":
            run.append(u)
        elif u.kind != "code" and u.pos > step.pos:
            break
        elif u.kind != "code":
            run = []
    return run[:MAX_STEPS] if step in run else []


def _around(
    best: Scored, eligible: list[Scored], max_points: int, weights: dict[str, float]
) -> list[Scored]:
    """The best unit, then units on the same point that add terms to it or score almost as well."""
    chosen: list[Scored] = [best]
    covered = set(best.own)
    total = sum(weights.values()) or 1.0
    for s in eligible:
        if len(chosen) >= max_points or s.score < KEEP * best.score:
            break
        if any(s.unit is c.unit for c in chosen) or not s.typed:
            continue
        if len(s.covered & best.covered) * 2 < len(best.covered):
            continue  # another subject that happens to share a word
        adds = sum(weights[t] for t in s.own - covered)
        if adds >= ADDS * total or s.score >= CLOSE * best.score:
            chosen.append(s)
            covered |= s.own
    return chosen


def _family(scorer: _Scorer, best: Scored) -> list[Scored]:
    """For a comparison that names no two things ("How do the tiers differ?"): the members
    of the family the best document lays side by side, its table rows or its headings that
    state a fact ("Team: $490 per month"), at most ``MAX_FAMILY``."""
    doc = best.unit.doc
    rows = [i for i, u in enumerate(scorer.units) if u.doc == doc and u.kind == "row"]
    heads = [
        i
        for i, u in enumerate(scorer.units)
        if u.doc == doc and u.kind == "heading" and ":" in u.text and _FACT.search(u.text)
    ]
    members = heads if len(heads) >= 2 else rows
    if len(members) < 2:
        return []
    lede = [i for i in sorted(scorer.ledes) if scorer.units[i].doc == doc][:1]
    family = [scorer.score(i) for i in [*lede, *members[:MAX_FAMILY]]]
    return [
        *family[: len(lede)],
        best,
        *(s for s in family[len(lede) :] if s.unit is not best.unit),
    ]


def _starts_with(analysis: Analysis, unit: Unit, entity: QueryTerm) -> bool:
    """Whether ``unit`` is about ``entity`` by its first words ("Team: …", "`viewer`: …")."""
    return matches(analysis.text_terms(" ".join(unit.text.split()[:2])), entity)


def _by_entity(scorer: _Scorer, eligible: list[Scored]) -> list[Scored]:
    """For a comparison of named things: the best units about each one alone."""
    compared = scorer.analysis.compared
    entities = [t for t in scorer.analysis.terms if t.term in compared]
    if len(entities) < 2:
        entities = [t for t in scorer.analysis.salient if not t.term[0].isdigit()]
    if len(entities) < 2:
        return []
    chosen: list[Scored] = []
    for entity in entities:
        others = [e for e in entities if e is not entity]
        about = []
        for s in eligible:
            i = scorer.index[id(s.unit)]
            have = scorer.own[i] | set(scorer.analysis.text_terms(s.unit.section))
            if matches(have, entity) and not any(matches(have, o) for o in others) and s.typed:
                about.append(s)
        # stable: by score among the units that start with the entity, then the others
        about.sort(key=lambda s: not _starts_with(scorer.analysis, s.unit, entity))
        chosen += [s for s in about[:PER_ENTITY] if s not in chosen]
    return chosen


def select(
    analysis: Analysis, docs: Sequence[tuple[str, str]], max_points: int = MAX_POINTS
) -> Selection:
    """The units of ``docs`` (title, text) that answer ``analysis``, or a decline."""
    if not analysis.terms:
        return Selection((), "this question")
    scorer = _Scorer(analysis, docs)
    if not scorer.units:
        return Selection((), " ".join(analysis.words) or "this question")
    missing = scorer.missing_salient()
    if missing:
        return Selection((), ", ".join(missing))
    scored = sorted(
        (scorer.score(i) for i in range(len(scorer.units))),
        key=lambda s: (-s.score, s.unit.doc, s.unit.pos),
    )
    eligible = [
        s
        for s in scored
        if (s.unit.kind != "code" or analysis.kind == "howto")
        and not (s.unit.kind == "heading" and s.unit.text == scorer.titles[s.unit.doc])
    ] or scored
    if scorer.focus:  # only what names the asked thing can give its value
        eligible = [s for s in eligible if scorer.names_focus(scorer.index[id(s.unit)])]
    best = next((s for s in eligible if s.typed), None)
    if best is None or best.coverage < MIN_COVERAGE:
        return Selection((), " ".join(analysis.words) or "this question")
    chosen = _by_entity(scorer, eligible) if analysis.kind == "compare" else []
    if analysis.kind == "compare" and not chosen:
        chosen = _family(scorer, best)
    if not chosen:
        chosen = _around(best, eligible, max_points, scorer.weights)
    points: list[Unit] = []
    for s in chosen:
        if s.unit.kind == "item":
            whole = _whole_item(scorer.units, s.unit)
            if any(u.pos == whole.pos and u.doc == whole.doc for u in points):
                continue
            s = Scored(whole, s.score, s.coverage, s.covered, s.own, s.typed)
        brought = [s.unit, *_followers(scorer.units, s.unit, analysis.kind)]
        if s.unit.kind == "step" and analysis.kind == "howto":  # a step: the whole procedure
            brought = _steps(scorer.units, s.unit) or brought
        elif s.unit.kind == "heading" and len(brought) == 1 and not _FACT.search(s.unit.text):
            brought = _body(scorer.units, s.unit) or brought  # a bare heading: what it heads
        for u in brought:
            if u not in points:
                points.append(u)
    return Selection(tuple(points))
