"""The title gate: a new conversation's title, written beside its first turn.

A new conversation is titled at once from its first prompt (``heuristic_title``: its key
phrase without greetings or filler, title-cased, at most ``TITLE_WORDS`` words), in the
``stage.gate`` block its first turn starts with (``actline.actors.conversation.intake``).
When the turn's model is a real one (``llm.writes_summaries``; the offline ``extractive``
and ``replay`` models are not language models), ``TitleGate`` asks it for a better title in
one tool-free call with a small output budget, beside the turn: the turn's answer never
waits for it. A usable reply (``clean_title``: one line, no quotes or markdown, capped)
becomes a newer ``stage.gate`` block at the same path, ``ar:<turn>.stage.gate``; an empty or
unusable reply, or a failed call, keeps the heuristic title, and the log says why. A
conversation's title is its latest ``stage.gate`` block's (``title_of``).

Cancellation: ``TitleGate.write`` is cancelled with the task that runs it (the
conversation's child); a cancelled gate leaves the heuristic title.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from actline.actors.services.shared import Services
from actline.actors.turn import remote
from actline.llm import ModelConfigError, writes_summaries
from actline.llm.protocol import Completion
from actline.messages import GenerateRequest, Usage
from actline.timeline import Block
from actline.timeline.blocks import STAGE_GATE
from actline.timeline.paths import ar_path

log = logging.getLogger(__name__)

ModelCall = Callable[[GenerateRequest], Awaitable[Completion]]
"""One tool-free model call run to the end (``actline.actors.turn.remote.complete``)."""

TITLE_WORDS = 8
"""Words a title has at most."""
TITLE_CHARS = 60
"""Characters a title has at most."""
TITLE_MAX_TOKENS = 32
"""The output budget of the title call: a few words, nothing more."""
UNTITLED = "(untitled)"
TITLE_SYSTEM = (
    "You write the title of a conversation from its first message. Reply with the title "
    f"only: at most {TITLE_WORDS} words naming its subject, on one line, without quotes, "
    "markdown or a final period."
)

_GREETING = re.compile(
    r"^(?:hi|hello|hey|hiya|howdy|greetings|yo|dear \w+|good (?:morning|afternoon|evening|day))"
    r"\b(?:\s+(?:there|all|team|everyone|folks))?[\s,.!:;-]*",
    re.IGNORECASE,
)
_FILLER = re.compile(
    r"^(?:please|pls|kindly|so|ok|okay|um+|uh+|well|just|quick question|a question|question"
    r"|(?:can|could|would|will) (?:you|u)(?: please)?(?: help me)?"
    r"|(?:can|could|may) i(?: ask)?"
    r"|i (?:want|wanted|need|needed|would like|'d like|d like) to (?:know|understand|learn|ask)"
    r"(?: about)?"
    r"|i(?:'m| am) (?:wondering|curious)(?: about| if| whether)?|i was wondering(?: if| whether)?"
    r"|i (?:want|need|would like|'d like)(?: to)?"
    r"|do you know|tell me(?: about)?|let me know|help me(?: with| to)?"
    r"|show me|give me|explain(?: to me)?|describe|summari[sz]e"
    r"|(?:what|how|why|when|where|which|who)(?:'s| is| are| was| were| do| does| did| can"
    r"| could| should| would| to)?(?: i| we| you)?"
    r"|about|me|the|a|an)\b[\s,.!:;-]*",
    re.IGNORECASE,
)
_TRAILING = re.compile(
    r"(?:[\s,;:-]+(?:please|thanks|thank you|thx|for me|if possible|asap))+[\s.!?]*$",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+|\n+")
_SMALL = frozenset("a an and as at but by for from in into of on or per the to vs via with".split())
_PREFACE = re.compile(
    r"^(?:sure|certainly|of course|here(?:'s| is| are)|i(?:'m| am) sorry|sorry|i can(?:'t|not)"
    r"|as an ai|unfortunately)\b",
    re.IGNORECASE,
)
_LABEL = re.compile(
    r"^(?:title|conversation title|suggested title)\s*[:\-\u2013\u2014]\s*", re.IGNORECASE
)
_MARKUP = re.compile(r"</?[a-zA-Z][^>]*>|[*_`#>~]|^\s*[-+•]\s+|^\s*\d+[.)]\s+")
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb\u201e"


def _title_case(words: list[str]) -> str:
    """Each word capitalised, small words lower inside the title; a word that already has
    a capital or a digit (``API``, ``OPS-2291``, ``iPhone``) kept as written."""
    out = []
    for i, word in enumerate(words):
        if any(c.isupper() or c.isdigit() for c in word):
            out.append(word)
        elif i > 0 and word.lower() in _SMALL:
            out.append(word.lower())
        else:
            out.append(word[:1].upper() + word[1:])
    return " ".join(out)


def _cap(words: list[str]) -> list[str]:
    """At most ``TITLE_WORDS`` words and ``TITLE_CHARS`` characters, cut between words, not
    ending on a small word or punctuation."""
    kept: list[str] = []
    for word in words[:TITLE_WORDS]:
        if len(" ".join([*kept, word])) > TITLE_CHARS:
            if not kept:
                kept.append(word[:TITLE_CHARS])
            break
        kept.append(word)
    while len(kept) > 1 and kept[-1].lower() in _SMALL:
        kept.pop()
    if kept:
        kept[-1] = kept[-1].rstrip(".,;:!?-\u2013\u2014")
    return [w for w in kept if w]


def _strip_filler(text: str) -> str:
    text = _GREETING.sub("", text.strip())
    while True:
        shorter = _FILLER.sub("", text, count=1)
        if shorter == text:
            return _TRAILING.sub("", text).strip(" \t,.;:!?-")
        text = shorter


def heuristic_title(text: str) -> str:
    """A title from the first message without a model: the first sentence that says
    something once greetings and filler (``hi``, ``can you``, ``please``, ``I want to know``,
    a leading question word) are dropped, title-cased, at most ``TITLE_WORDS`` words."""
    plain = _MARKUP.sub(" ", text)
    sentences = [s for s in _SENTENCE_END.split(plain) if s.strip()]
    for sentence in sentences:
        key = _strip_filler(sentence.strip().strip(_QUOTES))
        words = [w.strip(_QUOTES + "()[]{}") for w in key.split()]
        words = _cap([w for w in words if w])
        if words:
            return _title_case(words)
    words = _cap(plain.split())  # nothing but filler: its own words
    return _title_case(words) if words else UNTITLED


@dataclass(frozen=True, slots=True)
class Cleaned:
    """What ``clean_title`` made of a model's reply: the title, or why there is none."""

    title: str
    reason: str = ""


