"""The answer of a turn whose model kept breaking the decision protocol. Pure.

A weak model writes prose without channel tags, its answer inside the thinking channel,
or the same sentence over and over. When a turn ends ``protocol_failed`` its answer is
what the model did say: the answer channel if it wrote one, else the text it wrote
outside the channels, else its thinking; channel tags it left half-written are dropped,
so are lines that echo the rendered context (a block header such as ``[USER MESSAGE]`` or
a turn rule, a logical path, a tool id or a notice code, a line of the decision protocol's
instructions: a small model often copies its prompt), a sentence it repeated is kept once,
and a JSON object (a decision without its tags) is not prose. With nothing left the answer
says that the model gave none, and why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from actline.channels import OUTSIDE
from actline.llm.prompt import DECISION_PROTOCOL

ORDER = ("answer", OUTSIDE, "thinking")
"""Where prose is looked for, best first."""
SHORT = 12
"""Fragments shorter than this ("1.", "$20.") are never dropped as repeats."""
MAX_CHARS = 4_000
"""A salvaged answer is cut at a sentence end before this many characters."""

_TAG = re.compile(r"</?\s*channel\s*:?\s*[A-Za-z_-]*\s*>?|<[/A-Za-z:_-]*$", re.IGNORECASE)
_ECHO = re.compile(
    r"^\s*(?:═{2,}|\[[A-Z][A-Z0-9 _-]*\])"
    r"|\b(?:ar|fi|so|su|tc|ks|sk):[\w.\[-]"
    r"|\bprotocol_violation\.|\breact\.\s?[a-z_]+"
)
"""A line that echoes the rendered context rather than answering."""
COPIED = 24
"""A line at least this long found word for word in the decision protocol was copied."""
_SENTENCE = re.compile(r"[^.!?]+(?:[.!?]+|$)")
_SPACE = re.compile(r"\s+")


def salvage(channels: Mapping[str, str]) -> str:
    """The prose of one reply's channels, cleaned ("" when there is none)."""
    for name in ORDER:
        text = clean(channels.get(name, ""))
        if text:
            return text
    return ""


def clean(text: str) -> str:
    """``text`` without channel tags, each sentence once, cut at ``MAX_CHARS``; "" when what
    is left is a JSON value or nothing."""
    text = _TAG.sub(" ", text).strip()
    if not text or _is_json(text):
        return ""
    seen: set[str] = set()
    lines: list[str] = []
    for line in text.splitlines():
        if _ECHO.search(line) or _copied(line):
            continue
        kept: list[str] = []
        for sentence in _SENTENCE.findall(line):
            key = _SPACE.sub(" ", sentence).strip().casefold()
            if key and (len(key) < SHORT or key not in seen):
                seen.add(key)
                kept.append(sentence.strip())
        if kept or not line.strip():
            lines.append(" ".join(kept))
    out = "\n".join(lines).strip()
    out = re.sub(r"\n{3,}", "\n\n", out)
    if len(out) <= MAX_CHARS:
        return out
    cut = out[:MAX_CHARS]
    end = max(cut.rfind(". "), cut.rfind(".\n"), cut.rfind("\n"))
    return (cut[: end + 1] if end > MAX_CHARS // 2 else cut).rstrip() + " …"


def answer_from_replies(salvaged: str, reason: str) -> str:
    """The answer of a ``protocol_failed`` turn: the salvaged prose, or a sentence that says
    there was none and why."""
    if salvaged:
        return salvaged
    return f"The model gave no usable answer: {reason}."


def _copied(line: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= COPIED and stripped in DECISION_PROTOCOL


def _is_json(text: str) -> bool:
    if text[0] not in "{[":
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
