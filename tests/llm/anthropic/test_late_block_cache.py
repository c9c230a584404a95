"""Late blocks keep the cache, through the real anthropic client and the local Messages
API server (``actline.llm.cache_sim`` accounting): a followup stamped before blocks the model has
already been sent arrives after the render, lands after them, and the next request reads
the whole cached prefix instead of writing it again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from actline.actors.conversation.intake import add_followup
from actline.llm.anthropic import AnthropicModel
from actline.llm.config import LLMSettings
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.prompt import DECISION_PROTOCOL
from actline.llm.protocol import complete
from actline.llm.replay import ReplayModel
from actline.messages import Followup, GenerateRequest
from actline.timeline import Renderer, RenderResult, TimelineConfig
from tests.timeline.builders import Build, words

REPLY = "<channel:answer>ok</channel:answer>"


@pytest.fixture
async def server() -> AsyncIterator[FakeAnthropicServer]:
    async with FakeAnthropicServer(ReplayModel.of([REPLY] * 4)) as srv:
        yield srv


def request(result: RenderResult) -> GenerateRequest:
    return GenerateRequest(
        conversation_id="c1",
        turn_id="t1",
        system=DECISION_PROTOCOL,
        blocks=result.parts(),
        cache_marks=list(result.marks),
    )


async def test_a_followup_stamped_in_the_past_keeps_the_cached_prefix(
    server: FakeAnthropicServer, tmp_path: Path
) -> None:
    settings = LLMSettings(model="claude-sonnet-4-6", api_key="k", base_url=server.base_url)
    model = AnthropicModel(settings)
    b = Build()
    b.turn("t1", words(60, "question"))
    b.rounds(6, size=150)
    renderer = Renderer(b.tl, TimelineConfig())
    first = await complete(model, request(renderer.render(now=b.at())))
    cached = first.usage.cache_read_tokens + first.usage.cache_write_5m_tokens
    assert cached > 1024  # the prefix is long enough to be cached at all

    # The followup's clock says it was sent before the third block the model has seen.
    sent = datetime.fromtimestamp(b.tl.blocks[2].ts, UTC)
    followup = Followup(conversation_id="c1", turn_id="t1", text="also check the logs", ts=sent)
    add_followup(b.tl, "t1", 1, followup)  # no attachments: no file to store first
    assert b.tl.blocks[-1].text == "also check the logs"
    assert b.tl.blocks[-1].ts == sent.timestamp()

    second = await complete(model, request(renderer.render(now=b.at())))
    sent_first, sent_second = (r.body["messages"][0]["content"] for r in server.requests)
    same = [{k: v for k, v in p.items() if k != "cache_control"} for p in sent_second]
    old = [{k: v for k, v in p.items() if k != "cache_control"} for p in sent_first]
    assert same[: len(old) - 2] == old[:-2]  # all but the uncached tail (sources, announce)
    assert second.usage.cache_read_tokens == cached  # everything cached is read back
    assert second.usage.cache_write_5m_tokens == 0  # and nothing is written again
