"""Reading a rendered context back: the current turn, its tool calls, results and sources.

This is how the offline model "reads" (``actline.timeline.view`` is how the timeline
writes): each rendered part starts with optional round framing lines, then a
header ``[LABEL] <path> · <time>`` and the body. The turn header is a
``══════ TURN <id> …`` line. SOURCES POOL and ANNOUNCE are the tail parts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from actline.messages import GenerateRequest

_HEADER = re.compile(r"^\[(?P<label>[^\]]+?)(?: · hidden)?\](?: (?P<path>\S+))? · \S+")
_TURN = re.compile(r"^══════ TURN (?P<turn>\S+) ")
_SID_LINE = re.compile(r"^\[S:(?P<sid>\d+)\]\s*(?P<title>.*?)(?:\s+—\s+(?P<where>\S+))?\s*$")
_POOL_ROW = re.compile(r"^\[S:(?P<sid>\d+)\] (?P<title>.*) — (?P<where>\S+)$", re.MULTILINE)
_ITERATION = re.compile(r"iteration (\d+)/(\d+)")
_TC = re.compile(r"^tc:(?P<turn>[^.]+)\.(?P<call>.+)\.(?P<part>call|result|notice)$")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)

STOP_WORDS = frozenset(
    """a an the and or but if then else of to in on at by for with from as is are was were be
    been being do does did have has had i you he she it we they me my your our their this that
    these those what which who whom whose when where why how can could should would will shall
    may might must not no yes so than too very just about into over under again also please tell
    explain show give describe know want need let get ask any some all more most much many there
    here its it's i'm i've don't does doesn't up out""".split()
)


def stem(word: str) -> str:
    """A light suffix stemmer: plurals, -ing, -ed (same rule for text and queries)."""
    for suffix, keep in (
        ("ies", "y"),
        ("sses", "ss"),
        ("ing", ""),
        ("ed", ""),
        ("es", ""),
        ("s", ""),
    ):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "s" and word.endswith(("ss", "us", "is")):
                return word
            return word[: len(word) - len(suffix)] + keep
    return word


def terms(text: str, *, stemmed: bool = True) -> list[str]:
    """Lower-case content words of ``text`` without stop words (stemmed by default)."""
    words = (w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS)
    kept = [w for w in words if len(w) > 1 or w.isdigit()]
    return [stem(w) for w in kept] if stemmed else kept


@dataclass(frozen=True, slots=True)
class Entry:
    """One rendered part read back."""

    position: int
    label: str
    path: str
    body: str


@dataclass(slots=True)
class Call:
    """A tool call of the current turn and, once it came back, its result text."""

    position: int
    call_id: str
    tool: str
    params: dict[str, Any]
    result: str | None = None

    def result_json(self) -> Any:
        if not self.result:
            return None
        try:
            return json.loads(self.result)
        except ValueError:
            return None


@dataclass(frozen=True, slots=True)
class ToolEntry:
    """An external tool the system prompt lists: its name, description and params schema."""

    name: str
    description: str
    schema: Mapping[str, Any]


_TOOLS_HEADING = "\n# External tools\n"
_TOOL_LINE = re.compile(r"^- (?P<name>[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+): ?(?P<rest>.*)$")


