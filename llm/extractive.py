"""ExtractiveModel: the offline default, a deterministic policy over the rendered context.

It reads what a real model reads — the rendered timeline, SOURCES POOL and
ANNOUNCE — and writes the channel protocol a real model writes.
It keeps no state between calls: where it is in a turn is read from the
current turn's blocks, so it works the same in-process and behind the local
Messages API server. A turn goes:

1. ``react.plan`` (create) with the steps it will take;
2. ``react.memsearch`` first when the question refers to earlier turns;
3. ``react.search_knowledge`` for the question (and again for each user
   followup that landed during the turn), asking ``TOP_K`` hits for the analysed
   question (``actline.llm.query``: versions, numbers, identifiers and phrasal verbs kept,
   synonyms added);
4. ``react.read`` of the ``MAX_READ`` best hits not read yet, reranked by the
   search's score, the analysed question's terms in each hit's title and snippet
   and whether the snippet shows what the question asks for (``rerank_hits``);
5. an internal note (``react.write`` on the internal channel) with key facts;
6. ``agent.send`` when the task names an outside agent ("ask reviewer to …"),
   after which the loop waits for its DONE;
7. ``complete``: an answer of what answers each question in the documents read
   (``actline.llm.passages.select``: sentences, list items, table rows, headings, code
   blocks under the line that leads to them, numbered steps together), best first
   and only as long as it needs, each cited ``[[S:n]]`` with the SID the read
   result carries; or, when nothing read answers, a plain decline ("The documents
   do not cover …") with no citation; then 2 or 3 follow-ups and a usage sidecar.

A short question that points back ("How much does it cost?") is read with the newest
question before it, in this turn or an earlier one, that names its topic
(``with_antecedent``), so that "it" is searched and answered for. It completes early
when ANNOUNCE shows the last iteration. What it reads (see ``context.py``): tool calls
as ``{"params", "tool"}`` JSON under a ``[TOOL CALL] tc:…`` header, search hits as JSON
with ``ks:`` paths, read documents as blocks at ``ks:`` paths whose first line is
``[S:n] title — url``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from actline.messages import GenerateRequest, Usage
from actline.timeline.tokens import DEFAULT_COUNTER

from . import passages
from .context import Call, ToolEntry, TurnView, external_tools, parse_context, terms
from .passages import answers_kind, select
from .protocol import Chunk
from .query import SYNONYM_WEIGHT, Stem, analyze, matches, search_text, snowball_stem

_AGENT = re.compile(
    r"\b(?:ask|have|get|let)\s+(?:the\s+|our\s+)?([a-z][\w-]{1,40})\s+to\s+([^.?!\n]+)",
    re.IGNORECASE,
)
_NOT_AGENTS = frozenset({"me", "you", "us", "them", "him", "her", "it", "someone", "somebody"})
_MEMORY = re.compile(
    r"\b(earlier|before|previous(?:ly)?|last time|you (?:said|told|mentioned|wrote)|"
    r"we (?:discussed|talked)|remind me|recall|first question|my last question|"
    r"what did (?:i|you))\b",
    re.IGNORECASE,
)
_BACK = re.compile(
    r"\b(it|its|they|them|their|theirs|this|that|these|those|one|ones)\b", re.IGNORECASE
)
"""Words by which a short question points back at the one before it ("How much is it?")."""
SHORT_QUESTION = 3
"""Content words at most in a question that ``_BACK`` makes a follow-up of the one before."""
_CITATION = re.compile(r"\s*\[\[S:[^\]]*\]\]")
MAX_READ = 6
"""Documents read per search: the best answer is often the 4th or 5th hit."""
TOP_K = 10
"""Hits asked of a search: the reranking (``rerank_hits``) picks the ``MAX_READ`` to read."""
RANK_WEIGHT = 1.0
TYPE_WEIGHT = 0.3
SNIPPET_WEIGHT = 0.5
TITLE_WEIGHT = 0.5
MAX_POINTS = passages.MAX_POINTS
DECLINE = "The documents do not cover"
SHORT_ITEM = 6
"""A list item this short is shown under its heading: ``Not planned — Windows server support.``"""


def agent_request(text: str) -> tuple[str, str] | None:
    """``(name, task)`` when ``text`` asks a named outside agent to do something."""
    for found in _AGENT.finditer(text):
        name = found.group(1).lower()
        if name not in _NOT_AGENTS:
            return name, found.group(2).strip()
    return None


def refers_to_memory(text: str) -> bool:
    """True when a question points at earlier turns of the conversation."""
    return bool(_MEMORY.search(text))


_DANGLING = re.compile(r"[,;]?\s+(?:and|or|but|also|then)\s*(?=[.?!]|$)|\s+(?=[.?!,])")


def _topic(text: str) -> str:
    """The question without the outside-agent clause and the reference to earlier turns."""
    return _DANGLING.sub("", _MEMORY.sub(" ", _AGENT.sub(" ", text)))


def points_back(question: str) -> bool:
    """True when ``question`` is short and names what it asks about only by a pronoun."""
    if _BACK.search(question) is None:
        return False
    return len(terms(_topic(question), stemmed=False)) <= SHORT_QUESTION


def with_antecedent(question: str, before: Sequence[str]) -> str:
    """``question``, and when it points back ("How much does it cost?"), the topic of the
    newest question before it that does not point back itself, in brackets, so that what "it"
    stands for is searched and answered too. Anything else comes back as it is."""
    if not points_back(question):
        return question
    for earlier in reversed(before):
        if not points_back(earlier):
            antecedent = " ".join(_topic(earlier).split())
            return f"{question} ({antecedent})" if antecedent else question
    return question


_ASKING = (
    r"(?:how|what|which|when|where|who|why|whether|is|are|can|could|do|does|did|should|will"
    r"|would)"
)
_SENTENCES = re.compile(r"(?<=[.?!])\s+(?=[A-Z])")
_CLAUSE = re.compile(rf",?\s+(?:and|but|also)\s+(?={_ASKING}\b)", re.IGNORECASE)
_QUESTION_START = re.compile(rf"^\s*{_ASKING}\b", re.IGNORECASE)


def parts(question: str) -> list[str]:
    """The questions a prompt asks, one per part: "How many X do we need and how do we Y?"
    is two, each searched, read for and answered apart. Statements around them ("We are
    rolling out to production.") and the outside-agent clause are left out when there are
    two parts or more; a prompt of one question comes back whole, statements and all."""
    found: list[str] = []
    text = re.sub(r"([.?!])(?:\s*[.?!])+", r"\1", " ".join(_topic(question).split()))
    for sentence in _SENTENCES.split(text):
        sentence = sentence.strip()
        if not sentence.endswith("?") and not _QUESTION_START.match(sentence):
            continue
        for piece in _CLAUSE.split(sentence):
            piece = piece.strip(" ,;")
            if terms(piece, stemmed=False):
                found.append(piece if piece.endswith("?") else f"{piece}?")
    return found if len(found) > 1 else [question]


def search_query(text: str, stem: Stem = snowball_stem) -> str:
    """The question in its own words (the dense side of a hybrid search embeds a sentence
    better than a list of keywords), then the search words it does not hold already: phrasal
    verbs joined (``backup``) and synonyms (``actline.llm.query``); without the outside-agent
    clause."""
    topic = " ".join(_topic(text).split()).strip(" .")
    found = search_text(analyze(topic, stem))
    if not found:
        return " ".join(dict.fromkeys(terms(text, stemmed=False)))[:300] or text.strip()[:300]
    have = {w.casefold().strip(".") for w in re.findall(r"[\w.$%-]+", topic)}
    extra = [w for w in found.split() if w.casefold() not in have]
    query = " ".join([topic, *extra])
    return query[:300].rsplit(" ", 1)[0] if len(query) > 300 else query


@dataclass(frozen=True, slots=True)
class Point:
    """One piece of a read document chosen for the answer: a sentence, item, row or code."""

    text: str
    sid: int | None
    score: float
    rank: int
    kind: str = "prose"
    lead: str = ""
    pos: int = 0
    section: str = ""


@dataclass(frozen=True, slots=True)
class Answer:
    """The points that answer the turn's questions, best first, and what is not covered."""

    points: list[Point]
    declined: list[str]


def answer_points(
    view: TurnView, questions: Sequence[str], limit: int = MAX_POINTS, stem: Stem = snowball_stem
) -> Answer:
    """Choose what answers each question from the documents read
    (``actline.llm.passages.select``)."""
    docs = view.read_docs()
    pairs = [(d.title, d.text) for d in docs]
    points: list[Point] = []
    declined: list[str] = []
    for question in questions:
        chosen = select(analyze(_topic(question), stem), pairs, max_points=limit)
        if chosen.declined:
            declined.append(chosen.declined)
        for order, unit in enumerate(chosen.points):
            doc = docs[unit.doc]
            point = Point(
                unit.text,
                doc.sid,
                -float(order),
                unit.doc,
                unit.kind,
                unit.lead,
                unit.pos,
                "" if unit.section == doc.title else unit.section,
            )
            if not any((p.rank, p.pos) == (point.rank, point.pos) for p in points):
                points.append(point)
    return Answer(points, declined)


def rerank_hits(search: Call, question: str, stem: Stem = snowball_stem) -> list[str]:
    """The ``ks:`` paths of a search's hits, reranked: the search's own score (relative to the
    best) plus how much of the analysed question the hit's title and snippet hold."""
    data = search.result_json()
    rows = data.get("hits") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        return [p for p in re.findall(r"ks:[^\s\"',\]]+", search.result or "")]
    hits = [h for h in rows if isinstance(h, dict) and str(h.get("path", "")).startswith("ks:")]
    analysis = analyze(_topic(question), stem)
    total = sum(t.weight for t in analysis.terms) or 1.0
    best = max((_number(h.get("score")) for h in hits), default=0.0) or 1.0
    ranked: list[tuple[float, int, str]] = []
    for order, h in enumerate(hits):
        have = set(analysis.text_terms(f"{h.get('title', '')} {h.get('snippet', '')}"))
        title = set(analysis.text_terms(str(h.get("title", ""))))
        got = sum(
            t.weight * (1.0 if matches(have, t) else SYNONYM_WEIGHT * bool(t.alternatives & have))
            + t.weight * TITLE_WEIGHT * matches(title, t)
            for t in analysis.terms
        )
        typed = TYPE_WEIGHT * answers_kind(analysis.kind, str(h.get("snippet", "")))
        searched = RANK_WEIGHT * _number(h.get("score")) / best
        relevance = SNIPPET_WEIGHT * got / total + searched + typed
        ranked.append((-relevance, order, h["path"]))
    return list(dict.fromkeys(path for _, _, path in sorted(ranked)))


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def pick_points(
    view: TurnView, query: str, limit: int = MAX_POINTS, stem: Stem = snowball_stem
) -> list[Point]:
    """The pieces of the read documents that answer ``query``, best first (none: not covered)."""
    return answer_points(view, [query], limit, stem).points


def render_points(points: Sequence[Point]) -> list[str]:
    """Answer lines: one cited bullet per piece; a code block sits under the line leading to it."""
    lines: list[str] = []
    previous: Point | None = None
    for p in points:
        cite = f" [[S:{p.sid}]]" if p.sid else ""
        if p.kind == "code":
            follows = previous is not None and (previous.rank, previous.pos + 1) == (p.rank, p.pos)
            if not follows:
                lines.append(f"- {p.lead}{cite}")
            code = [f"  {line}" if line else "" for line in p.text.split("\n")]
            lines += ["  ```", *code, "  ```"]
        elif p.kind == "item" and len(p.text.split()) <= SHORT_ITEM and p.section:
            lines.append(f"- {p.section} — {p.text}{cite}")  # "Not planned — Windows server …"
        else:
            lines.append(f"- {p.text}{cite}")
        previous = p
    return lines


OWN_TOOLS = frozenset({"code.exec_python", "files.read", "files.write", "http.fetch"})
"""actline's built-in tools: the offline model calls only the user's own (and no skill's)."""
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|'([^']+)'")
_CAPITALISED = re.compile(r"(?<![.?!]\s)(?<!^)\b([A-Z][\w-]*(?:\s+[A-Z][\w-]*)*)")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")


