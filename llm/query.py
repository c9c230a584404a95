"""Query analysis for the offline model: what a question asks and the terms that find it.

``analyze(question)`` reads a question the way the offline model needs it:

- **terms** that keep what matters: version numbers whole (``3.2.1``, and ``3.2`` beside it),
  numbers with their digits (``1,000`` is ``1000``), identifiers (``lr_test_``, ``LR-3010``,
  ``storage.retention``, whole and in parts), phrasal verbs joined (``back up`` is ``backup``,
  ``set up`` is ``setup``), stop words dropped, every word stemmed with the Snowball (Porter 2)
  English stemmer (``snowballstemmer``) so that ``encrypt`` meets ``encryption``;
- **synonyms** from a small table of everyday equivalents (``biggest``/``maximum``,
  ``cost``/``price``), added as weaker alternatives;
- **salient** terms a document must name to answer at all: names and acronyms written with a
  capital letter inside the sentence (``GraphQL``, ``Platinum``), versions and identifiers;
- the **kind** of question: ``howto``, ``quantity``, ``money``, ``when``, ``version``,
  ``compare``, ``yesno`` or ``other``, which decides what an answer must contain.

``text_terms(text)`` gives the same terms for document text, so a question and a sentence are
compared term for term. ``search_text(analysis)`` is the query for ``react.search_knowledge``:
the question's own words with versions and joined phrasal verbs kept, and its synonyms.

Pure functions, deterministic, no I/O. The stemmer is measured against the light suffix
stemmer of ``actline.tools.search.text`` in ``tests/llm/test_answers.py`` (same cases, same run).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

import snowballstemmer

__all__ = [
    "KINDS",
    "Analysis",
    "QueryTerm",
    "Stem",
    "analyze",
    "focus_terms",
    "match",
    "matches",
    "search_text",
    "snowball_stem",
    "text_terms",
    "version_prefix",
]

KINDS = (
    "howto",
    "quantity",
    "often",
    "money",
    "date",
    "when",
    "who",
    "version",
    "compare",
    "yesno",
    "other",
)

STOP_WORDS = frozenset(
    """a an the and or but if then else of to in on at by for with from as is are was were be
    been being do does did doing have has had i you he she it we they me my your our their this
    that these those what which who whom whose when where why how can could should would will
    shall may might must not no yes so than too very just about into over under again also please
    tell explain show give describe know want need let get ask any some all more much many
    there here its it's i'm i've don't doesn't up out one there's thanks now whole straight way
    currently today between""".split()
)
"""Function and question words: they say how a question is asked, not what it is about."""

PHRASAL = {
    ("back", "up"): "backup",
    ("set", "up"): "setup",
    ("log", "in"): "login",
    ("sign", "in"): "login",
    ("roll", "back"): "rollback",
    ("shut", "down"): "shutdown",
    ("start", "up"): "startup",
    ("clean", "up"): "cleanup",
    ("look", "up"): "lookup",
    ("time", "out"): "timeout",
    ("fail", "over"): "failover",
    ("or", "newer"): "minimum",
    ("or", "later"): "minimum",
    ("at", "least"): "minimum",
    ("at", "most"): "maximum",
    ("up", "to"): "maximum",
}
"""Two words that mean one thing (``back up``, ``or newer``): their second would be a stop word."""

_OBJECTS = frozenset("it them this that these those everything all".split())
"""Pronouns that may sit inside a phrasal verb: "back them up" is "backup them"."""

SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("biggest", "largest", "maximum", "max", "highest", "longest", "most"),
    ("smallest", "lowest", "minimum", "min", "least", "oldest", "earliest"),
    ("cost", "price", "pricing", "fee", "pay", "charge"),
    ("fast", "speed", "throughput", "quick"),
    ("install", "setup"),
    ("delete", "remove", "purge"),
    ("mistake", "error", "invalid"),
    ("backup", "snapshot"),
    ("upgrade", "update"),
    ("version", "release"),
    ("year", "annual", "annually", "yearly"),
    ("month", "monthly"),
    ("uptime", "availability"),
    ("respond", "response"),
    ("add", "join"),
    ("leak", "compromise", "compromised"),
    ("memory", "ram"),
    ("window", "within"),
    ("secure", "security"),
    ("sso", "sign-on"),
    ("keep", "retain", "retention"),
    ("old", "previous"),
)
"""Everyday equivalents a question may use where the documents use the other word."""

SYNONYM_WEIGHT = 0.6
"""A synonym counts this much of the word it stands for."""
PREFIX_WEIGHT = 0.5
"""A version's major.minor line (``3.2`` for ``3.2.1``) counts this much of the version."""

