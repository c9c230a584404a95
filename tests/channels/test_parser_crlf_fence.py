"""Fences and inline code with CRLF, CR and mixed line endings: a line ends at LF, CR or
CRLF alike, so a fence holding a literal channel tag never swallows the channels after it.
Each case is checked in one chunk, split at every position and in one-character chunks."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import Run, run, split_at

LONG = "x" * 300
"""Longer than an inline span may be: only a fence can hold what follows as code."""

# (id, stream, expected raw text per channel)
CASES: list[tuple[str, str, dict[str, str]]] = [
    (
        "other tags in a CRLF fence are content",
        "<channel:thinking>```\r\n<channel:zzz>x</channel:answer>\r\n```\r\nafter"
        "</channel:thinking><channel:notes>n</channel:notes>",
        {
            "thinking": "```\r\n<channel:zzz>x</channel:answer>\r\n```\r\nafter",
            "notes": "n",
            "answer": "",
        },
    ),
    (
        "a CRLF fence at the very start of the channel",
        "<channel:answer>```\r\n<channel:zzz>\r\n```\r\n</channel:answer>"
        "<channel:notes>n</channel:notes>",
        {"answer": "```\r\n<channel:zzz>\r\n```\r\n", "notes": "n"},
    ),
    (
        "a CRLF fence with a language and a long body",
        f"<channel:answer>see:\r\n```python\r\n<channel:zzz>{LONG}\r\n```\r\nend"
        "</channel:answer><channel:notes>n</channel:notes>",
        {"answer": f"see:\r\n```python\r\n<channel:zzz>{LONG}\r\n```\r\nend", "notes": "n"},
    ),
    (
        "a CR fence with a long body",
        f"<channel:answer>see:\r```\r<channel:zzz>{LONG}\r```\rend</channel:answer>"
        "<channel:notes>n</channel:notes>",
        {"answer": f"see:\r```\r<channel:zzz>{LONG}\r```\rend", "notes": "n"},
    ),
    (
        "a fence opened after CRLF and closed after CR",
        f"<channel:answer>a\r\n```\n<channel:zzz>{LONG}\r```\r\nb</channel:answer>"
        "<channel:notes>n</channel:notes>",
        {"answer": f"a\r\n```\n<channel:zzz>{LONG}\r```\r\nb", "notes": "n"},
    ),
    (
        "an indented CRLF fence",
        "<channel:thinking>x\r\n   ```\r\n</channel:notes>\r\n   ```\r\n</channel:thinking>"
        "<channel:notes>n</channel:notes>",
        {"thinking": "x\r\n   ```\r\n</channel:notes>\r\n   ```\r\n", "notes": "n"},
    ),
    (
        "an unclosed CRLF fence ends where the next channel opens",
        "<channel:answer>```python\r\nprint(1)\r\n<channel:notes>n</channel:notes>",
        {"answer": "```python\r\nprint(1)\r\n", "notes": "n"},
    ),
    (
        "an unclosed CRLF fence cannot swallow the close tag",
        "<channel:answer>```\r\nprint(1)\r\n</channel:answer><channel:notes>n</channel:notes>",
        {"answer": "```\r\nprint(1)\r\n", "notes": "n"},
    ),
    (
        "a declared channel's open tag in a CRLF fence opens it",
        "<channel:thinking>```\r\n<channel:answer>x</channel:answer>\r\n```\r\n</channel:thinking>",
        {"thinking": "```\r\n", "answer": "x"},
    ),
    (
        "an inline span does not cross a CR line end",
        "<channel:thinking>a `b\r<channel:zzz>`</channel:thinking><channel:notes>n</channel:notes>",
        {"thinking": "a `b\r", "zzz": "`", "notes": "n"},
    ),
]


def _check_every_chunking(stream: str) -> Run:
    whole = run([stream])
    reference = whole.comparable()
    for cut in range(1, len(stream)):
        assert run(split_at(stream, [cut])).comparable() == reference, cut
    assert run(list(stream)).comparable() == reference
    return whole


@pytest.mark.parametrize(("stream", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_fence_with_any_line_ending_keeps_the_channels_apart(
    stream: str, expected: dict[str, str]
) -> None:
    whole = _check_every_chunking(stream)
    for name, raw in expected.items():
        assert whole.result[name].raw == raw, name


@pytest.mark.parametrize("ending", ["\r\n", "\r"], ids=["crlf", "cr"])
def test_a_fence_reads_the_same_with_lf_and_with_other_endings(ending: str) -> None:
    lf = (
        f"<channel:answer>before\n```\n<channel:zzz>{LONG}\n</channel:notes>\n```\nafter"
        "</channel:answer><channel:notes>n</channel:notes>"
    )
    other = _check_every_chunking(lf.replace("\n", ending))
    assert other.result["answer"].raw.replace(ending, "\n") == run([lf]).result["answer"].raw
    assert other.result["notes"].raw == "n"
    assert "zzz" not in other.result.channels
    assert [n.code for n in other.result.notices] == []


LINE = "\u23ce"
"""Where a line ends in a generated body; replaced by LF, CRLF or CR."""
BODY = [
    "```", "````", "```python", "`", "``", LINE, "   ", " ", "code", LONG, "<channel:zzz>",
    "</channel:zzz>", "</channel:thinking>", "</channel:page>", "<channel:answer>",
]  # fmt: skip
bodies = st.lists(st.sampled_from(BODY), max_size=25).map("".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), body=bodies, ending=st.sampled_from(["\r\n", "\r"]))
def test_any_body_reads_the_same_with_lf_and_with_crlf_or_cr_in_any_chunking(
    data: st.DataObject, body: str, ending: str
) -> None:
    """The channels of a stream do not depend on how its lines end: what a channel holds
    with CRLF or CR is what it holds with LF, line ends aside, and a later channel arrives
    whole whatever the answer held."""
    template = f"<channel:answer>{body}</channel:answer><channel:notes>N `x` N</channel:notes>"
    lf_text, other_text = template.replace(LINE, "\n"), template.replace(LINE, ending)
    lf, other = run([lf_text]), run([other_text])
    assert other.result["notes"].raw == "N `x` N"
    as_lf = {
        name: re.sub(re.escape(ending), "\n", result.raw)
        for name, result in other.result.channels.items()
    }
    assert as_lf == {name: result.raw for name, result in lf.result.channels.items()}
    assert [n.code for n in other.result.notices] == [n.code for n in lf.result.notices]
    cuts = data.draw(st.lists(st.integers(0, len(other_text)), max_size=20))
    assert run(split_at(other_text, cuts)).comparable() == other.comparable()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies)
def test_mixed_line_endings_in_one_character_chunks_give_the_one_chunk_result(body: str) -> None:
    endings = iter(["\r\n", "\n", "\r"] * (body.count(LINE) + 1))
    mixed = re.sub(LINE, lambda _: next(endings), body)
    text = f"<channel:answer>{mixed}</channel:answer><channel:notes>n</channel:notes>"
    whole = run([text])
    assert whole.result["notes"].raw == "n"
    assert run(list(text)).comparable() == whole.comparable()
