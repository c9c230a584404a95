"""Channel tags ``<channel:NAME>`` / ``</channel:NAME>`` and invisible characters.

Tags tolerate whitespace inside (``< channel : answer >``, bounded to 8
characters per gap) and any letter case. ``PARTIAL_TAG_RE`` matches every
prefix of a tag that reaches the end of the buffer, so the parser can hold such
a tail back until the next chunk decides it.
"""

from __future__ import annotations

import re

from .citations import _prefix_pattern

_WS = r"[ \t\r\n]{0,8}"
_NAME = r"[A-Za-z0-9_\-]{1,64}"
TAG_RE = re.compile(rf"<{_WS}(/?){_WS}channel{_WS}:{_WS}({_NAME}){_WS}>", re.IGNORECASE)
PARTIAL_TAG_RE = re.compile(
    _prefix_pattern(["<", _WS, "/?", _WS, *"channel", _WS, ":", _WS, _NAME, _WS]) + r"\Z",
    re.IGNORECASE,
)
MAX_TAG = 1 + 8 + 1 + 8 + 7 + 8 + 1 + 8 + 64 + 8 + 1

INVISIBLE_RE = re.compile(
    "[\u200b\u200c\u200d\u2060-\u2063\ufeff\u034f\u061c\u200e\u200f\u202a-\u202e]"
)
"""Zero-width and bidi-control characters: removed from the stream before parsing."""
