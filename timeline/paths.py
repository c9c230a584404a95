"""Logical paths: the handles the model uses to reopen timeline, file, source and skill content.

Grammar. ``<id>`` is ``[A-Za-z0-9_\\-:]{1,128}`` and never holds a ``.`` (dots separate
segments); turn, call, plan and message ids all follow it, so ``conv:7-a`` is a turn id::

    ar:<turn>.<name>               name: "."-separated segments of [A-Za-z0-9_\\-:]+
    ar:plan.latest:<plan_id>       plan alias: turn_id None, name "plan.latest"
    fi:<turn>.files/<scope>[/<seg>...][/]
    fi:<turn>.outputs/<scope>[/<seg>...][/]
    fi:<turn>.user.attachments/<name>
    fi:<turn>.external.followup.attachments/<message_id>/<name>
    so:sources_pool                whole pool
    so:sources_pool[<sel>]         sel: item ("," item)*, item: n | a-b (spaces allowed),
                                   1 <= n <= 999,999,999, a <= b; item sizes sum to <= 10,000
    su:<turn>.conv.range.summary
    tc:<turn>.<call_id>.call|result|notice
    ks:<rel>                       knowledge-space file
    sk:<rel>                       skill file

``ar:plan.latest:`` always starts the alias (so no turn named ``plan`` has an artifact
``latest:...``); plan ids have no dots, so the id after the first and last ``plan.latest:`` agree.

Relative parts (``<rel>``, and what follows a ``fi:`` area) are ``/``-separated segments, each
non-empty, not ``.`` or ``..``, not starting with ``~``, without surrounding whitespace and at
most 255 characters (Unicode letters and inner spaces are fine); at most 1024 characters in all.
A whole path is at most 1536 characters, holds no backslash and no character of Unicode category
Cc, Cf, Cs, Zl or Zp. A folder under ``files/`` or ``outputs/`` may end with ``/``
(``fi:t1.files/bundle/``): the slash stays in ``rel`` (``"bundle/"``) and ``is_folder`` is True.

``parse_path`` strips surrounding whitespace, then raises ``PathError(rule, path, detail)``;
``path`` is the text as given and ``detail`` says what to write instead. Rules (``RULES``):
``empty_path``; ``too_long``; ``absolute_path`` (a leading ``/``, ``~``, ``\\\\``, ``C:\\``
or ``C:/``, or a ks:/sk: path starting with ``/`` or ``~``); ``physical_path`` (``./``, ``../``,
a backslash, ``file:`` URLs, no prefix as in ``src/app.py``); ``url_not_path`` (``scheme://``);
``unknown_prefix`` (also bare ``sources_pool[...]`` unless ``lenient``); ``dot_segment``;
``bad_segment``; ``bad_turn_id``; ``bad_id`` (call, plan and message ids); ``bad_area``;
``bad_sources_selector``; ``too_many_sids``; ``bad_tc_part``; ``bad_summary_name``.
``format_path`` writes the canonical form, which differs from a parsed text only in ``so:``
selectors (written by ``format_sids``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import groupby
from typing import NoReturn

from .errors import PathError

__all__ = [
    "PREFIXES", "RULES", "LogicalPath", "ar_path", "check_path", "fi_path",
    "followup_attachment_path", "format_path", "format_sids", "is_logical_path", "ks_path",
    "parse_path", "parse_sids", "plan_alias", "sk_path", "su_path", "tc_path",
]  # fmt: skip

PREFIXES = ("ar", "fi", "so", "su", "tc", "ks", "sk")
RULES = (
    "empty_path", "too_long", "absolute_path", "physical_path", "url_not_path",
    "unknown_prefix", "dot_segment", "bad_segment", "bad_turn_id", "bad_id", "bad_area",
    "bad_sources_selector", "too_many_sids", "bad_tc_part", "bad_summary_name",
)  # fmt: skip

MAX_ID = 128
MAX_SEGMENT = 255
MAX_REL = 1024
MAX_PATH = 1536
MAX_SIDS = 10_000
MAX_SID = 999_999_999

POOL = "sources_pool"
SUMMARY_NAME = "conv.range.summary"
FOLLOWUP_AREA = "external.followup.attachments"
FI_AREAS = ("files", "outputs", "user.attachments", FOLLOWUP_AREA)
TC_PARTS = ("call", "result", "notice")
_ALIAS = "plan.latest:"

_ID = rf"[A-Za-z0-9_\-:]{{1,{MAX_ID}}}"
_SEG = rf"[A-Za-z0-9_\-:]{{1,{MAX_SEGMENT}}}"
_ID_RE = re.compile(_ID)
_NAME_SEG_RE = re.compile(_SEG)
_PREFIX_RE = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*):")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_DRIVE_RE = re.compile(r"[A-Za-z]:[\\/]")
_SID_ITEM_RE = re.compile(r" *([0-9]{1,9}) *(?:- *([0-9]{1,9}) *)?")  # 9 digits: MAX_SID
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_PLAIN = re.compile(rf"ar:{_ID}\.{_SEG}(?:\.{_SEG})*|tc:{_ID}\.{_ID}\.(?:{'|'.join(TC_PARTS)})")
"""ar: and tc: texts whose every segment meets the parser's own rules (``_is_plain``)."""


