"""Fuzzing the channel parser (``channels.parser``), its composite JSON streamer and the
streaming citation replacer, fed text from a grammar of near-tags, near-tokens, code spans,
fences, JSON and arbitrary Unicode, split into arbitrary chunks.

Properties: nothing raises (the package declares that parsing never does); the output does
not depend on the chunking; each channel's deltas add up to its emitted text; the raw texts
are the input's characters less the tags and some invisible ones (those inside tags and
citation tokens); a channel without
citations emits its raw text; cited SIDs come from tokens in the raw text; composite keys
stream exactly their JSON string values; the streaming replacer equals the one-shot one.
"""

from __future__ import annotations

import json
import random
import string
from collections import Counter, defaultdict
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from actline.channels import (
    OUTSIDE,
    CitationReplacer,
    CompositeJsonStreamer,
    citation_map,
    replace_citations,
    sids_in_text,
    strip_fence,
)
from actline.channels.tags import INVISIBLE_RE, TAG_RE

from ..channels.helpers import SOURCES, Run, run, specs, split_at
from .tally import EXAMPLES, TALLY, fuzz_settings

KIND = "channels.stream"
STREAMS_PER_EXAMPLE = 10
OBJECTS_PER_EXAMPLE = 20
CMAP = citation_map(SOURCES)
SPECS = {spec.name: spec for spec in specs()}
TAG_CHARS = frozenset(
    "<>/:_-\t\r\n abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    "\u0130\u0131\u017f\u212a"  # [A-Za-z] ignoring case also matches İ ı ſ and the Kelvin sign
)
INVISIBLES = "\u200b\u200c\u200d\u2060\u2061\u2062\u2063\ufeff\u034f\u061c\u200e\u200f\u202a\u202e"
FORMATS = ["markdown", "text", "html", "json"]

gaps = st.text(alphabet=" \t\r\n", max_size=9)
names = st.one_of(
    st.sampled_from([*SPECS, "zzz", "_outside"]).map(lambda n: n.upper() if len(n) % 2 else n),
    st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=70),
)


@st.composite
def tags(draw: st.DrawFn) -> str:
    """A channel tag, sometimes with too much whitespace, a bad name or cut short."""
    word = "".join(c.upper() if draw(st.booleans()) else c for c in "channel")
    slash = draw(st.sampled_from(["", "/"]))
    g = [draw(gaps) for _ in range(5)]
    tag = f"<{g[0]}{slash}{g[1]}{word}{g[2]}:{g[3]}{draw(names)}{g[4]}>"
    return tag[: draw(st.integers(1, len(tag)))] if draw(st.integers(0, 5)) == 0 else tag


@st.composite
def tokens(draw: st.DrawFn) -> str:
    """A citation token from its grammar, sometimes too long or cut short."""
    ws = st.text(alphabet=" \t", max_size=4)
    parts = [
        draw(st.sampled_from("[\uff3b")),
        draw(ws),
        draw(st.sampled_from("[\uff3b")),
        draw(ws),
        draw(st.sampled_from("Ss")),
        draw(ws),
        draw(st.sampled_from(":\uff1a\ufe55\ufe30")),
        draw(ws),
        draw(st.sampled_from("0123456789")),
        draw(st.text(alphabet="0123456789 ,-\u2013\u2014", max_size=44)),
        draw(ws),
        draw(st.sampled_from("]\uff3d")),
        draw(ws),
        draw(st.sampled_from("]\uff3d")),
    ]
    token = "".join(parts)
    return token[: draw(st.integers(1, len(token)))] if draw(st.integers(0, 4)) == 0 else token


json_leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_objects = st.dictionaries(
    st.sampled_from(["title", "body", "n", "action"]) | st.text(max_size=6),
    json_leaves
    | st.lists(json_leaves, max_size=3)
    | st.dictionaries(st.text(max_size=4), json_leaves, max_size=2),
    max_size=5,
)


