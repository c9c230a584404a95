"""The context watchdog: its signals (pure), and scripted turns over a real nats-server that
drive each signal over its threshold — a notice to the model, and an ask for a compaction
that the context policy weighs at the next turn boundary (never on token drift alone, never
in the middle of the turn) — and one that stays under."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack

from actline.actors.client.client import Client
from actline.actors.configuration.profiles import BUILTINS, resolve
from actline.actors.node.node import Node
from actline.actors.tracing import sinks as trace_sinks
from actline.actors.turn import events as ev
from actline.actors.turn.watchdog import (
    COOLDOWN_ROUNDS,
    WATCHDOG,
    ContextStats,
    Verdict,
    Watchdog,
)
from actline.bus import Bus
from actline.messages import ReActProgress
from actline.timeline import Block
from actline.timeline.blocks import NOTE, NOTICE, SUMMARY, TOOL_RESULT, TURN_HEADER
from tests.actors.harness import Scripted, run_turn, say, start_node
from tests.waiting import until

DOC = "ks:pricing/tiers.md"
DOCS = [
    "ks:pricing/billing.md",
    "ks:support/faq.md",
    "ks:support/sla.md",
    "ks:overview/architecture.md",
    "ks:config/reference.md",
    "ks:support/troubleshooting.md",
]


def read(*paths: str) -> tuple[str, dict[str, Any]]:
    return ("react.read", {"paths": list(paths)})


def decided(*calls: tuple[str, dict[str, Any]]) -> ev.ModelDecided:
    specs = tuple(ev.ToolSpec(f"c{i}", tool, params) for i, (tool, params) in enumerate(calls))
    return ev.ModelDecided(1, specs)


# --- the signals ------------------------------------------------------------------------------


def test_token_drift_is_the_recent_growth_per_round_and_resets_at_a_compaction() -> None:
    dog = Watchdog(BUILTINS["balanced"])
    for r, tokens in enumerate([1000, 1500, 3500, 6000], start=1):
        dog.rendered(r, ContextStats(tokens=tokens, blocks=10))
    assert dog.token_drift == (6000 - 1000) // 3  # the growth of the last three rounds
    dog.rendered(5, ContextStats(tokens=6600, blocks=10))
    assert dog.token_drift == (6600 - 1500) // 3
    dog.rendered(6, ContextStats(tokens=2000, blocks=4, compacted=True))
    assert dog.token_drift == 0 and dog.compactions == 1 and dog.peak_tokens == 6600


def test_over_tooling_counts_tool_rounds_without_progress_once_three_are_in() -> None:
    dog = Watchdog(BUILTINS["balanced"])
    dog.decided(decided(read(DOC)))
    dog.decided(decided(read(DOC)))
    assert dog.over_tooling == 0.0  # two rounds: too few to judge
    dog.decided(ev.CallRefused(3, "repeated_call"))
    assert dog.over_tooling == round(2 / 3, 2) and dog.repeated_reads == 2
    dog.decided(decided(read(DOC, DOCS[0])))  # something new: progress
    dog.decided(decided(("react.search_knowledge", {"query": "sla"})))
    assert dog.over_tooling == 0.4 and dog.repeated_reads == 3
    dog.decided(ev.ModelDecided(6, (), (ev.AgentCall("a1", "t1", "reviewer", "review"),)))
    assert dog.tooling[-1] is False  # a task for an agent moves the turn


def test_context_rot_weighs_summaries_twice_and_leaves_headers_out() -> None:
    folded = {"hidden": True, "replacement": "[anchor] digest", "meta": {"anchor": True}}
    blocks = [
        Block.new(TURN_HEADER, "t1", 1.0),
        Block.new(NOTE, "t1", 1.0, text="[K] a fact", **folded),
        Block.new(SUMMARY, "t1", 1.0, text="summary"),
        Block.new(TOOL_RESULT, "t1", 1.0, text="kept"),
        Block.new(TOOL_RESULT, "t1", 1.0, text="pruned", hidden=True, replacement="[pruned]"),
        Block.new(TOOL_RESULT, "t1", 1.0, text="kept"),
    ]
    stats = ContextStats.of(blocks, tokens=500, compacted=False)
    assert (stats.blocks, stats.rotten, stats.rot) == (5, 3, 0.6)
    assert ContextStats().rot == 0.0


def test_a_crossing_gives_one_notice_and_asks_only_above_the_floor_and_after_cooldown() -> None:
    table = {"extends": "balanced", "context_rot": 0.5, "watchdog_floor_tokens": 5000}
    profile = resolve({**table, "token_drift": 1_000_000})  # rot alone here
    dog = Watchdog(profile)
    dog.rendered(1, ContextStats(tokens=4000, blocks=10, rotten=6))
    small = dog.check(2)
    assert small.notices and "context rot 0.6 >= 0.5" in small.notices[0]
    assert not small.compact  # under the floor: a notice only
    dog.rendered(2, ContextStats(tokens=9000, blocks=10, rotten=6))
    assert dog.check(3).notices == ()  # still over: said once
    dog.rendered(3, ContextStats(tokens=9000, blocks=10, rotten=1))
    assert dog.check(4).notices == ()  # back under
    dog.rendered(4, ContextStats(tokens=9000, blocks=10, rotten=7))
    big = dog.check(5)
    assert big.compact and big.reason == "watchdog: context_rot"
    assert "compacted at the next turn boundary" in big.notices[0].lower()
    dog.rendered(5, ContextStats(tokens=5000, blocks=10, rotten=1, compacted=True, for_ask=True))
    dog.check(6)
    dog.rendered(6, ContextStats(tokens=9000, blocks=10, rotten=8))
    soon = dog.check(7)
    assert soon.notices and not soon.compact  # within COOLDOWN_ROUNDS of the last one
    assert COOLDOWN_ROUNDS >= 2
    telemetry = dog.telemetry()
    assert telemetry.signals == {"context_rot": 3} and telemetry.watchdog_compactions == 1
    assert telemetry.compactions == 1 and telemetry.peak_tokens == 9000


def test_a_watchdog_kept_in_a_checkpoint_goes_on_as_the_one_not_interrupted() -> None:
    profile = resolve({"extends": "balanced", "watchdog_floor_tokens": 0})
    going, readings = Watchdog(profile), []
    for r, tokens in enumerate([1000, 1400, 1800], start=1):
        going.check(r)
        going.rendered(r, ContextStats(tokens=tokens, blocks=10, rotten=1))
        going.decided(decided(read(DOC)))
    asked = going.check(4)
    assert asked.notices and asked.compact  # repeated reads: a notice, and a compaction
    kept = going.snapshot()  # what the checkpoint of round 4 stores, with that notice
    resumed = Watchdog.resumed(profile, msgpack.unpackb(msgpack.packb(kept)))
    assert resumed.snapshot() == kept
    assert asked.reason == "watchdog: over_tooling, repeated_reads"
    assert resumed.check(4) == Verdict((), True, asked.reason)  # replayed: said already
    for dog in (going, resumed):
        dog.rendered(4, ContextStats(tokens=900, blocks=10, rotten=3, compacted=True, for_ask=True))
        dog.decided(decided(read(DOCS[0])))
        readings.append((dog.check(5), dog.readings()))
    assert readings[0] == readings[1]
    assert readings[1][1]["watchdog_compactions"] == 1
    assert Watchdog.resumed(profile, None).snapshot() == Watchdog(profile).snapshot()


def test_a_profile_without_the_watchdog_never_fires() -> None:
    dog = Watchdog(resolve({"extends": "fast", "watchdog": False}))
    dog.rendered(1, ContextStats(tokens=90_000, blocks=10, rotten=10))
    assert dog.check(2).notices == () and dog.telemetry().context_rot == 1.0


# --- scripted turns ---------------------------------------------------------------------------


def watchdog_notices(node: Node, cid: str) -> list[str]:
    blocks = node.conversations[cid].tl.blocks
    return [b.text for b in blocks if b.type == NOTICE and b.meta.get("code") == WATCHDOG]


def summaries(node: Node, cid: str) -> list[Block]:
    return [b for b in node.conversations[cid].tl.blocks if b.type == SUMMARY]


def context_edits(home: Path, turn_id: str) -> list[dict[str, Any]]:
    """The ``context.edit`` events on the render spans of a turn's trace."""
    records = [r for r in trace_sinks.read(home) if r.get("type") == "span"]
    return [
        e["attrs"]
        for r in records
        if r["turn_id"] == turn_id and r["name"] == "render"
        for e in r.get("events", ())
        if e["name"] == "context.edit"
    ]