def choose_tool(question: str, tools: Sequence[ToolEntry]) -> tuple[str, dict[str, object]] | None:
    """The user's tool a question asks for, with its params read off the question, or None.

    Conservative on purpose: a word of the tool's name must be a word of the question, every
    required param must be found in it (a string: quoted text, else capitalised words that do
    not start a sentence; a number: a number; an enum: one of its values named), and params
    of other types must not be required. Of several, the one sharing the most words with
    the question (name first, then description) wins; ties go to the first by name."""
    asked = set(terms(question))
    best: tuple[int, str, dict[str, object]] | None = None
    for entry in sorted(tools, key=lambda t: t.name):
        if entry.name in OWN_TOOLS or entry.name.startswith("skill."):
            continue
        named = asked & set(terms(entry.name.replace(".", " ").replace("_", " ")))
        if not named:
            continue
        params = fill_params(question, entry)
        if params is None:
            continue
        score = 2 * len(named) + len(asked & set(terms(entry.description)))
        if best is None or score > best[0]:
            best = (score, entry.name, params)
    return None if best is None else (best[1], best[2])


def fill_params(question: str, entry: ToolEntry) -> dict[str, object] | None:
    """The params of ``entry`` found in ``question``; None when a required one is not."""
    props = entry.schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = entry.schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    skip = set(terms(entry.name.replace(".", " ").replace("_", " "), stemmed=False))
    strings = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(question)]
    strings += [
        m.group(1)
        for m in _CAPITALISED.finditer(question)
        if m.group(1).casefold() not in skip and m.group(1) not in strings
    ]
    numbers = _NUMBER.findall(question)
    words = {w.casefold() for w in re.findall(r"[\w-]+", question)}
    out: dict[str, object] = {}
    for name, spec in props.items():
        kind = _kind(spec)
        value: object = None
        if kind == "enum":
            named = [v for v in spec.get("enum", ()) if str(v).casefold() in words]
            value = named[0] if named and len(str(named[0])) > 1 else None
        elif kind == "string" and strings:
            value = strings.pop(0)
        elif kind in ("integer", "number") and numbers:
            found = next((n for n in numbers if kind == "number" or "." not in n), None)
            if found is not None:
                numbers.remove(found)
                value = int(found) if kind == "integer" else float(found)
        if value is not None:
            out[name] = value
        elif name in required:
            return None
    return out