def _layout(rnd: random.Random, obj: dict[str, Any]) -> str:
    """``obj`` as a model writes it: any layout, escaped or not, maybe fenced."""
    text = json.dumps(
        obj,
        ensure_ascii=rnd.random() < 0.5,
        indent=rnd.choice([None, 0, 2]),
        separators=rnd.choice([None, (",", ":"), (" , ", " : ")]),
    )
    return f"```json\n{text}\n```" if rnd.random() < 0.3 else text


json_texts = st.builds(_layout, st.randoms(use_true_random=False), json_objects)


pieces = st.one_of(
    tags(),
    tokens(),
    st.sampled_from(["`", "``", "```", "````", "```json\n", "\n", "   ", "<", ">", "</", "\\"]),
    json_texts,
    st.builds(lambda name, body: f"<channel:{name}>{body}</channel:{name}>", names, json_texts),
    json_texts.map(lambda body: f"<channel:canvas>{body}</channel:canvas>"),
    st.text(alphabet=INVISIBLES, min_size=1, max_size=3),
    st.text(max_size=8),
)


def _chunks(rnd: random.Random, text: str) -> list[str]:
    mode = rnd.randrange(6)
    if mode == 0:
        return list(text)
    if mode == 1:
        return [text]
    return split_at(text, [rnd.randrange(len(text) + 1) for _ in range(rnd.randint(1, 30))])


def _check_stream(text: str, chunks: list[str]) -> None:
    """Every property of one stream split into ``chunks``."""
    chunked: Run = TALLY.run(KIND, run, chunks)
    whole = run([text])
    assert chunked.comparable() == whole.comparable()
    result = chunked.result
    clean = INVISIBLE_RE.sub("", text)

    emitted: dict[str, list[str]] = defaultdict(list)
    completed: list[str] = []
    for delta in chunked.deltas:
        if delta.completed and delta.key is None:
            completed.append(delta.channel)
        elif delta.key is None:
            assert not completed, "a delta after the completions"
            emitted[delta.channel].append(delta.text)
    assert sorted(completed) == sorted(SPECS)
    for name, res in result.channels.items():
        assert "".join(emitted.get(name, [])) == res.emitted, name
        spec = SPECS.get(name)
        if spec is None:
            assert res.emitted == "" and name not in emitted, name
        elif not spec.cites:
            assert res.emitted == res.raw, name
        else:
            cited = set(sids_in_text(res.raw))
            assert set(res.used_sources) | set(res.unresolved_sources) <= cited, name
            assert set(res.used_sources) <= set(CMAP), name
            assert not set(res.unresolved_sources) & set(CMAP), name
            if "[" not in res.raw and "\uff3b" not in res.raw:
                assert res.emitted == res.raw, name

    kept = Counter("".join(res.raw for res in result.channels.values()))
    assert not kept - Counter(text), "raw text holds characters the input did not"
    lost = set(Counter(text) - kept)
    assert lost <= TAG_CHARS | set(INVISIBLES), "characters other than tags were lost"
    if TAG_RE.search(text) is None and TAG_RE.search(clean) is None:
        assert result.outside == text
        assert all(r.started_at is None for n, r in result.channels.items() if n != OUTSIDE)
    _check_canvas(chunked)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({k for k, _ in pairs}) != len(pairs):
        raise ValueError("duplicate keys")
    return dict(pairs)


def _check_canvas(chunked: Run) -> None:
    """When the canvas channel holds one plain JSON object, its key deltas are its values
    (citations replaced in the key's format)."""
    raw = chunked.result["canvas"].raw
    body = strip_fence(raw).strip()
    if not body.startswith("{") or raw.find(body) != raw.find("{"):
        return  # the streamer starts at the first brace, json.loads after the fence
    try:  # duplicate keys are skipped: json keeps the last, the streamer streams each
        obj = json.loads(body, object_pairs_hook=_unique_keys)
    except ValueError:
        return
    composite = SPECS["canvas"].composite or {}
    texts = chunked.text()
    for key, value in obj.items():
        fmt = composite.get(key) or composite.get("*")
        streamed = texts.get(("canvas", key))
        if fmt is None or not isinstance(value, str):
            assert streamed is None, key
            continue
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            continue  # a lone surrogate escape streams as U+FFFD
        expected = replace_citations(value, CMAP, fmt) if fmt != "json" else value
        assert (streamed or "") == expected, key


