"""The title gate: the heuristic title of a new conversation, and a real model's title
written by one tool-free call to the local Messages API server, stored as the newer
``stage.gate`` block at the same path (a real LMDB store), or the heuristic title kept,
with a log line, when the reply is unusable."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actline import messages
from actline.actors.conversation.intake import contribute
from actline.actors.conversation.title import (
    TITLE_MAX_TOKENS,
    TITLE_SYSTEM,
    TitleGate,
    clean_title,
    gate_block,
    heuristic_title,
    title_of,
)
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.llm import AnthropicModel, LLMSettings, ReplayModel
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.protocol import Chunk, complete
from actline.messages import GenerateRequest
from actline.storage import Store
from actline.timeline import Timeline
from actline.timeline.blocks import STAGE_GATE
from tests.actors.harness import settings

MODEL = "claude-sonnet-4-6"
FIRST = "Hi! Can you please tell me how the pricing tiers differ for annual plans?"


@pytest.mark.parametrize(
    ("first", "title"),
    [
        (FIRST, "Pricing Tiers Differ for Annual Plans"),
        ("Hello! I want to know what the refund policy covers.", "Refund Policy Covers"),
        ("please summarize the Q3 incident report OPS-2291", "Q3 Incident Report OPS-2291"),
        ("What is the capital of France?", "Capital of France"),
        ("How do I reset my password?", "Reset My Password"),
        (
            "hey there, quick question: why does the deploy to eu-west-1 fail with a timeout "
            "every night around 2am",
            "Deploy to eu-west-1 Fail with a Timeout Every",
        ),
        (
            "Could you please explain the difference between TCP and UDP? Thanks",
            ("Difference Between TCP and UDP"),
        ),
        ("I would like to know about the API rate limits, please", "API Rate Limits"),
        (
            "Good morning team. Compare Postgres and MySQL for analytics.",
            ("Compare Postgres and MySQL for Analytics"),
        ),
        ('"Write a haiku about autumn"', "Write a Haiku About Autumn"),
        ("# Bug report\nThe login page crashes on Safari", "Bug Report"),
        ("i'm curious about the history of the iPhone", "History of the iPhone"),
        ("can you help me?", "Can You Help Me"),
        ("", "(untitled)"),
    ],
)
def test_the_heuristic_title_keeps_the_key_phrase_without_greetings_or_filler(
    first: str, title: str
) -> None:
    assert heuristic_title(first) == title
    assert len(title.split()) <= 8


@pytest.mark.parametrize(
    ("reply", "title"),
    [
        ("Pricing Tiers Compared", "Pricing Tiers Compared"),
        ('"Pricing tiers for annual plans"\n', "Pricing tiers for annual plans"),
        ("**Title:** Refund Policy.", "Refund Policy"),
        ("<title>Password Reset</title>", "Password Reset"),
        ("# Deploy Timeouts\n\nThis conversation is about...", "Deploy Timeouts"),
        (
            "one two three four five six seven eight nine ten",
            "one two three four five six seven eight",
        ),
    ],
)
def test_a_model_reply_is_cleaned_to_one_capped_line(reply: str, title: str) -> None:
    assert clean_title(reply).title == title


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("", "the reply was empty"),
        ("```\n```", "the reply was empty"),
        ("Sure! Here is a title for you:", "the reply is not a title"),
        ("I'm sorry, I can't help with that.", "the reply is not a title"),
        ("???", "the reply has no words"),
        (" ".join(["word"] * 20), "a sentence of 20 words"),
    ],
)
def test_an_unusable_reply_is_refused_with_its_reason(reply: str, reason: str) -> None:
    cleaned = clean_title(reply)
    assert cleaned.title == "" and reason in cleaned.reason


def test_a_new_conversation_starts_with_the_heuristic_title_and_later_turns_add_none() -> None:
    tl = Timeline("c1")
    contribute(tl, messages.TurnRequest(conversation_id="c1", turn_id="t1", text=FIRST))
    contribute(tl, messages.TurnRequest(conversation_id="c1", turn_id="t2", text="And more?"))
    [gate] = [b for b in tl.blocks if b.type == STAGE_GATE]
    assert gate.path == "ar:t1.stage.gate"
    assert gate.data == {
        "title": "Pricing Tiers Differ for Annual Plans",
        "new_conversation": True,
        "source": "heuristic",
    }
    assert title_of(tl.blocks) == "Pricing Tiers Differ for Annual Plans"


class TitlePolicy:
    """The local server's answers: ``reply`` to every call, each request kept."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.seen: list[GenerateRequest] = []

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        self.seen.append(request)
        return ReplayModel.of([self.reply]).stream(request)


