"""ExtractiveModel: the offline default, a deterministic policy over the rendered context.

It reads what a real model reads — the rendered timeline, SOURCES POOL and
ANNOUNCE — and writes the channel protocol a real model writes (DESIGN.md §5).
It keeps no state between calls: where it is in a turn is read from the
current turn's blocks, so it works the same in-process and behind the local
Messages API server. A turn goes:

1. ``react.plan`` (create) with the steps it will take;
2. ``react.memsearch`` first when the question refers to earlier turns;
3. ``react.search_knowledge`` for the question (and again for each user
   followup that landed during the turn);
4. ``react.read`` of the best hits not read yet;
5. an internal note (``react.write`` on the internal channel) with key facts;
6. ``agent.send`` when the task names an outside agent ("ask reviewer to …"),
   after which the loop waits for its DONE;
7. ``complete``: an answer built from sentences of the documents it read, each
   cited ``[[S:n]]`` with the SID the read result carries, 2 or 3 follow-ups and
   a usage sidecar.

It completes early when ANNOUNCE shows the last iteration. What it reads
(see ``context.py``): tool calls as ``{"params", "tool"}`` JSON under a
``[TOOL CALL] tc:…`` header, search hits as JSON with ``ks:`` paths, read
documents as blocks at ``ks:`` paths whose first line is ``[S:n] title — url``.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from messages import GenerateRequest, Usage
from timeline.tokens import DEFAULT_COUNTER

from .context import Call, TurnView, parse_context, terms
from .protocol import Chunk

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
_ITEM = re.compile(r"^(?:[-*+•]|\d+[.)])\s+")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(])")
MAX_READ = 3
MAX_POINTS = 5


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


def search_query(text: str) -> str:
    """The question without the outside-agent clause, as search words."""
    text = _AGENT.sub(" ", text)
    text = _MEMORY.sub(" ", text)
    words = terms(text, stemmed=False)
    return " ".join(dict.fromkeys(words))[:300] or text.strip()[:300]


@dataclass(frozen=True, slots=True)
class Point:
    """One sentence of a read document chosen for the answer."""

    text: str
    sid: int | None
    score: float
    rank: int


def _units(text: str) -> list[str]:
    """Paragraphs, list items and table rows of a markdown document, code left out.

    Hard-wrapped lines are joined; a table row reads as ``first cell — header: cell``.
    """
    units: list[str] = []
    para: list[str] = []
    header: list[str] = []
    in_code = False

    def flush() -> None:
        if para:
            units.append(" ".join(para))
            para.clear()

    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            flush()
            in_code = not in_code
            continue
        if in_code:
            continue
        if not line or line.startswith("#"):
            flush()
            header = []
            continue
        if line.startswith("|"):
            flush()
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(set(c) <= set("-: ") for c in cells):
                continue
            if not header:
                header = cells
                continue
            pairs = [f"{h}: {c}" for h, c in zip(header[1:], cells[1:], strict=False) if c]
            units.append(f"{cells[0]} — " + ", ".join(pairs) if pairs else cells[0])
            continue
        if _ITEM.match(line):
            flush()
            line = _ITEM.sub("", line, count=1)
        para.append(line)
    flush()
    return units


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for unit in _units(text):
        unit = unit.replace("**", "").replace("__", "")
        for sentence in _SENTENCE.split(unit):
            sentence = sentence.strip()
            if len(sentence) >= 20 and not sentence.startswith("[S:"):
                out.append(sentence)
    return out


def pick_points(view: TurnView, query: str, limit: int = MAX_POINTS) -> list[Point]:
    """The sentences of the read documents that best answer ``query`` (at most 2 per doc)."""
    wanted = set(terms(query))
    if not wanted:
        return []
    docs = view.read_docs()
    split = [
        [(sentence, set(terms(sentence)) & wanted) for sentence in _sentences(d.text)] for d in docs
    ]
    df: dict[str, int] = {}
    for sentences in split:
        for _, have in sentences:
            for t in have:
                df[t] = df.get(t, 0) + 1
    n = max(1, sum(len(sentences) for sentences in split))
    scored: list[Point] = []
    for rank, (doc, sentences) in enumerate(zip(docs, split, strict=True)):
        for pos, (sentence, have) in enumerate(sentences):
            if not have:
                continue
            score = sum(math.log(1 + n / df[t]) for t in have) - 0.01 * pos
            scored.append(Point(sentence, doc.sid, score, rank))
    scored.sort(key=lambda p: (-p.score, p.rank, p.text))
    chosen: list[Point] = []
    per_doc: dict[int, int] = {}
    for p in scored:
        if per_doc.get(p.rank, 0) >= 2 or any(p.text == c.text for c in chosen):
            continue
        chosen.append(p)
        per_doc[p.rank] = per_doc.get(p.rank, 0) + 1
        if len(chosen) == limit:
            break
    chosen.sort(key=lambda p: (p.rank, -p.score))
    return chosen


class ExtractiveModel:
    """A ``Model`` that plans, searches, reads, notes, delegates and answers from documents."""

    def __init__(
        self,
        *,
        name: str = "extractive",
        chunk_chars: int = 16,
        delay: float = 0.0,
        top_k: int = 5,
        max_read: int = MAX_READ,
    ) -> None:
        self.name = name
        self.max_read = max(1, max_read)
        self.chunk_chars = max(1, chunk_chars)
        self.delay = delay
        self.top_k = top_k
        self.calls = 0

    def decide(self, request: GenerateRequest) -> str:
        """The raw channel-protocol output for this round (pure: a function of the context)."""
        view = parse_context(request)
        return Policy(view, self.top_k, self.max_read).output()

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

    def __init__(self, view: TurnView, top_k: int, max_read: int = MAX_READ) -> None:
        self.view = view
        self.top_k = top_k
        self.max_read = max_read
        self.question = view.prompt
        self.agent = agent_request(view.prompt)

    def output(self) -> str:
        v = self.view
        if v.last_iteration:
            return self.complete("I reached the iteration limit, so this answer uses what I have.")
        if not v.calls_of("react.plan"):
            return self.plan()
        if refers_to_memory(self.question) and not v.calls_of("react.memsearch"):
            return self.call(
                "Looking through earlier turns of our conversation first.",
                "react.memsearch",
                {
                    "query": search_query(self.question),
                    "targets": ["user", "assistant", "notes"],
                    "top_k": 3,
                },
                "… [1] recalling earlier turns",
            )
        for position, question in v.questions():
            search = v.first_call_after("react.search_knowledge", position)
            if search is None:
                return self.call(
                    f"Searching the knowledge space for: {search_query(question)}",
                    "react.search_knowledge",
                    {"query": search_query(question), "top_k": self.top_k},
                    "… [1] searching the knowledge space",
                )
            hits = [p for p in v.hit_paths(search) if p not in v.read_paths()]
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
            draft = "\n".join(f"- {p.text}" for p in pick_points(v, self.query()))
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

    def query(self) -> str:
        return " ".join([self.question, *(q for _, q in self.view.questions()[1:])])

    def call(self, thinking: str, tool: str, params: dict[str, object], notes: str) -> str:
        return _channel("thinking", thinking) + _decision(
            "call_tools", [{"tool": tool, "params": params}], notes
        )

    def plan(self) -> str:
        steps = []
        if refers_to_memory(self.question):
            steps.append("Recall what earlier turns said")
        steps += [
            f"Search the knowledge space for: {search_query(self.question)[:80]}",
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
        points = pick_points(self.view, self.query(), limit=3)
        facts = "; ".join(p.text[:160] + (f" [S:{p.sid}]" if p.sid else "") for p in points)
        content = (
            f"[K] {facts}" if facts else "[K] the knowledge space has nothing on this question"
        )
        slug = "-".join(search_query(self.question).lower().split()[:4]) or "note"
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
        points = pick_points(v, self.query())
        lines: list[str] = []
        if preface:
            lines += [preface, ""]
        recalled = v.memory_hits()
        if recalled:
            turn, snippet = recalled[0]
            lines += [f"Earlier in this conversation (turn {turn}) we covered: {snippet}", ""]
        if points:
            lines.append("Here is what the documentation says:")
            lines.append("")
            lines += [f"- {p.text}" + (f" [[S:{p.sid}]]" if p.sid else "") for p in points]
        else:
            lines.append(
                f"I could not find anything about {search_query(self.question)!r} in the "
                "knowledge space, so I cannot answer from sources."
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

    def followups(self) -> list[str]:
        v = self.view
        read = set(v.read_paths())
        titles = [t for p, t in v.hit_titles() if p not in read]
        out = [f"What does the documentation say about {t}?" for t in titles[:2]]
        for doc in v.read_docs():
            if len(out) >= 3:
                break
            out.append(f"Tell me more about {doc.title}.")
        if len(out) < 2:
            out.append("Which sources did you use for this answer?")
        return out[:3]


__all__ = ["Call", "ExtractiveModel", "Point", "agent_request", "pick_points", "refers_to_memory"]