def _kind(spec: object) -> str:
    """``enum``, ``string``, ``integer``, ``number`` or something the question cannot fill."""
    if not isinstance(spec, dict):
        return ""
    if "enum" in spec:
        return "enum"
    choices = [c for c in spec.get("anyOf", ()) if isinstance(c, dict) and c.get("type") != "null"]
    if len(choices) == 1:
        return _kind(choices[0])
    kind = spec.get("type")
    return kind if isinstance(kind, str) else ""


class ExtractiveModel:
    """A ``Model`` that plans, searches, reads, notes, delegates and answers from documents,
    and calls a user's tool that a question plainly asks for (``choose_tool``)."""

    def __init__(
        self,
        *,
        name: str = "extractive",
        chunk_chars: int = 16,
        delay: float = 0.0,
        top_k: int = TOP_K,
        max_read: int = MAX_READ,
        stem: Stem = snowball_stem,
    ) -> None:
        self.name = name
        self.max_read = max(1, max_read)
        self.stem = stem
        self.chunk_chars = max(1, chunk_chars)
        self.delay = delay
        self.top_k = top_k
        self.calls = 0

    def decide(self, request: GenerateRequest) -> str:
        """The raw channel-protocol output for this round (pure: a function of the context)."""
        view = parse_context(request)
        return Policy(view, self.top_k, self.max_read, self.stem).output()

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        self.calls += 1
        text = self.decide(request)
        step = self.chunk_chars
        for i in range(0, len(text), step):
            if self.delay:
                await asyncio.sleep(self.delay)
            yield text[i : i + step]
        yield Usage(
            input_tokens=DEFAULT_COUNTER.count(request.system)
            + sum(
                DEFAULT_COUNTER.count(p.get("text") or p.get("caption", "")) for p in request.blocks
            ),
            output_tokens=DEFAULT_COUNTER.count(text),
            model=self.name,
            request_id=f"extractive-{self.calls}",
        )


