"""Streams top-level string values of a JSON object as per-key deltas (canvas).

A character-exact state machine over the channel's text: it skips anything
before the first ``{`` (so a ```` ```json ```` fence is fine), follows depth-1
keys, decodes escapes (``\\n``, ``\\uXXXX`` with surrogate pairs, ...) in string
values of the keys it streams, skips nested values and scalars, and stops at
the closing brace of the object. Output does not depend on how the text is
chunked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .citations import CitationMap, CitationReplacer

_SIMPLE_ESCAPES = {
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "b": "\b",
    "f": "\f",
    '"': '"',
    "\\": "\\",
    "/": "/",
}
_STRING_STOP = re.compile(r'["\\]')
_SKIP_STOP = re.compile(r'["\\{}\[\]]')
_SCALAR_STOP = re.compile(r"[,}]")

KeyEvent = tuple[str, str, str, bool]
"""(key, format, text, completed)."""


class CompositeJsonStreamer:
    """Per-key deltas of one JSON object's top-level string values."""

    def __init__(self, keys: Mapping[str, str], cmap: CitationMap, replace_citations: bool) -> None:
        self._keys = keys
        self._cmap = cmap
        self._replace = replace_citations
        self._state = "start"
        self._depth = 0
        self._in_str = False
        self._esc = ""
        self._skip_next = False
        self._high: int | None = None
        self._key_parts: list[str] = []
        self._key = ""
        self._fmt = ""
        self._streaming = False
        self._replacer: CitationReplacer | None = None
        self._out: list[KeyEvent] = []
        self.unresolved: dict[str, list[int]] = {}
        """Key -> the SIDs its value cited that match no source (set when the value ends)."""
        self.used: dict[int, None] = {}
        """SIDs the keys' values cited that resolved."""

    # -- output ---------------------------------------------------------------
    def _text(self, text: str) -> None:
        if not text or not self._streaming:
            return
        if self._replacer is not None:
            text = self._replacer.feed(text)
        if text:
            self._out.append((self._key, self._fmt, text, False))

    def _end_value(self) -> None:
        if self._streaming:
            if self._high is not None:
                self._high = None
                self._text("\ufffd")
            if self._replacer is not None:
                tail = self._replacer.flush()
                if tail:
                    self._out.append((self._key, self._fmt, tail, False))
                self.unresolved[self._key] = sorted(self._replacer.unresolved)
                self.used.update(self._replacer.used)
            self._out.append((self._key, self._fmt, "", True))
        self._streaming = False
        self._replacer = None
        self._state = "after_value"

    def _char(self, ch: str) -> None:
        """One decoded character of the current string value (surrogate-aware)."""
        code = ord(ch)
        if self._high is not None:
            high, self._high = self._high, None
            if 0xDC00 <= code <= 0xDFFF:
                self._text(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)))
                return
            self._text("\ufffd")
        if 0xD800 <= code <= 0xDBFF:
            self._high = code
        elif 0xDC00 <= code <= 0xDFFF:
            self._text("\ufffd")
        else:
            self._text(ch)

    def _start_value(self) -> None:
        fmt = self._keys.get(self._key) or self._keys.get("*")
        self._streaming = fmt is not None
        self._fmt = fmt or ""
        if self._streaming and self._replace and self._fmt != "json":
            self._replacer = CitationReplacer(self._cmap, self._fmt)

    # -- parsing --------------------------------------------------------------
    def feed(self, text: str) -> list[KeyEvent]:
        """Consume a piece of the channel; return the key events it completes."""
        self._out = []
        i, n = 0, len(text)
        while i < n and self._state != "done":
            state = self._state
            if state == "start":
                j = text.find("{", i)
                if j < 0:
                    return self._out
                self._state, i = "key_or_end", j + 1
            elif state in ("key_or_end", "colon", "value", "after_value"):
                ch = text[i]
                i += 1
                if ch in " \t\r\n":
                    continue
                if state == "key_or_end":
                    if ch == '"':
                        self._state, self._key_parts = "in_key", []
                    elif ch == "}":
                        self._state = "done"
                elif state == "colon":
                    if ch == ":":
                        self._state = "value"
                elif state == "value":
                    if ch == '"':
                        self._state = "in_value"
                        self._start_value()
                    elif ch in "{[":
                        self._state, self._depth, self._in_str = "skip", 1, False
                    else:
                        self._state = "scalar"
                else:  # after_value
                    if ch == ",":
                        self._state = "key_or_end"
                    elif ch == "}":
                        self._state = "done"
            elif state in ("in_key", "in_value"):
                i = self._string(text, i, state == "in_key")
            elif state == "skip":
                i = self._skip(text, i)
            else:  # scalar
                m = _SCALAR_STOP.search(text, i)
                if m is None:
                    return self._out
                self._state = "key_or_end" if m.group() == "," else "done"
                i = m.end()
        return self._out

    def _string(self, text: str, i: int, is_key: bool) -> int:
        n = len(text)
        while i < n:
            if self._esc:
                if self._escape_step(text[i], is_key):
                    i += 1
                continue
            m = _STRING_STOP.search(text, i)
            end = m.start() if m else n
            if end > i:
                chunk = text[i:end]
                if is_key:
                    self._key_parts.append(chunk)
                elif self._high is None and not _has_surrogate(chunk):
                    self._text(chunk)
                else:
                    for ch in chunk:
                        self._char(ch)
            if m is None:
                return n
            i = m.end()
            if m.group() == "\\":
                self._esc = "\\"
                continue
            if is_key:  # the closing quote
                self._key = _pairs("".join(self._key_parts))
                self._state = "colon"
            else:
                self._end_value()
            return i
        return i

    def _decoded(self, text: str, is_key: bool) -> None:
        if is_key:
            self._key_parts.append(text)
        else:
            for ch in text:
                self._char(ch)

    def _escape_step(self, ch: str, is_key: bool) -> bool:
        """Feed one character of an escape; False when it does not belong to it."""
        if self._esc == "\\":
            if ch == "u":
                self._esc = "\\u"
            else:
                self._esc = ""
                self._decoded(_SIMPLE_ESCAPES.get(ch, ch), is_key)
            return True
        if ch in "0123456789abcdefABCDEF":
            self._esc += ch
            if len(self._esc) == 6:
                code = int(self._esc[2:], 16)
                self._esc = ""
                self._decoded(chr(code), is_key)
            return True
        # not a valid \uXXXX: keep what was written and read ``ch`` normally
        written, self._esc = self._esc, ""
        self._decoded(written, is_key)
        return False

    def _skip(self, text: str, i: int) -> int:
        n = len(text)
        if self._skip_next:
            self._skip_next = False
            i += 1
        while i < n:
            m = _SKIP_STOP.search(text, i)
            if m is None:
                return n
            ch = m.group()
            i = m.end()
            if self._in_str:
                if ch == "\\":
                    i += 1  # skip the escaped character, which may be in the next piece
                    if i > n:
                        self._skip_next = True
                        return n
                elif ch == '"':
                    self._in_str = False
            elif ch == '"':
                self._in_str = True
            elif ch in "{[":
                self._depth += 1
            elif ch in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self._state = "after_value"
                    return i
        return i

    def finish(self) -> list[KeyEvent]:
        """End of the channel: a string value still open is completed."""
        self._out = []
        if self._state == "in_value":
            if self._esc:
                for ch in self._esc:
                    self._char(ch)
                self._esc = ""
            self._end_value()
        self._state = "done"
        return self._out


def _pairs(key: str) -> str:
    """A key with ``\\uXXXX`` surrogate pairs joined and lone surrogates as U+FFFD, as in values."""
    return key.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text) if not text.isascii() else False