async def traced(home: Path, turn_id: str) -> None:
    def done() -> bool:
        records = trace_sinks.read(home)
        return any(r["type"] == "session" and r["turn_id"] == turn_id for r in records)

    await until(done, 30)


async def test_repeated_reads_and_over_tooling_ask_and_the_next_boundary_weighs_it(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "w1": [
                say("Looking around.", calls=[read(*DOCS[:3])]),
                say("Enough.", answer="Read three documents."),
                say("Reading.", calls=[read(DOC)]),
                say("Again.", calls=[read(DOC)]),
                say("Once more.", calls=[read(DOC)]),
                say("Enough.", answer="The Team plan is the middle tier."),
                say("From what I have.", answer="The Team plan, as said."),
            ]
        }
    )
    node = await start_node(bus, tmp_path, model)
    try:
        config = {"profile": {"extends": "balanced", "watchdog_floor_tokens": 0}}
        await run_turn(client, "What is in the docs?", "w1", config=config)
        handle = await run_turn(client, "What are the tiers?", "w1", config=config)
        result = handle.result.result()
        assert result.status == "completed"
        context = result.usage.context
        assert context is not None
        assert {"repeated_reads", "over_tooling"} <= set(context.signals)
        assert context.repeated_reads == 3
        assert context.compactions == 0 and not summaries(node, "w1")  # not mid-turn
        renderer = node.conversations["w1"].renderer
        assert renderer.policy.asked == "watchdog: over_tooling, repeated_reads"
        [notice] = watchdog_notices(node, "w1")
        assert "repeated reads 3 >= 3" in notice and DOC in notice
        assert "compacted at the next turn boundary" in notice
        # the model saw the notice: it is in the request of the round after it
        prompts = [r.blocks for r in model.models["w1"].requests]
        assert any("context watchdog" in str(p) for p in prompts[5]) and not any(
            "context watchdog" in str(p) for p in prompts[4]
        )
        cards = [e for e in handle.events if isinstance(e, ReActProgress)]
        assert cards and all("context" in c.data for c in cards)
        assert cards[-1].data["context"]["repeated_reads"] == 3
        third = await run_turn(client, "And the cheapest?", "w1", config=config)
        assert third.result.result().status == "completed"
        assert renderer.policy.asked == ""  # weighed at this turn's first round
        await traced(tmp_path, third.turn_id)
        [weighed] = [e for e in context_edits(tmp_path, third.turn_id) if e["kind"] == "compaction"]
        assert weighed["where"] == "boundary"
        assert "asked: watchdog: over_tooling, repeated_reads" in weighed["reason"]
        assert (weighed["verdict"] == "take") == (weighed["gain"] > weighed["cost"])
        assert bool(summaries(node, "w1")) == (weighed["verdict"] == "take")
        third_context = third.result.result().usage.context
        assert third_context is not None
        assert third_context.watchdog_compactions == (weighed["verdict"] == "take")
    finally:
        await node.stop()


