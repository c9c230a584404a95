"""Fuzzing the logical path parser (``timeline.paths``): arbitrary text, paths built from the
grammar with good and bad parts, and valid paths with characters flipped.

Properties: ``parse_path`` returns a ``LogicalPath`` or raises ``PathError`` whose rule is
one of ``RULES`` and whose path is the text as given, never another exception; a parsed
path formats back to the stripped text (``so:`` selectors to their canonical form) and
parses again to the same value; ``is_logical_path`` agrees; selectors hold sorted unique
SIDs within bounds.
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from actline.timeline.errors import PathError
from actline.timeline.paths import (
    FI_AREAS,
    MAX_SID,
    MAX_SIDS,
    RULES,
    LogicalPath,
    format_path,
    is_logical_path,
    parse_path,
    parse_sids,
)

from .tally import EXAMPLES, TALLY, fuzz_settings

KIND = "timeline.paths"
PATHS_PER_EXAMPLE = 20

GOOD_IDS = ["t1", "turn_123", "conv:7-a", "A-Z_0:9", "p" * 128, "-", ":"]
BAD_IDS = ["", "t.1", "t 1", "p" * 129, "é", "t/1", "t[1]", "t~", "t\\1"]
GOOD_NAME_SEGS = ["user", "prompt", "react", "plan", "2", "a:b", "x-y", "n" * 255]
BAD_NAME_SEGS = ["", "a b", "n" * 256, "é", "a/b", "~"]
GOOD_SEGS = ["app.py", "a b", "ümlaut", "x" * 255, "a~", "..a", ".hidden", "日本", "(1)"]
BAD_SEGS = ["", ".", "..", "~home", " a", "a ", "x" * 256, "a\\b", "a\x00b", "a\u200bb", "a\nb"]
AREAS = [*FI_AREAS, "file", "files.x", "", "FILES", "user", "outputs.", "external.followup"]
SIDS = ["1", "0", "01", "999999999", "1000000000", "12345678901", "", " ", "-1", "a"]
SPACES = ["", "", "", " ", "\t", "\n", "\u3000", "\x85", "\x1c", "\u2028"]
PREFIXES = ["ar:", "fi:", "so:", "su:", "tc:", "ks:", "sk:", "AR:", "xx:", "file:", "http://"]
ODD = ["/", "~", "\\\\", "./", "../", ".", "..", "C:\\", "C:/", "sources_pool", "", "a:"]
CHARS = "./\\~:[],- \t\x00\u200b\u202eé0aA_"


def _pick(rnd: random.Random, good: list[str], bad: list[str], p_bad: float = 0.15) -> str:
    return rnd.choice(bad) if rnd.random() < p_bad else rnd.choice(good)


def _rel(rnd: random.Random) -> str:
    rel = "/".join(_pick(rnd, GOOD_SEGS, BAD_SEGS, 0.1) for _ in range(rnd.randint(1, 5)))
    if rnd.random() < 0.02:
        rel = "/".join(["d" * 200] * 6)  # over the 1024-character limit
    return rel + ("/" if rnd.random() < 0.2 else "")


def _selector(rnd: random.Random) -> str:
    items = []
    for _ in range(rnd.randint(1, 4)):
        a = rnd.choice([*SIDS, str(rnd.randint(1, 20_000))])
        if rnd.random() < 0.4:
            b = rnd.choice([*SIDS, str(rnd.randint(1, 20_000))])
            a = f"{a}{rnd.choice(['-', ' - ', '--', '–'])}{b}"
        items.append(rnd.choice(["", " "]) + a + rnd.choice(["", " "]))
    return ",".join(items)


def grammar_path(rnd: random.Random) -> str:
    """A path of one of the forms, each part usually valid and sometimes not."""
    turn = _pick(rnd, GOOD_IDS, BAD_IDS)
    form = rnd.randrange(10)
    if form == 0:
        name = ".".join(_pick(rnd, GOOD_NAME_SEGS, BAD_NAME_SEGS, 0.1) for _ in range(3))
        text = f"ar:{turn}.{name}"
    elif form == 1:
        text = f"ar:plan.latest:{_pick(rnd, GOOD_IDS, BAD_IDS)}"
    elif form == 2:
        text = f"fi:{turn}.{_pick(rnd, list(FI_AREAS), AREAS)}/{_rel(rnd)}"
    elif form == 3:
        message = _pick(rnd, GOOD_IDS, BAD_IDS)
        seg = _pick(rnd, GOOD_SEGS, BAD_SEGS)
        text = f"fi:{turn}.external.followup.attachments/{message}/{seg}"
    elif form == 4:
        text = "so:sources_pool" + (f"[{_selector(rnd)}]" if rnd.random() < 0.9 else "")
    elif form == 5:
        text = f"su:{turn}.{_pick(rnd, ['conv.range.summary'], ['conv.range', 'summary', ''])}"
    elif form == 6:
        part = _pick(rnd, ["call", "result", "notice"], ["", "calls", "Result", "call.x"])
        text = f"tc:{turn}.{_pick(rnd, GOOD_IDS, BAD_IDS)}.{part}"
    elif form == 7:
        lead = rnd.choice(["", "", "", "/", "~", "./"])
        text = f"{rnd.choice(['ks:', 'sk:'])}{lead}{_rel(rnd)}"
    elif form == 8:
        text = rnd.choice(PREFIXES + ODD) + _rel(rnd)
    else:
        text = rnd.choice(["sources_pool", "sources_pool[", "so:sources_pool["]) + _selector(rnd)
    if rnd.random() < 0.2:
        text = _flip(rnd, text)
    return rnd.choice(SPACES) + text + rnd.choice(SPACES)


def _flip(rnd: random.Random, text: str) -> str:
    """A few characters of ``text`` deleted, doubled or replaced by grammar characters."""
    chars = list(text)
    for _ in range(rnd.randint(1, 3)):
        if not chars:
            chars.append(rnd.choice(CHARS))
            continue
        i = rnd.randrange(len(chars))
        op = rnd.randrange(3)
        if op == 0:
            del chars[i]
        elif op == 1:
            chars.insert(i, chars[i])
        else:
            chars[i] = rnd.choice(CHARS)
    return "".join(chars)


def _parse(text: str, lenient: bool) -> LogicalPath:
    return parse_path(text, lenient=lenient)


def _check(text: str, lenient: bool = False) -> None:
    """The property, for one text."""
    try:
        p: LogicalPath = TALLY.run(KIND, _parse, text, lenient)
    except PathError as exc:
        assert exc.rule in RULES, (text, exc.rule)
        assert exc.path == text, (text, exc.path)
        assert lenient or not is_logical_path(text), text
        return
    assert is_logical_path(text) or (lenient and p.prefix == "so"), text
    canonical = format_path(p)
    assert parse_path(canonical) == p, (text, canonical)
    if p.prefix == "so":
        assert all(1 <= n <= MAX_SID for n in p.sids) and len(p.sids) <= MAX_SIDS, text
        assert list(p.sids) == sorted(set(p.sids)), text
    else:
        assert canonical == text.strip(), (text, canonical)


@fuzz_settings()
@given(text=st.text(max_size=80), lenient=st.booleans())
def test_arbitrary_text_parses_or_raises_path_error(text: str, lenient: bool) -> None:
    _check(text, lenient)


@fuzz_settings(max(1, EXAMPLES // PATHS_PER_EXAMPLE))
@given(rnd=st.randoms(use_true_random=False))
def test_paths_from_the_grammar_parse_or_raise_path_error(rnd: random.Random) -> None:
    for _ in range(PATHS_PER_EXAMPLE):
        _check(grammar_path(rnd), rnd.random() < 0.2)


@fuzz_settings(max(1, EXAMPLES // PATHS_PER_EXAMPLE))
@given(rnd=st.randoms(use_true_random=False))
def test_selectors_give_sorted_unique_sids_in_bounds(rnd: random.Random) -> None:
    for _ in range(PATHS_PER_EXAMPLE):
        selector = _selector(rnd)
        try:
            sids = TALLY.run("timeline.sids", parse_sids, selector)
        except PathError as exc:
            assert exc.rule in ("bad_sources_selector", "too_many_sids"), (selector, exc.rule)
            continue
        assert list(sids) == sorted(set(sids)) and len(sids) <= MAX_SIDS, selector
        assert all(1 <= n <= MAX_SID for n in sids), selector