GENERIC = frozenset(
    "period time number amount value setting settings option options kind type level thing "
    "things way ways".split()
)
GENERIC_WEIGHT = 0.3
"""Nouns that head a phrase without saying what it is about ("retention *period*")."""

ASKED = {
    "version": frozenset({"version", "versions", "release", "releases"}),
    "money": frozenset({"cost", "costs", "price", "prices", "pricing", "fee", "fees", "pay"}),
    "date": frozenset({"date", "dates", "day", "exact"}),
    "compare": frozenset({"difference", "differences", "differ", "differs", "compare", "versus"}),
}
"""Words that name what a kind of question asks for: the answer's type stands for them."""
ASKED_WEIGHT = 0.4

_CONTEXT = re.compile(r"\s\((?P<context>[^()]*)\)\s*$")
"""The question a short one points back at, in brackets after it ("What is new in it? (When was
3.1.0 released?)"): its words count ``CONTEXT_WEIGHT`` and it does not set the kind."""
CONTEXT_WEIGHT = 0.5

_IMPERATIVE = re.compile(
    r"^\s*(?:please\s+)?(?:check|review|summari[sz]e|describe|explain|list|show|tell me about)\b",
    re.IGNORECASE,
)
"""A request's leading verb: "Check the retention settings" asks about the retention settings."""
_HOW_CUE = re.compile(r"\bhow\s+(?:many|much|long|often|soon|far|big|large)\b", re.IGNORECASE)

