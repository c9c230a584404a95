"""Model-written compaction summaries and memory facts in real turns: a node over a real
nats-server whose model is a claude model served by the local Messages API server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import AnthropicModel, LLMSettings
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.messages import GenerateRequest
from actline.timeline.blocks import SUMMARY, TOOL_CALL, TOOL_RESULT
from actline.timeline.editing.summary import SUMMARY_RECORD, record_of
from tests.actors.claude import MODEL, Policy
from tests.actors.harness import run_turn, say, settings


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeAnthropicServer, Policy]]:
    policy = Policy()
    async with FakeAnthropicServer(policy) as srv:
        yield srv, policy


@pytest.fixture
async def node(
    bus: Bus, tmp_path: Path, served: tuple[FakeAnthropicServer, Policy]
) -> AsyncIterator[Node]:
    srv = served[0]
    model = AnthropicModel(
        LLMSettings(model=MODEL, api_key="k", base_url=srv.base_url, max_retries=0)
    )
    n = Node(bus, settings(tmp_path, model=MODEL, max_context_tokens=5_000), model=model)
    await n.start()
    yield n
    await n.stop()
    await model.aclose()


def note(content: str) -> tuple[str, dict[str, Any]]:
    return ("react.write", {"path": "notes", "channel": "internal", "content": content})


def announce(request: GenerateRequest) -> str:
    return str(
        next(b["text"] for b in reversed(request.blocks) if "[ANNOUNCE]" in b.get("text", ""))
    )


async def test_a_claude_conversation_compacts_with_a_structured_summary_and_remembers_facts(
    node: Node, client: Client, served: tuple[FakeAnthropicServer, Policy]
) -> None:
    policy = served[1]
    cid = "c-sum"
    long = " ".join(["context"] * 700)
    policy.turns.extend(
        [
            say("note it", calls=[note("[K] deploy region: eu-west-1\n[D] blue-green")]),
            say(answer="Noted: eu-west-1."),
        ]
    )
    first = await run_turn(client, "We deploy to eu-west-1. " + long, cid)
    for i in range(2, 5):
        policy.turns.append(say(answer=f"Answer {i}."))
        await run_turn(client, f"Question {i}. " + long, cid)
    assert policy.summaries, "no compaction summary was asked for"

    conv = node.conversations[cid]
    su = conv.tl.latest_summary
    assert su is not None and su.type == SUMMARY and su.path.startswith("su:")
    assert su.text.startswith("Context summary:\nStable facts:\n- deploy_region: eu-west-1")
    assert su.meta[SUMMARY_RECORD]["writer"] == "model"
    record = record_of(su)
    assert record is not None and record.active_goals == ("plan the v2 deploy",)
    prompts = [r.blocks[0]["text"] for r in policy.summaries]
    assert any("[K] deploy region: eu-west-1" in p for p in prompts)  # what it summarised
    assert conv.compactor.compactions >= 1 and conv.compactor.fallbacks == 0
    assert (await first.wait()).status == "completed"

    # A later [K] note supersedes the summary's and the note's value; ANNOUNCE shows the new one.
    policy.turns.extend(
        [
            say("moved", calls=[note("[K] deploy region: us-east-1")]),
            say(answer="Moved to us-east-1."),
        ]
    )
    await run_turn(client, "We moved the deploy region to us-east-1.", cid)
    policy.turns.extend(
        [
            say("look", calls=[("react.memsearch", {"query": "deploy region"})]),
            say(answer="us-east-1"),
        ]
    )
    last = await run_turn(client, "Which deploy region do we use?", cid)
    board = announce(policy.seen[-1])
    assert "[USER MEMORY HOTSET]" in board
    assert "deploy_region: us-east-1 (turn" in board and "eu-west-1" not in board
    assert "owner: ann" in board

    book = conv.tl.facts
    old, new = book.history("deploy_region")[-2:]
    assert (old.value, old.status) == ("eu-west-1", "obsolete") and new.value == "us-east-1"
    assert old.superseded_by == new.turn_id
    calls = {b.call_id: b.data["tool"] for b in conv.tl.blocks if b.type == TOOL_CALL and b.data}
    found = [
        b.data
        for b in conv.tl.blocks
        if b.type == TOOL_RESULT and calls.get(b.call_id) == "react.memsearch" and b.data
    ]
    assert found and found[-1]["facts"][0]["key"] == "deploy_region"
    hit = found[-1]["facts"][0]
    assert hit["value"] == "us-east-1" and hit["path"].startswith("ar:") and hit["turn_id"]
    assert (await last.wait()).status == "completed"


async def test_the_turn_usage_counts_the_summary_calls(
    node: Node, client: Client, served: tuple[FakeAnthropicServer, Policy]
) -> None:
    srv, policy = served
    long = " ".join(["context"] * 700)
    results = []
    for i in range(4):
        policy.turns.append(say(answer=f"Answer {i}."))
        handle = await run_turn(client, f"Question {i}. " + long, "c-usage")
        results.append(await handle.wait())
        assert not any("Context summary" in d.text for d in handle.deltas)
    assert policy.summaries
    total = srv.usage_totals
    assert sum(r.usage.output_tokens for r in results) == total.output_tokens
    assert sum(r.usage.total_input_tokens for r in results) == total.total_input_tokens


async def test_user_scope_facts_are_shared_by_the_conversations_of_a_user(
    node: Node, client: Client, served: tuple[FakeAnthropicServer, Policy]
) -> None:
    policy = served[1]
    profile = {"extends": "balanced", "memory_scope": "user", "memory_hotset": 3}
    user = {"config": {"profile": profile}, "user_id": "ann@example"}
    policy.turns.extend(
        [say("note", calls=[note("[K] favourite editor: helix")]), say(answer="Noted.")]
    )
    await run_turn(client, "I use helix.", "c-u1", **user)
    assert node.conversations["c-u1"].tl.facts.active() == []  # the user's, not the chat's
    policy.turns.append(say(answer="helix"))
    await run_turn(client, "Which editor do I use?", "c-u2", **user)
    assert "favourite_editor: helix (turn" in announce(policy.seen[-1])
    policy.turns.append(say(answer="?"))
    await run_turn(client, "Which editor do I use?", "c-u3", config=user["config"])
    board = announce(policy.seen[-1])
    assert "helix" not in board and "memory_scope: scope 'user' needs the turn's user_id" in board


async def test_a_context_window_error_compacts_with_the_model_summary(
    node: Node, client: Client, served: tuple[FakeAnthropicServer, Policy]
) -> None:
    srv, policy = served
    cid = "c-force"
    for i in range(3):
        policy.turns.append(say(answer=f"Short answer {i}."))
        await run_turn(client, f"Short question {i}: " + " ".join(["word"] * 150), cid)
    assert not policy.summaries and node.conversations[cid].tl.latest_summary is None
    srv.fail_next("context_window")  # the next turn's model call: the render is forced
    policy.turns.append(say(answer="After compaction."))
    handle = await run_turn(client, "One more question.", cid)
    assert (await handle.wait()).status == "completed"
    su = node.conversations[cid].tl.latest_summary
    assert len(policy.summaries) >= 1 and su is not None
    assert su.meta[SUMMARY_RECORD]["writer"] == "model"


async def test_a_failed_summary_call_falls_back_with_a_notice_and_still_compacts(
    node: Node, client: Client, served: tuple[FakeAnthropicServer, Policy]
) -> None:
    srv, policy = served
    cid = "c-fallback"
    for i in range(3):
        policy.turns.append(say(answer=f"Short answer {i}."))
        await run_turn(client, f"Short question {i}: " + " ".join(["word"] * 150), cid)
    srv.fail_next("context_window")  # the turn's model call
    srv.fail_next("overloaded")  # then the summary call (the node's model does not retry)
    policy.turns.append(say(answer="After compaction."))
    handle = await run_turn(client, "One more question.", cid)
    assert (await handle.wait()).status == "completed"
    conv = node.conversations[cid]
    su = conv.tl.latest_summary
    assert su is not None and su.meta[SUMMARY_RECORD]["writer"] == "fallback"
    assert su.text.startswith("Summary of ") and conv.compactor.fallbacks == 1
    assert "summary_fallback: the compaction summary is the offline digest" in announce(
        policy.seen[-1]
    )
