"""Adversarial streams: each case is checked in one chunk, split at every position, and in
one-character chunks; all must agree and match the expected channel texts."""

from __future__ import annotations

import pytest

from .helpers import Run, run, split_at

E1 = "[One](https://e.com/1)"

# (id, stream, expected emitted text per channel, expected notice codes)
CASES: list[tuple[str, str, dict[str, str], list[str]]] = [
    ("plain", "<channel:answer>Hello</channel:answer>", {"answer": "Hello"}, []),
    (
        "whitespace inside tags",
        "< channel : answer >x</ channel:answer\t>",
        {"answer": "x"},
        [],
    ),
    ("upper-case tags", "<CHANNEL:ANSWER>x</Channel:Answer>", {"answer": "x"}, []),
    (
        "implicit switch and foreign close tag",
        "<channel:thinking>AAA<channel:notes>BBB</channel:thinking>still b</channel:notes>"
        "out<channel:thinking>tail no close",
        {"thinking": "AAAtail no close", "notes": "BBBstill b"},
        ["stray_close_tag", "unclosed_channel"],
    ),
    (
        "re-opening the open channel",
        "<channel:answer>a<channel:answer>b</channel:answer>",
        {"answer": "ab"},
        [],
    ),
    ("close tag outside any channel", "</channel:answer>out", {"answer": ""}, ["stray_close_tag"]),
    (
        "stray backtick does not swallow later channels",
        "<channel:answer>it`s fine</channel:answer><channel:notes>n</channel:notes>",
        {"answer": "it`s fine", "notes": "n"},
        [],
    ),
    (
        "stray backtick then implicit switch on the same line",
        "<channel:answer>it`s <channel:notes>n</channel:notes>",
        {"answer": "it`s ", "notes": "n"},
        [],
    ),
    # Code hides no tag that could swallow a channel (the module docstring decides it):
    # the open channel's close tag and a declared channel's open tag act inside inline
    # code and fences; every other tag there is content.
    (
        "other tags in inline code are content",
        "<channel:thinking>use `<channel:zzz>` and `</channel:answer>` here</channel:thinking>",
        {"thinking": "use `<channel:zzz>` and `</channel:answer>` here", "answer": ""},
        [],
    ),
    (
        "a declared channel's open tag in inline code opens it",
        "<channel:thinking>use `<channel:answer>` here</channel:answer>",
        {"thinking": "use `", "answer": "` here"},
        [],
    ),
    (
        "the open channel's close tag in inline code closes it",
        "<channel:answer>type `</channel:answer>` to end",
        {"answer": "type `"},
        [],
    ),
    (
        "double-backtick span with a backtick inside",
        "<channel:thinking>``a ` <channel:zzz> b``</channel:thinking>",
        {"thinking": "``a ` <channel:zzz> b``", "answer": ""},
        [],
    ),
    (
        "an inline span does not cross a line",
        "<channel:thinking>a `b\n<channel:notes>n`</channel:notes>",
        {"thinking": "a `b\n", "notes": "n`"},
        [],
    ),
    (
        "other tags in a fence are content",
        "<channel:thinking>```\n<channel:zzz>x</channel:answer>\n```\nafter</channel:thinking>",
        {"thinking": "```\n<channel:zzz>x</channel:answer>\n```\nafter", "answer": ""},
        [],
    ),
    (
        "a declared channel's open tag in a fence opens it",
        "<channel:thinking>```\n<channel:answer>x</channel:answer>\n```\n</channel:thinking>",
        {"thinking": "```\n", "answer": "x"},
        ["stray_close_tag"],
    ),
    (
        "an unclosed fence ends where the next channel opens",
        "<channel:answer>```python\nprint(1)\n<channel:notes>n</channel:notes>",
        {"answer": "```python\nprint(1)\n", "notes": "n"},
        [],
    ),
    (
        "a stray backtick cannot pair with a backtick of a later channel",
        "<channel:answer>it`s</channel:answer><channel:notes>use `x` now</channel:notes>"
        "<channel:thinking>t</channel:thinking>",
        {"answer": "it`s", "notes": "use `x` now", "thinking": "t"},
        [],
    ),
    (
        "zero-width joiners and non-joiners are content",
        "<channel:answer>👩\u200d💻 می\u200cخواهم [[S:1]]</channel:answer>",
        {"answer": f"👩\u200d💻 می\u200cخواهم {E1}"},
        [],
    ),
    (
        "invisible characters inside a tag or a citation token are removed",
        "<chan\u200dnel:ans\u200bwer>a [\u200d[S:\u200c1]]</channel\u200b:answer>",
        {"answer": f"a {E1}"},
        [],
    ),
    (
        "an unclosed fence cannot swallow the close tag",
        "<channel:answer>```python\nprint(1)\n</channel:answer><channel:notes>n</channel:notes>",
        {"answer": "```python\nprint(1)\n", "notes": "n"},
        [],
    ),
    (
        "indented fence up to three spaces",
        "<channel:thinking>x\n   ```\n</channel:notes>\n   ```\n</channel:thinking>",
        {"thinking": "x\n   ```\n</channel:notes>\n   ```\n", "answer": ""},
        [],
    ),
    (
        "backticks mid-line do not open a fence",
        "<channel:thinking>a ```b <channel:notes>n</channel:notes>",
        {"thinking": "a ```b ", "notes": "n"},
        [],
    ),
    (
        "unknown channel is a notice and is not emitted",
        "<channel:zzz>secret</channel:zzz><channel:answer>a</channel:answer>",
        {"answer": "a"},
        ["unknown_channel"],
    ),
    ("unclosed channel", "<channel:answer>abc", {"answer": "abc"}, ["unclosed_channel"]),
    (
        "text outside channels is not emitted",
        "before<channel:answer>in</channel:answer>after <notatag> <channel",
        {"answer": "in"},
        [],
    ),
    (
        "a broken tag is content",
        "<channel:answer>a <channel:a b> <channel:> </channel:answer>",
        {"answer": "a <channel:a b> <channel:> "},
        [],
    ),
    (
        "markdown citation",
        "<channel:answer>x [[S:1]].</channel:answer>",
        {"answer": f"x {E1}."},
        [],
    ),
    (
        "citation lists, ranges, unknown SIDs",
        "<channel:answer>[[S:1,3]] [[S:2-4]] [[S:9]] [[S:3-1]]</channel:answer>",
        {
            "answer": "[One](https://e.com/1) [Three <b>&](https://e.com/3) "
            "[Two \\[beta\\] \\| x](https://e.com/2?a=1&b=2) [Three <b>&](https://e.com/3) [?4] "
            "[?9] [One](https://e.com/1) [Two \\[beta\\] \\| x](https://e.com/2?a=1&b=2) "
            "[Three <b>&](https://e.com/3)"
        },
        [],
    ),
    (
        "tolerant citation syntax",
        "<channel:answer>[[ s : 1 – 1 ]] ［［S：1］］ [[S:1 , 1]]</channel:answer>",
        {"answer": f"{E1} {E1} {E1}"},
        [],
    ),
    (
        "source without title or url",
        "<channel:answer>[[S:5]]</channel:answer>",
        {"answer": "5"},
        [],
    ),
    (
        "dangling partial citation is emitted as written",
        "<channel:answer>tail [[S:1",
        {"answer": "tail [[S:1"},
        ["unclosed_channel"],
    ),
    (
        "partial citation cut by a close tag",
        "<channel:answer>a [[S:</channel:answer>",
        {"answer": "a [[S:"},
        [],
    ),
    (
        "text channel citations",
        "<channel:notes>see [[S:1,3]]</channel:notes>",
        {"notes": "see [1, 3]"},
        [],
    ),
    (
        "html channel citations are escaped",
        "<channel:page><p>x [[S:3]]</p></channel:page>",
        {
            "page": '<p>x <sup class="cite" data-sids="3"><a href="https://e.com/3" '
            'title="Three &lt;b&gt;&amp;">3</a></sup></p>'
        },
        [],
    ),
    (
        "thinking keeps citations as written",
        "<channel:thinking>[[S:1]]</channel:thinking>",
        {"thinking": "[[S:1]]"},
        [],
    ),
    (
        "invisible characters in tags and tokens are removed, control characters kept",
        "<chan\u200bnel:answer>a\x00b\x07\ufeff[[\u200bS:1]]</channel:answer>",
        {"answer": f"a\x00b\x07\ufeff{E1}"},
        [],
    ),
    (
        "text after finish of a tag-like tail",
        "<channel:answer>a</channel:answer><chan",
        {"answer": "a"},
        [],
    ),
]


