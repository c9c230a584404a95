"""The sources pool: URL normalisation, eligibility, merging, stable SIDs and rendering."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actline.timeline.errors import SourceError
from actline.timeline.sources import SourceRow, SourcesPool, is_eligible, normalize_url, pool_text


def web(url: str, sid: int = 0, **kw: object) -> SourceRow:
    return SourceRow(sid, url=url, provider="web", **kw)  # type: ignore[arg-type]


# --- normalize_url -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # the original's bug inputs
        (
            "HTTP://Example.COM:8080/a/?utm_source=x&b=2&a=1#frag",
            "http://example.com:8080/a?b=2&a=1",
        ),
        ("https://10.0.0.80/x", "https://10.0.0.80/x"),
        ("example.com/path/", "https://example.com/path"),
        ("https://a.com", "https://a.com/"),
        ("http://a.com:80/", "http://a.com/"),
        ("https://a.com:443/x/", "https://a.com/x"),
        ("http://a.com:443/", "http://a.com:443/"),
        ("https://a.com:80/", "https://a.com:80/"),
        # one rule per case
        ("HTTPS://a.com/x", "https://a.com/x"),
        ("https://WWW.Example.COM/Path", "https://www.example.com/Path"),
        ("https://user:pass@a.com/x", "https://a.com/x"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("http://10.0.0.80:80/", "http://10.0.0.80/"),
        ("https://[::1]:443/x", "https://[::1]/x"),
        ("https://a.com/x#section", "https://a.com/x"),
        ("https://a.com/?utm_medium=m&utm_anything=z&q=1", "https://a.com/?q=1"),
        ("https://a.com/?GCLID=1&FbClid=2&UTM_Source=3&q=1", "https://a.com/?q=1"),
        ("https://a.com/?z=1&a=2&m=3", "https://a.com/?z=1&a=2&m=3"),
        ("https://a.com/?q=%20a+b&r=%2F", "https://a.com/?q=%20a+b&r=%2F"),
        ("https://a.com/?utm_source=x", "https://a.com/"),
        ("https://a.com/x?", "https://a.com/x"),
        ("https://a.com/x/", "https://a.com/x"),
        ("https://a.com/x//", "https://a.com/x"),
        ("https://a.com/", "https://a.com/"),
        ("https://a.com?q=1", "https://a.com/?q=1"),
        ("  https://a.com/x  ", "https://a.com/x"),
        ("localhost:8080/x", "https://localhost:8080/x"),
        ("//cdn.a.com/x", "https://cdn.a.com/x"),
        ("Mailto:Someone@Example.COM", "mailto:Someone@Example.COM"),
        ("FTP://Host.COM/File/", "ftp://Host.COM/File/"),
    ],
)
def test_normalize_url_applies_each_rule(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # RFC 3986 6.2.2.1: hex digits of an escape are upper case
        ("https://a.com/a%2fb", "https://a.com/a%2Fb"),
        ("https://a.com/a%2Fb", "https://a.com/a%2Fb"),
        ("https://a.com/?q=%c3%a9&r=%3d", "https://a.com/?q=%C3%A9&r=%3D"),
        ("https://a.com/caf%c3%A9", "https://a.com/caf%C3%A9"),
        ("https://a%2fb.com/", "https://a%2Fb.com/"),
        # RFC 3986 6.2.2.2: escaped unreserved characters are decoded
        ("https://a.com/%7Euser/%41%62c", "https://a.com/~user/Abc"),
        ("https://a.com/%7euser", "https://a.com/~user"),
        ("https://a.com/x%2D%2e%5F%30", "https://a.com/x-._0"),
        ("https://%41.com/", "https://a.com/"),
        ("https://a.com/?utm%5Fsource=x&q=1", "https://a.com/?q=1"),
        ("https://a.com:%34%343/x", "https://a.com/x"),
        # reserved and other characters stay escaped; malformed escapes stay as they are
        ("https://a.com/a%20b%2F%3F%23", "https://a.com/a%20b%2F%3F%23"),
        ("https://a.com/100%", "https://a.com/100%"),
        ("https://a.com/%zz%4", "https://a.com/%zz%4"),
        ("https://a.com/%2541", "https://a.com/%2541"),
        ("https://a.com/%%34%31", "https://a.com/A"),
        # non-http schemes are left alone
        ("mailto:a%2fb@x.com", "mailto:a%2fb@x.com"),
    ],
)
def test_normalize_url_normalises_percent_encoding(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


def test_urls_differing_only_in_escape_case_share_one_sid() -> None:
    pool = SourcesPool()
    first, second = pool.add_rows(
        [web("https://a.com/docs/a%2fb%7e"), web("https://A.com/docs/a%2Fb~")]
    )
    assert first is not None and first is second and first.sid == 1


@pytest.mark.parametrize("url", ["", "   ", "\n\t"])
def test_normalize_url_rejects_blank_input(url: str) -> None:
    with pytest.raises(SourceError):
        normalize_url(url)


URL_FRAGMENTS = [
    "http", "HTTPS", "://", ":", "//", "/", "a.com", "A.Com", ":80", ":443", ":8080", "@",
    "user:pw", "?", "&", "=", "utm_source", "gclid", "q", "#", "frag", " ", "\t", "%2F",
    "mailto", "10.0.0.80", "[::1]", "İ", "é", "%", "%2f", "%7e", "%41", "%4", "%c3%a9",
]  # fmt: skip
URL_PARTS = st.lists(
    st.sampled_from(URL_FRAGMENTS) | st.text(max_size=4), min_size=1, max_size=12
).map("".join)


@settings(max_examples=500)
@given(URL_PARTS | st.text())
def test_normalize_url_is_a_fixed_point(url: str) -> None:
    try:
        once = normalize_url(url)
    except SourceError:
        assert not url.strip()
        return
    assert normalize_url(once) == once


# --- SourceRow ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "key"),
    [
        (SourceRow(0, url="HTTPS://A.com/x/#f"), "https://a.com/x"),
        (SourceRow(0, url="https://a.com/x", physical_path="/out/a.png"), "local:/out/a.png"),
        (SourceRow(0), ""),
        (SourceRow(0, url="   "), ""),
    ],
)
def test_row_key_prefers_the_physical_path_then_the_normalised_url(
    row: SourceRow, key: str
) -> None:
    assert row.key() == key


@pytest.mark.parametrize(
    ("row", "eligible"),
    [
        (SourceRow(0, url="https://a.com", provider="web"), True),
        (SourceRow(0, url="https://a.com/doc", provider="fetch"), True),
        (SourceRow(0, url="example.com/page", provider="skill"), True),
        (SourceRow(0, url="mailto:a@b.com", provider="web"), False),
        (SourceRow(0, physical_path="/out/a.png", mime="image/png"), True),
        (SourceRow(0, physical_path="/out/a.PNG", mime="IMAGE/PNG"), True),
        (SourceRow(0, physical_path="/out/a.pdf", mime="application/pdf"), False),
        (SourceRow(0, physical_path="/out/a.bin"), False),
        (SourceRow(0, url="https://cdn.a.com/x.pdf", provider="attachment"), False),
        (SourceRow(0, url="https://cdn.a.com/x.jpg", provider="output", mime="image/jpeg"), True),
        (SourceRow(0, url="https://a.com/x", provider="file", mime="text/plain"), False),
    ],
)
def test_only_web_rows_and_image_files_are_eligible(row: SourceRow, eligible: bool) -> None:
    assert is_eligible(row) is eligible


def test_compact_cuts_the_text_at_the_limit_with_a_marker() -> None:
    row = SourceRow(3, url="https://a.com/", title="T", text="x" * 600, favicon="f.ico")
    assert row.compact() == {
        "sid": 3,
        "title": "T",
        "url": "https://a.com/",
        "text": "x" * 500 + "…(truncated)",
        "favicon": "f.ico",
    }
    assert row.compact(limit=4)["text"] == "xxxx…(truncated)"


def test_compact_keeps_short_text_and_falls_back_to_content() -> None:
    row = SourceRow(1, url="u", text="short", published_time_iso="2024-01-01T00:00:00Z")
    assert row.compact() == {
        "sid": 1,
        "title": "",
        "url": "u",
        "text": "short",
        "published_time_iso": "2024-01-01T00:00:00Z",
    }
    assert SourceRow(1, content="body").compact()["text"] == "body"


def test_to_dict_omits_empty_fields_and_round_trips_through_json() -> None:
    row = SourceRow(
        4,
        url="https://a.com/x",
        title="T",
        mime="text/html",
        objective_relevance=0.5,
        extra={"rank": 2},
    )
    d = row.to_dict()
    assert d == {
        "sid": 4,
        "url": "https://a.com/x",
        "title": "T",
        "mime": "text/html",
        "objective_relevance": 0.5,
        "extra": {"rank": 2},
    }
    assert SourceRow.from_dict(json.loads(json.dumps(d))) == row
    assert SourceRow.from_dict(SourceRow(0).to_dict()) == SourceRow(0)


def test_from_dict_accepts_the_original_aliases() -> None:
    row = SourceRow.from_dict(
        {
            "sid": 2,
            "href": "https://a.com/x",
            "description": "D",
            "body": "B",
            "local_path": "/out/a.png",
            "unknown": "ignored",
        }
    )
    assert row == SourceRow(
        2, url="https://a.com/x", title="D", text="B", physical_path="/out/a.png"
    )
    other = SourceRow.from_dict({"value": "https://b.com", "value_preview": "P", "url": ""})
    assert (other.sid, other.url, other.text) == (0, "https://b.com", "P")


def test_from_dict_prefers_the_first_non_empty_alias() -> None:
    row = SourceRow.from_dict({"url": "https://a.com", "href": "https://b.com", "title": None})
    assert row.url == "https://a.com"
    assert row.title == ""


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"url": 3}, "'url'"),
        ({"href": ["x"]}, "'href'"),
        ({"title": b"t"}, "'title'"),
        ({"sid": "1"}, "'sid'"),
        ({"sid": True}, "'sid'"),
        ({"sid": -1}, "'sid'"),
        ({"query_relevance": "high"}, "'query_relevance'"),
        ({"objective_relevance": False}, "'objective_relevance'"),
        ({"extra": [1]}, "'extra'"),
        ({"extra": {1: "x"}}, "'extra'"),
    ],
)
def test_from_dict_names_the_field_with_a_bad_type(data: dict[str, object], field: str) -> None:
    with pytest.raises(SourceError) as raised:
        SourceRow.from_dict(data)
    assert field in raised.value.reason


def test_source_error_pickles_with_its_reason() -> None:
    try:
        SourceRow.from_dict({"url": 3})
    except SourceError as exc:
        copy = pickle.loads(pickle.dumps(exc))
        assert copy.reason == exc.reason


# --- SourcesPool.add ---------------------------------------------------------------------


def test_new_rows_get_sids_in_order_of_arrival_ignoring_proposals() -> None:
    pool = SourcesPool()
    mapping = pool.add([web("https://a.com/1", 7), web("https://a.com/2", 2), web("a.com/3")])
    assert mapping == {7: 1, 2: 2}
    assert [(r.sid, r.url) for r in pool.rows()] == [
        (1, "https://a.com/1"),
        (2, "https://a.com/2"),
        (3, "a.com/3"),
    ]
    assert pool.next_sid == 4


def test_add_rows_answers_each_input_in_order_with_none_for_skipped_rows() -> None:
    pool = SourcesPool()
    rows = [
        web("https://a.com/x"),
        SourceRow(5),
        SourceRow(6, physical_path="/out/report.pdf", mime="application/pdf"),
        web("https://A.com/x/#top"),
    ]
    result = pool.add_rows(rows)
    assert result[1] is None and result[2] is None
    assert result[0] is result[3] is pool.get(1)
    assert len(pool) == 1
    assert pool.add(rows) == {}  # proposals 5 and 6 were skipped, the others proposed 0


def test_a_known_key_merges_and_the_richer_title_and_text_win() -> None:
    pool = SourcesPool()
    pool.add([web("https://a.com/x/", title="Long title", text="t", objective_relevance=0.2)])
    new = web(
        "https://a.com/x?utm_source=feed",
        9,
        title="Short",
        text="a longer snippet",
        content="full",
        favicon="f.ico",
        objective_relevance=0.1,
        query_relevance=0.7,
        extra={"rank": 1},
    )
    assert pool.add([new]) == {9: 1}
    row = pool.get(1)
    assert row is not None
    assert (row.title, row.text, row.content, row.favicon) == (
        "Long title",
        "a longer snippet",
        "full",
        "f.ico",
    )
    assert (row.objective_relevance, row.query_relevance) == (0.2, 0.7)
    assert row.url == "https://a.com/x/"  # the existing url is kept
    assert row.extra == {"rank": 1}
    assert len(pool) == 1 and pool.next_sid == 2
    assert new.sid == 9  # inputs are never modified


def test_merge_adds_missing_extra_keys_but_keeps_existing_ones() -> None:
    pool = SourcesPool()
    pool.add([web("https://a.com", extra={"a": 1})])
    pool.add([web("https://a.com", extra={"a": 2, "b": 3})])
    assert pool.rows()[0].extra == {"a": 1, "b": 3}


def test_local_files_dedupe_by_physical_path() -> None:
    pool = SourcesPool()
    first = SourceRow(0, physical_path="/out/chart.png", mime="image/png", provider="output")
    again = SourceRow(
        3, physical_path="/out/chart.png", mime="image/png", title="Chart", url="https://f/c.png"
    )
    other = SourceRow(0, physical_path="/out/other.png", mime="image/png")
    assert pool.add([first, again, other]) == {3: 1}
    assert [r.key() for r in pool.rows()] == ["local:/out/chart.png", "local:/out/other.png"]
    chart = pool.find("/out/chart.png")
    assert chart is not None and (chart.sid, chart.title) == (1, "Chart")
    assert chart.url == "https://f/c.png"


def test_duplicate_keys_in_one_call_merge_into_one_row() -> None:
    pool = SourcesPool()
    mapping = pool.add(
        [web("https://a.com/x", 1, title="a"), web("HTTPS://A.COM:443/x/", 2, title="abc")]
    )
    assert mapping == {1: 1, 2: 1}
    assert [(r.sid, r.title) for r in pool.rows()] == [(1, "abc")]


def test_a_proposed_sid_that_is_free_is_still_not_kept() -> None:
    pool = SourcesPool([web("https://a.com/x", 1), web("https://b.com", 5)])
    mapping = pool.add(
        [web("a.com/x", 2), web("https://c.com", 7), web("https://d.com", 5), web("https://e.com")]
    )
    assert mapping == {2: 1, 7: 6, 5: 7}
    assert [r.sid for r in pool.rows()] == [1, 5, 6, 7, 8]


def test_a_restored_pool_with_gaps_never_reuses_a_sid() -> None:
    data = {"next_sid": 2, "rows": [{"sid": 1, "url": "https://a.com"}, {"sid": 5, "url": "b.com"}]}
    pool = SourcesPool.from_dict(data)
    assert pool.next_sid == 6
    assert pool.add([web("https://c.com", 2)]) == {2: 6}


@pytest.mark.parametrize(
    "rows",
    [
        [SourceRow(0, url="https://a.com")],
        [SourceRow(1)],
        [SourceRow(1, url="https://a.com"), SourceRow(1, url="https://b.com")],
        [SourceRow(1, url="https://a.com"), SourceRow(2, url="https://A.com/")],
    ],
)
def test_restoring_rows_without_sid_or_key_or_with_repeats_is_an_error(
    rows: list[SourceRow],
) -> None:
    with pytest.raises(SourceError):
        SourcesPool(rows)


def test_revision_grows_on_changes_only() -> None:
    pool = SourcesPool()
    assert pool.revision == 0
    pool.add([web("https://a.com", title="t")])
    assert pool.revision == 1
    pool.add([web("https://a.com", title="t"), SourceRow(0)])
    assert pool.revision == 1
    pool.add([web("https://a.com", title="longer")])
    assert pool.revision == 2


def test_get_select_and_find_look_rows_up() -> None:
    pool = SourcesPool()
    pool.add([web("https://a.com/x"), web("https://b.com/y")])
    assert pool.get(3) is None
    assert [r.sid for r in pool.select([2, 9, 1])] == [2, 1]
    found = pool.find("HTTPS://B.com/y/#frag")
    assert found is not None and found.sid == 2
    assert pool.find("https://c.com") is None
    assert pool.find("  ") is None


def test_pool_round_trips_through_json() -> None:
    pool = SourcesPool()
    pool.add([web("https://a.com", title="A", query_relevance=0.3)])
    pool.add([SourceRow(0, physical_path="/out/p.png", mime="image/png", provider="output")])
    restored = SourcesPool.from_dict(json.loads(json.dumps(pool.to_dict())))
    assert restored.to_dict() == pool.to_dict()
    assert restored.next_sid == 3


def test_pool_from_dict_accepts_the_original_payload_and_rejects_bad_types() -> None:
    pool = SourcesPool.from_dict({"sources_pool": [{"sid": 2, "href": "https://a.com"}]})
    assert pool.next_sid == 3
    with pytest.raises(SourceError, match="'rows'"):
        SourcesPool.from_dict({"rows": "nope"})
    with pytest.raises(SourceError, match="'next_sid'"):
        SourcesPool.from_dict({"rows": [], "next_sid": "1"})
    with pytest.raises(SourceError, match="'title'"):
        SourcesPool.from_dict({"rows": [{"sid": 1, "url": "https://a.com", "title": 1}]})


def test_compact_rows_are_sorted_by_sid() -> None:
    pool = SourcesPool([web("https://b.com", 2, text="y" * 10), web("https://a.com", 1)])
    assert [r["sid"] for r in pool.compact_rows(limit=3)] == [1, 2]
    assert pool.compact_rows(limit=3)[1]["text"] == "yyy…(truncated)"


# --- SIDs never change -------------------------------------------------------------------

HOSTS = ["a.com", "b.com", "10.0.0.80"]
PATHS = ["", "/x", "/y"]
SCHEMES = ["https://", "HTTPS://", "", "https://user@"]
PORTS = ["", ":443"]
SUFFIXES = ["", "/", "#frag", "?utm_source=x", "/?gclid=1#f"]

variant_urls = st.builds(
    lambda scheme, host, upper, port, path, suffix: (
        scheme + (host.upper() if upper else host) + port + path + suffix
    ),
    st.sampled_from(SCHEMES),
    st.sampled_from(HOSTS),
    st.booleans(),
    st.sampled_from(PORTS),
    st.sampled_from(PATHS),
    st.sampled_from(SUFFIXES),
)
rows_strategy = st.one_of(
    st.builds(lambda u, s: web(u, s), variant_urls, st.integers(0, 12)),
    st.builds(
        lambda p, m: SourceRow(0, physical_path=p, mime=m),
        st.sampled_from(["/out/a.png", "/out/b.png"]),
        st.sampled_from(["image/png", "text/plain"]),
    ),
    st.just(SourceRow(3)),
)


@given(st.lists(st.lists(rows_strategy, max_size=6), max_size=8))
def test_a_sid_always_points_to_the_same_key_and_sids_have_no_gaps(
    batches: list[list[SourceRow]],
) -> None:
    pool = SourcesPool()
    seen: dict[int, str] = {}
    for batch in batches:
        for row, final in zip(batch, pool.add_rows(batch), strict=True):
            if final is None:
                assert not row.key() or not is_eligible(row)
                continue
            assert final.key() == row.key()
            seen.setdefault(final.sid, final.key())
        for sid, key in seen.items():
            current = pool.get(sid)
            assert current is not None and current.key() == key
        assert [r.sid for r in pool.rows()] == list(range(1, len(pool) + 1))
        assert len({r.key() for r in pool.rows()}) == len(pool)
    assert pool.next_sid == len(pool) + 1
    restored = SourcesPool.from_dict(pool.to_dict())
    assert {r.sid: r.key() for r in restored.rows()} == seen


# --- pool_text ---------------------------------------------------------------------------


def test_pool_text_of_an_empty_pool() -> None:
    assert pool_text(SourcesPool()) == "SOURCES POOL (0 sources)"


def test_pool_text_golden() -> None:
    pool = SourcesPool()
    pool.add(
        [
            web("https://a.com/x", title="Alpha\nPage", text="line one\n\nline two"),
            SourceRow(0, physical_path="/out/chart.png", mime="image/png", provider="output"),
            web("https://b.com", text="z" * 25),
        ]
    )
    expected = (
        "SOURCES POOL (3 sources): cite as [[S:n]]; "
        'reopen with react.read(["so:sources_pool[...]"])\n'
        "[S:1] Alpha Page — https://a.com/x\n"
        "    line one\n"
        "    line two\n"
        "[S:2] (untitled) — /out/chart.png\n"
        "[S:3] (untitled) — https://b.com\n"
        "    " + "z" * 20 + "…(truncated)"
    )
    assert pool_text(pool, limit=20) == expected
    assert pool_text(pool, limit=20) == expected  # byte-stable


def test_pool_text_says_source_for_one_row() -> None:
    pool = SourcesPool([web("https://a.com", 1, title="A")])
    assert pool_text(pool).splitlines()[0].startswith("SOURCES POOL (1 source): cite as")