_TOKEN = re.compile(
    r"\$?\d{1,3}(?:,\d{3})+(?:\.\d+)?%?"  # 1,000 and $19,380
    r"|\$?\d+(?:\.(?:\d+|x))+%?"  # versions 3.2.1, 3.0.x and decimals 99.95%
    r"|\$?\d+%?"
    r"|[^\W\d_][\w]*(?:[.\-/][\w]+)*_?"  # words, identifiers, compounds
    r"|_[\w]+",
    re.UNICODE,
)
_VERSION = re.compile(r"^\d+(?:\.(?:\d+|x))+$")
_PARTS = re.compile(r"[._\-/]+")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;]\s+|\n\s*)$")
_HOWTO = re.compile(
    r"\bhow\s+(?:do|can|should|would|could|to|must)\b(?!\s+\w+\s+(?:cost|charge))"
    r"|\bhow\s+to\b|\bwhat(?:'s| is) the (?:command|way|procedure)\b|\bsteps?\s+to\b",
    re.IGNORECASE,
)
_MONEY = re.compile(r"\b(?:cost|costs|price|prices|pricing|pay|fee|fees|charge|charged)\b", re.I)
_QUANTITY = re.compile(
    r"\bhow\s+(?:many|much|long|often|fast|big|large|far|soon)\b|\bwhat\s+(?:size|number)\b"
    r"|\b(?:maximum|minimum|max|min|biggest|largest|smallest|lowest|highest|limit|limits)\b"
    r"|\bat what\b|\bwithin how\b|\bnumber of\b",
    re.IGNORECASE,
)
_OFTEN = re.compile(r"\bhow\s+often\b|\bhow\s+frequently\b|\bat what interval\b", re.I)
_WHEN = re.compile(
    r"(?:^|[.!?]\s+)when\b|\bwhat date\b|\buntil\b|\bsince when\b|\bby when\b", re.IGNORECASE
)
""""When" that asks for a time starts the question; "what happens when …" asks what happens."""
_DATE_Q = re.compile(r"\b(?:what|which)\s+(?:[\w-]+\s+){0,4}(?:date|day)\b", re.IGNORECASE)
"""A question for a calendar date ("What is the exact release date …?"), not just a time."""
_WHO = re.compile(r"(?:^|[.!?]\s+)who\b", re.IGNORECASE)
"""A question for a person or a party ("Who founded …?")."""
_FOCUS_END = frozenset(
    """does do did is are was were can could should would will may might must has have had per
    of in on at for to with from by that which who when where than and or""".split()
)
"""Words that end the noun phrase a question asks about ("how many *consumer groups* per …")."""
_FOCUS = re.compile(
    r"\bhow\s+many\s+(?P<many>[^?]+)"
    r"|\b(?:number|amount|count)\s+of\s+(?P<of>[^?]+)"
    r"|\b(?:how\s+much|what)\s+(?:does|do|did|will|would|could)\s+(?P<paid>[^?]+?)\s+"
    r"(?:cost|charge)"
    r"|\b(?:price|cost|fee)\s+(?:of|for)\s+(?P<priced>[^?]+)"
    r"|\b(?:which|what)\s+(?P<attr>(?:[\w.-]+\s+){0,2}port)s?\b",
    re.IGNORECASE,
)
"""Where a question names the thing whose value it asks for: the counted thing, the priced
thing, or an attribute that has a value of its own kind (a port: a number)."""
_VERSION_Q = re.compile(
    r"\b(?:which|what)\s+(?:[\w-]+\s+){0,2}(?:version|release)s?\b", re.IGNORECASE
)
_COMPARE = re.compile(
    r"\bdiffer(?:s|ence|ences)?\b|\bcompare[sd]?\b|\bversus\b|\bvs\.?\b|\bbetter than\b",
    re.IGNORECASE,
)
_COMPARED = re.compile(
    r"\bbetween\s+(?:the\s+)?(?P<a>[\w.-]+)\s+and\s+(?:the\s+)?(?P<b>[\w.-]+)"
    r"|(?P<c>[\w.-]+)\s+(?:vs\.?|versus)\s+(?:the\s+)?(?P<d>[\w.-]+)",
    re.IGNORECASE,
)
_YESNO = re.compile(
    r"(?:^|[.!?]\s+)(?:is|are|does|do|can|could|will|has|have|should)\b", re.IGNORECASE
)

_STEMMER = snowballstemmer.stemmer("english")

Stem = Callable[[str], str]
"""A stemmer: a lower-case word to its stem."""


@lru_cache(maxsize=1 << 15)
def snowball_stem(word: str) -> str:
    """The Snowball (Porter 2) English stem of a lower-case word."""
    return str(_STEMMER.stemWord(word))


def _synonym_table(stem: Callable[[str], str]) -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for group in SYNONYMS:
        stems = {stem(w) for w in group}
        for s in stems:
            table.setdefault(s, set()).update(stems - {s})
    return {k: frozenset(v) for k, v in table.items()}


_SYNONYMS = _synonym_table(snowball_stem)


def version_prefix(term: str) -> str | None:
    """``3.2`` for a version ``3.2.1`` (or ``3.2.x``); None for anything else."""
    if not _VERSION.match(term):
        return None
    parts = term.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else None


def _stem(word: str, stem: Callable[[str], str]) -> str:
    """``stem(word)``, and the plural of an acronym without vowels (``sdks``) made singular."""
    out = stem(word)
    if out.endswith("s") and len(out) > 2 and not any(c in "aeiouy" for c in out[:-1]):
        return out[:-1]
    return out


def _number(token: str) -> str:
    return token.replace(",", "").removeprefix("$")


def _word_terms(token: str, stem: Callable[[str], str]) -> list[str]:
    """Terms of one lower-case token: a compound gives itself and its stemmed parts."""
    if token[0].isdigit() or token[0] == "$":
        number = _number(token)
        prefix = version_prefix(number.rstrip("%"))
        return [number, prefix] if prefix else [number]
    parts = [p for p in _PARTS.split(token) if p]
    if len(parts) == 1 and parts[0] == token:
        return [] if token in STOP_WORDS or len(token) < 2 else [_stem(token, stem)]
    plain = "-" in token and all(p.isalpha() for p in parts) and not any(c in token for c in "._/")
    out = [] if plain else [token]  # dead-letter is its words; LR-3010 and a.b stay whole too
    out += [_stem(p, stem) for p in parts if p not in STOP_WORDS and len(p) > 1]
    return out


