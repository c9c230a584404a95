"""Channel tags ``<channel:NAME>`` / ``</channel:NAME>`` and invisible characters.

Tags tolerate whitespace inside (``< channel : answer >``, bounded to 8
characters per gap) and any letter case. Invisible characters (``INVISIBLE``:
zero-width and bidi-control characters) may sit anywhere inside a tag, so they
cannot hide one: up to 4 between two letters of ``channel`` or of the name, and
counted as whitespace in the gaps. ``tag_name`` gives the name without them.
``PARTIAL_TAG_RE`` matches every prefix of a tag that reaches the end of the
buffer, so the parser can hold such a tail back until the next chunk decides it.
"""

from __future__ import annotations

import re

from .citations import _prefix_pattern

INVISIBLE = "\u200b\u200c\u200d\u2060-\u2063\ufeff\u034f\u061c\u200e\u200f\u202a-\u202e"
"""Zero-width and bidi-control characters (a character-class body)."""
INVISIBLE_RE = re.compile(f"[{INVISIBLE}]")
"""One invisible character: removed only inside tags and citation tokens
(``actline.channels.parser``)."""

_I = f"[{INVISIBLE}]{{0,4}}"
_WS = f"[ \\t\\r\\n{INVISIBLE}]{{0,8}}"
_WORD = _I.join("channel")
_NAME = f"(?:[A-Za-z0-9_\\-]{_I}){{1,64}}"
TAG_RE = re.compile(rf"<{_WS}(/?){_WS}{_WORD}{_WS}:{_WS}({_NAME}){_WS}>", re.IGNORECASE)
PARTIAL_TAG_RE = re.compile(
    _prefix_pattern(
        [
            "<",
            _WS,
            "/?",
            _WS,
            *[part for letter in "channel" for part in (letter, _I)][:-1],
            _WS,
            ":",
            _WS,
            _NAME,
            _WS,
        ]
    )
    + r"\Z",
    re.IGNORECASE,
)
MAX_TAG = 1 + 8 + 1 + 8 + 7 + 6 * 4 + 8 + 1 + 8 + 64 * 5 + 8 + 1
"""The longest tag ``TAG_RE`` matches."""


def tag_name(match: re.Match[str]) -> str:
    """The name a ``TAG_RE`` match names, without invisible characters."""
    return INVISIBLE_RE.sub("", match.group(2))
