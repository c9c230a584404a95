"""A turn's settings: its ``config`` resolved once against the node's defaults and its
profile, and the per-turn limits the state machine checks.

``TurnSettings.parse`` is the one place a turn request's ``config`` is read; a
``SettingsMemo`` keeps the settings of the configs a node saw lately. Nothing here does
I/O or reads a clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeVar

from actline.timeline import TimelineConfig

from .checks import check_config, check_defaults
from .profiles import BALANCED, Profile, parse_patterns, resolve

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-turn guards. The wait timer itself is an effect.

    ``max_iterations`` bounds model calls; ``token_budget`` (None: unbounded) bounds
    the tokens reported with model events. Both are checked before every model call,
    the first included, so values below 1 exhaust the budget at once.
    """

    max_iterations: int = 15
    token_budget: int | None = None
    max_consecutive_refusals: int = 3
    max_repair_rounds: int = 3
    """Model calls a turn makes after replies that broke the decision protocol, in a row;
    the next broken reply ends it with a best-effort answer (``protocol_failed``)."""
    wait_timeout_s: float = 600.0


CONFIG_KEY = "approve_tools"
"""The turn config key that adds approval patterns."""


def split_config(config: Mapping[Any, Any]) -> tuple[dict[Any, Any], tuple[str, ...]]:
    """A turn config without its ``approve_tools`` and the patterns that key adds."""
    rest = dict(config)
    if CONFIG_KEY not in rest:
        return rest, ()
    return rest, parse_patterns(rest.pop(CONFIG_KEY), f"config.{CONFIG_KEY}")


MAX_CALLS = 5
"""Tool calls one decision may make unless the turn's config says otherwise."""


MAX_REFUSALS = 3
"""Refused decisions in a row that fail a turn unless its config says otherwise."""


MAX_REPAIRS = 3
"""Repair rounds after broken replies in a row unless a turn's config says otherwise."""


class TurnDefaults(Protocol):
    """The node settings a turn's config falls back to (``NodeSettings`` is one)."""

    @property
    def max_iterations(self) -> int: ...
    @property
    def token_budget(self) -> int: ...
    @property
    def wait_timeout_s(self) -> float: ...
    @property
    def followup_grace_s(self) -> float: ...
    @property
    def tool_timeout_s(self) -> float: ...
    @property
    def model(self) -> str: ...
    @property
    def profile(self) -> str: ...
    @property
    def profiles(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def approve_tools(self) -> str: ...
    @property
    def max_context_tokens(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TurnSettings:
    """Everything a turn's ``config`` may set, resolved against the node's defaults."""

    limits: Limits
    timeline: TimelineConfig
    """The renderer's settings under ``profile``, the context capped by the node's (made
    with the settings, so once per distinct config: ``SettingsMemo``)."""
    max_calls: int = MAX_CALLS
    grace_s: float = 0.75
    model: str = "extractive"
    tool_timeout_s: float = 60.0
    profile: Profile = BALANCED
    """The turn's resolved profile, the config's top-level limits included."""
    approval_tools: tuple[str, ...] = ()
    """Tool name patterns whose calls wait for an approval (``actline.actors.turn.approvals``): the
    node's, the profile's and the config's ``approve_tools``."""

    @property
    def memory_scope(self) -> Literal["conversation", "user"]:
        """Where memory facts live: this conversation, or every conversation of the turn's
        user (the profile's ``memory_scope``)."""
        return "user" if self.profile.memory_scope == "user" else "conversation"

    @property
    def memory_hotset(self) -> int:
        """How many memory facts ANNOUNCE shows (the profile's ``memory_hotset``)."""
        return self.profile.memory_hotset

    @classmethod
    def parse(cls, config: Mapping[Any, Any], defaults: TurnDefaults) -> TurnSettings:
        """The settings of a turn: ``config``'s values, else its profile's
        (``actline.actors.configuration.profiles``: ``config["profile"]``, else the node's), else
        the node's (``max_tokens`` 0: no token budget). Every value is of its type, finite and
        within its bound (``actline.actors.configuration.checks.CONFIG``, docs/input-checks.md);
        ``InputRefused`` (a
        ``SettingsError``) names the first key that is not, an unknown key or profile, or a
        default out of bounds. ``approve_tools`` (in the config or its profile) adds to the
        node's approval patterns, never removes one."""
        config, added = split_config(config)
        required = parse_patterns(defaults.approve_tools, "ACTLINE_APPROVE_TOOLS")
        given = check_config(config)
        check_defaults(defaults)
        profile = resolve(
            given.profile, defaults.profiles, defaults, defaults.profile, where="config.profile"
        )
        profile = replace(
            profile,
            max_iterations=_pick(given.max_iterations, profile.max_iterations),
            token_budget=_pick(given.max_tokens, profile.token_budget),
            max_tool_calls_per_decision=_pick(
                given.max_tool_calls_per_decision, profile.max_tool_calls_per_decision
            ),
            wait_timeout_s=float(_pick(given.wait_timeout_s, profile.wait_timeout_s)),
            approve_tools=tuple(dict.fromkeys(required + profile.approve_tools + added)),
        )
        budget = profile.token_budget
        limits = Limits(
            max_iterations=profile.max_iterations,
            token_budget=budget if budget > 0 else None,
            max_consecutive_refusals=_pick(given.max_consecutive_refusals, MAX_REFUSALS),
            max_repair_rounds=_pick(given.max_repair_rounds, MAX_REPAIRS),
            wait_timeout_s=profile.wait_timeout_s,
        )
        return cls(
            limits=limits,
            timeline=profile.timeline_config(defaults.max_context_tokens),
            max_calls=profile.max_tool_calls_per_decision,
            grace_s=float(_pick(given.followup_grace_s, defaults.followup_grace_s)),
            model=_pick(given.model, defaults.model),
            tool_timeout_s=float(_pick(given.tool_timeout_s, defaults.tool_timeout_s)),
            profile=profile,
            approval_tools=profile.approve_tools,
        )


class SettingsMemo:
    """The settings of the configs a node saw lately: a turn's settings depend only on its
    config and the node's defaults, so each distinct config is parsed once, not per turn.
    A config that is refused, or is not plain JSON, is parsed (and refused) every time."""

    SIZE = 256

    def __init__(self, defaults: TurnDefaults) -> None:
        self.defaults = defaults
        self._memo: dict[str, TurnSettings] = {}

    def parse(self, config: Mapping[Any, Any]) -> TurnSettings:
        try:
            key = json.dumps(config, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError):
            return TurnSettings.parse(config, self.defaults)
        settings = self._memo.get(key)
        if settings is None:
            settings = TurnSettings.parse(config, self.defaults)
            if len(self._memo) >= self.SIZE:
                del self._memo[next(iter(self._memo))]  # the oldest
            self._memo[key] = settings
        return settings


def _pick(given: T | None, default: T) -> T:
    return default if given is None else given
