"""Runtime profiles: the built-in table, layering (custom extends, node settings, per-turn
tables and keys), refusals naming the key, TOML and the CLI, and the resolved profile read
back from a stored turn and re-run with the same settings."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from actline.actors import NodeSettings
from actline.actors.client.client import Client
from actline.actors.configuration.profiles import (
    BUILTIN,
    BUILTINS,
    KEYS,
    Profile,
    check_custom,
    resolve,
)
from actline.actors.configuration.turn_settings import SettingsMemo, TurnSettings
from actline.actors.errors import InputRefused, SettingsError
from actline.actors.turn.approvals import needs_approval
from actline.bus import Bus
from actline.cli.main import main
from actline.config import Config, ConfigError
from actline.storage import Store
from actline.timeline.blocks import TURN_HEADER
from tests.actors.harness import Scripted, run_turn, say, settings, start_node


def same_settings(a: Profile, b: Profile) -> bool:
    return all(getattr(a, k) == getattr(b, k) for k in KEYS)


# --- the table --------------------------------------------------------------------------------


def test_the_built_ins_carry_the_original_limits_and_thresholds() -> None:
    """The built-in profiles' tool-response limits, watchdog thresholds and turns kept."""
    table = {
        "fast": (2400, 800, 1200, 0.7, 0.65, 6, 9000),
        "balanced": (3600, 1200, 1800, 0.6, 0.55, 8, 17000),
        "deep": (5400, 1800, 2200, 0.55, 0.5, 12, 30000),
        "research": (7200, 2200, 2600, 0.5, 0.45, 20, 42000),
    }
    assert tuple(BUILTINS) == BUILTIN
    for name, values in table.items():
        p = BUILTINS[name]
        got = (p.tool_response_max_chars, p.tool_response_max_tokens, p.token_drift)
        got += (p.over_tooling, p.context_rot, p.keep_turns, p.watchdog_floor_tokens)
        assert got == values, name
    # balanced is today's node defaults: a node that sets nothing behaves as before
    node = NodeSettings()
    balanced = BUILTINS["balanced"]
    assert balanced.max_iterations == node.max_iterations
    assert balanced.wait_timeout_s == node.wait_timeout_s
    assert balanced.context_tokens == node.max_context_tokens
    assert balanced.max_output_tokens == node.max_output_tokens
    assert resolve(None) == balanced
    limits = [BUILTINS[n].max_iterations for n in BUILTIN]
    assert limits == sorted(limits) and len(set(limits)) == 4


# --- layering ---------------------------------------------------------------------------------


def test_custom_profiles_extend_a_built_in_and_each_other() -> None:
    custom = check_custom(
        {
            "quick": {"extends": "fast", "max_iterations": 9, "approve_tools": ["code.*"]},
            "quicker": {"extends": "quick", "max_tool_calls_per_decision": 1},
            "plain": {"context_rot": 0.4},  # extends balanced
        }
    )
    quicker = resolve("quicker", custom)
    assert quicker.name == "quicker" and quicker.extends == "quick"
    assert quicker.max_iterations == 9 and quicker.max_tool_calls_per_decision == 1
    assert quicker.context_tokens == BUILTINS["fast"].context_tokens
    assert quicker.approve_tools == ("code.*",)
    plain = resolve("plain", custom)
    assert plain.extends == "balanced" and plain.context_rot == 0.4
    assert plain.keep_turns == BUILTINS["balanced"].keep_turns


def test_a_turn_table_layers_over_its_base_and_adds_approvals_never_removes_them() -> None:
    custom = check_custom({"guarded": {"extends": "deep", "approve_tools": ["code.exec_python"]}})
    turn = resolve({"extends": "guarded", "max_iterations": 3, "approve_tools": ["http.*"]}, custom)
    assert turn.name == "custom" and turn.extends == "guarded" and turn.max_iterations == 3
    assert turn.approve_tools == ("code.exec_python", "http.*")
    assert needs_approval("http.fetch", turn.approve_tools)
    assert needs_approval("code.exec_python", turn.approve_tools)
    assert not needs_approval("react.read", turn.approve_tools)
    emptied = resolve({"extends": "guarded", "approve_tools": []}, custom)
    assert emptied.approve_tools == ("code.exec_python",)


def test_node_settings_changed_from_their_defaults_are_the_operators_values_for_every_profile() -> (
    None
):
    node = NodeSettings(max_iterations=30, max_context_tokens=50_000)
    fast = resolve("fast", node=node)
    assert fast.max_iterations == 30 and fast.context_tokens == 50_000
    assert fast.max_tool_calls_per_decision == BUILTINS["fast"].max_tool_calls_per_decision
    # a custom profile (or a turn) still sets its own value over the node's
    custom = check_custom({"short": {"extends": "fast", "max_iterations": 4}})
    assert resolve("short", custom, node).max_iterations == 4


