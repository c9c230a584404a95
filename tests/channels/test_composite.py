"""Composite JSON channels: per-key canvas deltas, parsed objects, validation errors."""

from __future__ import annotations

import json

import pytest

from actline.channels import ChannelSpec, ChannelStream, CompositeJsonStreamer, citation_map, parse

from .helpers import Decision

CMAP = citation_map([{"sid": 2, "title": "Two", "url": "https://e.com/2"}])


def _keys(events: list[tuple[str, str, str, bool]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, _fmt, text, done in events:
        out[key] = out.get(key, "") + ("<done>" if done else text)
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 1000])
def test_reference_composite_case_in_any_chunk_size(size: int) -> None:
    src = '{"a":"Hi [[S:2]] \\u00e9\\n","b":{"x":"y"},"c":"C"}'
    streamer = CompositeJsonStreamer({"a": "markdown", "c": "text", "b": "markdown"}, CMAP, True)
    events = []
    for i in range(0, len(src), size):
        events += streamer.feed(src[i : i + size])
    events += streamer.finish()
    assert _keys(events) == {"a": "Hi [Two](https://e.com/2) é\n<done>", "c": "C<done>"}


def test_escapes_surrogates_and_invalid_escapes() -> None:
    src = r'{"t": "q\"\\\/\b\f\t\r \ud83d\ude00 \ud83d x \udc00 \u12zz"}'
    streamer = CompositeJsonStreamer({"*": "text"}, {}, False)
    events = [e for ch in src for e in streamer.feed(ch)] + streamer.finish()
    assert _keys(events)["t"] == 'q"\\/\b\f\t\r 😀 \ufffd x \ufffd \\u12zz<done>'


def test_nested_values_scalars_and_strings_with_braces_are_skipped() -> None:
    src = '```json\n{"n": {"x": "}{\\"", "y": [1, {"z": "]"}]}, "k": 12, "b": true, "s": "ok"}\n```'
    streamer = CompositeJsonStreamer({"*": "markdown"}, {}, True)
    events = [e for ch in src for e in streamer.feed(ch)] + streamer.finish()
    assert _keys(events) == {"s": "ok<done>"}


def test_an_unterminated_value_is_completed_at_finish() -> None:
    streamer = CompositeJsonStreamer({"a": "text"}, CMAP, True)
    events = streamer.feed('{"a": "partial [[S:2') + streamer.finish()
    assert _keys(events) == {"a": "partial [[S:2<done>"}


def test_canvas_channel_streams_keys_and_parses_the_object() -> None:
    spec = ChannelSpec("canvas", format="json", composite={"title": "text", "body": "markdown"})
    obj = {"title": "T [[S:2]]", "body": "B [[S:2]]", "meta": {"k": 1}}
    text = f"<channel:canvas>```json\n{json.dumps(obj)}\n```</channel:canvas>"
    stream = ChannelStream([spec], sources=CMAP)
    deltas = [d for ch in text for d in stream.feed(ch)] + stream.finish()
    keyed: dict[str | None, str] = {}
    for d in deltas:
        if d.key is not None and not d.completed:
            keyed[d.key] = keyed.get(d.key, "") + d.text
            assert d.marker == "canvas"
    assert keyed == {"title": "T [2]", "body": "B [Two](https://e.com/2)"}
    assert stream.result["canvas"].obj == obj
    completions = [d.key for d in deltas if d.completed and d.key is not None]
    assert completions == ["title", "body"]


def test_invalid_json_is_an_error_with_the_raw_text_kept() -> None:
    _, result = parse(
        '<channel:followup>["a", </channel:followup>', [ChannelSpec("followup", "json")]
    )
    assert result["followup"].obj is None
    assert result["followup"].raw == '["a", '
    assert result["followup"].errors and result["followup"].errors[0].startswith("invalid JSON")


def test_model_validation_goes_to_the_result() -> None:
    specs = [ChannelSpec("decision", "json", model=Decision, replace_citations=False)]
    _, ok = parse('<channel:decision>{"action": "complete"}</channel:decision>', specs)
    assert isinstance(ok["decision"].obj, Decision) and ok["decision"].errors == []
    _, bad = parse('<channel:decision>{"calls": 3}</channel:decision>', specs)
    assert bad["decision"].errors and "does not match Decision" in bad["decision"].errors[0]
    _, missing = parse("<channel:other>x</channel:other>", specs)
    assert missing["decision"].errors == ["the channel did not appear in the stream"]


def test_model_on_a_text_channel_validates_the_raw_text() -> None:
    specs = [ChannelSpec("count", "text", model=int)]
    _, result = parse("<channel:count>41</channel:count>", specs)
    assert result["count"].obj == 41 and result["count"].errors == []
    _, bad = parse("<channel:count>many</channel:count>", specs)
    assert bad["count"].obj is None and "does not match int" in bad["count"].errors[0]


def test_unresolved_sids_in_a_key_are_marked_never_passed_through() -> None:
    spec = ChannelSpec("canvas", format="json", composite={"*": "markdown", "h": "html"})
    text = '<channel:canvas>{"a": "x [[S:2,9]]", "h": "y [[S:8]]"}</channel:canvas>'
    deltas, _ = parse(text, [spec], sources=CMAP)
    keyed: dict[str, str] = {}
    for d in deltas:
        if d.key is not None:
            keyed[d.key] = keyed.get(d.key, "") + d.text
    assert keyed["a"] == "x [Two](https://e.com/2) [?9]"
    assert keyed["h"] == 'y <sup class="cite unresolved" data-sids="8">?8</sup>'


def test_each_key_records_the_sids_it_cited_not_what_its_text_looks_like() -> None:
    """The parser knows which SIDs a key cited: resolved ones join the channel's used
    sources, unresolved ones are listed per key; a literal "[?5]" in the text is not one."""
    spec = ChannelSpec("canvas", format="json", composite={"*": "markdown"})
    text = '<channel:canvas>{"a": "x [[S:2,9]]", "b": "a literal [?5] only"}</channel:canvas>'
    stream = ChannelStream([spec], sources=CMAP)
    deltas = [d for ch in text for d in stream.feed(ch)]
    done = [d.key for d in deltas if d.completed and d.key is not None]
    assert done == ["a", "b"]
    assert stream.key_unresolved("canvas", "a") == [9]
    assert stream.key_unresolved("canvas", "b") == []
    stream.finish()
    canvas = stream.result["canvas"]
    assert canvas.key_unresolved == {"a": [9], "b": []}
    assert canvas.used_sources == [2]
