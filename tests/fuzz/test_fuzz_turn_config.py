"""Fuzzing a turn's ``config`` (``actors.policy.TurnSettings.parse``): dicts of known and
unknown keys whose values are floats (inf, nan, -0.0, huge), ints of any size, bools,
strings, None and nested containers.

Property: ``parse`` either returns settings whose every numeric field is finite and within
its bound (``actline.actors.configuration.checks.CONFIG``, docs/input-checks.md), each given
value taken as given, or raises a ``SettingsError`` naming a ``config.<key>`` that is
unknown or out of its bound; which of the two happens is decided independently here from
the bounds.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from actline.actors.configuration.checks import CONFIG, Name, Number, ProfileChoice
from actline.actors.configuration.profiles import BUILTIN, KEYS
from actline.actors.configuration.settings import NodeSettings
from actline.actors.configuration.turn_settings import TurnSettings
from actline.actors.errors import SettingsError

from .tally import EXAMPLES, TALLY, fuzz_settings

KIND = "turn.config"
CONFIGS_PER_EXAMPLE = 20
NODES = [
    NodeSettings(),
    NodeSettings(token_budget=1000, wait_timeout_s=0.5, followup_grace_s=0.0, model="m"),
]

FIELDS: Mapping[str, str] = {
    "limits.max_iterations": "max_iterations",
    "limits.token_budget": "max_tokens",
    "limits.max_consecutive_refusals": "max_consecutive_refusals",
    "limits.max_repair_rounds": "max_repair_rounds",
    "limits.wait_timeout_s": "wait_timeout_s",
    "max_calls": "max_tool_calls_per_decision",
    "grace_s": "followup_grace_s",
    "tool_timeout_s": "tool_timeout_s",
    "model": "model",
}
"""Each field of ``TurnSettings`` and the config key that sets it."""

EDGE_VALUES: list[Any] = [
    math.inf, -math.inf, math.nan, -0.0, 0.0, 0, 1, -1, 0.5, 1e-300, 5e-324, 1e308, -1e308,
    2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**30, -(10**30), 86_400, 86_400.0000001,
    3_600, 3600.5, 60, 60.0, 60.000001, 50, 51, 1000, 1001, 100_000_000, 100_000_001,
    True, False, None, "", " ", "600", "inf", "nan", "1e999", "m" * 128, "m" * 129,
    [], {}, [600], {"value": 600}, b"600", "fast", "research", "nope", {"extends": "deep"},
    {"extends": "nope"}, {"context_rot": 0.5}, {"context_rot": 2}, {"approve_tools": ["x*"]},
    {"tool_policies": [["code.*", "drop"]]}, {"tool_policies": [["code.*", "lose"]]},
]  # fmt: skip

values: st.SearchStrategy[Any] = st.one_of(
    st.floats(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.booleans(),
    st.none(),
    st.text(max_size=140),
    st.sampled_from(EDGE_VALUES),
    st.recursive(
        st.none() | st.floats() | st.integers() | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
        max_leaves=5,
    ),
)
keys: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(sorted(CONFIG)),
    st.sampled_from(sorted(CONFIG)).map(str.upper),
    st.text(max_size=50),
    st.integers(),
    st.none(),
)


def _in_bound(bound: Number | Name | ProfileChoice, value: Any) -> bool:
    """Whether ``value`` is acceptable under ``bound``, as docs/input-checks.md states it."""
    if isinstance(bound, ProfileChoice):  # a built-in's name, or a table of known keys
        if isinstance(value, str):
            return value in BUILTIN
        return isinstance(value, dict) and all(
            (k == "extends" and v in BUILTIN) or (k in KEYS and _profile_value(k, v))
            for k, v in value.items()
        )
    if isinstance(bound, Name):
        return isinstance(value, str) and bool(value.strip()) and len(value) <= bound.max_chars
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if bound.integer and not isinstance(value, int):
        return False
    if not math.isfinite(value):
        return False
    low_ok = value > bound.low if bound.above else value >= bound.low
    return low_ok and value <= bound.high


def _profile_value(key: str, value: Any) -> bool:
    bound = KEYS[key]
    if bound.kind in ("int", "float"):
        number = Number(bound.kind == "int", bound.low, bound.high)
        return _in_bound(number, value)
    if bound.kind == "bool":
        return isinstance(value, bool)
    if bound.kind == "choice":
        return value in bound.choices
    if not isinstance(value, list) or len(value) > 64:
        return False
    if bound.kind == "patterns":
        return all(isinstance(p, str) and 0 < len(p) <= 128 for p in value)
    return all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and p[0] != ""
        and p[1] in ("keep_full", "keep_structured", "summarize_archive", "drop")
        for p in value
    )  # fmt: skip


def _names(named: str, key: object) -> bool:
    """Whether a refusal's ``config.<named>`` names ``key``: verbatim, or for a long key
    its first 40 characters (a key that is not a string is described by its type)."""
    if not isinstance(key, str):
        return True
    return named == key or named.startswith(repr(key[:40]))


def _field(settings: TurnSettings, path: str) -> Any:
    value: Any = settings
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _numbers(obj: object, prefix: str = "") -> dict[str, Any]:
    """Every int or float field of a settings dataclass, nested ones by dotted name."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            out |= _numbers(value, f"{prefix}{f.name}.")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}{f.name}"] = value
    return out