def test_turn_settings_take_the_profile_then_the_configs_top_level_keys() -> None:
    node = NodeSettings(profile="deep")
    default = TurnSettings.parse({}, node)
    assert default.profile.name == "deep" and default.limits.max_iterations == 25
    assert default.max_calls == 6 and default.limits.wait_timeout_s == 1200.0
    table = {"extends": "fast", "max_tool_calls_per_decision": 9}
    turn = TurnSettings.parse({"profile": table, "max_iterations": 2, "max_tokens": 5000}, node)
    assert turn.max_calls == 9 and turn.limits.max_iterations == 2
    assert turn.limits.token_budget == 5000 and turn.profile.token_budget == 5000
    assert turn.profile.max_iterations == 2  # what is recorded is what ran
    assert turn.profile.timeline_config(200_000).max_tokens == BUILTINS["fast"].context_tokens


def test_a_turns_renderer_settings_are_made_once_per_config_and_equal_to_made_afresh() -> None:
    node = NodeSettings(
        max_context_tokens=100_000,
        profiles={"mine": {"extends": "deep", "tool_policies": [["a.*", "drop"]]}},
    )
    memo = SettingsMemo(node)
    turn = memo.parse({"profile": "mine"})
    first = turn.timeline
    assert memo.parse({"profile": "mine"}).timeline is first  # one per distinct config
    assert first == turn.profile.timeline_config(100_000)
    assert first.retention_by_tool == (("a.*", "drop"),)
    assert first.max_tokens == min(turn.profile.context_tokens, 100_000)  # the node's cap
    other = SettingsMemo(replace(node, max_context_tokens=50_000)).parse({"profile": "mine"})
    assert other.timeline.max_tokens == 50_000  # another cap, its own


def test_approvals_join_from_the_node_the_profile_and_the_turn() -> None:
    node = NodeSettings(
        approve_tools="code.*",
        profile="guarded",
        profiles={"guarded": {"extends": "fast", "approve_tools": ["http.fetch"]}},
    )
    turn = TurnSettings.parse({"approve_tools": ["files.write"]}, node)
    assert turn.approval_tools == ("code.*", "http.fetch", "files.write")
    assert turn.profile.approve_tools == turn.approval_tools  # recorded as it ran
    table = {"extends": "balanced", "approve_tools": []}
    assert TurnSettings.parse({"profile": table}, node).approval_tools == ("code.*",)


def test_the_recorded_table_re_runs_with_the_same_settings() -> None:
    custom = check_custom({"quick": {"extends": "fast", "max_iterations": 9, "recent_results": 2}})
    for choice in [*BUILTIN, "quick", {"extends": "quick", "context_rot": 0.3}]:
        profile = resolve(choice, custom)
        again = resolve(json.loads(json.dumps(profile.as_table())))  # no custom profiles here
        assert same_settings(again, profile), choice


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "field", "limit"),
    [
        ("nope", "config.profile", "a known profile: fast, balanced, deep, research"),
        ({"extends": "nope"}, "config.profile.extends", "a known profile"),
        ({"extends": 3}, "config.profile.extends", "a profile name"),
        ({"bogus": 1}, "config.profile.bogus", "one of extends, max_iterations"),
        ({"context_rot": 1.5}, "config.profile.context_rot", "a number from 0 to 1"),
        ({"context_rot": float("nan")}, "config.profile.context_rot", "a number from 0 to 1"),
        ({"max_iterations": 2.5}, "config.profile.max_iterations", "an integer from 1 to 1000"),
        ({"max_iterations": True}, "config.profile.max_iterations", "an integer"),
        ({"watchdog": "yes"}, "config.profile.watchdog", "true or false"),
        ({"verbose_policy": "shred"}, "config.profile.verbose_policy", "one of keep_full"),
        ({"memory_scope": "world"}, "config.profile.memory_scope", "conversation, user"),
        ({"approve_tools": "code.*"}, "config.profile.approve_tools", "a list of at most"),
        ({"tool_policies": [["x", "lose"]]}, "config.profile.tool_policies", "policy one of"),
        ([1, 2], "config.profile", "a profile name or a table"),
    ],
)
def test_a_bad_profile_is_refused_naming_the_key(choice: Any, field: str, limit: str) -> None:
    with pytest.raises(InputRefused) as info:
        TurnSettings.parse({"profile": choice}, NodeSettings())
    assert info.value.field == field and limit in info.value.limit
    assert str(info.value).startswith(f"{field} is ")


