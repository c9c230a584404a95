"""The streaming channel parser: model text in any chunking -> per-channel deltas.

``ChannelStream.feed(chunk)`` returns the deltas that became safe; ``finish()``
returns the rest, including exactly one ``completed`` delta per declared
channel, and ``result`` holds per-channel results. The output never depends on
how the text was chunked: a prefix is committed only when no later character
can change what it means (a partial tag, a backtick run that may grow, an
inline code span that may still close, a partial citation are held back).

Rules:
- ``<channel:NAME>`` opens NAME (case-insensitive, whitespace allowed inside
  the tag) and implicitly closes the open channel; ``</channel:NAME>`` closes
  NAME when it is open and is ignored otherwise (a notice says so).
- Inside a channel, markdown code is content: an inline span (a backtick run
  closed by an equal run on the same line within 256 characters) and a fenced
  block. A stray backtick is just a character. A line ends at LF, CR or CRLF
  alike, so a fence written with CRLF or CR line endings is the fence it is with LF.
- Code never hides two tags, decided on purpose so that no channel can swallow
  another: the open channel's own close tag always closes it, and a declared
  channel's open tag always opens that channel, inside an inline span or a
  fence alike. An inline span therefore never reaches past such a tag (a stray
  backtick cannot pair with a backtick of a later channel), and an unclosed
  fence ends where the next channel opens. Every other tag inside code (another
  channel's close tag, an unknown channel's tag, the open channel's own open
  tag) is content, kept as written; outside code it acts as usual.
- Text outside channels is kept in the ``_outside`` result, never emitted.
- An unknown channel becomes a notice; its text is kept raw in its own result.
- Citation tokens are replaced in emitted text only; raw text is never changed.
- Invisible characters (zero-width and bidi controls, ``actline.channels.tags``) are
  removed only where they could hide something: inside a tag (the tag pattern
  allows them; tags are not content) and inside what may still become a
  citation token in a channel that replaces citations (the text before the
  character, in the same channel, ends in a prefix of a token such as ``[[S:``).
  Everywhere else they are content: a zero-width joiner in an emoji sequence or
  a non-joiner in a Persian word reaches the client as written.
- Nothing raises: protocol problems are notices and result errors.

Cost is linear in the input for any chunking: a backtick run that may still grow
is held as a count, not rescanned, and every other held-back tail is bounded
(a partial tag, a possible inline span of at most ``MAX_INLINE`` characters), so
each character is scanned a bounded number of times however small the chunks.
``work`` counts the characters scanned, re-scans included, so tests can check it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from .citations import PARTIAL_RE, CitationReplacer, LazyCitationMap
from .composite import CompositeJsonStreamer
from .errors import ChannelSpecError
from .spec import OUTSIDE, ChannelDelta, ChannelNotice, ChannelResult, ChannelSpec, StreamResult
from .subscribers import ChannelSubscribers
from .tags import INVISIBLE, INVISIBLE_RE, MAX_TAG, PARTIAL_TAG_RE, TAG_RE, tag_name

MAX_INLINE = 256
_INTEREST = re.compile(f"[<`{INVISIBLE}]")
_BACKTICKS = re.compile("`+")
_EOL = re.compile("[\r\n]")
"""A line ends at LF, CR or CRLF (CRLF's CR ends it first)."""
_TOKEN_CONTEXT = 80
"""Characters before an invisible one that can hold the start of a citation token."""


class ChannelStream:
    """Parses one model stream into channels. Not thread-safe; one per model call."""

    def __init__(
        self,
        specs: Iterable[ChannelSpec],
        *,
        sources: Iterable[Any] | Mapping[int, Any] | None = None,
        subscribers: ChannelSubscribers | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._specs: dict[str, ChannelSpec] = {}
        for spec in specs:
            key = spec.name.lower()
            if key in self._specs:
                raise ChannelSpecError(spec.name, "declared twice (names are case-insensitive)")
            self._specs[key] = spec
        self._cmap = LazyCitationMap(sources)
        self._subs = subscribers if subscribers else None
        self._clock = clock
        self._results: dict[str, ChannelResult] = {
            s.name: ChannelResult(s.name) for s in self._specs.values()
        }
        self._results[OUTSIDE] = ChannelResult(OUTSIDE, declared=False)
        self._raw: dict[str, list[str]] = {name: [] for name in self._results}
        self._emitted: dict[str, list[str]] = {name: [] for name in self._results}
        self._replacers: dict[str, CitationReplacer] = {}
        self._composites: dict[str, CompositeJsonStreamer] = {}
        self._key_index: dict[tuple[str, str], int] = {}
        self._notices: list[ChannelNotice] = []
        self._buf = ""
        self._cur: str | None = None
        self._spec: ChannelSpec | None = None
        # hot-path state of the open channel, set by _open
        self._cur_raw: list[str] = []
        self._cur_emitted: list[str] = []
        self._cur_result: ChannelResult | None = None
        self._cur_replacer: CitationReplacer | None = None
        self._cur_composite: CompositeJsonStreamer | None = None
        self._cur_marker = ""
        self._cur_cites = False
        self._seg_start = 0
        self._fence = 0
        self._run_held = False
        """``_buf`` is one backtick run that may still grow; ``_ticks`` more backticks follow."""
        self._ticks = 0
        self._work = 0
        self._finished = False
        self._out: list[ChannelDelta] = []

    # -- public ------------------------------------------------------------------
    def feed(self, chunk: str) -> list[ChannelDelta]:
        """Consume a piece of model output; return the deltas that are now safe."""
        out: list[ChannelDelta] = []
        self._out = out
        if self._finished:
            self._notice("fed_after_finish", "text arrived after the stream finished; ignored")
            return out
        if not chunk:
            return out
        self._work += len(chunk)
        if self._run_held and not chunk.strip("`"):
            self._ticks += len(chunk)  # the held run grows: count it, rescan nothing
            return out
        if self._spec is not None and not self._buf and self._cur_composite is None:
            if _INTEREST.search(chunk) is None:
                self._content(chunk)  # fast path: no tag, code or invisible character here
                return out
        if self._ticks:
            self._buf += "`" * self._ticks
            self._ticks = 0
        self._buf += chunk
        self._process(final=False)
        return out

    def finish(self) -> list[ChannelDelta]:
        """End of stream: flush everything, complete every declared channel."""
        out: list[ChannelDelta] = []
        self._out = out
        if self._finished:
            return out
        self._process(final=True)
        if self._cur is not None:
            if self._spec is not None:
                self._notice("unclosed_channel", "closed at end of stream", self._cur)
            self._close()
        for name, composite in self._composites.items():
            self._key_events(name, composite.finish())
        for spec in self._specs.values():
            result = self._results[spec.name]
            out.append(ChannelDelta(spec.name, "", result.deltas, spec.marker, spec.format, True))
            self._dispatch(out[-1])
        self._finished = True
        self._build_results()
        return out

    @property
    def result(self) -> StreamResult:
        """Per-channel results (complete after ``finish()``)."""
        if not self._finished:
            self._build_results()
        return StreamResult(self._results, list(self._notices))

    @property
    def work(self) -> int:
        """Characters scanned so far, each re-scan of held-back text counted again: a
        measure of the parser's work that stays linear in the input for any chunking."""
        return self._work

    @property
    def notices(self) -> list[ChannelNotice]:
        """Protocol notices so far."""
        return list(self._notices)

    # -- scanning ------------------------------------------------------------------
    def _process(self, final: bool) -> None:
        if self._ticks:
            self._buf += "`" * self._ticks
            self._ticks = 0
        self._run_held = False
        buf = self._buf
        n = len(buf)
        self._work += n
        pos = scan = 0
        while pos < n:
            if self._cur is None:
                m = TAG_RE.search(buf, pos)
                if m is None:
                    end = n
                    if not final:
                        lt = buf.rfind("<", max(pos, n - MAX_TAG))
                        if lt >= 0 and PARTIAL_TAG_RE.match(buf, lt):
                            end = lt
                    self._outside(buf[pos:end])
                    pos = end
                    break
                self._outside(buf[pos : m.start()])
                self._tag(m)
                pos = scan = m.end()
                continue
            m = _INTEREST.search(buf, max(pos, scan))
            if m is None:
                self._content(buf[pos:])
                pos = n
                break
            i = m.start()
            char = buf[i]
            if char == "<":
                tm = TAG_RE.match(buf, i)
                if tm is not None:
                    if self._fence and not self._strong(tm):
                        scan = tm.end()  # a tag inside a fence is content
                        continue
                    self._content(buf[pos:i])
                    self._tag(tm)
                    pos = scan = tm.end()
                    continue
                if not final and PARTIAL_TAG_RE.match(buf, i):
                    self._content(buf[pos:i])
                    pos = i
                    break
                scan = i + 1
                continue
            if char != "`":  # an invisible character
                if self._hides_token(buf, pos, i):
                    self._content(buf[pos:i])
                    pos = i + 1
                scan = i + 1
                continue
            j = _BACKTICKS.match(buf, i).end()  # type: ignore[union-attr]
            self._content(buf[pos:i])
            pos = scan = i
            if j == n and not final:
                self._run_held = True
                break  # the run may grow
            run = j - i
            if self._fence:
                if run >= self._fence and self._at_line_start():
                    self._fence = 0
                self._content(buf[i:j])
                pos = scan = j
                continue
            if run >= 3 and self._at_line_start():
                self._fence = run
                self._content(buf[i:j])
                pos = scan = j
                continue
            close = self._inline_close(buf, j, run, final)
            if close is None:
                break  # cannot tell yet whether this opens a code span
            end = j if close < 0 else close + run
            self._content(buf[i:end])
            pos = scan = end
        self._buf = buf[pos:]

    def _hides_token(self, buf: str, pos: int, i: int) -> bool:
        """True when the invisible character ``buf[i]`` sits inside what may still become
        a citation token of the open channel (the text before it ends in a token prefix)."""
        if not self._cur_cites:
            return False
        context = buf[max(pos, i - _TOKEN_CONTEXT) : i]
        if len(context) < _TOKEN_CONTEXT:
            parts: list[str] = []
            need = _TOKEN_CONTEXT - len(context)
            for k in range(len(self._cur_raw) - 1, self._seg_start - 1, -1):
                parts.append(self._cur_raw[k][-need:])
                need -= len(parts[-1])
                if need <= 0:
                    break
            context = "".join(reversed(parts)) + context
        if "[" not in context and "\uff3b" not in context:
            return False
        return PARTIAL_RE.search(INVISIBLE_RE.sub("", context)) is not None

    def _at_line_start(self) -> bool:
        """True when the channel's text since its last line end (LF, CR or CRLF; or its
        start) is <= 3 spaces."""
        parts = self._cur_raw
        spaces = 0
        for k in range(len(parts) - 1, self._seg_start - 1, -1):
            part = parts[k]
            i = len(part)
            while i and part[i - 1] == " ":
                i -= 1
                spaces += 1
                if spaces > 3:
                    return False
            if i:
                return part[i - 1] in "\r\n"
        return True

    def _inline_close(self, buf: str, j: int, run: int, final: bool) -> int | None:
        """Start of the run closing an inline span opened at ``j``; -1 if none; None if unknown.

        The span ends at the line's end, after ``MAX_INLINE`` characters, or at a tag that
        code cannot hide (``_strong``), whichever comes first.
        """
        if run > MAX_INLINE:
            return -1  # no equal run fits in the window
        n = len(buf)
        limit = j + MAX_INLINE
        seg_end = min(n, limit)
        eol = _EOL.search(buf, j, seg_end)
        nl = eol.start() if eol is not None else -1
        stop = nl if nl >= 0 else seg_end
        tag = self._strong_tag(buf, j, stop)
        if tag >= 0:
            stop = tag
        self._work += stop - j
        for m in _BACKTICKS.finditer(buf, j, stop):
            if m.end() - m.start() == run:
                if m.end() == n and not final:
                    return None  # the closing run may still grow
                return m.start()
        if tag >= 0 or nl >= 0 or limit <= n or final:
            return -1
        return None

    def _strong_tag(self, buf: str, start: int, stop: int) -> int:
        """Position of the first tag code cannot hide in ``buf[start:stop]``, or -1."""
        lt = buf.find("<", start, stop)
        while lt >= 0:
            m = TAG_RE.match(buf, lt)
            if m is not None and self._strong(m):
                return lt
            lt = buf.find("<", lt + 1, stop)
        return -1

    def _strong(self, m: re.Match[str]) -> bool:
        """Tags that code cannot hide: the open channel's close tag, a declared channel's
        open tag (other than the open channel's)."""
        name, spec = self._resolve(tag_name(m))
        if m.group(1) == "/":
            return name == self._cur
        return spec is not None and name != self._cur

    def _resolve(self, raw_name: str) -> tuple[str, ChannelSpec | None]:
        """The channel a tag names: the declared spelling, or the lower-cased unknown name."""
        spec = self._specs.get(raw_name.lower())
        return (spec.name if spec is not None else raw_name.lower()), spec

    # -- tags ------------------------------------------------------------------------
    def _tag(self, m: re.Match[str]) -> None:
        raw_name = tag_name(m)
        name, spec = self._resolve(raw_name)
        if m.group(1) == "/":
            if name == self._cur:
                self._close()
            else:
                where = f"inside {self._cur!r}" if self._cur else "outside any channel"
                self._notice("stray_close_tag", f"</channel:{raw_name}> {where} was ignored", name)
            return
        if self._cur is not None:
            if name == self._cur:
                return  # re-opening the open channel changes nothing
            self._close()
        self._open(name, spec)

    def _open(self, name: str, spec: ChannelSpec | None) -> None:
        result = self._results.get(name)
        if result is None:
            result = self._results[name] = ChannelResult(name, declared=False)
            self._raw[name], self._emitted[name] = [], []
            self._notice(
                "unknown_channel",
                f"<channel:{name}> is not a declared channel; its text is kept raw",
                name,
            )
        if result.started_at is None:
            result.started_at = self._clock()
        self._cur, self._spec = name, spec
        self._fence = 0
        self._cur_raw = self._raw[name]
        self._cur_emitted = self._emitted[name]
        self._cur_result = result
        self._seg_start = len(self._cur_raw)
        self._cur_replacer = self._cur_composite = None
        self._cur_cites = False
        if spec is None:
            return
        self._cur_marker = spec.marker
        self._cur_cites = spec.cites or (spec.composite is not None and spec.replace_citations)
        if spec.cites:
            if name not in self._replacers:
                self._replacers[name] = CitationReplacer(self._cmap, spec.format)
            self._cur_replacer = self._replacers[name]
        if spec.composite is not None:
            if name not in self._composites:
                self._composites[name] = CompositeJsonStreamer(
                    spec.composite, self._cmap, spec.replace_citations
                )
            self._cur_composite = self._composites[name]

    def _close(self) -> None:
        name, spec = self._cur, self._spec
        assert name is not None
        if self._cur_replacer is not None and spec is not None:
            tail = self._cur_replacer.flush()
            if tail:
                self._emit(spec, tail)
        self._results[name].finished_at = self._clock()
        self._cur, self._spec, self._fence = None, None, 0
        self._cur_replacer = self._cur_composite = self._cur_result = None

    # -- content -----------------------------------------------------------------------
    def _outside(self, text: str) -> None:
        if text:
            self._raw[OUTSIDE].append(text)

    def _content(self, text: str) -> None:
        if not text:
            return
        self._cur_raw.append(text)
        spec = self._spec
        if spec is None:
            return  # unknown channel: raw only
        if self._cur_composite is not None:
            self._key_events(spec.name, self._cur_composite.feed(text))
        replacer = self._cur_replacer
        if replacer is not None:
            text = replacer.feed(text)
            if not text:
                return
        self._emit(spec, text)

    def _emit(self, spec: ChannelSpec, text: str) -> None:
        """One delta of the open channel (``spec``) to clients and subscribers."""
        result = self._cur_result
        assert result is not None
        delta = ChannelDelta(spec.name, text, result.deltas, self._cur_marker, spec.format)
        result.deltas += 1
        self._cur_emitted.append(text)
        self._out.append(delta)
        if self._subs is not None:
            self._dispatch(delta)

    def _key_events(self, name: str, events: list[tuple[str, str, str, bool]]) -> None:
        spec = self._specs[name.lower()]
        for key, fmt, text, completed in events:
            index = self._key_index.get((name, key), 0)
            self._key_index[(name, key)] = index + (0 if completed else 1)
            delta = ChannelDelta(name, text, index, spec.composite_marker, fmt, completed, key)
            self._out.append(delta)
            if self._subs is not None:
                self._dispatch(delta)

    def key_unresolved(self, channel: str, key: str) -> list[int]:
        """The SIDs the value of composite ``key`` of ``channel`` cited that match no source
        (known once the key's completed delta is out)."""
        composite = self._composites.get(channel)
        return [] if composite is None else composite.unresolved.get(key, [])

    def _dispatch(self, delta: ChannelDelta) -> None:
        if self._subs is None:
            return
        for failure in self._subs.dispatch(delta):
            self._results[delta.channel].errors.append(failure)

    def _notice(self, code: str, message: str, channel: str | None = None) -> None:
        self._notices.append(ChannelNotice(code, message, channel))

    # -- results -------------------------------------------------------------------------
    def _build_results(self) -> None:
        for name, result in self._results.items():
            result.raw = "".join(self._raw[name])
            result.emitted = "".join(self._emitted[name])
            replacer = self._replacers.get(name)
            if replacer is not None:
                result.used_sources = sorted(replacer.used)
                result.unresolved_sources = sorted(replacer.unresolved)
            composite = self._composites.get(name)
            if composite is not None:
                result.used_sources = sorted({*result.used_sources, *composite.used})
                result.key_unresolved = dict(composite.unresolved)
            if not result.declared and name != OUTSIDE:
                if "unknown channel" not in result.errors:
                    result.errors.append("unknown channel")
        if not self._finished:
            return
        for spec in self._specs.values():
            self._finalise(spec, self._results[spec.name])

    def _finalise(self, spec: ChannelSpec, result: ChannelResult) -> None:
        if spec.format == "json":
            body = strip_fence(result.raw).strip()
            if body:
                try:
                    result.obj = json.loads(body)
                except ValueError as exc:
                    result.errors.append(f"invalid JSON: {exc}")
        if spec.model is None:
            return
        if result.started_at is None:
            result.errors.append("the channel did not appear in the stream")
            return
        if spec.format == "json" and result.obj is None:
            return  # already reported as invalid or empty JSON
        target = result.obj if spec.format == "json" else result.raw
        try:
            if isinstance(spec.model, type) and issubclass(spec.model, BaseModel):
                result.obj = spec.model.model_validate(target)
            else:
                result.obj = TypeAdapter(spec.model).validate_python(target)
        except ValidationError as exc:
            result.errors.append(
                f"does not match {getattr(spec.model, '__name__', spec.model)}: {exc}"
            )


def strip_fence(text: str) -> str:
    """Remove one outer ```` ``` ```` fence (its first line and everything after the last fence)."""
    stripped = text.strip()
    if not stripped.startswith("```"):
        return text
    newline = stripped.find("\n")
    body = stripped[newline + 1 :] if newline >= 0 else ""
    last = body.rfind("```")
    return body[:last] if last >= 0 else body


def parse(
    text: str,
    specs: Iterable[ChannelSpec],
    *,
    sources: Iterable[Any] | Mapping[int, Any] | None = None,
) -> tuple[list[ChannelDelta], StreamResult]:
    """Parse a complete text in one go: all deltas and the results."""
    stream = ChannelStream(specs, sources=sources)
    deltas = stream.feed(text) + stream.finish()
    return deltas, stream.result
