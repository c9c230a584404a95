"""A turn end to end over a real nats-server: tool rounds, stream, cards, timeline, guards."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from actline.actors import NodeSettings, ToolRegistry
from actline.actors.client.client import Client, TurnHandle
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import ReplayModel
from actline.messages import Attachment, DeadLetter, ErrorReply, Message, encode
from actline.storage import Store, Workspace
from actline.timeline import Renderer, TimelineConfig
from actline.timeline.blocks import (
    COMPLETION,
    NOTICE,
    REACT_NOTES,
    STAGE_GATE,
    TOOL_CALL,
    TOOL_RESULT,
    USER_ATTACHMENT_META,
    USER_FOLLOWUP,
    USER_PROMPT,
)
from tests.actors.harness import Scripted, run_turn, say, start_node

DOC = "ks:pricing/tiers.md"
SEARCH = ("react.search_knowledge", {"query": "pricing tiers"})


def notices(node: Node, cid: str) -> list[str]:
    return [b.meta.get("code", "") for b in node.conversations[cid].tl.blocks if b.type == NOTICE]


async def test_a_turn_with_two_tool_rounds_answers_with_citations(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "c1": [
                say("Searching the docs.", calls=[SEARCH]),
                say("Reading the tiers page.", calls=[("react.read", {"paths": [DOC]})]),
                say(
                    "Answering.",
                    answer="The Team plan is the middle tier [[S:1]].",
                    followups=["What does Enterprise add?"],
                ),
            ]
        }
    )
    home = tmp_path / "home"
    node = await start_node(bus, home, model)
    try:
        handle = await run_turn(client, "What plans are there?", "c1")
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed", result.error
    assert result.rounds == 3
    assert "[[S:1]]" not in result.answer and "Team plan" in result.answer
    assert result.sources_used == [1]
    assert result.followups == ["What does Enterprise add?"]
    assert result.usage.output_tokens > 0
    # the stream: thinking, answer (citations resolved for clients) and followups
    assert handle.text("thinking") == "Searching the docs.Reading the tiers page.Answering."
    assert "Team plan" in handle.text("answer") and "[[S:1]]" not in handle.text("answer")
    assert json.loads(handle.text("followup")) == ["What does Enterprise add?"]
    assert not handle.text("decision")  # the loop's own channel is never streamed
    seqs = [d.seq for d in handle.deltas]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # a card per transition
    assert handle.accepted is not None and handle.accepted.node == "n1"
    assert [c.phase for c in handle.cards] == [
        "thinking", "tool_call", "tool_result",
        "thinking", "tool_call", "tool_result",
        "thinking", "complete",
    ]  # fmt: skip
    assert [c.round for c in handle.cards] == [1, 1, 1, 2, 2, 2, 3, 3]
    # the persisted timeline is what the model saw, plus what the last round produced
    with Store(home) as store:
        stored = store.load("c1").timeline
        assert store.turn_record("c1", handle.turn_id)["status"] == "completed"
    types = [b.type for b in stored.blocks]
    assert types.count(USER_PROMPT) == 1 and types.count(STAGE_GATE) == 1
    assert types.count(TOOL_CALL) == 2 and types.count(COMPLETION) == 1
    assert types.count(REACT_NOTES) == 3
    seen = model.models["c1"].requests[-1]
    fresh = Renderer(stored, TimelineConfig(max_tokens=200_000)).render(now=0.0).parts()
    saw = [p.get("text") for p in seen.blocks[:-2]]  # without SOURCES POOL and ANNOUNCE
    assert [p.get("text") for p in fresh[: len(saw)]] == saw
    assert stored.sources.get(1) is not None and "tiers" in stored.sources.get(1).url


async def test_runaway_calls_are_refused_with_notices_and_the_turn_recovers(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    six = [("react.search_knowledge", {"query": f"topic {i}"}) for i in range(6)]
    model = Scripted(
        {
            "c1": [
                say("one", calls=[SEARCH]),
                say("two", calls=[SEARCH]),
                say("three", calls=[SEARCH]),
                say("four: the same call again", calls=[SEARCH]),
                say("six at once", calls=six),
                say("broken", decision='{"action": "call_tools", "calls": [}'),
                say("unknown", calls=[("web.teleport", {"to": "mars"})]),
                say("done", answer="Recovered."),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await run_turn(client, "loop please", "c1")
        codes = notices(node, "c1")
        calls = [b for b in node.conversations["c1"].tl.blocks if b.type == TOOL_CALL]
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed" and result.answer == "Recovered."
    assert result.rounds == 8
    assert codes == [
        "protocol_violation.repeated_call",
        "protocol_violation.too_many_calls",
        "protocol_violation.schema_error",
        "protocol_violation.unknown_tool_id",
    ]
    assert len(calls) == 3 + 5  # three identical searches, then five of the six
    # the model saw each notice on the round after it
    requests = model.models["c1"].requests
    assert any("repeated_call" in (b.get("text") or "") for b in requests[4].blocks)
    assert any("unknown_tool_id" in (b.get("text") or "") for b in requests[7].blocks)
    notice_cards = [c for c in handle.cards if c.phase == "notice"]
    assert len(notice_cards) >= 4


async def test_three_refusals_in_a_row_fail_the_turn_with_a_clear_error(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say(str(i), calls=[SEARCH]) for i in range(6)]})
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await run_turn(client, "repeat yourself", "c1")
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "failed"
    assert result.error is not None and "3 decisions in a row were refused" in result.error
    assert result.rounds == 6


async def test_the_iteration_budget_ends_the_turn_with_a_best_effort_answer(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    outputs = [
        say(str(i), calls=[("react.search_knowledge", {"query": f"q{i}"})]) for i in range(3)
    ]
    outputs.append(say("out of budget", answer="Partial answer from what I read."))
    model = Scripted({"c1": outputs})
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await run_turn(client, "keep going", "c1", config={"max_iterations": 3})
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "budget_exhausted"
    assert result.answer == "Partial answer from what I read."
    assert result.error is not None and "max_iterations (3)" in result.error
    best_effort = model.models["c1"].requests[-1]
    assert "budget is spent" in best_effort.blocks[-1]["text"]  # told so in ANNOUNCE


async def test_a_token_budget_ends_the_turn_without_another_model_call(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("a", calls=[SEARCH]), say("never", answer="x")]})
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await run_turn(client, "hello", "c1", config={"max_tokens": 10})
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "budget_exhausted" and "token budget (10)" in (result.error or "")
    assert "budget" in result.answer
    assert model.models["c1"].calls == 1


async def test_a_model_that_fails_fails_the_turn_and_says_why(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": []})  # the script is exhausted at the first call
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await run_turn(client, "hello", "c1")
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "failed"
    assert result.error is not None and result.error.startswith("model call failed: model_error")


async def test_external_tools_run_on_the_executor_pool(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    registry = ToolRegistry()

    @registry.tool(
        "math.add",
        schema={"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]},
    )
    async def add(params: dict[str, Any], ctx: Any) -> str:
        return str(params["a"] + 1)

    model = Scripted(
        {
            "c1": [
                say("adding", calls=[("math.add", {"a": 41}), ("math.add", {"b": 1})]),
                say("done", answer="42"),
            ]
        }
    )
    node = Node(
        bus,
        NodeSettings(home=tmp_path / "home", node_id="n1", followup_grace_s=0.0),
        model=model,
        registry=registry,
    )
    await node.start()
    try:
        handle = await run_turn(client, "add", "c1")
        results = [b for b in node.conversations["c1"].tl.blocks if b.type == TOOL_RESULT]
    finally:
        await node.stop()
    assert handle.result.result().status == "completed"
    assert results[0].data == {"status": "ok", "content": "42"}
    assert results[1].data["status"] == "error" and "bad_params" in json.dumps(results[1].data)
    assert "math.add" in model.models["c1"].requests[0].system  # listed for the model


async def test_a_turn_id_that_has_a_result_is_answered_again_not_rerun(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("done", answer="Once.")]})
    node = await start_node(bus, tmp_path / "home", model)
    try:
        first = await run_turn(client, "hello", "c1", turn_id="t-1")
        blocks = len(node.conversations["c1"].tl.blocks)
        again = await run_turn(client, "hello", "c1", turn_id="t-1")
        assert len(node.conversations["c1"].tl.blocks) == blocks
    finally:
        await node.stop()
    assert again.result.result().answer == first.result.result().answer == "Once."
    assert model.models["c1"].calls == 1


async def test_turns_of_a_new_and_a_known_conversation_and_a_gate_only_once(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("a", answer="First."), say("b", answer="Second.")]})
    node = await start_node(bus, tmp_path / "home", model)
    try:
        await run_turn(client, "Tell me about the relay please", "c1")
        await run_turn(client, "And more?", "c1")
        tl = node.conversations["c1"].tl
    finally:
        await node.stop()
    gates = [b for b in tl.blocks if b.type == STAGE_GATE]
    # offline, the title is the first message's key phrase (a real model writes one)
    assert len(gates) == 1 and gates[0].data["title"] == "Relay"
    assert gates[0].data["source"] == "heuristic"
    assert [b.text for b in tl.blocks if b.type == COMPLETION] == ["First.", "Second."]


def two_slow_rounds(before: str, after: str) -> Scripted:
    """Conversation c1: a first round slow enough for a followup to land while the model
    writes (it answers ``before``), then the round that saw it (``after``)."""
    rounds = [say("slow first round", answer=before), say("saw it", answer=after)]
    return Scripted({"c1": rounds}, delay=0.05, chunk_chars=8)


async def thinking_turn(client: Client) -> TurnHandle:
    """A turn of c1 whose model is writing its first round."""
    handle = await client.submit("first question", conversation_id="c1")
    await handle.wait_text("thinking")
    return handle


async def test_a_followup_joins_the_running_turn_and_the_answer_waits_for_it(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = two_slow_rounds(
        "An answer before the followup.", "An answer that includes the followup."
    )
    node = await start_node(bus, tmp_path / "home", model, followup_grace_s=0.3)
    try:
        handle = await thinking_turn(client)  # it did not see what follows
        reply = await client.followup("c1", handle.turn_id, "also: what about limits?")
        result = await handle.wait(20)
        tl = node.conversations["c1"].tl
        late = await client.followup("c1", handle.turn_id, "too late")
    finally:
        await node.stop()
    assert reply.kind == "ack"
    assert result.answer == "An answer that includes the followup."
    assert result.rounds == 2
    followups = [b for b in tl.blocks if b.type == USER_FOLLOWUP]
    assert [b.text for b in followups] == ["also: what about limits?"]
    assert any(
        "also: what about limits?" in (b.get("text") or "")
        for b in model.models["c1"].requests[1].blocks
    )
    assert isinstance(late, ErrorReply) and late.code == "turn_not_running"


async def test_a_followups_attachments_join_the_running_turn_under_its_message(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    """Inline bytes go to ``fi:<turn>.external.followup.attachments/<message>/<name>``, a
    reference stays a reference; the model sees both next round."""
    model = two_slow_rounds("Before.", "After.")
    node = await start_node(bus, tmp_path / "home", model, followup_grace_s=0.3)
    try:
        handle = await thinking_turn(client)
        reply = await client.followup(
            "c1",
            handle.turn_id,
            "and these",
            attachments=[
                Attachment(name="receipt.txt", mime="text/plain", data=b"paid 42 EUR"),
                Attachment(name="scan.pdf", mime="application/pdf", ref="s3://bucket/scan.pdf"),
                Attachment(name="photo.jpg", mime="image/jpeg", ref="s3://bucket/photo.jpg"),
            ],
        )
        result = await handle.wait(20)
        tl = node.conversations["c1"].tl
        workspace = Workspace(node.store, "c1")
        followup = next(b for b in tl.blocks if b.type == USER_FOLLOWUP)
        meta = [b for b in tl.turn_blocks(handle.turn_id) if b.type == USER_ATTACHMENT_META]
        stored = workspace.read(meta[0].path)
    finally:
        await node.stop()
    assert reply.kind == "ack" and result.answer == "After."
    assert followup.path == f"ar:{handle.turn_id}.user.followup.1"
    message = followup.meta["message_id"]
    assert message.startswith("f1-")
    assert meta[0].path == (
        f"fi:{handle.turn_id}.external.followup.attachments/{message}/receipt.txt"
    )
    assert stored == b"paid 42 EUR" and "paid 42 EUR" in meta[0].text
    assert meta[0].meta["message_id"] == message
    assert meta[1].meta["ref"] == "s3://bucket/scan.pdf" and "message_id" not in meta[1].meta
    assert [b.path for b in meta[1:]] == [
        f"ar:{handle.turn_id}.user.followup.1.attachment.{n}" for n in (2, 3)
    ]
    assert [b.seq for b in meta] == [followup.seq + n for n in (1, 2, 3)]  # right after it
    seen = " ".join(b.get("text") or "" for b in model.models["c1"].requests[1].blocks)
    assert "paid 42 EUR" in seen and "scan.pdf" in seen


async def test_a_followup_whose_attachment_the_store_cannot_hold_is_refused_whole(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    """A full LMDB map: the followup gets ``not_stored`` and nothing of it joins the turn;
    the next followup (counted as the first) and the turn go on."""
    store = Store(tmp_path / "small", map_size=1 << 20, max_map_size=1 << 20)
    model = two_slow_rounds("Before.", "After.")
    node = await start_node(
        bus, tmp_path / "home", model, store=store, followup_grace_s=0.3,
        max_attachment_bytes=2 << 20, max_attachments_bytes=2 << 20,
    )  # fmt: skip
    try:
        handle = await thinking_turn(client)
        refused = await client.followup(
            "c1",
            handle.turn_id,
            "with a file too big for the store",
            attachments=[Attachment(name="big.bin", data=b"x" * (1 << 20))],
        )
        joined = await client.followup("c1", handle.turn_id, "without it then")
        result = await handle.wait(20)
        tl = node.conversations["c1"].tl
    finally:
        await node.stop()
        store.close()
    assert isinstance(refused, ErrorReply) and refused.code == "not_stored", refused
    assert "store full" in refused.message and "nothing of it joined" in refused.message
    assert joined.kind == "ack" and result.answer == "After."
    followups = [b for b in tl.blocks if b.type == USER_FOLLOWUP]
    assert [(b.text, b.path) for b in followups] == [
        ("without it then", f"ar:{handle.turn_id}.user.followup.1")
    ]
    assert not any(b.type == USER_ATTACHMENT_META for b in tl.blocks)


async def test_feedback_becomes_a_block_and_an_announce_notice_next_turn(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("a", answer="First."), say("b", answer="Second.")]})
    node = await start_node(bus, tmp_path / "home", model)
    try:
        first = await run_turn(client, "hello", "c1")
        reply = await client.feedback("c1", first.turn_id, -1, "too short")
        unknown = await client.feedback("c1", "t-nope", 1)
        await run_turn(client, "again", "c1")
    finally:
        await node.stop()
    assert reply.kind == "ack"
    assert isinstance(unknown, ErrorReply) and unknown.code == "unknown_turn"
    announce = model.models["c1"].requests[1].blocks[-1]["text"]
    assert "feedback on turn" in announce and "too short" in announce


async def test_a_malformed_turn_request_is_dead_lettered_and_the_node_serves_on(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    letters: asyncio.Queue[Message] = asyncio.Queue()

    async def on_letter(msg: Message, env: Any) -> None:
        await letters.put(msg)

    await bus.subscribe(bus.subjects.deadletter, on_letter)
    model = Scripted({"c1": [say("a", answer="Fine.")]})
    node = await start_node(bus, tmp_path / "home", model)
    try:
        await bus.publish_stored_bytes(bus.subjects.turn_submit, b"\x93not a turn")
        bad_kind = encode(ErrorReply(code="x", message="not a turn"))
        await bus.publish_stored_bytes(bus.subjects.turn_submit, bad_kind)
        handle = await run_turn(client, "hello", "c1")
        first = await asyncio.wait_for(letters.get(), 5)
        second = await asyncio.wait_for(letters.get(), 5)
    finally:
        await node.stop()
    assert handle.result.result().answer == "Fine."
    assert isinstance(first, DeadLetter) and isinstance(second, DeadLetter)
    assert "expected turn.request" in second.reason


async def test_a_cancel_while_thinking_stops_the_model_and_ends_the_turn(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted({"c1": [say("x" * 400, answer="never")]}, delay=0.05, chunk_chars=4)
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await client.submit("hello", conversation_id="c1")
        await handle.wait_for("thinking")
        await client.cancel(handle.turn_id, "changed my mind")
        result = await handle.wait(10)
        codes = notices(node, "c1")
    finally:
        await node.stop()
    assert result.status == "cancelled"
    assert result.error is not None and "changed my mind" in result.error
    assert codes == ["cancelled"]
    assert len(handle.text("thinking")) < 400  # the stream stopped early


def test_the_turn_queue_stream_name_is_a_valid_jetstream_name() -> None:
    from actline.messages import Subjects

    assert Subjects("al").turn_stream == "AL_TURNS"
    assert Subjects("t01abc-x-y").turn_stream == "T01ABC_X_Y_TURNS"


async def test_the_replay_model_in_a_node_with_no_conversation_script_fails_cleanly(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    node = await start_node(bus, tmp_path / "home", ReplayModel.of([]))
    try:
        handle = await run_turn(client, "hi", "c9")
    finally:
        await node.stop()
    assert handle.result.result().status == "failed"


async def test_a_full_store_fails_the_turn_with_a_clear_error_and_the_node_serves_on(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    store = Store(tmp_path / "small", map_size=1 << 20, max_map_size=1 << 20)
    model = Scripted({"big": [say("a", answer="never")], "small": [say("b", answer="Fine.")]})
    node = await start_node(bus, tmp_path / "home", model, store=store, max_text_bytes=4 << 20)
    try:
        big = await run_turn(client, "x " * 1_500_000, "big")
        small = await run_turn(client, "hello", "small")
    finally:
        await node.stop()
        store.close()
    failed = big.result.result()
    assert failed.status == "failed"
    assert failed.error is not None and "store full" in failed.error
    assert small.result.result().answer == "Fine."
