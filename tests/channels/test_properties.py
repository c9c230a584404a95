"""Properties: any chunking of any stream gives the same deltas and results, and never raises."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actline.channels import citation_map, replace_citations
from actline.channels.citations import PARTIAL_RE, TOKEN_RE
from actline.channels.tags import INVISIBLE_RE

from .helpers import SOURCES, run, split_at

FRAGMENTS = [
    "<channel:thinking>", "</channel:thinking>", "<channel:answer>", "</channel:answer>",
    "<CHANNEL:Answer>", "< channel : notes >", "</channel:notes>", "<channel:page>",
    "</channel:page>", "<channel:decision>", "</channel:decision>", "<channel:canvas>",
    "</channel:canvas>", "<channel:followup>", "</channel:followup>", "<channel:zzz>",
    "</channel:zzz>", "<chan", "nel:", "answer>", "</", "<", ">", "<channel:", "`", "``", "```",
    "```json\n", "\n", "  ", "[[S:1]]", "[[S:2,3]]", "[[S:2-4]]", "[[S:9]]", "[[ s : 1 – 3 ]]",
    "［［S：5］］", "[[S:", "1", ",", "-", "]]", "]", "[", "[[", "S", ":", "\u200b", "\ufeff",
    '{"title": "T [[S:1]]", "body": "b\\n\\u00e9 [[S:2]]", "n": {"x": "}"}, "z": 1}',
    '{"action": "complete"}', '["a", "b"]', '"', "\\", "\\u00e9", "\\ud83d\\ude00", "{", "}",
    "plain text ", "é", "😀", "\x00", "\x07", "<b>&amp;</b>",
]  # fmt: skip

streams = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=40).map(
    "".join
)


def _cuts(text: str) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(min_value=0, max_value=max(0, len(text))), max_size=30)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), text=streams)
def test_any_chunking_gives_the_same_deltas_results_and_notices(
    data: st.DataObject, text: str
) -> None:
    whole = run([text])
    cuts = data.draw(_cuts(text))
    assert run(split_at(text, cuts)).comparable() == whole.comparable()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=streams)
def test_one_character_chunks_give_the_same_result(text: str) -> None:
    assert run(list(text)).comparable() == run([text]).comparable()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), text=streams)
def test_no_delta_splits_a_citation_token(data: st.DataObject, text: str) -> None:
    result = run(split_at(text, data.draw(_cuts(text))))
    by_channel: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    for d in result.deltas:
        citing = d.channel in {"answer", "notes", "page"} or d.key is not None
        if not d.completed and citing:
            by_channel[(d.channel, d.key)].append(d.text)
    for pieces in by_channel.values():
        joined = "".join(pieces)
        boundaries = set()
        pos = 0
        for piece in pieces[:-1]:
            pos += len(piece)
            boundaries.add(pos)
        for token in TOKEN_RE.finditer(joined):
            inside = set(range(token.start() + 1, token.end()))
            assert not (inside & boundaries), (joined, token.group())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), text=streams)
def test_indexes_count_up_and_every_declared_channel_completes_once(
    data: st.DataObject, text: str
) -> None:
    result = run(split_at(text, data.draw(_cuts(text))))
    counters: dict[tuple[str, str | None], int] = defaultdict(int)
    completed: dict[str, int] = defaultdict(int)
    for d in result.deltas:
        key = (d.channel, d.key)
        if d.completed:
            if d.key is None:
                completed[d.channel] += 1
                assert d.index == counters[key] and d.text == ""
            continue
        assert d.index == counters[key]
        counters[key] += 1
    declared = {n for n, r in result.result.channels.items() if r.declared}
    assert set(completed) == declared and set(completed.values()) == {1}
    channel_completions = [d for d in result.deltas if d.completed and d.key is None]
    assert result.deltas[-len(channel_completions) :] == channel_completions


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200), cuts=st.lists(st.integers(0, 200), max_size=20))
def test_arbitrary_unicode_never_raises(text: str, cuts: list[int]) -> None:
    chunks = split_at(text, cuts)
    assert run(chunks).comparable() == run([text]).comparable()


def without_token_invisibles(text: str) -> str:
    """The rule, one character at a time: an invisible character is dropped only when the
    kept text before it ends in a prefix of a citation token."""
    kept = ""
    for char in text:
        if INVISIBLE_RE.fullmatch(char) and PARTIAL_RE.search(INVISIBLE_RE.sub("", kept[-80:])):
            continue
        kept += char
    return kept


body_text = st.lists(
    st.one_of(
        st.sampled_from(
            ["[[S:1]]", "[[S:2,3]]", "[[S:9]]", "[[S:", "]]", "[", "\u200b", "\u200d", "\n"]
        ),
        st.text(alphabet=st.characters(blacklist_characters="<`"), max_size=8),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), body=body_text)
def test_raw_keeps_the_text_and_only_emitted_text_has_citations_replaced(
    data: st.DataObject, body: str
) -> None:
    text = f"<channel:answer>{body}</channel:answer>"
    result = run(split_at(text, data.draw(_cuts(text)))).result["answer"]
    clean = without_token_invisibles(body)
    assert result.raw == clean
    assert result.emitted == replace_citations(clean, citation_map(SOURCES), "markdown")