@dataclass(frozen=True, slots=True)
class LogicalPath:
    """One parsed logical path; ``str()`` gives its canonical form.

    ``name`` is the part after ``<turn>.`` for ar/su/tc, the area for fi, the relative path for
    ks/sk, ``sources_pool`` for so and ``plan.latest`` for the alias. The other fields are
    filled by ``parse_path`` from the text; ``format_path`` writes from prefix, turn_id, name,
    rel, sids and (for the alias) plan_id.
    """

    prefix: str
    turn_id: str | None
    name: str
    rel: str = ""
    sids: tuple[int, ...] = ()
    call_id: str | None = None
    part: str | None = None
    plan_id: str | None = None
    message_id: str | None = None
    scope: str | None = None

    @property
    def is_folder(self) -> bool:
        """True for a ``files/`` or ``outputs/`` subtree ref written with a trailing ``/``."""
        return self.prefix == "fi" and self.rel.endswith("/")

    def __str__(self) -> str:
        return format_path(self)


def _fail(rule: str, path: str, detail: str) -> NoReturn:
    raise PathError(rule, path, detail)


def _check_id(value: str, what: str, rule: str, path: str) -> None:
    if _ID_RE.fullmatch(value) is None:
        detail = f"a {what} is 1-{MAX_ID} of A-Z a-z 0-9 _ - : (no dots, no spaces)"
        _fail(rule, path, f"{detail}; got {value!r}")


def _check_rel(rel: str, path: str, *, folder_ok: bool) -> None:
    if len(rel) > MAX_REL:
        _fail("too_long", path, f"a relative path is at most {MAX_REL} characters")
    body = rel[:-1] if folder_ok and rel.endswith("/") else rel
    for seg in body.split("/"):
        if not seg:
            _fail("bad_segment", path, "empty segment: write each segment once between single '/'")
        if seg in (".", ".."):
            _fail("dot_segment", path, f"write the path without {seg!r} segments")
        if seg.startswith("~"):
            _fail("bad_segment", path, f"segment {seg!r} starts with '~'; drop the '~'")
        if seg != seg.strip():
            _fail("bad_segment", path, f"segment {seg!r} has surrounding whitespace; trim it")
        if len(seg) > MAX_SEGMENT:
            _fail("bad_segment", path, f"a segment is at most {MAX_SEGMENT} characters")


def _split_turn(body: str, path: str) -> tuple[str, str]:
    turn, _, rest = body.partition(".")
    _check_id(turn, "turn id", "bad_turn_id", path)
    return turn, rest


