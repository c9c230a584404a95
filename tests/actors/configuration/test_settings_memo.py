"""A node parses each distinct turn config once
(``actline.actors.configuration.turn_settings.SettingsMemo``)."""

from __future__ import annotations

import math

import pytest

from actline.actors import NodeSettings
from actline.actors.configuration.turn_settings import SettingsMemo, TurnSettings
from actline.actors.errors import InputRefused


def test_a_config_seen_before_is_not_parsed_again() -> None:
    memo = SettingsMemo(NodeSettings())
    first = memo.parse({"max_iterations": 4, "profile": "fast"})
    assert first == TurnSettings.parse({"max_iterations": 4, "profile": "fast"}, NodeSettings())
    again = memo.parse({"profile": "fast", "max_iterations": 4})  # the same config, reordered
    assert again is first  # a parse makes a new object
    whole = memo.parse({"wait_timeout_s": 30, "profile": "fast"})
    other = memo.parse({"wait_timeout_s": 30.0, "profile": "fast"})  # a float: another config
    assert other == whole and other is not whole
    assert memo.parse({}) == TurnSettings.parse({}, NodeSettings())
    assert len(memo._memo) == 4


def test_a_refused_config_is_refused_every_time_and_not_kept() -> None:
    memo = SettingsMemo(NodeSettings())
    for _ in range(2):
        with pytest.raises(InputRefused) as refused:
            memo.parse({"max_iterations": -1})
        assert refused.value.field == "config.max_iterations"
    with pytest.raises(InputRefused):  # not JSON (NaN): parsed, and refused, each time
        memo.parse({"wait_timeout_s": math.nan})
    assert not memo._memo


def test_the_memo_keeps_the_newest_configs_only() -> None:
    memo = SettingsMemo(NodeSettings())
    configs = [{"wait_timeout_s": 10 + n} for n in range(SettingsMemo.SIZE + 5)]
    kept = [memo.parse(c) for c in configs]
    assert len(memo._memo) == SettingsMemo.SIZE
    assert memo.parse(configs[-1]) is kept[-1]  # the newest is still there
    assert memo.parse(configs[0]) is not kept[0]  # the oldest was dropped, parsed again


def test_a_node_parses_with_its_own_defaults() -> None:
    """``Services.turn_settings`` keeps one memo per defaults object: a node whose
    settings are replaced parses against the new ones."""
    from actline.actors.services.shared import Services

    slow = NodeSettings(wait_timeout_s=30.0)
    services = Services.__new__(Services)
    services.settings = slow
    services._settings = None
    assert services.turn_settings({}).limits.wait_timeout_s == 30.0
    services.settings = NodeSettings(wait_timeout_s=45.0)
    assert services.turn_settings({}).limits.wait_timeout_s == 45.0