_FACTUAL = re.compile(r"[\d:()$%]")
"""A heading that states a fact ("Team: $490 per month") makes no follow-up question."""
_HEADING = re.compile(r"^#{2,4}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_VERB_HEADING = re.compile(r"^(?:[A-Z][a-z]+)\s+(?:a|an|the|your|\w+s?)\b")
_HOW_HEADING = re.compile(r"^(?:how|what|which|when|where|why|who)\b", re.IGNORECASE)


def _headings(text: str) -> list[str]:
    """The section headings of a markdown document, in order."""
    return [h.strip() for h in _HEADING.findall(text)]


def _as_question(heading: str, title: str) -> str:
    """A follow-up question from a section heading: a heading that asks ("How many nodes")
    as it is, one that says what to do ("Restore a backup", "Rotate the signing key") as
    "How do I …?", and a topic ("Compatibility") as "What about … in <title>?"."""
    text = heading.rstrip("?.: ")
    if _HOW_HEADING.match(text):
        return f"{text[0].upper()}{text[1:]}?"
    words = text.split()
    first = words[0].casefold() if words else ""
    if len(words) > 1 and first in _IMPERATIVE_VERBS:
        return f"How do I {first} {' '.join(words[1:])}?".replace("  ", " ")
    lowered = text if text[:2].isupper() else text[0].lower() + text[1:]
    return f"What about {lowered} in {title}?"


_IMPERATIVE_VERBS = frozenset(
    """add apply back build change check configure connect create delete deploy disable enable
    export find fix form get import install join limit migrate monitor move protect reload
    remove rename replace restore revoke rotate run scale secure send set start stop test
    troubleshoot tune turn uninstall update upgrade use verify watch write""".split()
)
"""Verbs a how-to heading starts with ("Rotate the signing key", "Verify a webhook signature")."""


def _channel(name: str, body: str) -> str:
    return f"<channel:{name}>{body}</channel:{name}>"


def _decision(action: str, calls: Sequence[dict[str, object]] = (), notes: str = "") -> str:
    body: dict[str, object] = {"action": action}
    if calls:
        body["calls"] = list(calls)
    if notes:
        body["notes"] = notes
    return _channel("decision", json.dumps(body, ensure_ascii=False))


class Policy:
    """One round's choice, read off a ``TurnView``."""

    def __init__(
        self, view: TurnView, top_k: int, max_read: int = MAX_READ, stem: Stem = snowball_stem
    ) -> None:
        self.view = view
        self.top_k = top_k
        self.max_read = max_read
        self.stem = stem
        self.question = with_antecedent(view.prompt, view.asked_before)
        self.agent = agent_request(view.prompt)
        self.tool = choose_tool(view.prompt, external_tools(view.system)) if view.system else None

    def output(self) -> str:
        v = self.view
        if v.last_iteration:
            return self.complete("I reached the iteration limit, so this answer uses what I have.")
        if not v.calls_of("react.plan"):
            return self.plan()
        if self.tool is not None:
            name, params = self.tool
            called = v.calls_of(name)
            if not called:
                return self.call(f"Calling {name} for this.", name, params, f"… [1] {name}")
            if called[-1].result is not None:
                return self.tool_answer(called[-1])
        if refers_to_memory(self.question) and not v.calls_of("react.memsearch"):
            return self.call(
                "Looking through earlier turns of our conversation first.",
                "react.memsearch",
                {
                    "query": search_query(self.question, self.stem),
                    "targets": ["user", "assistant", "notes", "agents"],
                    "top_k": 3,
                },
                "… [1] recalling earlier turns",
            )
        for position, question in self.questions():
            query = search_query(question, self.stem)
            search = next(
                (
                    c
                    for c in v.calls_of("react.search_knowledge")
                    if c.position > position and c.params.get("query") == query
                ),
                None,
            )
            if search is None:
                words = search_text(analyze(_topic(question), self.stem)) or query
                return self.call(
                    f"Searching the knowledge space for: {words}",
                    "react.search_knowledge",
                    {"query": query, "top_k": self.top_k},
                    "… [1] searching the knowledge space",
                )
            hits = [p for p in rerank_hits(search, question, self.stem) if p not in v.read_paths()]
            if hits and v.first_call_after("react.read", search.position) is None:
                chosen = hits[: self.max_read]
                return self.call(
                    f"Reading the {len(chosen)} best match{'es' * (len(chosen) != 1)}: "
                    + ", ".join(chosen),
                    "react.read",
                    {"paths": chosen},
                    f"✓ [1] found {len(v.hit_paths(search))} hits\n… [2] reading",
                )
        if not v.calls_of("react.write"):
            return self.note()
        if self.agent is not None and not v.calls_of("agent.send"):
            name, task = self.agent
            draft = "\n".join(render_points(self.answer().points))
            return self.call(
                f"Handing the draft to {name} and waiting for its answer.",
                "agent.send",
                {
                    "name": name,
                    "text": f"Please {task}.\n\nDraft answer:\n{draft or '(no findings)'}",
                },
                f"… [3] waiting for {name}",
            )
        return self.complete()

    def questions(self) -> list[tuple[int, str]]:
        """The prompt and each user followup of the turn (with their positions), a short one
        that points back read with the question before it (``with_antecedent``)."""
        asked = list(self.view.asked_before)
        out = []
        for position, question in self.view.questions():
            for part in parts(question):
                own = part != question and analyze(part, self.stem).kind == "howto"
                out.append((position, part if own else with_antecedent(part, asked)))
                asked.append(part)  # a how-to part names its own action ("how do we back them up")
        return out

    def answer(self, limit: int = MAX_POINTS) -> Answer:
        """What answers the prompt and each user followup of the turn."""
        questions = [q for _, q in self.questions()]
        return answer_points(self.view, questions, limit, self.stem)

    def call(self, thinking: str, tool: str, params: dict[str, object], notes: str) -> str:
        return _channel("thinking", thinking) + _decision(
            "call_tools", [{"tool": tool, "params": params}], notes
        )

    def plan(self) -> str:
        steps = []
        if self.tool is not None:
            return self.call(
                f"Planning how to answer: call {self.tool[0]}; answer with what it returns.",
                "react.plan",
                {"mode": "create", "steps": [f"Call {self.tool[0]}", "Answer with its result"]},
                "",
            )
        if refers_to_memory(self.question):
            steps.append("Recall what earlier turns said")
        steps += [
            f"Search the knowledge space for: {search_query(self.question, self.stem)[:80]}",
            "Read the best sources and note the key facts",
        ]
        if self.agent is not None:
            steps.append(f"Ask {self.agent[0]} to {self.agent[1][:60]}")
        steps.append("Answer with citations")
        return self.call(
            "Planning how to answer: " + "; ".join(s.lower() for s in steps) + ".",
            "react.plan",
            {"mode": "create", "steps": steps},
            "",
        )

    def note(self) -> str:
        points = [p for p in self.answer(limit=3).points if p.kind != "code"]
        facts = "; ".join(p.text[:160] + (f" [S:{p.sid}]" if p.sid else "") for p in points)
        content = (
            f"[K] {facts}" if facts else "[K] the knowledge space has nothing on this question"
        )
        slug = "-".join(search_query(self.question, self.stem).lower().split()[:4]) or "note"
        slug = re.sub(r"[^a-z0-9-]", "", slug) or "note"
        return self.call(
            "Noting the key facts before answering.",
            "react.write",
            {
                "path": f"files/notes/{slug}.md",
                "channel": "internal",
                "content": content,
                "kind": "file",
                "scratchpad": True,
            },
            "✓ [2] read the sources",
        )

    def complete(self, preface: str = "") -> str:
        v = self.view
        found = self.answer()
        points = found.points
        lines: list[str] = []
        if preface:
            lines += [preface, ""]
        recalled = v.memory_hits()
        said = self.recalled_speech()
        if said:
            turn, speaker, snippet = said
            lines += [f"Earlier in this conversation (turn {turn}), {speaker} said: {snippet}", ""]
        elif recalled:
            turn, snippet = recalled[0]
            snippet = _CITATION.sub("", snippet)
            lines += [f"Earlier in this conversation (turn {turn}) we covered: {snippet}", ""]
        if said and refers_to_memory(self.question):
            points = []  # what was said is the answer; the documents searched add nothing
        lines += render_points(points)
        if not v.read_docs():
            lines.append(
                f"{DECLINE} {search_query(self.question, self.stem)!r}: I could not find "
                "anything about it in the knowledge space, so I cannot answer from sources."
            )
        elif found.declined and not (recalled and not points):
            if points:
                lines.append("")
            read = ", ".join(d.title for d in v.read_docs())
            for missing in found.declined:
                lines.append(
                    f"{DECLINE} {missing}: none of the documents I read ({read}) answers "
                    "this, so I cannot answer it from sources."
                )
        if self.agent is not None:
            done = v.agent_done(self.agent[0])
            lines.append("")
            if done:
                lines.append(f"{self.agent[0]} reviewed this: {done}")
            else:
                lines.append(f"{self.agent[0]} did not answer in time; this answer is unreviewed.")
        sids = sorted({p.sid for p in points if p.sid})
        followups = self.followups()
        usage = {"sids": sids, "sources": [d.path for d in v.read_docs()], "model": "extractive"}
        return (
            _channel(
                "thinking", f"Writing the answer from {len(sids)} source{'s' * (len(sids) != 1)}."
            )
            + _decision("complete", notes="✓ [3] answered")
            + _channel("answer", "\n".join(lines))
            + _channel("followup", json.dumps(followups, ensure_ascii=False))
            + _channel("usage", json.dumps(usage, ensure_ascii=False))
        )

    def tool_answer(self, call: Call) -> str:
        """The answer from a user's tool: what it returned, or why it gave nothing."""
        data = call.result_json()
        data = data if isinstance(data, dict) else {}
        if data.get("status") == "ok":
            content = str(data.get("content") or "").strip()
            if not content and data.get("data"):
                content = json.dumps(data["data"], ensure_ascii=False)
            text = content or f"{call.tool} returned nothing."
        else:
            error = str(data.get("error") or call.result or "no result").strip()
            text = f"I could not get this from {call.tool}: {error}"
        usage = {"sids": [], "sources": [], "model": "extractive"}
        return (
            _channel("thinking", f"Writing the answer from {call.tool}.")
            + _decision("complete", notes="✓ [2] answered")
            + _channel("answer", text)
            + _channel("followup", "[]")
            + _channel("usage", json.dumps(usage, ensure_ascii=False))
        )

    def recalled_speech(self) -> tuple[str, str, str] | None:
        """(turn, speaker, words) of the newest memsearch hit that an outside agent said,
        when the question names that agent ("What did the reviewer say?")."""
        asked = {w.casefold() for w in re.findall(r"[\w-]+", self.view.prompt)}
        for call in reversed(self.view.calls_of("react.memsearch")):
            data = call.result_json()
            rows = data.get("hits") if isinstance(data, dict) else None
            for hit in rows if isinstance(rows, list) else []:
                if not isinstance(hit, dict) or not hit.get("snippet"):
                    continue
                speaker = str(hit.get("speaker") or "")
                path = str(hit.get("block_path") or "")
                if not speaker:
                    named = [w for w in asked if w in path.casefold()]
                    speaker = named[0] if named and hit.get("role") == "agents" else ""
                head = str(hit["snippet"]).split(":", 1)[0].strip().casefold()
                if not speaker and hit.get("role") != "user" and head in asked:
                    speaker = head  # a DONE's row reads "<agent>: <summary>"
                if speaker and speaker.casefold() in asked:
                    words = _CITATION.sub("", " ".join(str(hit["snippet"]).split()))
                    if words.casefold().startswith(f"{speaker.casefold()}:"):
                        words = words[len(speaker) + 1 :].strip()
                    return str(hit.get("turn_id", "?")), speaker, words[:400]
        return None

    def followups(self) -> list[str]:
        """Questions the read documents answer that this answer did not use: a section
        heading of a cited document first, then of the other documents read, phrased from the
        heading itself ("How do I restore a backup?", "What about compatibility in Backup and
        restore?")."""
        v = self.view
        answer = self.answer()
        used = {(p.rank, p.section) for p in answer.points}
        cited = {p.rank for p in answer.points}
        docs = v.read_docs()
        order = [i for i in cited if i < len(docs)] + [
            i for i in range(len(docs)) if i not in cited
        ]
        out: list[str] = []
        asked = set(terms(self.question))
        for i in order:
            for heading in _headings(docs[i].text):
                if (i, heading) in used or set(terms(heading)) <= asked or _FACTUAL.search(heading):
                    continue
                question = _as_question(heading, docs[i].title)
                if question not in out:
                    out.append(question)
                break
            if len(out) >= 3:
                break
        if len(out) < 2:
            out.append("Which sources did you use for this answer?")
        return out[:3]


__all__ = [
    "DECLINE",
    "Answer",
    "Call",
    "ExtractiveModel",
    "Point",
    "agent_request",
    "answer_points",
    "choose_tool",
    "fill_params",
    "pick_points",
    "refers_to_memory",
    "render_points",
    "search_query",
]