def _tokens(text: str) -> list[tuple[str, int]]:
    return [(m.group(), m.start()) for m in _TOKEN.finditer(text)]


def _joined(tokens: list[str]) -> list[str]:
    """Lower-case tokens with phrasal verbs joined into one word."""
    out: list[str] = []
    i = 0
    while i < len(tokens):
        split = (tokens[i], tokens[i + 2]) if i + 2 < len(tokens) else None
        if split in PHRASAL and tokens[i + 1] in _OBJECTS:  # "back them up"
            out += [PHRASAL[split], tokens[i + 1]]
            i += 3
            continue
        pair = (tokens[i], tokens[i + 1]) if i + 1 < len(tokens) else None
        if pair in PHRASAL:
            out.append(PHRASAL[pair])
            i += 2
            continue
        out.append(tokens[i])
        i += 1
    return out


def text_terms(text: str, stem: Callable[[str], str] = snowball_stem) -> list[str]:
    """The terms of ``text`` (a sentence, a heading, a code block) as ``analyze`` makes them."""
    words = _joined([t.casefold() for t, _ in _tokens(text)])
    return [term for word in words for term in _word_terms(word, stem)]


@dataclass(frozen=True, slots=True)
class QueryTerm:
    """One term of a question: its surface word, its term, its alternatives and salience."""

    word: str
    term: str
    alternatives: frozenset[str] = frozenset()
    salient: bool = False
    weight: float = 1.0
    """How much the term counts: less for generic nouns and for words the kind stands for."""


@dataclass(frozen=True, slots=True)
class Analysis:
    """What ``analyze`` read from a question."""

    question: str
    kind: str
    terms: tuple[QueryTerm, ...]
    words: tuple[str, ...]
    """The question's content words in their written form (phrasal verbs joined)."""
    synonyms: tuple[str, ...] = field(default=())
    """Written forms of the synonyms (for the search query)."""
    compared: tuple[str, ...] = field(default=())
    """For a comparison: the terms of the things compared ("between X and Y", "X vs Y")."""
    focus: tuple[str, ...] = field(default=())
    """The terms of the thing whose value the question asks for ("how many *consumer groups*",
    "what does *an extra node* cost", "which *gRPC port*"): an answer must name it."""
    stem: Callable[[str], str] = field(default=snowball_stem, repr=False, compare=False)
    """The stemmer the terms were made with: document text is read with the same one."""

    def text_terms(self, text: str) -> list[str]:
        """``text_terms(text)`` with this analysis's stemmer."""
        return text_terms(text, self.stem)

    @property
    def salient(self) -> tuple[QueryTerm, ...]:
        return tuple(t for t in self.terms if t.salient)


def _kind(question: str) -> str:
    if _COMPARE.search(question):
        return "compare"
    if _HOWTO.search(question) and not _QUANTITY.search(question):
        return "howto"
    if _WHO.search(question):
        return "who"
    if _DATE_Q.search(question):
        return "date"
    if _VERSION_Q.search(question):
        return "version"
    if _MONEY.search(question):
        return "money"
    if _OFTEN.search(question):
        return "often"
    if _QUANTITY.search(question):
        return "quantity"
    if _WHEN.search(question):
        return "when"
    if _YESNO.search(question):
        return "yesno"
    return "other"


def _is_salient(token: str, start: int, text: str) -> bool:
    """A name, an acronym, a version or an identifier, not a capital that starts a sentence."""
    if token[0].isdigit() and (_VERSION.match(token) or "." in token):
        return True
    if any(c in token for c in "_./") and any(c.isalpha() for c in token) and len(token) > 3:
        return True
    if "-" in token and any(c.isdigit() for c in token):
        return True
    if sum(c.isupper() for c in token) >= 2:
        return True  # an acronym or a CamelCase name ("gRPC"), even at the start
    if not token[0].isupper() or token == "I":
        return False
    return not _SENTENCE_START.search(text[:start])