def clean_title(reply: str) -> Cleaned:
    """The title in a model's reply: its first line with text, without a ``Title:`` label,
    markdown, tags or quotes, capped like a heuristic title; an empty title with the reason
    when the reply is empty, a preface or refusal, a sentence rather than a title, or has
    no letters."""
    lines = [line.strip() for line in reply.replace("\r", "\n").split("\n")]
    lines = [line for line in lines if line and not line.startswith(("```", "~~~"))]
    if not lines:
        return Cleaned("", "the reply was empty")
    line = "".join(c for c in lines[0] if c.isprintable())
    line = _LABEL.sub("", _MARKUP.sub("", line)).strip().strip(_QUOTES).strip()
    line = _LABEL.sub("", line).strip(_QUOTES + " ").rstrip(".")
    if _PREFACE.match(line):
        return Cleaned("", f"the reply is not a title: {line[:80]!r}")
    words = line.split()
    if not any(c.isalnum() for c in line):
        return Cleaned("", f"the reply has no words: {line[:80]!r}")
    if len(words) > 2 * TITLE_WORDS:
        return Cleaned("", f"the reply is a sentence of {len(words)} words, not a title")
    capped = _cap(words)
    return Cleaned(" ".join(capped)) if capped else Cleaned("", "the reply was empty")