async def test_token_drift_gives_a_notice_and_never_asks_for_a_compaction(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "w2": [
                say("Reading.", calls=[read(*DOCS[:2])]),
                say("Reading more.", calls=[read(*DOCS[2:4])]),
                say("And more.", calls=[read(*DOCS[4:])]),
                say("Done.", answer="Read them all."),
            ]
        }
    )
    node = await start_node(bus, tmp_path, model)
    try:
        config = {"profile": {"extends": "fast", "token_drift": 300, "watchdog_floor_tokens": 0}}
        handle = await run_turn(client, "Read the docs.", "w2", config=config)
        context = handle.result.result().usage.context
        assert context is not None and context.signals.get("token_drift") == 1
        assert context.watchdog_compactions == 0 and not summaries(node, "w2")
        assert node.conversations["w2"].renderer.policy.asked == ""
        [notice] = watchdog_notices(node, "w2")
        assert "token drift" in notice and ">= 300 tokens per round" in notice
        assert "work from what you have" in notice
    finally:
        await node.stop()


async def test_context_rot_from_archived_results_fires_and_asks(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    searches = ["pricing tiers", "signing keys", "system requirements", "service level"]
    rounds = [say("Searching.", calls=[("react.search_knowledge", {"query": q})]) for q in searches]
    model = Scripted({"w3": [*rounds, say("Done.", answer="Done.")]})
    node = await start_node(bus, tmp_path, model)
    try:
        profile = {
            "extends": "balanced",
            "tool_response_max_tokens": 25,  # every search result is verbose: archived
            "recent_results": 1,
            "context_rot": 0.1,
            "token_drift": 1_000_000,
            "watchdog_floor_tokens": 0,
        }
        handle = await run_turn(client, "Search four things.", "w3", config={"profile": profile})
        context = handle.result.result().usage.context
        assert context is not None and context.signals == {"context_rot": 1}
        conversation = node.conversations["w3"]
        counted = ContextStats.of(conversation.renderer.visible_blocks(), 0, False)
        assert conversation.renderer.rot_counts == (counted.blocks, counted.rotten) != (0, 0)
        blocks = conversation.tl.blocks
        archived = [b for b in blocks if b.hidden and "ARCHIVED" in b.replacement]
        assert len(archived) >= 2  # results that left the window, archived in the tail
        [notice] = watchdog_notices(node, "w3")
        assert "context rot" in notice and ">= 0.1 of the visible blocks" in notice
        assert conversation.renderer.policy.asked == "watchdog: context_rot"
        assert context.watchdog_compactions == 0 and not summaries(node, "w3")
        await traced(tmp_path, handle.turn_id)
        edits = context_edits(tmp_path, handle.turn_id)
        assert edits and {e["kind"] for e in edits} == {"retention"}
        assert all(e["verdict"] != "take" or e["where"] == "tail" for e in edits)
    finally:
        await node.stop()


async def test_an_ordinary_turn_stays_under_every_threshold(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "w4": [
                say("Searching.", calls=[("react.search_knowledge", {"query": "tiers"})]),
                say("Reading.", calls=[read(DOC)]),
                say("Answering.", answer="The Team plan is the middle tier [[S:1]]."),
            ]
        }
    )
    node = await start_node(bus, tmp_path, model)
    try:
        handle = await run_turn(client, "What are the tiers?", "w4")
        context = handle.result.result().usage.context
        assert context is not None and context.signals == {} and context.compactions == 0
        assert context.tokens > 0 and context.peak_tokens >= context.tokens
        assert watchdog_notices(node, "w4") == [] and summaries(node, "w4") == []
    finally:
        await node.stop()
