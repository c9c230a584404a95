"""Logical paths: every form parses to its fields, formats back, and every refusal has a rule."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actline.timeline.errors import PathError
from actline.timeline.paths import (
    MAX_PATH,
    PREFIXES,
    RULES,
    LogicalPath,
    ar_path,
    check_path,
    fi_path,
    followup_attachment_path,
    format_path,
    format_sids,
    is_logical_path,
    ks_path,
    parse_path,
    parse_sids,
    plan_alias,
    sk_path,
    su_path,
    tc_path,
)

FOLLOWUP = "external.followup.attachments"

VALID = [
    ("ar:turn_123.user.prompt", LogicalPath("ar", "turn_123", "user.prompt")),
    ("ar:turn_123.assistant.completion", LogicalPath("ar", "turn_123", "assistant.completion")),
    ("ar:turn_123.react.notes.tc_abc", LogicalPath("ar", "turn_123", "react.notes.tc_abc")),
    ("ar:turn_123.react.plan.ack.2", LogicalPath("ar", "turn_123", "react.plan.ack.2")),
    ("ar:t1.react.plan.plan_42.carry", LogicalPath("ar", "t1", "react.plan.plan_42.carry")),
    ("ar:turn_123.react.turn.index", LogicalPath("ar", "turn_123", "react.turn.index")),
    ("ar:t1.system.message.cache_pruned", LogicalPath("ar", "t1", "system.message.cache_pruned")),
    ("ar:t1.react.note.preserved.3", LogicalPath("ar", "t1", "react.note.preserved.3")),
    ("ar:t1.turn.header", LogicalPath("ar", "t1", "turn.header")),
    ("ar:t1.external.followup.m1", LogicalPath("ar", "t1", "external.followup.m1")),
    ("ar:conv:7-a.user.prompt", LogicalPath("ar", "conv:7-a", "user.prompt")),
    ("ar:plan.latest:plan_42", LogicalPath("ar", None, "plan.latest", plan_id="plan_42")),
    ("ar:plan.latest", LogicalPath("ar", "plan", "latest")),
    (
        "fi:turn_123.files/bundle/src/app.py",
        LogicalPath("fi", "turn_123", "files", rel="bundle/src/app.py", scope="bundle"),
    ),
    ("fi:t1.files/app.py", LogicalPath("fi", "t1", "files", rel="app.py", scope="app.py")),
    ("fi:t1.files/bundle/", LogicalPath("fi", "t1", "files", rel="bundle/", scope="bundle")),
    (
        "fi:t1.outputs/report/chart.png",
        LogicalPath("fi", "t1", "outputs", rel="report/chart.png", scope="report"),
    ),
    ("fi:t1.outputs/site/", LogicalPath("fi", "t1", "outputs", rel="site/", scope="site")),
    (
        "fi:t1.user.attachments/résumé final.pdf",
        LogicalPath("fi", "t1", "user.attachments", rel="résumé final.pdf"),
    ),
    (
        "fi:turn_123.external.followup.attachments/mabc123/receipt.pdf",
        LogicalPath("fi", "turn_123", FOLLOWUP, rel="mabc123/receipt.pdf", message_id="mabc123"),
    ),
    ("so:sources_pool", LogicalPath("so", None, "sources_pool")),
    ("so:sources_pool[1-5]", LogicalPath("so", None, "sources_pool", sids=(1, 2, 3, 4, 5))),
    ("so:sources_pool[3, 5-6]", LogicalPath("so", None, "sources_pool", sids=(3, 5, 6))),
    ("su:turn_123.conv.range.summary", LogicalPath("su", "turn_123", "conv.range.summary")),
    (
        "tc:turn_123.tc_abc.call",
        LogicalPath("tc", "turn_123", "tc_abc.call", call_id="tc_abc", part="call"),
    ),
    ("tc:t1.c1.result", LogicalPath("tc", "t1", "c1.result", call_id="c1", part="result")),
    ("tc:t1.c1.notice", LogicalPath("tc", "t1", "c1.notice", call_id="c1", part="notice")),
    ("ks:docs/architecture.md", LogicalPath("ks", None, "docs/architecture.md")),
    ("sk:public.pdf-press/SKILL.md", LogicalPath("sk", None, "public.pdf-press/SKILL.md")),
]


@pytest.mark.parametrize(("text", "expected"), VALID, ids=[t for t, _ in VALID])
def test_each_path_form_parses_to_its_fields(text: str, expected: LogicalPath) -> None:
    assert parse_path(text) == expected


@pytest.mark.parametrize(("text", "expected"), VALID, ids=[t for t, _ in VALID])
def test_each_path_form_formats_back_to_the_same_text(text: str, expected: LogicalPath) -> None:
    assert format_path(expected) == text
    assert str(expected) == text
    assert parse_path(format_path(expected)) == expected


def test_surrounding_whitespace_is_stripped() -> None:
    assert parse_path("  \tar:t1.user.prompt \n") == LogicalPath("ar", "t1", "user.prompt")


def test_sources_selector_formats_canonically() -> None:
    p = parse_path("so:sources_pool[6,5 , 3,3]")
    assert p.sids == (3, 5, 6)
    assert format_path(p) == "so:sources_pool[3, 5-6]"


def test_bare_sources_pool_parses_only_when_lenient() -> None:
    assert parse_path("sources_pool[2, 1]", lenient=True).sids == (1, 2)
    assert parse_path("sources_pool", lenient=True) == LogicalPath("so", None, "sources_pool")
    with pytest.raises(PathError) as info:
        parse_path("sources_pool[2, 1]")
    assert info.value.rule == "unknown_prefix"
    assert "so:sources_pool[...]" in info.value.detail


def test_trailing_slash_marks_a_folder_only_in_files_and_outputs() -> None:
    assert parse_path("fi:t1.files/bundle/").is_folder
    assert parse_path("fi:t1.outputs/a/b/").is_folder
    assert not parse_path("fi:t1.files/bundle").is_folder
    assert not is_logical_path("fi:t1.user.attachments/a/")
    assert not is_logical_path("ks:docs/")


def test_is_logical_path_answers_without_raising() -> None:
    assert is_logical_path("tc:t1.c1.result")
    assert not is_logical_path("src/app.py")
    assert not is_logical_path("")


@pytest.mark.parametrize(
    ("sids", "text"),
    [
        ({3, 5, 6}, "so:sources_pool[3, 5-6]"),
        ({1, 2, 3, 4, 5}, "so:sources_pool[1-5]"),
        ({1, 3, 7}, "so:sources_pool[1, 3, 7]"),
        ([7, 3, 1, 3], "so:sources_pool[1, 3, 7]"),
        ({1, 2, 4, 5, 9}, "so:sources_pool[1-2, 4-5, 9]"),
        (set(), "so:sources_pool"),
    ],
)
def test_format_sids_sorts_dedupes_and_compresses_runs(sids: set[int], text: str) -> None:
    assert format_sids(sids) == text


@pytest.mark.parametrize(
    ("selector", "sids"),
    [
        ("1-5", (1, 2, 3, 4, 5)),
        ("1,3,7", (1, 3, 7)),
        ("3, 5-6", (3, 5, 6)),
        (" 2 - 3 ,1", (1, 2, 3)),
    ],
)
def test_parse_sids_returns_sorted_unique_ints(selector: str, sids: tuple[int, ...]) -> None:
    assert parse_sids(selector) == sids


def test_parse_sids_refuses_a_bad_selector_with_the_selector_as_path() -> None:
    with pytest.raises(PathError) as info:
        parse_sids("1,,2")
    assert (info.value.rule, info.value.path) == ("bad_sources_selector", "1,,2")


@pytest.mark.parametrize(
    ("sids", "rule"), [({0, 1}, "bad_sources_selector"), (range(1, 10_002), "too_many_sids")]
)
def test_format_sids_refuses_what_parse_would_refuse(sids: set[int], rule: str) -> None:
    with pytest.raises(PathError) as info:
        format_sids(sids)
    assert info.value.rule == rule


def test_builders_write_canonical_paths() -> None:
    assert ar_path("t1", "react.plan.ack.2") == "ar:t1.react.plan.ack.2"
    assert fi_path("t1", "files", "bundle/src/app.py") == "fi:t1.files/bundle/src/app.py"
    assert fi_path("t1", "outputs", "site/") == "fi:t1.outputs/site/"
    assert fi_path("t1", "user.attachments", "a.pdf") == "fi:t1.user.attachments/a.pdf"
    assert followup_attachment_path("t1", "m1", "r.pdf") == f"fi:t1.{FOLLOWUP}/m1/r.pdf"
    assert su_path("t1") == "su:t1.conv.range.summary"
    assert tc_path("t1", "c1", "result") == "tc:t1.c1.result"
    assert plan_alias("plan_42") == "ar:plan.latest:plan_42"
    assert ks_path("docs/architecture.md") == "ks:docs/architecture.md"
    assert sk_path("public.pdf-press/SKILL.md") == "sk:public.pdf-press/SKILL.md"


@pytest.mark.parametrize(
    ("build", "rule"),
    [
        (lambda: ar_path("t1.x", "user.prompt"), "bad_turn_id"),
        (lambda: ar_path("plan", "latest:p1"), "bad_turn_id"),
        (lambda: ar_path("t1", "user/prompt"), "bad_segment"),
        (lambda: fi_path("t1", FOLLOWUP, "m1/a.pdf"), "bad_area"),
        (lambda: fi_path("t1", "files/bundle", "a.py"), "bad_area"),
        (lambda: fi_path("t1", "files", "../a.py"), "dot_segment"),
        (lambda: followup_attachment_path("t1", "m1/x", "a.pdf"), "bad_segment"),
        (lambda: followup_attachment_path("t1", "m.1", "a.pdf"), "bad_id"),
        (lambda: su_path("t 1"), "bad_turn_id"),
        (lambda: tc_path("t1", "c1", "output"), "bad_tc_part"),
        (lambda: tc_path("t1", "c.1", "call"), "bad_id"),
        (lambda: plan_alias("p.1"), "bad_id"),
        (lambda: ks_path("docs/a.md "), "bad_segment"),
        (lambda: sk_path("/etc/passwd"), "absolute_path"),
    ],
)
def test_builders_refuse_inputs_that_break_the_grammar(build: Callable[[], str], rule: str) -> None:
    with pytest.raises(PathError) as info:
        build()
    assert info.value.rule == rule


def test_format_path_refuses_fields_that_would_not_parse_back() -> None:
    with pytest.raises(PathError) as info:
        format_path(LogicalPath("fi", "t1", "files/x", rel="a.py"))
    assert info.value.rule == "bad_segment"
    with pytest.raises(PathError) as info:
        format_path(LogicalPath("zz", None, "x"))
    assert info.value.rule == "unknown_prefix"


REFUSALS = [
    ("empty_path", ""),
    ("empty_path", "   \n"),
    ("too_long", "ar:t1." + "a" * 2000),
    ("too_long", "ks:" + "/".join(["a" * 200] * 6)),
    ("absolute_path", "/etc/passwd"),
    ("absolute_path", "~/notes.md"),
    ("absolute_path", "C:\\Users\\me\\a.txt"),
    ("absolute_path", "C:/Users/me/a.txt"),
    ("absolute_path", "\\\\server\\share\\a.txt"),
    ("absolute_path", "ks:/docs/a.md"),
    ("absolute_path", "sk:~/skills/a.md"),
    ("physical_path", "./src/app.py"),
    ("physical_path", "../src/app.py"),
    ("physical_path", "src\\app.py"),
    ("physical_path", "fi:t1.files/src\\app.py"),
    ("physical_path", "file:///home/me/a.txt"),
    ("physical_path", "src/app.py"),
    ("physical_path", "README.md"),
    ("url_not_path", "https://example.com/a"),
    ("url_not_path", "HTTP://example.com"),
    ("dot_segment", "fi:t1.files/bundle/../secret"),
    ("dot_segment", "fi:t1.outputs/./a.txt"),
    ("dot_segment", "ks:docs/.."),
    ("unknown_prefix", "xx:foo"),
    ("unknown_prefix", "http:foo"),
    ("unknown_prefix", "AR:t1.user.prompt"),
    ("unknown_prefix", "sources_pool[1-3]"),
    ("bad_turn_id", "ar:t 1.user.prompt"),
    ("bad_turn_id", "ar:.user.prompt"),
    ("bad_turn_id", "su:" + "t" * 129 + ".conv.range.summary"),
    ("bad_turn_id", "tc:t/1.c1.call"),
    ("bad_id", "ar:plan.latest:"),
    ("bad_id", "ar:plan.latest:plan.latest:p1"),
    ("bad_id", "tc:t1.c.1.call"),
    ("bad_id", "tc:t1..call"),
    ("bad_id", f"fi:t1.{FOLLOWUP}/m.1/a.pdf"),
    ("bad_segment", "ar:t1"),
    ("bad_segment", "ar:t1.user..prompt"),
    ("bad_segment", "ar:t1.user prompt"),
    ("bad_segment", "ar:t1.user.prompt\x00"),
    ("bad_segment", "ks:docs/a\tb.md"),
    ("bad_segment", "ks:docs\u202e/a.md"),
    ("bad_segment", "ks:docs/r\u00e9sum\u00e9\u200b.md"),  # non-ASCII: every character is checked
    ("bad_segment", "ks:docs/a\u2028b.md"),
    ("bad_segment", "ks:docs/a\x7fb.md"),
    ("bad_segment", "ks:docs//a.md"),
    ("bad_segment", "ks:" + "a" * 256),
    ("bad_segment", "fi:t1.files/~bundle/a.py"),
    ("bad_segment", "fi:t1.files/bundle /a.py"),
    ("bad_segment", "fi:t1.files"),
    ("bad_segment", "fi:t1.files/"),
    ("bad_segment", "fi:t1.files/bundle//"),
    ("bad_segment", "fi:t1.user.attachments/a/b.pdf"),
    ("bad_segment", f"fi:t1.{FOLLOWUP}/m1"),
    ("bad_segment", f"fi:t1.{FOLLOWUP}/m1/a/b.pdf"),
    ("bad_area", "fi:t1.attachments/a.pdf"),
    ("bad_area", "fi:t1.code.c1/a.py"),
    ("bad_area", "fi:t1/files/a.py"),
    ("bad_sources_selector", "so:sources_pool[]"),
    ("bad_sources_selector", "so:sources_pool[ ]"),
    ("bad_sources_selector", "so:sources_pool[0]"),
    ("bad_sources_selector", "so:sources_pool[5-3]"),
    ("bad_sources_selector", "so:sources_pool[1,,2]"),
    ("bad_sources_selector", "so:sources_pool[1,]"),
    ("bad_sources_selector", "so:sources_pool[a]"),
    ("bad_sources_selector", "so:sources_pool[1"),
    ("bad_sources_selector", "so:pool[1]"),
    ("bad_sources_selector", "so:sources_pool[1234567890]"),
    ("too_many_sids", "so:sources_pool[1-10001]"),
    ("too_many_sids", "so:sources_pool[1-999999999]"),
    ("too_many_sids", "so:sources_pool[1-6000, 1-6000]"),
    ("bad_tc_part", "tc:t1.c1"),
    ("bad_tc_part", "tc:t1.c1.output"),
    ("bad_tc_part", "tc:t1.tool_calls.c1.out.json"),
    ("bad_summary_name", "su:t1.summary"),
    ("bad_summary_name", "su:t1"),
    ("bad_summary_name", "su:t1.conv.range.summary.2"),
]


@pytest.mark.parametrize(("rule", "text"), REFUSALS, ids=[f"{r}:{t[:40]!r}" for r, t in REFUSALS])
def test_each_refusal_names_its_rule_and_keeps_the_input(rule: str, text: str) -> None:
    with pytest.raises(PathError) as info:
        parse_path(text)
    assert info.value.rule == rule
    assert info.value.path == text
    assert info.value.detail
    assert not is_logical_path(text)


def test_every_rule_has_a_refusal_case() -> None:
    assert {rule for rule, _ in REFUSALS} == set(RULES)


def test_path_error_pickles_with_its_fields() -> None:
    with pytest.raises(PathError) as info:
        parse_path("/etc/passwd")
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, PathError)
    assert (copy.rule, copy.path, copy.detail) == (
        info.value.rule,
        info.value.path,
        info.value.detail,
    )
    assert str(copy) == str(info.value)


def test_prefixes_are_the_seven_namespaces() -> None:
    assert PREFIXES == ("ar", "fi", "so", "su", "tc", "ks", "sk")


ids = st.from_regex(r"[A-Za-z0-9_\-:]{1,12}", fullmatch=True)
name_segments = st.from_regex(r"[A-Za-z0-9_\-:]{1,8}", fullmatch=True)
rel_segments = st.text(
    alphabet=st.characters(categories=("L", "N"), include_characters=" ._-~()"),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in (".", "..") and not s.startswith("~") and s == s.strip())
rels = st.lists(rel_segments, min_size=1, max_size=5).map("/".join)
names = st.lists(name_segments, min_size=1, max_size=4).map(".".join)

valid_paths = st.one_of(
    st.builds(ar_path, ids, names).filter(lambda t: not t.startswith("ar:plan.latest:")),
    st.builds(plan_alias, ids),
    st.builds(fi_path, ids, st.sampled_from(["files", "outputs"]), rels),
    st.builds(lambda t, r: fi_path(t, "files", r + "/"), ids, rels),
    st.builds(fi_path, ids, st.just("user.attachments"), rel_segments),
    st.builds(followup_attachment_path, ids, ids, rel_segments),
    st.builds(su_path, ids),
    st.builds(tc_path, ids, ids, st.sampled_from(["call", "result", "notice"])),
    st.builds(ks_path, rels),
    st.builds(sk_path, rels),
    st.builds(format_sids, st.sets(st.integers(1, 500), max_size=30)),
)


@settings(max_examples=400)
@given(text=valid_paths)
def test_generated_valid_paths_round_trip(text: str) -> None:
    p = parse_path(text)
    assert format_path(p) == text
    assert parse_path(format_path(p)) == p
    assert is_logical_path(f"  {text} ")


@given(sids=st.sets(st.integers(1, 500)))
def test_sids_round_trip_and_runs_compress(sids: set[int]) -> None:
    text = format_sids(sids)
    assert parse_path(text).sids == tuple(sorted(sids))
    if sids:
        body = text[len("so:sources_pool[") : -1]
        assert parse_sids(body) == tuple(sorted(sids))
        bounds = [tuple(int(n) for n in item.split("-")) for item in body.split(", ")]
        for (*_, prev_end), (next_start, *_) in pairwise(bounds):
            assert next_start > prev_end + 1
        for item in bounds:
            assert len(item) == 1 or item[0] < item[1]


fragments = st.sampled_from(
    ["ar:", "fi:", "so:", "su:", "tc:", "ks:", "sk:", "t1", ".", "/", "..", "~", "[", "]", "-",
     ",", " ", "\\", "plan.latest:", "files", "user.attachments", "sources_pool", "conv.range."
     "summary", "call", "\x00", "é", ":", "C:", "1", "5-3"]
)  # fmt: skip


@settings(max_examples=500)
@given(text=st.one_of(st.text(max_size=40), st.lists(fragments, max_size=12).map("".join)))
def test_any_text_parses_or_raises_path_error_with_a_known_rule(text: str) -> None:
    try:
        p = parse_path(text)
    except PathError as exc:
        assert exc.rule in RULES
        assert exc.path == text
    else:
        assert parse_path(format_path(p)) == p


def _round_trip(p: LogicalPath) -> str:
    """What ``format_path`` gives by its definition: the text, when it parses back to ``p``;
    else the rule of the refusal (``"!" + rule``)."""
    text = f"{p.prefix}:{p.turn_id or ''}.{p.name}"
    try:
        back = parse_path(text)
    except PathError as exc:
        return "!" + exc.rule
    same = (back.turn_id, back.name, back.rel, back.plan_id) == (
        p.turn_id,
        p.name,
        p.rel,
        p.plan_id,
    )
    return text if same else "!mismatch"


_PIECES = st.lists(
    st.sampled_from([*"aZ09_-:./ \\~é\x00", "plan", "latest:", "call"]), max_size=8
).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    prefix=st.sampled_from(["ar", "tc"]),
    turn=st.one_of(st.none(), _PIECES, st.just("plan")),
    name=_PIECES,
    part=st.sampled_from(["", ".call", ".result", ".notice", ".other"]),
    long=st.booleans(),
)
def test_ar_and_tc_paths_format_as_their_round_trip_defines(
    prefix: str, turn: str | None, name: str, part: str, long: bool
) -> None:
    """``format_path`` skips the round trip for plain ar:/tc: texts: it must give exactly
    what the round trip gives (the text, or a refusal) for every path."""
    if long:
        name = name + "x" * 300 + ("." + "y" * 250) * 6
    p = LogicalPath(prefix, turn, name + part)
    expected = _round_trip(p)
    try:
        got = format_path(p)
    except PathError as exc:
        assert expected.startswith("!"), (p, expected, exc.rule)
        return
    assert got == expected, p


def test_plain_paths_skip_the_parser_and_the_alias_does_not() -> None:
    assert ar_path("t-new-1", "react.plan.ack.2") == "ar:t-new-1.react.plan.ack.2"
    assert tc_path("t-new-1", "c1", "result") == "tc:t-new-1.c1.result"
    assert plan_alias("p1") == "ar:plan.latest:p1"
    with pytest.raises(PathError) as exc:
        format_path(LogicalPath("ar", "plan", "latest:x"))  # reads back as the alias
    assert exc.value.rule == "bad_turn_id"


def _same_verdict(text: str) -> None:
    """``check_path(text)`` passes when ``parse_path`` does, else raises its rule."""
    try:
        parse_path(text)
    except PathError as exc:
        with pytest.raises(PathError) as refused:
            check_path(text)
        assert refused.value.rule == exc.rule
        return
    check_path(text)


_TEXT_PIECES = st.lists(
    st.sampled_from(
        [*"aZ09_-:./ \\~é\x00[]", "ar:", "tc:", "fi:", "plan", "latest:", ".call", ".result"]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(text=_TEXT_PIECES, long=st.sampled_from([0, 130, 300, 1600]))
def test_check_path_accepts_and_refuses_exactly_what_parse_path_does(text: str, long: int) -> None:
    """``check_path`` checks plain ar:/tc: texts by one pattern: the same verdict (and for a
    refusal the same rule) as the parser for every text."""
    text = text + "x" * long if long < 1000 else "ar:t1." + ".".join(["y" * 200] * 8) + text
    _same_verdict(text)


@pytest.mark.parametrize(
    "text",
    [
        "ar:t1.user.prompt",
        "ar:t-1:x.react.plan.ack.2",
        "tc:t1.c1.call",
        "tc:t1.c-1.notice",
        "ar:plan.latest:p1",
        "ar:t1." + ".".join(["y" * 255] * 5) + "." + "z" * (MAX_PATH - 1286),
        "ar:t1." + ".".join(["y" * 255] * 5) + "." + "z" * (MAX_PATH - 1285),
        "ar:t1.x..y",
        "ar:t1.",
        "tc:t1.c.1.call",
        "tc:t1.c1.output",
        " ar:t1.user.prompt",
    ],
)
def test_check_path_agrees_with_the_parser_on_edges(text: str) -> None:
    _same_verdict(text)