@fuzz_settings(max(1, EXAMPLES // STREAMS_PER_EXAMPLE))
@given(parts=st.lists(pieces, max_size=40), rnd=st.randoms(use_true_random=False))
def test_any_stream_in_any_chunking_parses_consistently(
    parts: list[str], rnd: random.Random
) -> None:
    for variant in range(STREAMS_PER_EXAMPLE):
        if variant:
            parts = rnd.sample(parts, len(parts)) if rnd.random() < 0.5 else parts
            parts = parts + rnd.choices(parts, k=rnd.randint(0, 5)) if parts else parts
        text = "".join(parts)
        _check_stream(text, _chunks(rnd, text))


def _feed_composite(streamer: CompositeJsonStreamer, chunks: list[str]) -> dict[str, list[Any]]:
    events = [e for chunk in chunks for e in streamer.feed(chunk)] + streamer.finish()
    out: dict[str, list[Any]] = defaultdict(list)
    for key, _fmt, text, done in events:
        out[key].append(True if done else text)
    return out


def _damage(rnd: random.Random, text: str) -> str:
    """``text`` with a few characters deleted, doubled or replaced by JSON punctuation."""
    chars = list(text)
    for _ in range(rnd.randint(1, 4)):
        if not chars:
            break
        i = rnd.randrange(len(chars))
        op = rnd.randrange(3)
        if op == 0:
            del chars[i]
        elif op == 1:
            chars.insert(i, chars[i])
        else:
            chars[i] = rnd.choice('{}[]",:\\u')
    return "".join(chars)


COMPOSITE_KEYS: list[dict[str, str]] = [{"*": "text"}, {"title": "markdown", "n": "json"}, {}]


@fuzz_settings(max(1, EXAMPLES // OBJECTS_PER_EXAMPLE))
@given(objs=st.lists(json_objects, min_size=1, max_size=3), rnd=st.randoms(use_true_random=False))
def test_composite_keys_stream_their_json_string_values(
    objs: list[dict[str, Any]], rnd: random.Random
) -> None:
    """An object written any way streams exactly its string values; a damaged one streams
    something and never raises."""
    for _ in range(OBJECTS_PER_EXAMPLE):
        obj, keys = rnd.choice(objs), rnd.choice(COMPOSITE_KEYS)
        text = _layout(rnd, obj)
        if rnd.random() < 0.3:
            damaged = CompositeJsonStreamer(keys, CMAP, rnd.random() < 0.5)
            TALLY.run(
                "channels.composite", _feed_composite, damaged, _chunks(rnd, _damage(rnd, text))
            )
            continue
        streamer = CompositeJsonStreamer(keys, CMAP, False)
        out = TALLY.run("channels.composite", _feed_composite, streamer, _chunks(rnd, text))
        for key, value in obj.items():
            events = out.pop(key, [])
            if not isinstance(value, str) or (keys.get(key) or keys.get("*")) is None:
                assert events == [], key
                continue
            assert events and events[-1] is True and events.count(True) == 1, key
            assert "".join(events[:-1]) == value, key
        assert not out, "only the object's keys stream"


@fuzz_settings(max(1, EXAMPLES // STREAMS_PER_EXAMPLE))
@given(
    parts=st.lists(tokens() | st.text(max_size=6) | st.sampled_from(["[", "［", "]"]), max_size=30),
    rnd=st.randoms(use_true_random=False),
)
def test_streaming_citation_replacement_equals_replacing_the_whole(
    parts: list[str], rnd: random.Random
) -> None:
    for variant in range(STREAMS_PER_EXAMPLE):
        if variant:
            parts = rnd.sample(parts, len(parts))
        text, fmt = "".join(parts), rnd.choice(FORMATS)
        replacer = CitationReplacer(CMAP, fmt)

        def stream(chunks: list[str], replacer: CitationReplacer = replacer) -> str:
            return "".join(replacer.feed(chunk) for chunk in chunks) + replacer.flush()

        streamed = TALLY.run("channels.citations", stream, _chunks(rnd, text))
        assert streamed == replace_citations(text, CMAP, fmt)