def _check(config: dict[Any, Any], node: NodeSettings) -> None:
    """The property, for one config."""
    acceptable = all(
        isinstance(k, str) and k in CONFIG and _in_bound(CONFIG[k], v) for k, v in config.items()
    )
    try:
        settings = TALLY.run(KIND, TurnSettings.parse, config, node)
    except SettingsError as exc:
        assert not acceptable, f"refused an acceptable config {config!r}: {exc}"
        assert exc.name.startswith("config."), exc.name
        named = exc.name.removeprefix("config.")
        named = "profile" if named.startswith("profile.") else named
        offending = [
            k
            for k, v in config.items()
            if not (isinstance(k, str) and k in CONFIG and _in_bound(CONFIG[k], v))
        ]
        assert any(_names(named, k) for k in offending), f"{exc.name} names no bad key"
        return
    assert acceptable, f"accepted {config!r} as {settings!r}"
    for name, value in _numbers(settings).items():
        assert math.isfinite(value), (name, value, config)
        if name.startswith("profile."):  # within its profile bound
            key = name.removeprefix("profile.")
            assert _profile_value(key, value), (name, value, config)
            continue
        if name.startswith("timeline."):  # the profile's, capped by the node: checked below
            continue
        assert name in FIELDS, f"{name} has no bound in this test"
        key = FIELDS[name]
        assert _in_bound(CONFIG[key], value), (name, value, config)
    if settings.limits.token_budget is not None:
        assert settings.limits.token_budget > 0, config
    assert settings.timeline == settings.profile.timeline_config(node.max_context_tokens), config
    for name, key in FIELDS.items():
        if key in config:
            given_value = config[key]
            expected = None if key == "max_tokens" and given_value == 0 else given_value
            assert _field(settings, name) == expected, (name, config)


@fuzz_settings(max(1, EXAMPLES // CONFIGS_PER_EXAMPLE))
@given(
    pool=st.lists(st.tuples(keys, values), min_size=1, max_size=12),
    rnd=st.randoms(use_true_random=False),
)
def test_any_config_gives_bounded_settings_or_a_refusal_naming_the_key(
    pool: list[tuple[Any, Any]], rnd: random.Random
) -> None:
    for _ in range(CONFIGS_PER_EXAMPLE):
        config: dict[Any, Any] = {}
        for _ in range(rnd.randint(0, 6)):
            key, value = rnd.choice(pool)
            if rnd.random() < 0.5:
                key = rnd.choice(sorted(CONFIG))
            if rnd.random() < 0.3:
                value = rnd.choice(EDGE_VALUES)
            config[key] = value
        _check(config, rnd.choice(NODES))


def test_every_numeric_setting_has_a_finite_bound() -> None:
    for key, bound in CONFIG.items():
        if isinstance(bound, Number):
            assert math.isfinite(bound.low) and math.isfinite(bound.high), key
    for key, profile_bound in KEYS.items():
        assert math.isfinite(profile_bound.low) and math.isfinite(profile_bound.high), key
    assert {*FIELDS.values(), "profile"} == set(CONFIG)