def title_of(blocks: Iterable[Block]) -> str:
    """A conversation's title: its latest ``stage.gate`` block's ("" without one)."""
    title = ""
    for block in blocks:
        if block.type == STAGE_GATE and isinstance(block.data, dict):
            title = str(block.data.get("title") or title)
    return title


def gate_block(
    turn_id: str, ts: float, title: str, source: str, usage: Usage | None = None
) -> Block:
    """The ``stage.gate`` block of a new conversation's first turn, titled by ``source``
    (``heuristic`` or ``model``); ``usage``: what the title call cost, when one was made
    (the call runs beside the turn, so its tokens are recorded here, not in the turn's
    usage)."""
    data: dict[str, object] = {"title": title or UNTITLED, "new_conversation": True}
    data["source"] = source
    if usage is not None:
        data["usage"] = usage.model_dump(mode="json")
    return Block.new(
        STAGE_GATE,
        turn_id,
        ts,
        path=ar_path(turn_id, "stage.gate"),
        mime="application/json",
        data=data,
    )


@dataclass(frozen=True, slots=True)
class TitleWritten:
    """The gate's title for the conversation to store, once a model call was made: what the
    gate's task tells the conversation's actor, which appends ``gate_block(turn_id, now,
    title, source, usage)`` (``source`` ``heuristic`` when the reply was unusable)."""

    turn_id: str
    title: str
    source: str = "model"
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class Titled:
    """The gate's outcome: the model's title (``source`` ``model``), or the heuristic one
    kept (``heuristic``) and why."""

    title: str
    source: str
    reason: str = ""
    usage: Usage | None = None


class TitleGate:
    """Asks a real model for a new conversation's title, in one tool-free call."""

    def __init__(self, call: ModelCall, model: str) -> None:
        self.call = call
        self.model = model

    @classmethod
    def for_model(cls, services: Services, model: str) -> TitleGate | None:
        """The gate for the turn's ``model`` on this node (through its streamer, or the
        pool's), or None when it is an offline model, not served, or model titles are off
        (``ACTLINE_MODEL_TITLES``): the heuristic title stays."""
        streamer = services.streamer
        if streamer is None or not services.settings.model_titles:
            return None
        try:
            served = streamer.models(model)
        except ModelConfigError:
            return None
        if served is None or not writes_summaries(served):
            return None
        return cls(lambda request: remote.complete(services, request), model)

    def request(self, conversation_id: str, turn_id: str, prompt: str) -> GenerateRequest:
        """The title call: the first message (its first 2,000 characters), no tools, no
        channels, ``TITLE_MAX_TOKENS`` of output."""
        return GenerateRequest(
            conversation_id=conversation_id,
            turn_id=turn_id,
            model=self.model,
            system=TITLE_SYSTEM,
            blocks=[{"type": "text", "text": f"First message:\n\n{prompt[:2000]}\n\nTitle:"}],
            max_output_tokens=TITLE_MAX_TOKENS,
        )

    async def write(self, conversation_id: str, turn_id: str, prompt: str) -> Titled:
        """The model's title for the conversation, or ``heuristic_title(prompt)`` with the
        reason logged when the call fails or its reply is unusable."""
        fallback = heuristic_title(prompt)
        try:
            done = await self.call(self.request(conversation_id, turn_id, prompt))
        except Exception as exc:  # any failure: the heuristic title stays
            reason = f"the title call failed: {type(exc).__name__}: {exc}"
            log.warning("title of %s by %s: %s; heuristic title kept", conversation_id,
                        self.model, reason)  # fmt: skip
            return Titled(fallback, "heuristic", reason)
        cleaned = clean_title(done.text)
        if not cleaned.title:
            log.warning("title of %s by %s: %s; heuristic title kept", conversation_id,
                        self.model, cleaned.reason)  # fmt: skip
            return Titled(fallback, "heuristic", cleaned.reason, done.usage)
        log.info("title of %s written by %s (%d chars)", conversation_id, self.model,
                 len(cleaned.title))  # fmt: skip
        return Titled(cleaned.title, "model", usage=done.usage)