def _emitted(result: Run) -> dict[str, str]:
    texts = result.text()
    return {name: texts.get((name, None), "") for name in result.result.channels}


@pytest.mark.parametrize(
    ("stream", "expected", "notices"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_adversarial_stream(stream: str, expected: dict[str, str], notices: list[str]) -> None:
    whole = run([stream])
    emitted = _emitted(whole)
    for name, text in expected.items():
        assert emitted.get(name, "") == text, name
        assert whole.result[name].emitted == text if name in whole.result else text == ""
    assert [n.code for n in whole.result.notices] == notices
    reference = whole.comparable()
    for cut in range(1, len(stream)):
        assert run(split_at(stream, [cut])).comparable() == reference, cut
    assert run(list(stream)).comparable() == reference


def test_every_pair_of_split_positions_for_a_citation_between_tags() -> None:
    stream = "<channel:answer>a [[S:1]] b</channel:answer>"
    reference = run([stream]).comparable()
    for a in range(1, len(stream)):
        for b in range(a + 1, len(stream)):
            assert run(split_at(stream, [a, b])).comparable() == reference, (a, b)


def test_unknown_channel_text_is_kept_raw() -> None:
    result = run(["<channel:zzz>secret [[S:1]]</channel:zzz>"]).result
    assert result["zzz"].raw == "secret [[S:1]]"
    assert result["zzz"].emitted == "" and not result["zzz"].declared
    assert "unknown channel" in result["zzz"].errors


def test_outside_text_is_kept_in_the_outside_result() -> None:
    result = run(["before<channel:answer>in</channel:answer>after"]).result
    assert result.outside == "beforeafter"
    assert result["_outside"].emitted == ""


def test_a_one_megabyte_channel_in_any_chunking() -> None:
    body = (
        "Lorem ipsum dolor sit amet [[S:1]], consectetur `code` adipiscing [[S:2,3]]. " * 14000
    )[: 1024 * 1024]
    stream = f"<channel:thinking>short</channel:thinking><channel:answer>{body}</channel:answer>"
    whole = run([stream])
    assert len(whole.result["answer"].raw) == len(body)
    for size in (7, 4096, 65536):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert run(chunks).comparable() == whole.comparable(), size
    assert whole.result["answer"].used_sources == [1, 2, 3]