def external_tools(system: str) -> list[ToolEntry]:
    """The ``# External tools`` the system prompt lists (``- name: description Params:
    {json schema}``), in order; a tool whose params are not JSON on its line has none."""
    start = system.find(_TOOLS_HEADING)
    if start < 0:
        return []
    out = []
    for line in system[start + len(_TOOLS_HEADING) :].split("\n"):
        if line.startswith("#"):
            break  # the next section
        found = _TOOL_LINE.match(line)
        if found is None:
            continue  # a description's next line
        rest = found.group("rest")
        description, _, params = rest.partition(" Params: ")
        if rest.startswith("Params: "):
            description, params = "", rest[len("Params: ") :]
        try:
            schema = json.loads(params) if params else {}
        except ValueError:
            schema = {}
        out.append(
            ToolEntry(
                found.group("name"), description.strip(), schema if isinstance(schema, dict) else {}
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class ReadDoc:
    """A knowledge document read in the current turn."""

    path: str
    title: str
    sid: int | None
    text: str


def _entry(position: int, text: str) -> Entry | None:
    lines = text.split("\n")
    while lines and lines[0][:1] in ("┌", "└"):
        lines.pop(0)
    if not lines:
        return None
    turn = _TURN.match(lines[0])
    if turn:
        return Entry(position, "TURN", turn.group("turn"), "")
    head = _HEADER.match(lines[0])
    if head is None:
        return Entry(position, "", "", "\n".join(lines))
    return Entry(position, head.group("label"), head.group("path") or "", "\n".join(lines[1:]))


@dataclass
class TurnView:
    """The current turn of a rendered context, with the tail's signals."""

    turn_id: str = ""
    entries: list[Entry] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    announce: str = ""
    pool: str = ""
    system: str = ""
    earlier: dict[str, Entry] = field(default_factory=dict, repr=False, compare=False)
    """``ks:`` documents of earlier turns by path (react.read does not copy them again)."""
    asked_before: list[str] = field(default_factory=list, repr=False, compare=False)
    """The user's prompts of the earlier turns still in the view, oldest first."""
    _read_docs: list[ReadDoc] | None = field(default=None, repr=False, compare=False)

    @property
    def prompt(self) -> str:
        for e in self.entries:
            if e.label == "USER MESSAGE":
                return e.body.strip()
        return ""

    @property
    def last_iteration(self) -> bool:
        found = _ITERATION.search(self.announce)
        if found is None:
            return False
        return int(found.group(1)) >= int(found.group(2)) > 0

    def questions(self) -> list[tuple[int, str]]:
        """The prompt and every user followup of the turn, with their positions."""
        return [
            (e.position, e.body.strip())
            for e in self.entries
            if e.label in ("USER MESSAGE", "USER FOLLOWUP") and e.body.strip()
        ]

    def calls_of(self, tool: str) -> list[Call]:
        return [c for c in self.calls if c.tool == tool]

    def first_call_after(self, tool: str, position: int) -> Call | None:
        return next((c for c in self.calls if c.tool == tool and c.position > position), None)

    def _hits(self, call: Call) -> list[Mapping[str, Any]]:
        data = call.result_json()
        hits = data.get("hits") if isinstance(data, Mapping) else data
        if isinstance(hits, list):
            return [h for h in hits if isinstance(h, Mapping)]
        return [{"path": p} for p in re.findall(r"ks:[^\s\"',\]]+", call.result or "")]

    def hit_paths(self, call: Call) -> list[str]:
        """``ks:`` paths of a search's hits, best first."""
        paths = [str(h.get("path", "")) for h in self._hits(call)]
        return list(dict.fromkeys(p for p in paths if p.startswith("ks:")))

    def hit_titles(self) -> list[tuple[str, str]]:
        """(path, title) of every knowledge hit of the turn, in order, once each."""
        out: dict[str, str] = {}
        for call in self.calls_of("react.search_knowledge"):
            for h in self._hits(call):
                path = str(h.get("path", ""))
                if path.startswith("ks:"):
                    out.setdefault(path, str(h.get("title") or path))
        return list(out.items())

    def read_paths(self) -> list[str]:
        return [d.path for d in self.read_docs()]

    def read_docs(self) -> list[ReadDoc]:
        """Documents whose content was read into the turn (``ks:`` blocks), in order."""
        if self._read_docs is None:
            self._read_docs = self._find_read_docs()
        return self._read_docs

    def _visible_reads(self) -> list[Entry]:
        """Earlier-turn documents this turn's reads found already visible, in call order."""
        out: list[Entry] = []
        for call in self.calls_of("react.read"):
            data = call.result_json()
            named = data.get("exists_in_visible_context") if isinstance(data, Mapping) else None
            for path in named if isinstance(named, list) else []:
                entry = self.earlier.get(str(path))
                if entry is not None:
                    out.append(Entry(call.position, entry.label, entry.path, entry.body))
        return out

    def _find_read_docs(self) -> list[ReadDoc]:
        pool = {m.group("where"): int(m.group("sid")) for m in _POOL_ROW.finditer(self.pool)}
        docs: dict[str, ReadDoc] = {}
        for e in [*self.entries, *self._visible_reads()]:
            if not e.path.startswith("ks:") or e.path in docs:
                continue
            lines = e.body.split("\n")
            first = _SID_LINE.match(lines[0]) if lines else None
            sid: int | None = None
            title = e.path
            if first:
                sid = int(first.group("sid"))
                title = first.group("title") or title
                text = "\n".join(lines[1:])
            else:
                text = e.body
                heading = re.search(r"^#\s+(.+)$", text, re.MULTILINE)
                title = heading.group(1).strip() if heading else title
                url = re.search(r"https?://\S+", text)
                sid = pool.get(url.group(0)) if url else pool.get(e.path)
            docs[e.path] = ReadDoc(e.path, title, sid, text)
        return list(docs.values())

    def memory_hits(self) -> list[tuple[str, str]]:
        """(turn id, snippet) of the turn's memsearch results."""
        out: list[tuple[str, str]] = []
        for call in self.calls_of("react.memsearch"):
            for h in self._hits(call):
                if h.get("turn_id") and h.get("snippet"):
                    out.append((str(h["turn_id"]), " ".join(str(h["snippet"]).split())[:300]))
        return out

    def agent_done(self, agent: str) -> str | None:
        """The summary of a DONE from ``agent`` that arrived in this turn, if any."""
        for e in self.entries:
            if "DONE" not in e.label.upper():
                continue
            body = e.body.strip()
            if body.lower().startswith(f"{agent.lower()}:"):
                return body[len(agent) + 1 :].strip()
            if agent.lower() in (e.path.lower() + body.lower()):
                return body
        return None


def _iter_texts(request: GenerateRequest) -> Iterator[tuple[int, str]]:
    for i, part in enumerate(request.blocks):
        yield i, str(part.get("text") or part.get("caption") or "")


def parse_context(request: GenerateRequest) -> TurnView:
    """The current (last) turn of ``request`` and its tail, read back from the text."""
    view = TurnView(system=request.system)
    entries: list[Entry] = []
    for i, text in _iter_texts(request):
        if text.startswith("[ANNOUNCE]"):
            view.announce = text
            continue
        if text.startswith("SOURCES POOL"):
            view.pool = text
            continue
        entry = _entry(i, text)
        if entry is None:
            continue
        if entry.label == "TURN":
            view.turn_id = entry.path
            for earlier in entries:
                if earlier.path.startswith("ks:"):
                    view.earlier[earlier.path] = earlier
                elif earlier.label == "USER MESSAGE" and earlier.body.strip():
                    view.asked_before.append(earlier.body.strip())
            entries = []
            continue
        entries.append(entry)
    view.entries = entries
    calls: dict[str, Call] = {}
    for e in entries:
        tc = _TC.match(e.path)
        if tc is None:
            continue
        call_id = tc.group("call")
        if tc.group("part") == "call":
            try:
                data = json.loads(e.body)
            except ValueError:
                data = {}
            tool = str(data.get("tool", "")) if isinstance(data, dict) else ""
            params = data.get("params") if isinstance(data, dict) else None
            calls[call_id] = Call(
                e.position, call_id, tool, params if isinstance(params, dict) else {}
            )
        elif tc.group("part") == "result" and call_id in calls:
            call = calls[call_id]
            call.result = e.body if call.result is None else f"{call.result}\n{e.body}"
    view.calls = list(calls.values())
    return view