def test_custom_profiles_are_checked_when_the_settings_are_made() -> None:
    with pytest.raises(SettingsError, match=r"profiles\.fast is a built-in name"):
        NodeSettings(profiles={"fast": {"max_iterations": 2}})
    with pytest.raises(SettingsError, match=r"profiles\.a.*a chain of profiles without a cycle"):
        NodeSettings(profiles={"a": {"extends": "b"}, "b": {"extends": "a"}})
    with pytest.raises(SettingsError, match=r"profiles\.x\.keep_turns"):
        NodeSettings(profiles={"x": {"keep_turns": -1}})
    with pytest.raises(SettingsError, match="ACTLINE_PROFILE is 'mine'"):
        NodeSettings(profile="mine")
    assert NodeSettings(profile="mine", profiles={"mine": {}}).profile == "mine"


# --- TOML and the CLI -------------------------------------------------------------------------


def test_profiles_from_the_toml_file_and_the_cli_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # the table side by side
    toml = tmp_path / "actline.toml"
    toml.write_text(
        'profile = "careful"\n[profiles.careful]\nextends = "deep"\nmax_iterations = 12\n'
        'approve_tools = ["code.exec_python"]\n',
        encoding="utf-8",
    )
    config = Config.load(toml, env={})
    assert config.node.profile == "careful"
    assert resolve("careful", config.node.profiles).max_iterations == 12
    assert main(["--config", str(toml), "profiles", "careful", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["extends"] == "deep" and table["max_iterations"] == 12
    assert table["approve_tools"] == ["code.exec_python"] and set(table) == {
        "name",
        "extends",
        *KEYS,
    }
    assert table["name"] == "careful"
    assert main(["--config", str(toml), "profiles"]) == 0
    out = capsys.readouterr().out
    for name in (*BUILTIN, "careful"):
        assert name in out
    assert "(default)" in out and "context_rot" in out
    toml.write_text('[profiles.bad]\nextends = "fast"\ncontext_rot = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"actline.toml: profiles\.bad\.context_rot is 3"):
        Config.load(toml, env={})
    assert main(["--config", str(toml), "profiles"]) == 2
    assert "profiles.bad.context_rot" in capsys.readouterr().err


# --- over NATS and LMDB -----------------------------------------------------------------------


def stored_profile(home: Path, cid: str, turn_id: str) -> dict[str, Any]:
    with Store(home) as store:
        blocks = store.load(cid).timeline.blocks
    [header] = [b for b in blocks if b.type == TURN_HEADER and b.turn_id == turn_id]
    profile: dict[str, Any] = header.meta["profile"]
    return profile


async def test_the_resolved_profile_is_read_back_from_the_stored_turn_and_re_runs(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    answer = say("Done.", answer="The Team plan is the middle tier.")
    model = Scripted({"p1": [answer], "p2": [answer]})
    node = await start_node(bus, tmp_path, model)
    try:
        config = {"profile": {"extends": "fast", "context_rot": 0.3}, "max_iterations": 5}
        first = await client.submit("Tiers?", conversation_id="p1", turn_id="p1-t1", config=config)
        await first.wait(30)
        conversation = node.conversations["p1"]
        renderer = conversation.renderer.config  # the profile's context and retention
        assert renderer.max_tokens == BUILTINS["fast"].context_tokens
        assert renderer.retention_informative == "keep_structured"
        assert renderer.retention_recent_results == 4 and renderer.retention_max_tokens == 800
    finally:
        await node.stop()
    recorded = stored_profile(tmp_path, "p1", "p1-t1")
    assert recorded["extends"] == "fast" and recorded["context_rot"] == 0.3
    assert recorded["max_iterations"] == 5
    node_settings = settings(tmp_path)  # the node's wait timeout (30 s) is over every profile
    assert recorded["wait_timeout_s"] == node_settings.wait_timeout_s == 30.0
    expected = replace(resolve(config["profile"], node=node_settings), max_iterations=5)
    assert same_settings(resolve(recorded), expected)
    node = await start_node(bus, tmp_path, model)  # the same store: re-run the settings
    try:
        again = await run_turn(client, "Tiers?", "p2", config={"profile": recorded})
        assert again.result.result().status == "completed"
    finally:
        await node.stop()
    rerun = stored_profile(tmp_path, "p2", again.turn_id)
    assert {k: v for k, v in rerun.items() if k != "name"} == {
        k: v for k, v in recorded.items() if k != "name"
    }
    assert [f.name for f in fields(Profile) if f.name not in ("name", "extends", "base")] == list(
        KEYS
    )
