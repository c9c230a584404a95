"""Citation tokens: grammar, expansion, rendering, and the streaming holdback."""

from __future__ import annotations

import pytest

from actline.channels import (
    CitationReplacer,
    CitationSource,
    citation_map,
    expand_ids,
    sids_in_text,
)
from actline.channels.citations import PARTIAL_RE, TOKEN_RE, render

SOURCES = citation_map(
    [
        {"sid": 1, "title": "One", "url": "u1"},
        {"sid": 3, "title": "Three", "url": "u3"},
    ]
)


@pytest.mark.parametrize(
    ("token", "rendered"),
    [
        ("[[S:1,3]]", "[One](u1) [Three](u3)"),
        ("[[S:2-4]]", "[Three](u3) [?2] [?4]"),
        ("[[S:9]]", "[?9]"),
        ("[[ s : 1 – 3 ]]", "[One](u1) [Three](u3) [?2]"),
        ("[[S:3—1]]", "[One](u1) [Three](u3) [?2]"),
        ("［［S：1］］", "[One](u1)"),
        ("[[S:1,1,1]]", "[One](u1)"),
    ],
)
def test_reference_rendering_table(token: str, rendered: str) -> None:
    assert CitationReplacer(SOURCES, "markdown").replace_all(token) == rendered


@pytest.mark.parametrize(
    "tail",
    ["[", "［", "[[", "[[S", "[[S:", "[[S:1", "[[S:1, 2-3", "[[S:1, 2-3]", "[[ s : 1 "],
)
def test_partial_tokens_are_held_back(tail: str) -> None:
    replacer = CitationReplacer(SOURCES, "markdown")
    assert replacer.feed("abc " + tail) == "abc "
    assert replacer.pending == tail
    assert replacer.flush() == tail


@pytest.mark.parametrize(
    ("text", "held"),
    [("[x", ""), ("[[T:", ""), ("[[S:a", ""), ("[[S:1]x", ""), ("a]]", ""), ("[ [ [ [", "[ [")],
)
def test_only_the_shortest_possible_token_start_is_held(text: str, held: str) -> None:
    replacer = CitationReplacer(SOURCES, "markdown")
    out = replacer.feed(text)
    assert out + replacer.pending == text
    assert replacer.pending == held
    if held:
        partial = PARTIAL_RE.search(text)
        assert partial is not None and partial.start() == len(out)


def test_tokens_are_bounded_so_long_bodies_are_not_tokens() -> None:
    body = ",".join(["1"] * 30)
    assert TOKEN_RE.search(f"[[S:{body}]]") is None
    replacer = CitationReplacer(SOURCES, "markdown")
    long_text = f"[[S:{body}"
    assert replacer.feed(long_text) + replacer.pending == long_text
    assert replacer.pending == ""


def test_expand_ids() -> None:
    assert expand_ids("3, 1-2") == [3, 1, 2]
    assert expand_ids("4-2") == [2, 3, 4]
    assert expand_ids("1 – 3") == [1, 2, 3]
    assert len(expand_ids("1-100000")) == 256
    assert sids_in_text("[[S:3, 1-2]] [[S:9]]") == [1, 2, 3, 9]


def test_used_and_unresolved_sources_are_tracked() -> None:
    replacer = CitationReplacer(SOURCES, "text")
    assert replacer.feed("[[S:1,2]] [[S:7]] [[S:3]]") == "[1] [?2] [?7] [3]"
    assert list(replacer.used) == [1, 3]
    assert list(replacer.unresolved) == [2, 7]


def test_render_formats_and_escaping() -> None:
    src = [CitationSource(1, "A [b] | c\nd", "https://x.org/a b(1)"), CitationSource(2, "", "")]
    assert render(src, "markdown") == "[A \\[b\\] \\| c d](https://x.org/a%20b%281%29) 2"
    assert render(src, "text") == "[1, 2]"
    html = render([CitationSource(1, 'T"<&>', 'https://x.org/?a=1&b="2"')], "html")
    assert html == (
        '<sup class="cite" data-sids="1"><a href="https://x.org/?a=1&amp;b=&quot;2&quot;" '
        'title="T&quot;&lt;&amp;&gt;">1</a></sup>'
    )


def test_citation_map_accepts_objects_dicts_and_positions() -> None:
    class Row:
        sid = 4
        title = "Four"
        url = "u4"

    cmap = citation_map([{"title": "first", "href": "h1"}, Row(), CitationSource(7, "S", "u7")])
    assert cmap[1] == CitationSource(1, "first", "h1")
    assert cmap[4] == CitationSource(4, "Four", "u4")
    assert cmap[7].title == "S"
    assert citation_map({9: {"title": "Nine"}})[9].title == "Nine"
    assert citation_map(None) == {}
