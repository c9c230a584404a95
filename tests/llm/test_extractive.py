"""ExtractiveModel: plans, searches, reads, notes, delegates and answers from what it read."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from actline.channels import parse, sids_in_text
from actline.llm.anthropic import AnthropicModel
from actline.llm.config import LLMSettings
from actline.llm.extractive import (
    ExtractiveModel,
    agent_request,
    refers_to_memory,
    search_query,
    with_antecedent,
)
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.protocol import Model
from actline.tools import KnowledgeSpace
from bench.driver import Driver, TurnOutcome

KB = Path(__file__).parents[2] / "examples" / "kb"
T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def kb() -> KnowledgeSpace:
    return KnowledgeSpace(KB)


def driver(model: Model, kb: KnowledgeSpace, **kwargs: object) -> Driver:
    now = [T0]

    def advance(seconds: float) -> None:
        now[0] += seconds

    reply: Callable[[str], str] = lambda text: "Checked: the retention figure is right."  # noqa: E731
    return Driver(
        model,
        kb,
        clock=lambda: now[0],
        advance=advance,
        agents={"reviewer": reply},
        **kwargs,  # type: ignore[arg-type]
    )


def cited_sentences(answer: str) -> list[tuple[str, int]]:
    """(sentence, sid) for every answer line that ends with one citation."""
    out = []
    for line in answer.splitlines():
        found = re.match(r"^- (.*) \[\[S:(\d+)\]\]$", line)
        if found:
            out.append((found.group(1), int(found.group(2))))
    return out


def flat(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def test_an_outside_agent_is_recognised_only_when_named_with_a_task() -> None:
    assert agent_request("Summarise it and ask reviewer to check the numbers.") == (
        "reviewer",
        "check the numbers",
    )
    assert agent_request("Ask the auditor to verify the SLA") == ("auditor", "verify the SLA")
    assert agent_request("Can you ask me to confirm?") is None
    assert agent_request("What does the pricing page say?") is None


def test_memory_questions_are_told_apart_from_fresh_ones() -> None:
    assert refers_to_memory("Remind me what you said about pricing")
    assert refers_to_memory("What did I ask before?")
    assert not refers_to_memory("What is the default retention?")
    query = search_query("What is the default retention, and ask reviewer to check it?")
    assert "default retention" in query and "reviewer" not in query and " and ?" not in query


async def test_a_question_is_answered_in_five_rounds_from_the_documents_read(
    kb: KnowledgeSpace,
) -> None:
    d = driver(ExtractiveModel(), kb)
    out = await d.turn("What is the default retention?")
    assert out.status == "completed" and out.rounds == 5
    assert out.tools == ["react.plan", "react.search_knowledge", "react.read", "react.write"]
    cited = cited_sentences(out.answer)
    assert len(cited) >= 2
    assert "72 hours" in out.answer
    rows = {row.sid: row for row in d.tl.sources.rows()}
    read = {b.path: b.text for b in d.tl.blocks if b.path.startswith("ks:")}
    for sentence, sid in cited:
        assert sid in rows, f"[[S:{sid}]] is not in the sources pool"
        doc = next(text for text in read.values() if text.startswith(f"[S:{sid}] "))
        assert flat(sentence.split(" — ")[0]) in flat(doc), sentence
    assert 2 <= len(out.followups) <= 3


async def test_the_raw_output_follows_the_channel_protocol(kb: KnowledgeSpace) -> None:
    d = driver(ExtractiveModel(), kb)
    out = await d.turn("How much does the Team tier cost?")
    final = await _raw_outputs(out)
    for raw in final[:-1]:
        decision = json.loads(parse(raw, _specs())[1]["decision"].raw)
        assert decision["action"] == "call_tools" and len(decision["calls"]) == 1
    _, last = parse(final[-1], _specs())
    assert json.loads(last["decision"].raw)["action"] == "complete"
    cited = sids_in_text(last["answer"].raw)
    assert cited
    usage = json.loads(last["usage"].raw)
    assert usage["sids"] == cited
    assert "$4,998" in out.answer or "Team" in out.answer


async def _raw_outputs(out: TurnOutcome) -> list[str]:
    model = ExtractiveModel()
    return [model.decide(r) for r in out.requests]


def _specs() -> list:  # type: ignore[type-arg]
    from bench.driver import SPECS

    return list(SPECS)


async def test_naming_an_outside_agent_hands_it_the_draft_and_uses_its_done(
    kb: KnowledgeSpace,
) -> None:
    d = driver(ExtractiveModel(), kb)
    out = await d.turn("What is the default retention? Ask reviewer to check the answer.")
    assert out.rounds == 6 and out.tools[-1] == "agent.send"
    send = next(b for b in d.tl.blocks if b.type == "react.tool.call" and "agent.send" in b.content)
    assert "check the answer" in send.content and "72 hours" in send.content
    assert "reviewer reviewed this: Checked: the retention figure is right." in out.answer


async def test_a_question_about_earlier_turns_searches_memory_first(kb: KnowledgeSpace) -> None:
    d = driver(ExtractiveModel(), kb)
    await d.turn("How much does the Team tier cost?")
    out = await d.turn("Remind me what you told me earlier about the Team tier cost.")
    assert out.tools[:3] == ["react.plan", "react.memsearch", "react.search_knowledge"]
    assert "Earlier in this conversation (turn t1)" in out.answer


async def test_a_followup_landing_mid_turn_is_searched_and_answered_too(
    kb: KnowledgeSpace,
) -> None:
    d = driver(ExtractiveModel(), kb)
    out = await d.turn(
        "How do I rotate the signing key?", followups={3: "And what is the default retention?"}
    )
    assert out.tools.count("react.search_knowledge") == 2
    assert "rotate" in out.answer and "72 hours" in out.answer


async def test_the_last_iteration_completes_with_what_it_has(kb: KnowledgeSpace) -> None:
    d = driver(ExtractiveModel(), kb, max_iterations=2)
    out = await d.turn("What is the default retention?")
    assert out.rounds == 2 and out.status == "completed"
    assert out.answer.startswith("I reached the iteration limit")


async def test_nothing_in_the_knowledge_space_gives_an_honest_answer_without_citations(
    tmp_path: Path,
) -> None:
    (tmp_path / "other.md").write_text("# Gardening\nWater tomatoes daily.\n", encoding="utf-8")
    d = driver(ExtractiveModel(), KnowledgeSpace(tmp_path))
    out = await d.turn("What is the quantum flux capacitor rating?")
    assert "could not find anything" in out.answer and "[[S:" not in out.answer
    assert out.status == "completed"


async def test_runs_are_deterministic(kb: KnowledgeSpace) -> None:
    first = await driver(ExtractiveModel(), kb).turn("How do I rotate the signing key?")
    second = await driver(ExtractiveModel(chunk_chars=3), kb).turn(
        "How do I rotate the signing key?"
    )
    assert first.answer == second.answer and first.followups == second.followups


async def test_behind_the_local_messages_api_it_answers_exactly_as_in_process(
    kb: KnowledgeSpace,
) -> None:
    local = await driver(ExtractiveModel(), kb).turn("What is the default retention?")
    async with FakeAnthropicServer(ExtractiveModel()) as srv:
        settings = LLMSettings(
            model="claude-sonnet-4-6", api_key="k", base_url=srv.base_url, max_retries=0
        )
        remote = await driver(AnthropicModel(settings), kb).turn("What is the default retention?")
    assert remote.answer == local.answer and remote.rounds == local.rounds
    assert sum(u.cache_read_tokens for u in remote.usage) > 0


@pytest.mark.parametrize(
    ("question", "before", "read"),
    [
        (
            "How much does it cost?",
            ["What does the Enterprise tier include?"],
            "How much does it cost? (What does the Enterprise tier include?)",
        ),
        (  # the newest question before it
            "And the Business one?",
            ["Team tier limits", "Which tiers have SSO?"],
            "And the Business one? (Which tiers have SSO?)",
        ),
        ("Which tiers include SSO?", ["Tell me about Enterprise"], None),  # points nowhere
        ("And what is the default retention?", ["How do I rotate the key?"], None),
        ("What does that mean for Kafka integration limits?", ["Kafka?"], None),  # not short
        ("How much does it cost?", [], None),  # nothing before it
        (  # asked again: the question it points to is the one that named the topic
            "Is it encrypted?",
            ["What does the Enterprise tier include?", "How much does it cost?"],
            "Is it encrypted? (What does the Enterprise tier include?)",
        ),
        ("Is it encrypted?", ["Ask reviewer to check the TLS setup"], None),  # only a task
    ],
)
def test_a_short_question_that_points_back_takes_the_topic_of_the_one_before(
    question: str, before: list[str], read: str | None
) -> None:
    assert with_antecedent(question, before) == (read or question)
