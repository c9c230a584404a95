"""Structured compaction summaries written by a model through the real anthropic client
against the local Messages API server: the summary, the integrity repair, the fallbacks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actline.llm import Compacted, ModelSummarizer, ReplayModel, compact
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest
from actline.storage import Store
from actline.timeline import Renderer, TimelineConfig
from actline.timeline.blocks import SUMMARY
from actline.timeline.editing.summary import SUMMARY_RECORD, SummaryRequest, record_of
from tests.llm.anthropic.test_model import Sleeps, model_for
from tests.timeline.builders import Build, words

SYSTEM = 1000
FIRST = {
    "stable_facts": [
        {"key": "deploy region", "value": "eu-west-1", "confidence": 0.9},
        {"key": "owner", "value": "ann"},
    ],
    "active_goals": ["ship v2"],
    "open_questions": ["which database?"],
    "discarded_obsolete": ["database: mysql"],
    "rawSummary": "The user plans the v2 deploy; details at tc:t2.p2.result.",
}
SECOND = {  # drops deploy region, revives database: mysql, lists and discards owner
    "stable_facts": [
        {"key": "database", "value": "mysql", "confidence": 0.8},
        {"key": "owner", "value": "bob"},
        {"key": "budget window", "value": "Q3"},
    ],
    "active_goals": ["ship v2"],
    "obsolete_discarded": ["owner"],
    "rawSummary": "More deploy work.",
}


def fenced(data: dict[str, Any]) -> str:
    return f"Here is the summary:\n```json\n{json.dumps(data)}\n```\nDone."


def add_turns(b: Build, first: int, last: int) -> None:
    for t in range(first, last + 1):
        b.turn(f"t{t}", words(50, "question"))
        if t == 1:
            b.note("[K] deploy region: eu-central-1\n[K] deploy region: eu-west-1\n[D] blue-green")
        if t == 2:
            b.tool("p2", "PROJECT|code=ALPHA|budget=100|owner=ann\n" + words(40, "detail"))
        b.rounds(3, size=150, prefix=f"r{t}-")
        b.completion(words(30, "answer"))


class SummaryPolicy:
    """Scripted history summaries; a split turn's prefix gets a short summary of its own."""

    def __init__(self, *history: str) -> None:
        self.history = ReplayModel.of(list(history), chunk_chars=40)
        self.prefix = ReplayModel.of([json.dumps({"rawSummary": "The turn so far."})] * 10)

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        prompt = request.blocks[0]["text"]
        return (self.prefix if "this turn so far" in prompt else self.history).stream(request)


def history_prompts(server: FakeAnthropicServer) -> list[str]:
    texts = [r.body["messages"][0]["content"][0]["text"] for r in server.requests]
    return [t for t in texts if "the conversation history" in t]


@pytest.fixture
async def server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(SummaryPolicy(fenced(FIRST), fenced(SECOND))) as srv:
        yield srv


async def run(renderer: Renderer, summarizer: ModelSummarizer, now: float) -> Compacted:
    done = await compact(renderer, summarizer, now=now, system_tokens=SYSTEM)
    assert done is not None and done.outcome is not None
    assert done.outcome.after_tokens < done.outcome.before_tokens
    return done


