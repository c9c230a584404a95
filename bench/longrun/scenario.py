"""The long-run scenario: the pages a tool fetches, the planted facts and the scripted model.

Each tool round fetches a new page (word salad of ``words`` words, a planted fact
``PLANTED|code=F07|value=amber-4412`` in the middle of one page per turn); every fourth
round reads the previous round's result again. The model's last round of a turn completes
it. A summary request (the compaction's tool-free call, recognised by a system prompt
without the decision channel) is answered extractively: the planted facts found in it, as
the structured summary's JSON.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from actline.llm.anthropic.wire import system_text
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest
from bench.harness import corpus

MODEL = "claude-sonnet-4-6"
KB = Path(__file__).parents[2] / "examples" / "kb"
FACT_RE = re.compile(r"PLANTED\|code=(F\d+)\|value=([a-z]+-\d+)")
REREAD_EVERY = 4
TURN_RE = re.compile(r"(?:ar|tc):(t-[0-9A-Z]+)\.")
ITERATION_RE = re.compile(r"iteration (\d+)/")
DECISION = "<channel:decision>"
"""In the system prompt of every decision request; a summary request's prompt lacks it."""


def fact(i: int) -> tuple[str, str]:
    """The ``i``-th planted fact: its code and value."""
    rng = random.Random(i)
    word = rng.choice(["amber", "cobalt", "heron", "lichen", "quartz", "saffron", "tundra"])
    return f"F{i:02d}", f"{word}-{rng.randrange(1000, 9999)}"


def fact_pages(turns: int, rounds_per_turn: int) -> dict[int, int]:
    """Page -> planted fact: one fact a turn, on the middle page the turn fetches."""
    fetched = len([r for r in range(1, rounds_per_turn) if r % REREAD_EVERY])  # pages a turn
    return {t * fetched + (fetched + 1) // 2: t + 1 for t in range(turns)}


def page_text(page: int, words: int, fact_page: dict[int, int]) -> str:
    """A large tool result: word salad, with a planted fact in the middle on some pages."""
    text = corpus(7)
    start = (page * 7919) % max(1, len(text) - words * 8)
    body = text[start : start + words * 6].split()[:words]
    lines = [f"page {page} of the bench corpus"]
    for at in range(0, len(body), 20):
        lines.append(" ".join(body[at : at + 20]))
    if page in fact_page:
        code, value = fact(fact_page[page])
        lines.insert(len(lines) // 2, f"PLANTED|code={code}|value={value}")
    return "\n".join(lines)


def is_summary(body: Mapping[str, Any]) -> bool:
    """Whether a Messages API body is a summary request rather than a decision request."""
    return DECISION not in system_text(body)


class ScriptedAgent:
    """The model's choices, scripted per turn; summary requests answered extractively."""

    name = "longrun"

    def __init__(self, rounds_per_turn: int) -> None:
        self.rounds_per_turn = rounds_per_turn
        self.rounds: dict[str, int] = defaultdict(int)
        self.page = 0
        self.summaries = 0
        self.last_prompt = ""

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        text = prompt_text(request)
        if DECISION not in request.system:  # the compaction's tool-free call
            self.summaries += 1
            facts = dict(FACT_RE.findall(text))
            yield json.dumps(
                {
                    "stable_facts": [
                        {"key": f"planted.{code.lower()}.value", "value": v, "confidence": 0.9}
                        for code, v in sorted(facts.items())
                    ],
                    "active_goals": ["read the bench pages"],
                    "open_questions": [],
                    "discarded_obsolete": [],
                }
            )
            return
        self.last_prompt = text
        turn = TURN_RE.findall(text)[-1]  # the newest path's turn: the id does not cross HTTP
        r = int(ITERATION_RE.findall(text)[-1])  # ANNOUNCE's iteration: the turn's round
        self.rounds[turn] = r
        if r >= self.rounds_per_turn:
            done = {"action": "complete", "notes": f"turn {turn} done"}
            yield "<channel:thinking>Done reading.</channel:thinking>"
            yield f"{DECISION}{json.dumps(done)}</channel:decision>"
            yield f"<channel:answer>Read {r - 1} rounds of pages.</channel:answer>"
            yield "<channel:followup>[]</channel:followup>"
            return
        call: dict[str, Any]
        if r % REREAD_EVERY == 0:
            call = {"tool": "react.read", "params": {"paths": [f"tc:{turn}.c{r - 1}-1.result"]}}
        else:
            self.page += 1
            call = {"tool": "bench.fetch", "params": {"page": self.page}}
        body = {"action": "call_tools", "calls": [call]}
        yield f"<channel:thinking>Round {r}.</channel:thinking>"
        yield f"{DECISION}{json.dumps(body)}</channel:decision>"


def prompt_text(request: GenerateRequest) -> str:
    """The system prompt and every block's text, as the model reads them."""
    parts = [request.system]
    for block in request.blocks:
        parts.append(str(block.get("text", "")) if isinstance(block, dict) else str(block))
    return "\n".join(parts)
