"""A turn's cost and the OpenTelemetry GenAI attributes of its model calls, over a real
nats-server and a real LMDB home: the result's ``cost`` prices its usage, the model spans
carry ``gen_ai.*`` and ``actline.cost.usd`` in the JSONL trace, the render span's
``context.edit`` events reach the JSONL file, ``actline trace`` and an OTLP/HTTP receiver."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from actline.actors import NodeSettings
from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.actors.tracing import sinks as trace_sinks
from actline.actors.turn.mailbox import Rendered
from actline.actors.turn.trace import TurnTrace
from actline.bus import Bus
from actline.cli.main import main as actline_main
from actline.llm import AnthropicModel, LLMSettings
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.pricing import price
from actline.messages import GenerateRequest, GenerateResult, ReActResult, Usage
from actline.traces import turn_trace
from tests.actors.claude import MODEL, Policy
from tests.actors.harness import Scripted, run_turn, say, settings
from tests.actors.tracing.test_traces import adder, named, otlp_spans, traced

TIMEOUT = 30.0
HAIKU = "claude-haiku-4-5"
ADD = ("math.add", {"a": 41})
ROUND_1 = {
    "input_tokens": 1_000,
    "output_tokens": 100,
    "cache_read_tokens": 4_000,
    "cache_write_5m_tokens": 2_000,
    "model": HAIKU,
}
ROUND_2 = {"input_tokens": 500, "output_tokens": 50, "cache_read_tokens": 6_000, "model": HAIKU}
EDITS = (
    {"kind": "retention", "verdict": "take", "saved_tokens": 3100, "path": "tc:t1.c1-0"},
    {"kind": "ttl", "verdict": "keep", "saved_tokens": 0, "paths": ["a", "b"], "why": {"n": 1}},
)


def gen_ai(span: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in span["attrs"].items() if k.startswith("gen_ai.")}


async def test_a_turns_result_and_trace_carry_its_cost_and_the_genai_attributes(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    script = [
        {"output": say("adding", calls=[ADD]), "usage": ROUND_1},
        {"output": say("done", answer="42"), "usage": ROUND_2},
    ]
    model = Scripted({"c1": script})
    node = Node(bus, settings(home, model=HAIKU), model=model, registry=adder())
    await node.start()
    try:
        handle = await client.submit("add 41 and 1", conversation_id="c1")
        result = await handle.wait(TIMEOUT)
        found = await traced(home, handle.turn_id)
    finally:
        await node.stop()
    assert result.status == "completed", result
    # Haiku 4.5, $1 / $5 per million: (1,500 + 10,000 x 0.1 + 2,000 x 1.25) in, 150 out
    assert result.cost is not None
    assert result.cost == price(result.usage)
    assert result.cost.total_usd == pytest.approx(0.005 + 0.00075)
    assert result.cost.uncached_usd == pytest.approx(0.0135 + 0.00075)
    assert (result.cost.priced_as, result.cost.estimated) == (HAIKU, False)

    spans = found["spans"]
    [root] = named(spans, "turn")
    assert root["attrs"]["actline.cost.usd"] == pytest.approx(result.cost.total_usd)
    assert root["attrs"]["actline.cost.uncached_usd"] == pytest.approx(result.cost.uncached_usd)
    first, second = sorted(named(spans, "model"), key=lambda s: s["attrs"]["round"])
    assert gen_ai(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system": "anthropic",
        "gen_ai.request.model": HAIKU,
        "gen_ai.response.model": HAIKU,
        "gen_ai.conversation.id": "c1",
        "gen_ai.usage.input_tokens": 7_000,  # every prompt token, cached ones included
        "gen_ai.usage.output_tokens": 100,
        "gen_ai.usage.cache_read.input_tokens": 4_000,
        "gen_ai.usage.cache_creation.input_tokens": 2_000,
    }
    assert gen_ai(second)["gen_ai.usage.input_tokens"] == 6_500
    assert first["attrs"]["actline.cost.usd"] == pytest.approx(price(Usage(**ROUND_1)).total_usd)
    costs = [m["attrs"]["actline.cost.usd"] for m in (first, second)]
    assert sum(costs) == pytest.approx(result.cost.total_usd)


@pytest.fixture
async def claude(bus: Bus, tmp_path: Path) -> AsyncIterator[tuple[Node, Policy]]:
    """A node on a Claude model behind the local Messages API server."""
    policy = Policy()
    async with FakeAnthropicServer(policy) as srv:
        llm = LLMSettings(model=MODEL, api_key="k", base_url=srv.base_url, max_retries=0)
        model = AnthropicModel(llm)
        node = Node(bus, settings(tmp_path, model=MODEL), model=model)
        await node.start()
        try:
            yield node, policy
        finally:
            await node.stop()
            await model.aclose()


async def test_a_claude_turn_names_anthropic_and_counts_cached_tokens_in_the_input(
    claude: tuple[Node, Policy], client: Client
) -> None:
    node, policy = claude
    long = " ".join(["context"] * 1_500)  # over the minimum cacheable prefix
    turns = []
    for i in range(2):
        policy.turns.append(say(answer=f"Answer {i}."))
        turns.append(await run_turn(client, f"Question {i}. {long}", "c-claude"))
    results: list[ReActResult] = [await t.wait(TIMEOUT) for t in turns]
    found = [await traced(node.settings.home, t.turn_id) for t in turns]
    models = [m for f in found for m in named(f["spans"], "model")]
    assert len(models) == 2
    for span in models:
        a = span["attrs"]
        assert gen_ai(span)["gen_ai.provider.name"] == "anthropic"
        assert gen_ai(span)["gen_ai.request.model"] == MODEL
        assert gen_ai(span)["gen_ai.response.model"].startswith(MODEL)
        prompt = a["input_tokens"] + a["cache_read_tokens"] + a["cache_write_tokens"]
        assert gen_ai(span)["gen_ai.usage.input_tokens"] == prompt > a["input_tokens"]
        assert gen_ai(span)["gen_ai.usage.cache_read.input_tokens"] == a["cache_read_tokens"]
    assert models[1]["attrs"]["cache_read_tokens"] > 0  # the second turn read the prefix
    for result in results:
        assert result.cost is not None and result.cost.priced_as == MODEL
        assert result.cost == price(result.usage) and not result.cost.estimated
    assert results[1].cost is not None and results[1].cost.saved_usd > 0


async def traced_by_hand(home: Path, sinks: Sequence[Any] = ()) -> str:
    """One turn's trace recorded by ``TurnTrace`` as the DecisionActor records it: a round
    whose render compacted (its summaries' usage counted in the model call) and whose
    context policy took two decisions; written by the real JSONL sink (and ``sinks``)."""
    tracer = trace_sinks.tracer(NodeSettings(home=home, node_id="n1"), env={})
    tracer.sinks.extend(sinks)
    clock = iter(float(t) for t in range(1_000, 1_100))
    tracer.clock = lambda: next(clock)
    trace = TurnTrace(tracer.session("t-edits", "c1"), "c1")
    summaries = Usage(input_tokens=900, output_tokens=120, model=MODEL)
    request = GenerateRequest(conversation_id="c1", turn_id="t-edits", round=1, model=MODEL)
    trace.round(1)
    with trace.step("render", 1) as span:
        trace.rendered(span, Rendered(request, 0, usage=summaries, edits=EDITS))
    own = Usage(input_tokens=300, output_tokens=40, cache_read_tokens=5_000, model=MODEL)
    rendered = Rendered(request, 0, usage=summaries)
    with trace.step("model", 1) as span:
        counted = rendered.counted(
            GenerateResult(conversation_id="c1", turn_id="t-edits", usage=own)
        )
        trace.generated(span, counted)
    usage = own + summaries
    result = ReActResult(
        conversation_id="c1",
        turn_id="t-edits",
        status="completed",
        usage=usage,
        cost=price(usage),
        rounds=1,
    )
    trace.finish(result, "result")
    await tracer.aclose()
    return "t-edits"


async def test_context_edits_are_events_of_the_render_span_in_the_jsonl_and_actline_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    turn = await traced_by_hand(home)
    found = turn_trace(trace_sinks.read(home), turn)
    [render] = named(found["spans"], "render")
    events = render["events"]
    assert [e["name"] for e in events] == ["context.edit", "context.edit"]
    assert [e["attrs"] for e in events] == [dict(e) for e in EDITS]
    assert all(render["start"] <= e["ts"] <= render["end"] for e in events)  # the tracer's clock
    [model] = named(found["spans"], "model")
    assert model["events"] == []
    # the model call's own tokens; actline's attributes and cost count the summaries too
    assert gen_ai(model)["gen_ai.usage.input_tokens"] == 5_300
    assert gen_ai(model)["gen_ai.usage.output_tokens"] == 40
    assert model["attrs"]["input_tokens"] == 1_200
    summed = price(Usage(input_tokens=1_200, output_tokens=160, cache_read_tokens=5_000))
    assert model["attrs"]["actline.cost.usd"] == pytest.approx(summed.total_usd)

    assert actline_main(["trace", turn, "--home", str(home)]) == 0
    text = capsys.readouterr().out
    total = summed.total_usd
    saved = summed.saved_usd
    assert f"cost ${total:.4f}" in text and f"caching saved ${saved:.4f}" in text
    assert "event context.edit  kind=retention verdict=take saved_tokens=3100" in text
    assert "paths=['a', 'b']" in text


def values(attributes: Any) -> dict[str, Any]:
    """OTLP key-values as Python values (strings, ints, doubles, bools, string arrays)."""
    out: dict[str, Any] = {}
    for kv in attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        if kind == "array_value":
            out[kv.key] = [x.string_value for x in v.array_value.values]
        else:
            out[kv.key] = getattr(v, kind)
    return out


async def test_the_otel_sink_exports_genai_attributes_as_named_and_edits_as_span_events(
    tmp_path: Path, otlp: list[ExportTraceServiceRequest]
) -> None:
    await traced_by_hand(tmp_path / "home", [trace_sinks.OtelSink("n1")])
    spans = {s.name: s for s in otlp_spans(otlp)}
    model = spans["model"]
    attrs = values(model.attributes)
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["gen_ai.usage.input_tokens"] == 5_300
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 5_000
    assert attrs["actline.cost.usd"] > 0 and "actline.actline.cost.usd" not in attrs
    assert attrs["actline.input_tokens"] == 1_200  # actline's own: under its namespace
    assert model.kind == model.SPAN_KIND_CLIENT
    assert spans["render"].kind == spans["render"].SPAN_KIND_INTERNAL
    assert values(spans["turn"].attributes)["actline.cost.usd"] == pytest.approx(
        attrs["actline.cost.usd"]
    )
    events = spans["render"].events
    assert [e.name for e in events] == ["context.edit", "context.edit"]
    first, second = (values(e.attributes) for e in events)
    assert first == dict(EDITS[0])
    assert second["paths"] == ["a", "b"]  # a list of scalars stays a list
    assert second["why"] == "{'n': 1}"  # anything else goes out as its string
    render = spans["render"]
    assert all(
        render.start_time_unix_nano <= e.time_unix_nano <= render.end_time_unix_nano for e in events
    )
