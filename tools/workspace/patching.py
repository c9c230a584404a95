"""Strict unified-diff application for ``react.patch``.

``apply_patch(original, patch)`` applies a one-file unified diff (``---``/``+++`` headers
optional, then ``@@ -a,b +c,d @@`` hunks) to a text. Every hunk must match: its context and
removed lines must equal the file's lines at the hunk's position or, when the file moved, at
exactly one other position after the previous hunk. Anything else raises ``PatchError`` with a
code the model can act on and the failing hunk's text; nothing is half-applied, since the
caller writes only the complete result.

Codes: ``invalid_hunk_header`` (an ``@@`` line that does not parse, or a patch without hunks),
``hunk_mismatch`` (the lines are not in the file, or not at one place), ``hunk_out_of_order``
(a hunk starts before the end of the previous one), ``hunk_length`` (a hunk body with fewer or
more lines than its header counts), ``multi_file_patch`` (headers for a second file).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

__all__ = ["Hunk", "PatchError", "apply_patch", "is_unified_diff", "parse_hunks"]

HUNK_RE: Final = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE: Final = "\\ No newline at end of file"
SHOWN_LINES: Final = 3


class PatchError(ValueError):
    """A patch that cannot be applied; ``hunk`` is the failing hunk's text ("" for none)."""

    def __init__(self, code: str, message: str, hunk: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.hunk = hunk


@dataclass(slots=True)
class Hunk:
    """One ``@@`` hunk: its header numbers and its body lines with their marks."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    header: str
    lines: list[tuple[str, str]] = field(default_factory=list)
    """(mark, text) with mark ' ', '-' or '+'."""
    old_eof_newline: bool = True
    new_eof_newline: bool = True

    @property
    def old(self) -> list[str]:
        return [text for mark, text in self.lines if mark != "+"]

    @property
    def new(self) -> list[str]:
        return [text for mark, text in self.lines if mark != "-"]

    def text(self) -> str:
        return "\n".join([self.header, *(mark + text for mark, text in self.lines)])


def is_unified_diff(patch: str) -> bool:
    """True when ``patch`` starts (after blank lines) with ``---``, ``+++`` or ``@@``."""
    return patch.lstrip("\r\n").startswith(("---", "+++", "@@"))


def parse_hunks(patch: str) -> list[Hunk]:
    """The hunks of a one-file unified diff (``PatchError`` when it is malformed)."""
    hunks: list[Hunk] = []
    current: Hunk | None = None
    headers = 0
    old_left = new_left = 0
    for raw in patch.splitlines():
        line = raw.rstrip("\r")
        if current is not None and (old_left > 0 or new_left > 0):
            if line == NO_NEWLINE:
                _no_newline(current)
                continue
            mark, text = (line[:1], line[1:]) if line else (" ", "")
            if mark not in (" ", "-", "+"):
                raise PatchError(
                    "hunk_length",
                    f"the hunk {current.header!r} has fewer lines than its header counts "
                    f"({old_left} old and {new_left} new lines missing)",
                    current.text(),
                )
            current.lines.append((mark, text))
            old_left -= mark != "+"
            new_left -= mark != "-"
            if old_left < 0 or new_left < 0:
                raise PatchError(
                    "hunk_length",
                    f"the hunk {current.header!r} has more lines than its header counts",
                    current.text(),
                )
            continue
        if line == NO_NEWLINE and current is not None:
            _no_newline(current)
            continue
        if line.startswith("--- ") or line == "---":
            headers += 1
            if headers > 1:
                raise PatchError(
                    "multi_file_patch",
                    "the patch changes more than one file; react.patch takes one file per call",
                )
            continue
        if line.startswith("+++"):
            continue
        if line.startswith("@@"):
            match = HUNK_RE.match(line)
            if match is None:
                raise PatchError(
                    "invalid_hunk_header",
                    f"{line!r} is not a hunk header; write @@ -<start>,<count> +<start>,<count> @@",
                    line,
                )
            a, b, c, d = match.groups()
            current = Hunk(
                int(a), 1 if b is None else int(b), int(c), 1 if d is None else int(d), line
            )
            hunks.append(current)
            old_left, new_left = current.old_count, current.new_count
            continue
        if line.strip() and current is not None:
            raise PatchError(
                "hunk_length",
                f"the hunk {current.header!r} has more lines than its header counts "
                f"(unexpected {line[:60]!r})",
                current.text(),
            )
    if not hunks:
        raise PatchError(
            "invalid_hunk_header",
            "the patch has no @@ hunk; send a unified diff or the whole new content",
        )
    last = hunks[-1]
    if old_left > 0 or new_left > 0:
        raise PatchError(
            "hunk_length",
            f"the hunk {last.header!r} ends early ({old_left} old and {new_left} new lines "
            "missing); recount the header or send the whole new content",
            last.text(),
        )
    return hunks


def _no_newline(hunk: Hunk) -> None:
    """``\\ No newline at end of file`` after a line: that side of the file ends without one."""
    if not hunk.lines:
        return
    mark = hunk.lines[-1][0]
    if mark in (" ", "-"):
        hunk.old_eof_newline = False
    if mark in (" ", "+"):
        hunk.new_eof_newline = False


def _matches(lines: list[str], at: int, want: list[str]) -> bool:
    return at >= 0 and lines[at : at + len(want)] == want


def _context(lines: list[str], at: int) -> str:
    start = max(0, at - 1)
    shown = lines[start : start + SHOWN_LINES + 2]
    return "\n".join(f"{start + i + 1:>5}| {text}" for i, text in enumerate(shown))


def apply_patch(original: str, patch: str) -> str:
    """``original`` with the unified diff ``patch`` applied (``PatchError`` on any failure)."""
    hunks = parse_hunks(patch)
    ends_newline = original.endswith("\n") or original == ""
    lines = original.splitlines()
    out: list[str] = []
    cursor = 0
    eof_newline = ends_newline
    for hunk in hunks:
        old = hunk.old
        expected = hunk.old_start - 1 if hunk.old_count else hunk.old_start
        if expected < cursor:
            raise PatchError(
                "hunk_out_of_order",
                f"the hunk {hunk.header} starts at line {hunk.old_start}, before the end of the "
                f"previous hunk (line {cursor}); order hunks by line",
                hunk.text(),
            )
        if _matches(lines, expected, old):
            at = expected
        else:
            found = [i for i in range(cursor, len(lines) - len(old) + 1) if _matches(lines, i, old)]
            if len(found) != 1:
                where = "nowhere" if not found else f"at {len(found)} places"
                raise PatchError(
                    "hunk_mismatch",
                    f"the hunk {hunk.header} does not match the file (its lines are {where} "
                    f"after line {cursor}); the file near line {hunk.old_start} reads:\n"
                    f"{_context(lines, expected)}\nread the file again and rebuild the patch, "
                    "or send the whole new content",
                    hunk.text(),
                )
            at = found[0]
        out.extend(lines[cursor:at])
        out.extend(hunk.new)
        cursor = at + len(old)
        if cursor >= len(lines):
            eof_newline = hunk.new_eof_newline if old or hunk.new else eof_newline
    out.extend(lines[cursor:])
    text = "\n".join(out)
    return text + "\n" if out and eof_newline else text