async def test_a_model_writes_the_structured_summary_and_repairs_the_next_one(
    server: FakeAnthropicServer, tmp_path: Path
) -> None:
    b = Build()
    add_turns(b, 1, 7)
    renderer = Renderer(b.tl, TimelineConfig(max_tokens=6_000))
    model = model_for(server)
    summarizer = ModelSummarizer(model, conversation_id="conv")
    done = await run(renderer, summarizer, b.at())

    sent = server.requests[0].body
    assert "tools" not in sent and "strict JSON" in sent["system"][0]["text"]
    prompt = history_prompts(server)[0]
    assert "- project.alpha.budget: 100" in prompt and "[K] deploy region: eu-west-1" in prompt
    reported = server.usage_totals
    assert done.usage.output_tokens == reported.output_tokens > 0
    assert summarizer.usage.input_tokens == reported.input_tokens

    su = b.tl.latest_summary
    assert su is not None and su.type == SUMMARY and su.path.startswith("su:")
    assert su.text.startswith("Context summary:\nStable facts:\n- deploy_region: eu-west-1\n")
    assert "Active goals:\n- ship v2" in su.text and "Open questions:\n- which database?" in su.text
    assert "Discarded obsolete:\n- database: mysql" in su.text
    record = record_of(su)
    assert record is not None and su.meta[SUMMARY_RECORD]["writer"] == "model"
    facts = {f.key: f for f in record.stable_facts}
    assert facts["owner"].confidence == 0.7  # the default confidence
    assert facts["project.alpha.budget"].value == "100"
    assert facts["project.alpha.budget"].confidence == 0.98  # canonical tool output
    assert done.summaries[0].integrity.repaired is False

    # The stored record is what the next compaction reads, also after a reload.
    with Store(tmp_path / "db", sync=False) as store:
        store.persist(b.tl)
        loaded = store.load("conv").timeline
    assert record_of(loaded.latest_summary) == record

    b = Build(loaded, t0=b.clock)
    add_turns(b, 8, 14)
    again = await run(Renderer(loaded, TimelineConfig(max_tokens=6_000)), summarizer, b.at())
    lost = set(again.summaries[0].integrity.lost_readded)
    assert lost == {"deploy_region", "project.alpha.budget", "project.alpha.code"} | {
        "project.alpha.owner"
    }
    assert set(again.summaries[0].integrity.revived_removed) == {"database", "owner"}
    second = record_of(loaded.latest_summary)
    assert second is not None
    values = {f.key: f.value for f in second.stable_facts}
    assert values["deploy_region"] == "eu-west-1" and values["budget_window"] == "Q3"
    assert "database" not in values and "owner" not in values
    integrity = loaded.latest_summary.meta[SUMMARY_RECORD]["integrity"]  # type: ignore[union-attr]
    assert integrity["passed"] and "deploy_region" in integrity["lost_readded"]
    await model.aclose()


@pytest.mark.parametrize("failure", ["overloaded", "api_error"])
async def test_a_failed_model_call_falls_back_to_the_offline_digest_and_says_so(
    server: FakeAnthropicServer, failure: Any
) -> None:
    b = Build()
    add_turns(b, 1, 7)
    renderer = Renderer(b.tl, TimelineConfig(max_tokens=6_000))
    sleeps = Sleeps()
    model = model_for(server, retries=1, sleep=sleeps)
    summarizer = ModelSummarizer(model)
    server.fail_next(failure, times=2)  # the first attempt and its one retry
    done = await run(renderer, summarizer, b.at())
    await model.aclose()
    assert len(sleeps.delays) == 1 and summarizer.fallbacks == 1
    su = b.tl.latest_summary
    assert su is not None and su.text.startswith("Summary of ")  # the offline digest
    stored = su.meta[SUMMARY_RECORD]
    assert stored["writer"] == "fallback" and "model call failed" in stored["fallback"]
    record = record_of(su)
    assert record is not None
    values = {f.key: f.value for f in record.stable_facts}
    assert values["deploy_region"] == "eu-west-1" and values["project.alpha.owner"] == "ann"
    assert "deploy_region: eu-central-1" in record.discarded
    assert done.notices and done.notices[0].startswith("summary_fallback:")


async def test_an_unparsable_answer_falls_back_and_still_compacts() -> None:
    b = Build()
    add_turns(b, 1, 7)
    model = ReplayModel.of(["I would rather not summarise this."] * 2)
    summarizer = ModelSummarizer(model)
    done = await run(Renderer(b.tl, TimelineConfig(max_tokens=6_000)), summarizer, b.at())
    assert summarizer.fallbacks == len(done.summaries) == model.calls
    assert "not a JSON object" in done.summaries[0].fallback
    assert b.tl.latest_summary is not None and b.tl.latest_summary.text.startswith("Summary of ")
    assert done.usage.output_tokens > 0  # the failed attempt's spend still counts


async def test_the_rendered_summary_fits_its_budget() -> None:
    b = Build()
    add_turns(b, 1, 2)
    many = {"stable_facts": [{"key": f"k{i}", "value": words(8, "v")} for i in range(40)]}
    summarizer = ModelSummarizer(ReplayModel.of([json.dumps(many)]))
    out = await summarizer.summarize(SummaryRequest(list(b.tl.blocks), max_tokens=60))
    assert summarizer.counter.count(out.text) <= 60 and out.text.endswith("…")
    assert out.text.startswith("Context summary:\nStable facts:\n- k0:")
    assert len(out.record.stable_facts) >= 40  # the record keeps every fact
