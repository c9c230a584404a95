"""The parser's rules: no channel is swallowed by code, invisible characters are
content except inside tags and citation tokens, and the work stays linear.

Work is measured with ``ChannelStream.work`` (characters scanned, re-scans counted),
never with a clock.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actline.channels import ChannelStream
from actline.channels.parser import MAX_INLINE

from .helpers import SOURCES, run, specs, split_at


def work(text: str, size: int) -> int:
    stream = ChannelStream(specs(), sources=SOURCES, clock=lambda: 0.0)
    for i in range(0, len(text), size):
        stream.feed(text[i : i + size])
    stream.finish()
    return stream.work


@pytest.mark.parametrize("tail", ["x", "\nafter", "`` x", "</channel:answer>"])
def test_a_long_backtick_run_in_small_chunks_costs_linear_work(tail: str) -> None:
    def text(ticks: int) -> str:
        return "<channel:answer>" + "`" * ticks + tail + "</channel:answer>"

    for ticks in (10_000, 20_000):
        whole = work(text(ticks), len(text(ticks)))
        for size in (1, 2, 7):
            assert work(text(ticks), size) <= 1.1 * whole + 100, (ticks, size)
    # twice the run, twice the work (a quadratic parser would do four times as much)
    assert work(text(20_000), 1) <= 2.2 * work(text(10_000), 1)
    assert run(list(text(300))).comparable() == run([text(300)]).comparable()


fragments = st.sampled_from(
    ["`", "``", "```", "\n", " ", "a", "<channel:answer>", "</channel:answer>", "<chan", "[[S:1]]"]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(fragments, max_size=200), size=st.sampled_from([1, 2, 5]))
def test_work_per_character_is_bounded_for_any_chunking(pieces: list[str], size: int) -> None:
    text = "".join(pieces)
    assert work(text, size) <= 4 * MAX_INLINE * len(text) + 100


# -- no channel is swallowed --------------------------------------------------------------

BODY = [
    "`", "``", "```", "````", "```python\n", "\n", "   ", "a", "it`s ", "<", "</", "<chan",
    "<channel:zzz>", "</channel:zzz>", "</channel:thinking>", "</channel:page>", "[[S:1]]",
    "[[", "\u200b", "\u200d", "\u200c", "👩", "می", "<channel:page>", "<channel:thinking>",
]  # fmt: skip
bodies = st.lists(st.sampled_from(BODY) | st.text(max_size=3), max_size=40).map("".join)


def _cuts(text: str) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(min_value=0, max_value=len(text)), max_size=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), body=bodies)
def test_no_code_in_a_channel_swallows_the_next_channel(data: st.DataObject, body: str) -> None:
    """Whatever an answer holds (stray backticks, unclosed fences, foreign tags), a later
    channel arrives whole, in any chunking."""
    if "<" in body and any(t in body for t in ("notes", "answer")):
        return
    text = f"<channel:answer>{body}</channel:answer><channel:notes>N `x` N</channel:notes>"
    whole = run([text])
    assert whole.result["notes"].raw == "N `x` N"
    assert run(split_at(text, data.draw(_cuts(text)))).comparable() == whole.comparable()


@pytest.mark.parametrize(
    ("stream", "answer", "notes"),
    [
        # (1) a stray backtick pairing with one in a later channel
        (
            "<channel:answer>it`s</channel:answer><channel:notes>a `b` c</channel:notes>",
            "it`s",
            "a `b` c",
        ),
        # (2) an unclosed fence followed by another channel's open tag
        ("<channel:answer>```\ncode\n<channel:notes>n</channel:notes>", "```\ncode\n", "n"),
        ("<channel:answer>```\ncode <channel:notes>n</channel:notes>", "```\ncode ", "n"),
        # the own close tag ends inline code and a fence alike
        ("<channel:answer>a `b</channel:answer><channel:notes>n</channel:notes>", "a `b", "n"),
        ("<channel:answer>```\nb</channel:answer><channel:notes>n</channel:notes>", "```\nb", "n"),
    ],
)
def test_code_never_swallows_a_channel(stream: str, answer: str, notes: str) -> None:
    reference = run([stream])
    assert reference.result["answer"].raw == answer
    assert reference.result["notes"].raw == notes
    for cut in range(1, len(stream)):
        assert run(split_at(stream, [cut])).comparable() == reference.comparable()


@pytest.mark.parametrize(
    "text",
    [
        "👩\u200d💻 and 👨\u200d👩\u200d👧",  # emoji sequences
        "می\u200cخواهم",  # Persian: a non-joiner inside a word
        "\u200fright-to-left mark and a zero\u200bwidth space",
        "[x]\u200d[y] and [[S:1]]\u200d after a token",
    ],
)
def test_invisible_characters_outside_tags_and_tokens_reach_the_client(text: str) -> None:
    stream = f"<channel:answer>{text}</channel:answer><channel:thinking>{text}</channel:thinking>"
    result = run(list(stream)).result
    assert result["thinking"].raw == text
    assert result["answer"].raw == text
    assert "\u200d" not in text or "\u200d" in result["answer"].emitted


@pytest.mark.parametrize(
    ("stream", "answer_emitted"),
    [
        ("<\u200bchannel:answer>x</channel:answer>", "x"),
        ("<channel:an\u200dswer>x</chan\u200cnel:answer>", "x"),
        ("<channel:answer>[\u200b[S:1]]</channel:answer>", "[One](https://e.com/1)"),
        ("<channel:answer>[[S\u200d:\u200c1\u200b]]</channel:answer>", "[One](https://e.com/1)"),
    ],
)
def test_invisible_characters_cannot_hide_a_tag_or_a_citation(
    stream: str, answer_emitted: str
) -> None:
    reference = run([stream])
    assert reference.result["answer"].emitted == answer_emitted
    assert run(list(stream)).comparable() == reference.comparable()