def focus_terms(question: str, stem: Callable[[str], str] = snowball_stem) -> list[str]:
    """The terms of the noun phrase whose value ``question`` asks for (see ``Analysis.focus``):
    its words up to the first verb or preposition that follows it, or none."""
    found = _FOCUS.search(question)
    if found is None:
        return []
    phrase = next(g for g in found.groups() if g is not None)
    words: list[str] = []
    for token, _ in _tokens(phrase):
        word = token.casefold()
        if word in _FOCUS_END or len(words) >= 4:
            break
        words.append(word)
    return [t for w in _joined(words) for t in _word_terms(w, stem)[:1] if w not in GENERIC]


def analyze(question: str, stem: Callable[[str], str] = snowball_stem) -> Analysis:
    """The kind, terms, synonyms and salient terms of ``question`` (see the module docstring)."""
    synonyms = _SYNONYMS if stem is snowball_stem else _synonym_table(stem)
    context = _CONTEXT.search(question)
    asking = question[: context.start()] if context else question
    kind = _kind(asking)
    own = set(text_terms(question[: context.start()], stem)) if context else None
    question = _IMPERATIVE.sub("", _HOW_CUE.sub("how", question))
    asked = ASKED.get(kind, frozenset())
    raw = _tokens(question)
    lowered = [t.casefold() for t, _ in raw]
    words = _joined(lowered)
    salient_words = {t.casefold() for t, start in raw if _is_salient(t, start, question)}
    terms: dict[str, QueryTerm] = {}
    surface: list[str] = []
    extra: list[str] = []
    for word in words:
        found = _word_terms(word, stem)
        if found:
            surface.append(word)
        for term in found[:1] if found and found[0][0].isdigit() else found:
            if term in terms:  # a version's major.minor is matched by ``matches``, not added
                continue
            alternatives = synonyms.get(term, frozenset())
            weight = GENERIC_WEIGHT if word in GENERIC else ASKED_WEIGHT if word in asked else 1.0
            if own is not None and term not in own:
                weight *= CONTEXT_WEIGHT  # from the question it points back at, not its own
            terms[term] = QueryTerm(word, term, alternatives, word in salient_words, weight)
        for group in SYNONYMS:
            if word in group:
                extra += [w for w in group if w != word and w not in extra]
    compared: list[str] = []
    if kind == "compare" and (pair := _COMPARED.search(question)):
        for name in (n for n in pair.groups() if n):
            compared += [t for t in _word_terms(name.casefold(), stem) if t in terms][:1]
    focus = [t for t in focus_terms(asking, stem) if t in terms]
    if kind == "who" and not focus:  # who *founded* X: the answer must hold what was done
        focus = [t.term for t in terms.values() if not t.salient and t.weight == 1.0]
    return Analysis(
        question=question,
        kind=kind,
        focus=tuple(dict.fromkeys(focus)),
        compared=tuple(dict.fromkeys(compared)),
        stem=stem,
        terms=tuple(terms.values()),
        words=tuple(dict.fromkeys(surface)),
        synonyms=tuple(w for w in extra if w not in surface),
    )


def search_text(analysis: Analysis, limit: int = 300) -> str:
    """The question's words, then its synonyms, as a search query of at most ``limit`` chars."""
    text = " ".join([*analysis.words, *analysis.synonyms[:6]])
    return text[:limit].rsplit(" ", 1)[0] if len(text) > limit else text


def match(terms: Iterable[str], term: QueryTerm) -> float:
    """1.0 when ``terms`` hold ``term``, ``PREFIX_WEIGHT`` when they hold only the major.minor
    line of a version (``3.2`` or ``3.2.x`` for ``3.2.1``), else 0."""
    have = terms if isinstance(terms, set | frozenset) else set(terms)
    if term.term in have:
        return 1.0
    prefix = version_prefix(term.term)
    if prefix is not None and (prefix in have or f"{prefix}.x" in have):
        return PREFIX_WEIGHT
    return 0.0


def matches(terms: Iterable[str], term: QueryTerm) -> bool:
    """Whether ``terms`` hold ``term`` itself or, for a version, its major.minor line."""
    return match(terms, term) > 0