def _parse_ar(body: str, path: str) -> LogicalPath:
    if body.startswith(_ALIAS):
        plan_id = body[len(_ALIAS) :]
        _check_id(plan_id, "plan id", "bad_id", path)
        return LogicalPath("ar", None, "plan.latest", plan_id=plan_id)
    turn, name = _split_turn(body, path)
    for seg in name.split("."):
        if _NAME_SEG_RE.fullmatch(seg) is None:
            detail = f"write ar:{turn}.<name>, segments of A-Z a-z 0-9 _ - : joined by '.'"
            _fail("bad_segment", path, f"{detail}; got segment {seg!r}")
    return LogicalPath("ar", turn, name)


def _parse_fi(body: str, path: str) -> LogicalPath:
    head, slash, rel = body.partition("/")
    turn, area = _split_turn(head, path)
    if area not in FI_AREAS:
        _fail("bad_area", path, f"write fi:{turn}.<area>/..., area one of {', '.join(FI_AREAS)}")
    if not slash:
        _fail("bad_segment", path, f"write fi:{turn}.{area}/<name>")
    if area in ("files", "outputs"):
        _check_rel(rel, path, folder_ok=True)
        return LogicalPath("fi", turn, area, rel=rel, scope=rel.split("/", 1)[0])
    _check_rel(rel, path, folder_ok=False)
    segs = rel.split("/")
    if area == "user.attachments":
        if len(segs) != 1:
            _fail("bad_segment", path, f"write fi:{turn}.user.attachments/<name>, one file name")
        return LogicalPath("fi", turn, area, rel=rel)
    if len(segs) != 2:
        _fail("bad_segment", path, f"write fi:{turn}.{FOLLOWUP_AREA}/<message_id>/<name>")
    _check_id(segs[0], "message id", "bad_id", path)
    return LogicalPath("fi", turn, area, rel=rel, message_id=segs[0])


def _parse_so(body: str, path: str) -> LogicalPath:
    if body == POOL:
        return LogicalPath("so", None, POOL)
    if not (body.startswith(POOL + "[") and body.endswith("]")):
        _fail("bad_sources_selector", path, "write so:sources_pool or so:sources_pool[1, 3-5]")
    return LogicalPath("so", None, POOL, sids=_parse_sids(body[len(POOL) + 1 : -1], path))


def _parse_su(body: str, path: str) -> LogicalPath:
    turn, name = _split_turn(body, path)
    if name != SUMMARY_NAME:
        _fail("bad_summary_name", path, f"write su:{turn}.{SUMMARY_NAME}")
    return LogicalPath("su", turn, name)


def _parse_tc(body: str, path: str) -> LogicalPath:
    turn, rest = _split_turn(body, path)
    call, dot, part = rest.rpartition(".")
    if not dot or part not in TC_PARTS:
        _fail("bad_tc_part", path, f"write tc:{turn}.<call_id>.call, .result or .notice")
    _check_id(call, "call id", "bad_id", path)
    return LogicalPath("tc", turn, rest, call_id=call, part=part)


def _parse_rel_prefix(prefix: str) -> Callable[[str, str], LogicalPath]:
    def parse(body: str, path: str) -> LogicalPath:
        if body.startswith(("/", "~")):
            _fail("absolute_path", path, f"write {prefix}:<relative path>, e.g. {prefix}:docs/a.md")
        _check_rel(body, path, folder_ok=False)
        return LogicalPath(prefix, None, body)

    return parse


_PARSERS: dict[str, Callable[[str, str], LogicalPath]] = {
    "ar": _parse_ar, "fi": _parse_fi, "so": _parse_so, "su": _parse_su, "tc": _parse_tc,
    "ks": _parse_rel_prefix("ks"), "sk": _parse_rel_prefix("sk"),
}  # fmt: skip


