"""Runtime profiles: a name that resolves into a turn's limits
and policies.

Four are built in: ``fast``, ``balanced`` (the default), ``deep`` and ``research``. A custom
profile extends one of them (``[profiles.NAME]`` tables in ``actline.toml``, or a table in a
turn request's ``config["profile"]``) and changes some of its keys. Resolution, lowest
precedence first:

1. the built-in profile the chain of ``extends`` ends at;
2. the node's settings that differ from their defaults (``ACTLINE_MAX_ITERATIONS=30`` is the
   operator's value for every profile; ``Profile.NODE_KEYS`` lists them);
3. each custom profile of the chain, base first;
4. the turn's own profile table, then the turn's top-level config keys (``max_iterations``,
   ``max_tokens``, ``wait_timeout_s``, ``max_tool_calls_per_decision``).

Approval patterns only grow down the chain: a turn (or a custom profile) adds tools that need
approval, it never removes one its base requires.

Every key has a bound; an unknown key, a value of the wrong type or out of bounds, an unknown
base or a cycle of ``extends`` is ``InputRefused`` naming it (``profile.<key>``). The resolved
profile is recorded on the turn's first block (its header's ``meta["profile"]``), as a table a
turn request accepts again, so any turn can be re-run with the same settings.

Pure: no I/O.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from actline.actors.errors import InputRefused
from actline.timeline import CONTEXT_POLICIES, RETENTION_POLICIES, TimelineConfig

BUILTIN = ("fast", "balanced", "deep", "research")
DEFAULT_PROFILE = "balanced"
MEMORY_SCOPES = ("conversation", "user")
MAX_EXTENDS = 8
"""Custom profiles one chain may stack."""
MAX_PATTERNS = 64
MAX_PATTERN_CHARS = 128
_PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-*?[]!")
_TIMELINE = TimelineConfig()


UNGATED = ("agent.send",)
"""Calls that never wait for approval: a hand-off to an outside agent only stores its task
(what the agent does is gated where it runs)."""


def ungated(patterns: Iterable[str]) -> tuple[str, ...]:
    """The patterns that name only calls approvals cannot gate (``agent.send``,
    ``agent.*``): a setting holding one asks for something that never happens."""
    return tuple(
        p
        for p in patterns
        if p.startswith("agent.") and any(fnmatch.fnmatchcase(t, p) for t in UNGATED)
    )


def parse_patterns(value: object, field: str) -> tuple[str, ...]:
    """Approval patterns from a comma-separated string or a list of strings; ``InputRefused``
    names ``field`` for anything else (a blank or overlong pattern, odd characters)."""
    if isinstance(value, str):
        items: list[object] = [p.strip() for p in value.split(",") if p.strip()]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        raise InputRefused(field, repr(value)[:80], "a list of tool name patterns such as code.*")
    if len(items) > MAX_PATTERNS:
        raise InputRefused(field, f"{len(items)} patterns", f"at most {MAX_PATTERNS} patterns")
    out: list[str] = []
    for item in items:
        if (
            not isinstance(item, str)
            or not item.strip()
            or len(item) > MAX_PATTERN_CHARS
            or not set(item.strip().lower()) <= _PATTERN_CHARS
        ):
            raise InputRefused(
                field,
                repr(item)[:80],
                "tool name patterns of letters, digits, . _ - and the wildcards * ? [ ]",
            )
        out.append(item.strip().lower())
    never = ungated(out)
    if never:
        raise InputRefused(
            field,
            ", ".join(never),
            "only patterns of tools that can wait for approval (a hand-off to an outside "
            "agent, agent.send, only stores its task and never waits: gate what the agent "
            "does where it runs)",
        )
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True, slots=True)
class Bound:
    """What a profile key may be: ``kind`` int, float, bool, str (one of ``choices``),
    or patterns (a list of tool-name patterns, or of ``[pattern, policy]`` pairs)."""

    kind: str
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        match self.kind:
            case "int":
                return f"an integer from {self.low:g} to {self.high:g}"
            case "float":
                return f"a number from {self.low:g} to {self.high:g}"
            case "bool":
                return "true or false"
            case "choice":
                return "one of " + ", ".join(self.choices)
            case "patterns":
                return f"a list of at most {MAX_PATTERNS} tool-name patterns"
        return f"at most {MAX_PATTERNS} [pattern, policy] pairs, policy one of " + ", ".join(
            RETENTION_POLICIES
        )

    def check(self, field: str, value: object) -> Any:
        """``value`` as the profile holds it; ``InputRefused`` naming ``field`` otherwise."""
        bad = InputRefused(field, _show(value), self.describe())
        match self.kind:
            case "int" | "float":
                allowed: tuple[type, ...] = (int,) if self.kind == "int" else (int, float)
                if isinstance(value, bool) or not isinstance(value, allowed):
                    raise bad
                number = float(value)  # type: ignore[arg-type]
                if number != number or not self.low <= number <= self.high:
                    raise bad
                return int(value) if self.kind == "int" else number  # type: ignore[call-overload]
            case "bool":
                if not isinstance(value, bool):
                    raise bad
                return value
            case "choice":
                if value not in self.choices:
                    raise bad
                return value
            case "patterns":
                if not isinstance(value, list | tuple):
                    raise bad
                return parse_patterns(value, field)
        if not isinstance(value, list | tuple | Mapping) or len(value) > MAX_PATTERNS:
            raise bad
        pairs = list(value.items()) if isinstance(value, Mapping) else list(value)
        out: list[tuple[str, str]] = []
        for pair in pairs:
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise bad
            pattern, policy = pair
            if not isinstance(pattern, str) or not pattern or policy not in RETENTION_POLICIES:
                raise bad
            out.append((pattern, policy))
        return tuple(out)


def _int(low: float, high: float) -> Bound:
    return Bound("int", low, high)


def _float(low: float, high: float) -> Bound:
    return Bound("float", low, high)


BOOL = Bound("bool")
POLICY = Bound("choice", choices=RETENTION_POLICIES)


@dataclass(frozen=True, slots=True)
class Profile:
    """A resolved profile: every limit and policy of a turn. See ``KEYS`` for the bounds."""

    name: str = DEFAULT_PROFILE
    extends: str = ""
    """The built-in or custom profile this one was made from ("" for a built-in one)."""
    base: str = DEFAULT_PROFILE
    """The built-in profile its chain of ``extends`` ends at."""
    # -- limits ---------------------------------------------------------------------------
    max_iterations: int = 15
    token_budget: int = 0
    """Tokens one turn may use, 0 for none."""
    max_tool_calls_per_decision: int = 5
    max_output_tokens: int = 4096
    wait_timeout_s: float = 600.0
    # -- context: compaction, TTL pruning, cache points, hiding ---------------------------
    context_policy: str = "cost"
    """Where and when view edits go: ``cost`` (where they are cheap, when they pay) or
    ``append`` (the smart layer off: each edit by its own rule, compaction at the ceiling)."""
    context_tokens: int = 200_000
    """The render budget compaction keeps the context under."""
    compaction_ratio: float = 0.9
    """Compaction runs when the context passes this share of ``context_tokens``."""
    keep_turns: int = 8
    summary_max_tokens: int = 800
    ttl_pruning: bool = True
    ttl_keep_turns: int = 10
    cache_point_offset_rounds: int = 4
    hide_max_tail_tokens: int = 2000
    # -- tool responses -------------------------------------------------------------------
    retention: bool = True
    tool_response_max_chars: int = 3600
    tool_response_max_tokens: int = 1200
    informative_policy: str = "keep_full"
    verbose_policy: str = "summarize_archive"
    redundant_policy: str = "drop"
    critical_policy: str = "keep_full"
    critical_tools: tuple[str, ...] = ("react.read", "react.plan")
    tool_policies: tuple[tuple[str, str], ...] = ()
    recent_results: int = 6
    # -- the context watchdog --------------------------------------------------------------
    watchdog: bool = True
    token_drift: int = 1800
    over_tooling: float = 0.6
    context_rot: float = 0.55
    repeated_reads: int = 3
    watchdog_floor_tokens: int = 17_000
    """A context at least this large may be compacted before the ceiling: when the watchdog
    asks, or at a turn boundary when the cost model says it pays (the original's summary
    trigger); below it a watchdog crossing is a notice only."""
    # -- memory ---------------------------------------------------------------------------
    memory_scope: str = "conversation"
    memory_hotset: int = 5
    # -- approvals ------------------------------------------------------------------------
    approve_tools: tuple[str, ...] = ()

    def as_table(self) -> dict[str, Any]:
        """The profile as a turn request's ``config["profile"]`` table: every key, over its
        built-in base, so that it re-runs with the same settings on any node (``name`` says
        what it was made from; a table's ``name`` is not read back)."""
        out: dict[str, Any] = {"name": self.name, "extends": self.base}
        for key in KEYS:
            value = getattr(self, key)
            if isinstance(value, tuple):
                value = [list(v) if isinstance(v, tuple) else v for v in value]
            out[key] = value
        return out

    def timeline_config(self, max_context_tokens: int) -> TimelineConfig:
        """The renderer's settings under this profile (the context capped by the node's)."""
        return TimelineConfig(
            max_tokens=min(self.context_tokens, max_context_tokens),
            compaction_ratio=self.compaction_ratio,
            # keep well under the trigger: a page or two of headroom, or the next round
            # compacts again (fast's 0.75 trigger once kept 0.70: one compaction a round)
            compaction_keep_ratio=min(0.7, self.compaction_ratio - 0.15),
            compaction_keep_turns=self.keep_turns,
            summary_max_tokens=self.summary_max_tokens,
            compaction_floor_tokens=max(1, self.watchdog_floor_tokens),  # 0 there: any size
            cache_point_offset_rounds=self.cache_point_offset_rounds,
            hide_max_tail_tokens=self.hide_max_tail_tokens,
            cache_ttl_seconds=_TIMELINE.cache_ttl_seconds if self.ttl_pruning else 0,
            keep_recent_turns=self.ttl_keep_turns,
            keep_recent_intact_turns=min(2, self.ttl_keep_turns),
            retention=self.retention,
            retention_max_chars=self.tool_response_max_chars,
            retention_max_tokens=self.tool_response_max_tokens,
            retention_informative=self.informative_policy,
            retention_verbose=self.verbose_policy,
            retention_redundant=self.redundant_policy,
            retention_critical=self.critical_policy,
            retention_critical_tools=self.critical_tools,
            retention_by_tool=self.tool_policies,
            retention_recent_results=self.recent_results,
            context_policy=self.context_policy,
        )


KEYS: Mapping[str, Bound] = {
    "max_iterations": _int(1, 1000),
    "token_budget": _int(0, 100_000_000),
    "max_tool_calls_per_decision": _int(1, 50),
    "max_output_tokens": _int(1, 128_000),
    "wait_timeout_s": _float(0.001, 86_400),
    "context_policy": Bound("choice", choices=CONTEXT_POLICIES),
    "context_tokens": _int(256, 2_000_000),
    "compaction_ratio": _float(0.3, 1.0),
    "keep_turns": _int(0, 1000),
    "summary_max_tokens": _int(32, 32_000),
    "ttl_pruning": BOOL,
    "ttl_keep_turns": _int(2, 1000),
    "cache_point_offset_rounds": _int(1, 100),
    "hide_max_tail_tokens": _int(0, 1_000_000),
    "retention": BOOL,
    "tool_response_max_chars": _int(100, 10_000_000),
    "tool_response_max_tokens": _int(25, 2_500_000),
    "informative_policy": POLICY,
    "verbose_policy": POLICY,
    "redundant_policy": POLICY,
    "critical_policy": POLICY,
    "critical_tools": Bound("patterns"),
    "tool_policies": Bound("pairs"),
    "recent_results": _int(1, 1000),
    "watchdog": BOOL,
    "token_drift": _int(1, 10_000_000),
    "over_tooling": _float(0.0, 1.0),
    "context_rot": _float(0.0, 1.0),
    "repeated_reads": _int(2, 1000),
    "watchdog_floor_tokens": _int(0, 2_000_000),
    "memory_scope": Bound("choice", choices=MEMORY_SCOPES),
    "memory_hotset": _int(0, 50),
    "approve_tools": Bound("patterns"),
}
"""Every key a profile table may set, and its bound."""

NODE_KEYS: Mapping[str, str] = {
    "max_iterations": "max_iterations",
    "token_budget": "token_budget",
    "max_output_tokens": "max_output_tokens",
    "wait_timeout_s": "wait_timeout_s",
    "context_tokens": "max_context_tokens",
}
"""Profile key -> the node setting that overrides it when the node changed it from its
default (the operator's value for every profile)."""

_BALANCED = Profile()
BALANCED = _BALANCED
"""The default profile (a module constant: dataclass defaults use it)."""
BUILTINS: Mapping[str, Profile] = {
    "fast": replace(
        _BALANCED,
        name="fast",
        base="fast",
        max_iterations=8,
        max_tool_calls_per_decision=3,
        max_output_tokens=2048,
        wait_timeout_s=300.0,
        context_tokens=64_000,
        compaction_ratio=0.75,
        keep_turns=6,
        summary_max_tokens=600,
        ttl_keep_turns=6,
        cache_point_offset_rounds=2,
        tool_response_max_chars=2400,
        tool_response_max_tokens=800,
        informative_policy="keep_structured",
        recent_results=4,
        token_drift=1200,
        over_tooling=0.7,
        context_rot=0.65,
        watchdog_floor_tokens=9_000,
        memory_hotset=3,
    ),
    "balanced": _BALANCED,
    "deep": replace(
        _BALANCED,
        name="deep",
        base="deep",
        max_iterations=25,
        max_tool_calls_per_decision=6,
        max_output_tokens=8192,
        wait_timeout_s=1200.0,
        compaction_ratio=0.85,
        keep_turns=12,
        summary_max_tokens=1200,
        ttl_keep_turns=14,
        hide_max_tail_tokens=3000,
        tool_response_max_chars=5400,
        tool_response_max_tokens=1800,
        recent_results=8,
        token_drift=2200,
        over_tooling=0.55,
        context_rot=0.5,
        repeated_reads=4,
        watchdog_floor_tokens=30_000,
        memory_scope="user",
        memory_hotset=8,
    ),
    "research": replace(
        _BALANCED,
        name="research",
        base="research",
        max_iterations=40,
        max_tool_calls_per_decision=8,
        max_output_tokens=8192,
        wait_timeout_s=3600.0,
        compaction_ratio=0.85,
        keep_turns=20,
        summary_max_tokens=1600,
        ttl_keep_turns=20,
        cache_point_offset_rounds=6,
        hide_max_tail_tokens=4000,
        tool_response_max_chars=7200,
        tool_response_max_tokens=2200,
        recent_results=10,
        token_drift=2600,
        over_tooling=0.5,
        context_rot=0.45,
        repeated_reads=4,
        watchdog_floor_tokens=42_000,
        memory_scope="user",
        memory_hotset=10,
    ),
}


def check_table(table: object, where: str = "profile") -> dict[str, Any]:
    """A profile table's keys, each checked (``extends`` and ``name`` kept as given)."""
    if not isinstance(table, Mapping):
        raise InputRefused(where, _show(table), "a profile name or a table of profile keys")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key == "extends":
            if not isinstance(value, str) or not value:
                raise InputRefused(f"{where}.extends", _show(value), "a profile name")
            out[key] = value
        elif key == "name":
            continue  # a recorded profile's own name: the re-run is named after its base
        elif isinstance(key, str) and key in KEYS:
            out[key] = KEYS[key].check(f"{where}.{key}", value)
        else:
            known = ", ".join(["extends", *KEYS])
            raise InputRefused(f"{where}.{key}", "not a profile key", f"one of {known}")
    return out


def check_custom(profiles: Mapping[str, object]) -> dict[str, dict[str, Any]]:
    """Custom profiles (``[profiles.NAME]`` tables), each checked and resolvable."""
    out: dict[str, dict[str, Any]] = {}
    for name, table in profiles.items():
        if name in BUILTIN:
            raise InputRefused(
                f"profiles.{name}", "a built-in name", "a new name that extends a built-in one"
            )
        out[name] = check_table(table, f"profiles.{name}")
    for name in out:  # an unknown base or a cycle is refused now, not at a turn
        resolve(name, out, where=f"profiles.{name}")
    return out


def resolve(
    choice: object,
    custom: Mapping[str, Mapping[str, Any]] | None = None,
    node: object | None = None,
    default: str = DEFAULT_PROFILE,
    where: str = "profile",
) -> Profile:
    """The profile ``choice`` names (None: ``default``) or describes (a table with
    ``extends``), over the custom profiles and the node's settings (see the module)."""
    custom = custom or {}
    if choice is None:
        choice = default
    if isinstance(choice, str):
        chain, own = _chain(choice, custom, where), None
    else:
        own = check_table(choice, where)
        chain = _chain(own.get("extends", default), custom, f"{where}.extends")
    root = BUILTINS[chain[0]]
    values: dict[str, Any] = {}
    if node is not None:
        defaults = {f.name: f.default for f in fields(node)}  # type: ignore[arg-type]
        for key, setting in NODE_KEYS.items():
            value = getattr(node, setting)
            if value != defaults[setting]:
                values[key] = KEYS[key].check(f"node setting {setting}", value)
    approvals = list(root.approve_tools)
    for name in chain[1:]:
        _layer(values, custom[name], approvals)
    name = chain[-1]
    if own is not None:
        _layer(values, own, approvals)
        name = "custom"
    values["approve_tools"] = tuple(dict.fromkeys(approvals))
    if own is not None:
        extends = chain[-1]
    else:
        extends = chain[-2] if len(chain) > 1 else ""
    return replace(root, **values, name=name, extends=extends, base=root.name)


def _layer(values: dict[str, Any], table: Mapping[str, Any], approvals: list[str]) -> None:
    for key, value in table.items():
        if key == "extends":
            continue
        if key == "approve_tools":
            approvals.extend(value)
        else:
            values[key] = value


def _chain(name: str, custom: Mapping[str, Mapping[str, Any]], where: str) -> list[str]:
    """``name``'s chain of bases, the built-in one first."""
    chain: list[str] = []
    current = name
    while current not in BUILTIN:
        if current in chain:
            raise InputRefused(where, _show(name), "a chain of profiles without a cycle")
        if current not in custom:
            known = ", ".join([*BUILTIN, *custom])
            raise InputRefused(where, _show(current), f"a known profile: {known}")
        if len(chain) >= MAX_EXTENDS:
            raise InputRefused(where, _show(name), f"at most {MAX_EXTENDS} profiles deep")
        chain.append(current)
        current = str(custom[current].get("extends", DEFAULT_PROFILE))
    chain.append(current)
    return chain[::-1]


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