async def served_gate(srv: FakeAnthropicServer) -> tuple[TitleGate, AnthropicModel]:
    model = AnthropicModel(
        LLMSettings(model=MODEL, api_key="k", base_url=srv.base_url, max_retries=0)
    )
    return TitleGate(lambda request: complete(model, request), MODEL), model


async def test_a_real_model_writes_the_title_stored_as_the_newer_gate_block(
    tmp_path: Path,
) -> None:
    policy = TitlePolicy('"Pricing Tiers for Annual Plans"')
    async with FakeAnthropicServer(policy) as srv:
        gate, model = await served_gate(srv)
        try:
            titled = await gate.write("c1", "t1", FIRST)
        finally:
            await model.aclose()
        [record] = srv.requests
    assert (titled.title, titled.source, titled.reason) == (
        "Pricing Tiers for Annual Plans",
        "model",
        "",
    )
    body = record.body
    assert body["max_tokens"] == TITLE_MAX_TOKENS and "tools" not in body
    assert TITLE_SYSTEM in str(body["system"]) and FIRST in str(body["messages"])

    tl = Timeline("c1")
    contribute(tl, messages.TurnRequest(conversation_id="c1", turn_id="t1", text=FIRST))
    with Store(tmp_path / "store") as store:
        store.persist(tl)
        tl.append(gate_block("t1", tl.blocks[-1].ts + 1.0, titled.title, titled.source))
        store.persist(tl)
        stored = store.read_path("c1", "ar:t1.stage.gate")
    assert [b.data["source"] for b in stored] == ["heuristic", "model"]
    assert title_of(stored) == title_of(tl.blocks) == "Pricing Tiers for Annual Plans"


@pytest.mark.parametrize("junk", ["", "Sure! Here is a title for your conversation:"])
async def test_a_junk_reply_keeps_the_heuristic_title_and_says_why(
    junk: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeAnthropicServer(TitlePolicy(junk)) as srv:
        gate, model = await served_gate(srv)
        try:
            with caplog.at_level(logging.WARNING, logger="actline.actors.conversation.title"):
                titled = await gate.write("c1", "t1", FIRST)
        finally:
            await model.aclose()
    assert (titled.title, titled.source) == (heuristic_title(FIRST), "heuristic")
    assert titled.reason
    [line] = [r.getMessage() for r in caplog.records if "heuristic title kept" in r.getMessage()]
    assert "title of c1 by claude-sonnet-4-6" in line and titled.reason in line


async def test_a_failed_title_call_keeps_the_heuristic_title_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeAnthropicServer(TitlePolicy("Pricing")) as srv:
        srv.fail_next("overloaded")
        gate, model = await served_gate(srv)
        try:
            with caplog.at_level(logging.WARNING, logger="actline.actors.conversation.title"):
                titled = await gate.write("c1", "t1", FIRST)
        finally:
            await model.aclose()
    assert (titled.title, titled.source) == (heuristic_title(FIRST), "heuristic")
    assert titled.reason.startswith("the title call failed")
    assert any("heuristic title kept" in r.getMessage() for r in caplog.records)


@pytest.fixture
async def offline_node(bus: Bus, tmp_path: Path) -> AsyncIterator[Node]:
    node = Node(bus, settings(tmp_path / "home"))
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


async def test_offline_models_get_no_title_call(offline_node: Node) -> None:
    services = offline_node.services
    assert services is not None
    assert TitleGate.for_model(services, "extractive") is None
    assert TitleGate.for_model(services, "replay") is None