def parse_path(text: str, *, lenient: bool = False) -> LogicalPath:
    """Parse a logical path, or raise ``PathError`` naming the broken rule.

    With ``lenient=True`` the bare ``sources_pool[...]`` (no ``so:``) is accepted too.
    Valid paths are remembered (a block's path is built, then checked again when it is
    appended); errors are raised afresh each time.
    """
    return _parse_cached(text, lenient)


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str, lenient: bool) -> LogicalPath:
    s = text.strip()
    if not s:
        _fail("empty_path", text, "write a logical path such as ar:<turn>.user.prompt")
    if len(s) > MAX_PATH:
        _fail("too_long", text, f"a logical path is at most {MAX_PATH} characters")
    bad = None  # printable ASCII has no control or format character
    if not (s.isascii() and s.isprintable()):
        bad = next((c for c in s if unicodedata.category(c) in _BAD_CATEGORIES), None)
    if bad is not None:
        _fail("bad_segment", text, f"remove the control or format character {bad!r}")
    if s.lower().startswith("file:"):
        _fail("physical_path", text, "file URLs are physical; write fi:<turn>.files/<rel>")
    if _URL_RE.match(s):
        _fail("url_not_path", text, "a URL is not a path; cite it from so:sources_pool[<sid>]")
    if s.startswith(("/", "~", "\\\\")) or _DRIVE_RE.match(s):
        _fail("absolute_path", text, "write a logical path such as fi:<turn>.files/<rel>")
    if "\\" in s:
        _fail("physical_path", text, "use '/' between segments of a logical path, never '\\'")
    if s in (".", "..") or s.startswith(("./", "../")):
        _fail("physical_path", text, "write a logical path such as fi:<turn>.files/<rel>")
    match = _PREFIX_RE.match(s)
    if match is None:
        if s.startswith(POOL):
            if lenient:
                return _parse_so(s, text)
            _fail("unknown_prefix", text, "write so:sources_pool[...]")
        _fail("physical_path", text, "add a prefix: fi:<turn>.files/<rel>, ks:<rel>, ar:, tc:")
    prefix = match.group(1)
    if prefix not in _PARSERS:
        _fail("unknown_prefix", text, f"use one of {', '.join(p + ':' for p in PREFIXES)}")
    return _PARSERS[prefix](s[match.end() :], text)


def check_path(text: str) -> None:
    """Raise ``PathError`` unless ``text`` is a logical path: ``parse_path`` without its
    result. A plain ar: or tc: text (every segment within the parser's rules) is checked by
    one pattern; the blocks of a new turn have such paths, never in the parse cache."""
    if not _is_plain(text):
        parse_path(text)


def _is_plain(text: str) -> bool:
    """True for an ar: or tc: text that parses, checked without the parser: a new turn's
    ids are never in its cache."""
    return (
        len(text) <= MAX_PATH
        and _PLAIN.fullmatch(text) is not None
        and not text.startswith("ar:" + _ALIAS)
    )


def is_logical_path(text: str) -> bool:
    """True when ``parse_path(text)`` would succeed."""
    try:
        parse_path(text)
    except PathError:
        return False
    return True


def format_path(p: LogicalPath) -> str:
    """The canonical text of ``p``; raises ``PathError`` when it would not parse back to ``p``."""
    if p.prefix == "so":
        return format_sids(p.sids)
    if p.prefix == "ar" and p.turn_id is None and p.plan_id is not None:
        text = f"ar:{_ALIAS}{p.plan_id}"
    elif p.prefix == "fi":
        text = f"fi:{p.turn_id or ''}.{p.name}/{p.rel}"
    elif p.prefix in ("ks", "sk"):
        text = f"{p.prefix}:{p.name}"
    else:
        text = f"{p.prefix}:{p.turn_id or ''}.{p.name}"
        plain = p.turn_id is not None and not p.rel and p.plan_id is None
        if plain and _ID_RE.fullmatch(p.turn_id or "") is not None and _is_plain(text):
            return text  # the turn id is the text's first segment: it parses back to ``p``
    if p.turn_id is not None:
        _check_id(p.turn_id, "turn id", "bad_turn_id", text)
    back = parse_path(text)
    if back.turn_id != p.turn_id:
        _fail("bad_turn_id", text, f"turn id {p.turn_id!r} does not survive a round trip")
    if (back.name, back.rel, back.plan_id) != (p.name, p.rel, p.plan_id):
        _fail("bad_segment", text, "the name or relative path does not survive a round trip")
    return text


def _parse_sids(selector: str, path: str) -> tuple[int, ...]:
    if not selector.strip(" "):
        _fail("bad_sources_selector", path, "empty selector; write so:sources_pool for all")
    bounds: list[tuple[int, int]] = []
    total = 0
    for item in selector.split(","):
        m = _SID_ITEM_RE.fullmatch(item)
        if m is None:
            _fail("bad_sources_selector", path, f"item {item!r}: write n or a-b with 1 <= a <= b")
        lo = int(m.group(1))
        hi = int(m.group(2) or lo)
        if lo < 1 or hi < lo:
            _fail("bad_sources_selector", path, f"item {item!r}: write n or a-b with 1 <= a <= b")
        total += hi - lo + 1
        if total > MAX_SIDS:
            _fail("too_many_sids", path, f"select at most {MAX_SIDS} SIDs; split the read")
        bounds.append((lo, hi))
    return tuple(sorted({n for lo, hi in bounds for n in range(lo, hi + 1)}))


def parse_sids(selector: str) -> tuple[int, ...]:
    """The sorted unique SIDs of a selector body: ``"3, 5-6"`` -> ``(3, 5, 6)``."""
    return _parse_sids(selector, selector)


def format_sids(sids: Iterable[int]) -> str:
    """``so:sources_pool[...]`` for ``sids``, sorted and deduplicated, runs written ``a-b``."""
    ordered = sorted(set(sids))
    if not ordered:
        return "so:" + POOL
    if ordered[0] < 1 or ordered[-1] > MAX_SID:
        bad = ordered[0] if ordered[0] < 1 else ordered[-1]
        _fail("bad_sources_selector", f"so:{POOL}[{bad}]", f"SIDs are 1 to {MAX_SID}")
    if len(ordered) > MAX_SIDS:
        where = f"so:{POOL}[{len(ordered)} SIDs]"
        _fail("too_many_sids", where, f"select at most {MAX_SIDS} SIDs; split the read")
    items: list[str] = []
    for _, group in groupby(enumerate(ordered), key=lambda pair: pair[1] - pair[0]):
        run = [n for _, n in group]
        items.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return f"so:{POOL}[{', '.join(items)}]"


def ar_path(turn_id: str, name: str) -> str:
    """``ar:<turn>.<name>``, e.g. ``ar:t1.react.plan.ack.2``."""
    return format_path(LogicalPath("ar", turn_id, name))


def fi_path(turn_id: str, area: str, rel: str) -> str:
    """``fi:<turn>.<area>/<rel>`` for area ``files``, ``outputs`` or ``user.attachments``."""
    if area not in FI_AREAS[:3]:
        detail = "area is files, outputs or user.attachments; see followup_attachment_path"
        _fail("bad_area", f"fi:{turn_id}.{area}/{rel}", detail)
    return format_path(LogicalPath("fi", turn_id, area, rel=rel))


def followup_attachment_path(turn_id: str, message_id: str, name: str) -> str:
    """``fi:<turn>.external.followup.attachments/<message_id>/<name>``."""
    return format_path(LogicalPath("fi", turn_id, FOLLOWUP_AREA, rel=f"{message_id}/{name}"))


def su_path(turn_id: str) -> str:
    """``su:<turn>.conv.range.summary``."""
    return format_path(LogicalPath("su", turn_id, SUMMARY_NAME))


def tc_path(turn_id: str, call_id: str, part: str) -> str:
    """``tc:<turn>.<call_id>.<part>`` for part ``call``, ``result`` or ``notice``."""
    return format_path(LogicalPath("tc", turn_id, f"{call_id}.{part}"))


def plan_alias(plan_id: str) -> str:
    """``ar:plan.latest:<plan_id>``, the alias of the newest snapshot of a plan."""
    return format_path(LogicalPath("ar", None, "plan.latest", plan_id=plan_id))


def ks_path(rel: str) -> str:
    """``ks:<rel>``, a read-only knowledge-space file."""
    return format_path(LogicalPath("ks", None, rel))


def sk_path(rel: str) -> str:
    """``sk:<rel>``, a skill file."""
    return format_path(LogicalPath("sk", None, rel))
