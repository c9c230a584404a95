"""Trace sessions over a real nats-server: the JSONL span tree of a turn, a sink that
fails (``partial``), spans joined across two nodes by ``traceparent`` headers, OTLP/HTTP
export to a local receiver, and ``actline trace``."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)

from actline.actors import NodeSettings, ToolRegistry
from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.actors.tracing import sinks as trace_sinks
from actline.actors.tracing import spans as tracing
from actline.actors.tracing.spans import Span
from actline.bus import Bus
from actline.cli.main import main as actline_main
from actline.llm import AnthropicModel, LLMSettings
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.messages import ReActResult
from actline.timeline.blocks import TOOL_RESULT
from actline.traces import turn_trace
from tests.actors.claude import MODEL, Policy
from tests.actors.harness import Scripted, run_turn, say, settings, start_node
from tests.actors.nodeprocs import NodeOptions, NodeProcess
from tests.waiting import until

TIMEOUT = 30.0
REVIEWER = "reviewer"
ADD = ("math.add", {"a": 41})
READ = ("files.read", {"path": "files/notes.md"})
SEND = ("agent.send", {"name": REVIEWER, "text": "check the sum"})


def adder() -> ToolRegistry:
    registry = ToolRegistry()

    @registry.tool(
        "math.add",
        schema={"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]},
    )
    async def add(params: dict[str, Any], ctx: Any) -> str:
        return str(params["a"] + 1)

    return registry


def used(output: str, tokens_in: int, tokens_out: int, cache_read: int) -> dict[str, Any]:
    usage = {"input_tokens": tokens_in, "output_tokens": tokens_out}
    return {"output": output, "usage": usage | {"cache_read_tokens": cache_read}}


def two_rounds(*calls: tuple[str, Mapping[str, Any]]) -> list[Any]:
    return [
        used(say("adding", calls=[ADD, *calls]), 100, 10, 40),
        used(say("done", answer="42, checked"), 200, 20, 150),
    ]


def one_round() -> list[Any]:
    return [used(say("easy", answer="hello"), 30, 5, 0)]


async def traced(home: Path, turn_id: str, *more: str) -> dict[str, Any]:
    """The turn's session and spans once its session line (and spans named ``more``) are in."""

    def ready() -> bool:
        records = trace_sinks.read(home)
        if not any(r["type"] == "session" and r["turn_id"] == turn_id for r in records):
            return False
        names = {r["name"] for r in records if r["type"] == "span"}
        return all(n in names for n in more)

    await until(ready, TIMEOUT)
    return turn_trace(trace_sinks.read(home), turn_id)


def named(spans: Sequence[Mapping[str, Any]], name: str) -> list[Mapping[str, Any]]:
    return [s for s in spans if s["name"] == name]


async def answer_the_agent(client: Client, node: Any, handle: Any) -> ReActResult:
    """Wait for the turn to wait, answer the reviewer's task with a DONE, and the result."""
    await handle.wait_for("waiting", timeout=TIMEOUT)
    blocks = node.conversations["c1"].tl.blocks
    [task_id] = [
        b.data["task_id"]
        for b in blocks
        if b.type == TOOL_RESULT and b.meta.get("tool") == "agent.send"
    ]
    await client.send_done(
        REVIEWER, "sum checked", turn_id=handle.turn_id, task_id=task_id, timeout=TIMEOUT
    )
    result: ReActResult = await handle.wait(TIMEOUT)
    assert result.status == "completed", result
    return result


def check_tree(
    found: Mapping[str, Any],
    result: ReActResult,
    *,
    tool: tuple[str, str] = ("math.add", "ok"),
    waited: bool = True,
) -> None:
    """The figures on the spans against the turn result."""
    session, spans = found["session"], found["spans"]
    by_id = {s["span_id"]: s for s in spans}
    [root] = named(spans, "turn")
    assert root["parent_id"] is None
    assert all(s["parent_id"] in by_id for s in spans if s is not root)
    assert {s["trace_id"] for s in spans} == {session["trace_id"]}
    rounds = named(spans, "round")
    assert len(rounds) == result.rounds == root["attrs"]["rounds"] == 2
    models = named(spans, "model")
    assert len(models) == 2
    u = result.usage
    assert sum(m["attrs"]["input_tokens"] for m in models) == u.input_tokens == 300
    assert sum(m["attrs"]["output_tokens"] for m in models) == u.output_tokens == 30
    assert sum(m["attrs"]["cache_read_tokens"] for m in models) == u.cache_read_tokens == 190
    assert root["attrs"]["input_tokens"] == u.input_tokens
    round_ids = [r["span_id"] for r in sorted(rounds, key=lambda r: r["attrs"]["round"])]
    assert [m["parent_id"] for m in sorted(models, key=lambda m: m["attrs"]["round"])] == round_ids
    [call] = named(spans, "tool")
    assert (call["attrs"]["tool"], call["status"]) == tool
    assert call["attrs"]["result_bytes"] > 0 and call["parent_id"] == round_ids[0]
    if not waited:
        assert not named(spans, "wait")
        return
    assert named(spans, "commit")  # the round's blocks stored before the wait
    [wait] = named(spans, "wait")
    assert (wait["attrs"]["agents"], wait["attrs"]["ended"]) == (REVIEWER, "done")
    assert wait["parent_id"] == round_ids[0]
    renders = named(spans, "render")
    assert len(renders) == 2 and all(r["attrs"]["context_tokens"] > 0 for r in renders)
    persists = named(spans, "persist")  # each round's commit until it is durable
    assert sorted(p["parent_id"] for p in persists) == sorted(round_ids)
    assert all(s["end"] >= s["start"] for s in spans)


async def test_a_two_round_turn_writes_its_span_tree_with_the_figures_of_its_result(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    node = await start_node(bus, home, Scripted({"c1": two_rounds(SEND)}), registry=adder())
    try:
        handle = await client.submit("add 41 and 1", conversation_id="c1")
        result = await answer_the_agent(client, node, handle)
        found = await traced(home, handle.turn_id, "tool.exec")
    finally:
        await node.stop()
    assert found["session"]["status"] == "ok"
    check_tree(found, result)
    # the executor served the call from the turn's traceparent header: a child of its span
    [tool] = named(found["spans"], "tool")
    [served] = named(found["spans"], "tool.exec")
    assert served["parent_id"] == tool["span_id"] and served["attrs"]["tool"] == "math.add"


class Broken:
    """A sink whose export raises (a full disk, a collector away)."""

    def export(self, spans: Sequence[Span]) -> None:
        raise OSError("the disk is on fire")

    def session(self, record: Mapping[str, Any]) -> None:
        return None


async def test_a_sink_that_raises_leaves_the_turn_completed_and_the_session_partial(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    node = await start_node(bus, home, Scripted({"c1": one_round()}))
    assert node.services is not None
    node.services.tracer.sinks.append(Broken())
    try:
        handle = await client.submit("hi", conversation_id="c1")
        result = await handle.wait(TIMEOUT)
        found = await traced(home, handle.turn_id)
    finally:
        await node.stop()
    assert result.status == "completed" and result.answer == "hello"
    session = found["session"]
    assert session["status"] == "partial"
    assert "the disk is on fire" in session["sink_errors"][0]
    assert node.services.tracer.sessions[handle.turn_id] == "partial"
    assert named(found["spans"], "model")  # the JSONL sink still has the spans


async def test_spans_served_on_another_node_process_join_the_turns_trace(
    bus: Bus, client: Client, nats_server: Any, tmp_path: Path
) -> None:
    """Node A, a ``python -m actline.cli.node`` process without streamers or tool executors, runs
    the turn; node B (this process) serves its model calls and its tool call, takes no turns."""
    a_home, b_home = tmp_path / "a", tmp_path / "b"
    outputs = [
        used(say("reading", calls=[READ]), 100, 10, 40),
        used(say("done", answer="42, checked"), 200, 20, 150),
    ]
    b = await start_node(bus, b_home, Scripted({"c1": outputs}), node_id="n2", max_active_turns=0)
    env = (("ACTLINE_STREAMERS", "0"), ("ACTLINE_TOOL_WORKERS", "0"))
    a = NodeProcess(
        nats_server.url, bus.subjects.prefix, a_home, tmp_path / "logs",
        NodeOptions(model_delay_s=0.0, env=env), node_id="n1",
    )  # fmt: skip
    await a.start()
    try:
        handle = await client.submit("read the notes", conversation_id="c1")
        result = await handle.wait(TIMEOUT)
        found = await traced(a_home, handle.turn_id)
        await until(lambda: len(named(trace_sinks.read(b_home), "streamer")) == 2, TIMEOUT)
        await until(lambda: len(named(trace_sinks.read(b_home), "tool.exec")) == 1, TIMEOUT)
    finally:
        await a.stop()
        await b.stop()
    assert result.status == "completed", result
    check_tree(found, result, tool=(READ[0], "error"), waited=False)  # no workspace on B
    spans = found["spans"]
    served = trace_sinks.read(b_home)
    trace_id = found["session"]["trace_id"]
    assert {s["trace_id"] for s in served} == {trace_id}  # one trace across the two nodes
    assert {s["node"] for s in spans} == {"n1"} and {s["node"] for s in served} == {"n2"}
    models = {m["span_id"]: m for m in named(spans, "model")}
    for streamed in named(served, "streamer"):
        model = models[streamed["parent_id"]]
        assert streamed["attrs"]["round"] == model["attrs"]["round"]
        assert streamed["attrs"]["input_tokens"] == model["attrs"]["input_tokens"]
    [tool] = named(spans, "tool")
    [executed] = named(served, "tool.exec")
    assert executed["parent_id"] == tool["span_id"] and executed["status"] == "error"
    # actline trace over both homes draws the served spans under the turn's
    found_both = turn_trace(trace_sinks.read(a_home) + served, handle.turn_id)
    assert len(found_both["spans"]) == len(spans) + len(served)


def otlp_spans(received: Sequence[ExportTraceServiceRequest]) -> list[Any]:
    return [
        span
        for request in received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


async def test_otlp_export_reaches_a_local_receiver_with_span_names_and_attributes(
    bus: Bus, client: Client, tmp_path: Path, otlp: list[ExportTraceServiceRequest]
) -> None:
    home = tmp_path / "home"
    node = await start_node(bus, home, Scripted({"c1": one_round()}))
    try:
        handle = await client.submit("hi", conversation_id="c1")
        result = await handle.wait(TIMEOUT)
        found = await traced(home, handle.turn_id)
        await until(lambda: any(s.name == "turn" for s in otlp_spans(otlp)), TIMEOUT)
    finally:
        await node.stop()
    assert result.status == "completed" and found["session"]["status"] == "ok"
    spans = otlp_spans(otlp)
    assert {"turn", "round", "render", "model"} <= {s.name for s in spans}
    assert {s.trace_id.hex() for s in spans} == {found["session"]["trace_id"]}
    [model] = [s for s in spans if s.name == "model"]
    attrs = {a.key: a.value for a in model.attributes}
    assert attrs["actline.input_tokens"].int_value == 30
    assert attrs["actline.output_tokens"].int_value == 5
    assert attrs["actline.turn_id"].string_value == handle.turn_id
    [turn] = [s for s in spans if s.name == "turn"]
    assert model.parent_span_id != b"" and turn.parent_span_id == b""
    names = {a.key: a.value.string_value for a in otlp[0].resource_spans[0].resource.attributes}
    assert names["service.name"] == "actline"


def stored_trace(home: Path) -> str:
    """A turn's spans written by the real JSONL sink, as a node would; its turn id."""
    tracer = trace_sinks.tracer(NodeSettings(home=home, node_id="n1"), env={})
    clock = iter(float(t) for t in range(100, 200))
    tracer.clock = lambda: next(clock)
    session = tracer.session("t-stored", "c1")
    round_ = session.start("round", round=1)
    model = session.start("model", round_, round=1)
    session.end(model, input_tokens=60, output_tokens=7, cache_read_tokens=140)
    tool = session.start("tool", round_, round=1, tool="math.add")
    session.end(tool, result_bytes=42)
    session.end(round_)
    session.end(session.root, rounds=1)
    record = {"type": "session", "trace_id": session.root.trace_id, "turn_id": "t-stored"}
    assert tracer.export_now(session.spans, record | {"status": "ok", "end": 106.0}) == "ok"
    return "t-stored"


def test_actline_trace_draws_the_tree_and_prints_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    turn = stored_trace(home)
    assert actline_main(["trace", turn, "--home", str(home)]) == 0
    text = capsys.readouterr().out
    assert f"turn {turn}" in text and "status ok" in text
    assert "model" in text and "tokens 200 in / 7 out" in text  # every prompt token
    assert "cache read 70%" in text  # 140 of 60 + 140
    assert "tool=math.add" in text and "42 B" in text
    assert actline_main(["trace", "--last", "--json", "--home", str(home)]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["session"]["turn_id"] == turn
    assert [s["name"] for s in found["spans"]] == ["turn", "round", "model", "tool"]
    assert actline_main(["trace", "t-nope", "--home", str(home)]) != 0
    assert "no trace of turn 't-nope'" in capsys.readouterr().err


def test_the_jsonl_sink_rotates_by_size_and_actline_trace_0_turns_it_off(tmp_path: Path) -> None:
    sink = trace_sinks.JsonlSink(tmp_path / "traces", max_bytes=1)
    tracer = trace_sinks.Tracer([sink], node="n1")
    for turn in ("t-a", "t-b"):
        session = tracer.session(turn, "c1")
        session.end(session.root)
        record = {"type": "session", "trace_id": session.root.trace_id, "turn_id": turn}
        tracer.export_now(session.spans, record | {"status": "ok", "end": session.root.end})
    day = Path(sink.path().name).name.split(".")[0]  # traces-YYYYMMDD
    files = {p.name for p in (tmp_path / "traces").iterdir()}
    assert files == {f"{day}.jsonl", *(f"{day}.{n}.jsonl" for n in (1, 2, 3))}
    records = trace_sinks.read(tmp_path)
    assert [r["turn_id"] for r in records] == ["t-a", "t-a", "t-b", "t-b"]
    assert turn_trace(records, None)["session"]["turn_id"] == "t-b"  # --last
    off = NodeSettings.from_env({"ACTLINE_TRACE": "0", "ACTLINE_HOME": str(tmp_path)})
    assert trace_sinks.sinks(off, env={}) == []
    assert isinstance(trace_sinks.sinks(off.with_(trace=True), env={})[0], trace_sinks.JsonlSink)


class HeldSink:
    """A sink whose first export waits for ``release``: what each call got."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.exports: list[list[str]] = []
        self.sessions: list[str] = []

    def export(self, spans: Sequence[Span]) -> None:
        if not self.exports:
            assert self.release.wait(TIMEOUT)
        self.exports.append(sorted({s.turn_id for s in spans}))

    def session(self, record: Mapping[str, Any]) -> None:
        self.sessions.append(record["turn_id"])


async def test_sessions_that_end_during_an_export_reach_the_sinks_together_in_the_next(
    tmp_path: Path,
) -> None:
    held, jsonl = HeldSink(), trace_sinks.JsonlSink(tmp_path / "traces")
    tracer = trace_sinks.Tracer([held, jsonl], node="n1")
    for turn in ("t-1", "t-2", "t-3"):
        session = tracer.session(turn, "c1")
        session.start("round", round=1)
        session.finish("ok", rounds=1)
        if turn == "t-1":
            await until(lambda: tracer._exporter is not None and not tracer._unsent)
    held.release.set()
    await tracer.aclose()
    assert held.exports == [["t-1"], ["t-2", "t-3"]]  # two thread hops for three turns
    assert held.sessions == ["t-1", "t-2", "t-3"]
    assert tracer.sessions == {"t-1": "ok", "t-2": "ok", "t-3": "ok"}
    records = trace_sinks.read(tmp_path)
    assert [r["turn_id"] for r in records if r["type"] == "session"] == ["t-1", "t-2", "t-3"]
    assert jsonl._current is None  # closed; a later line opens the file again
    session = tracer.session("t-4", "c1")
    session.finish("ok")
    await tracer.aclose()
    assert [r["turn_id"] for r in trace_sinks.read(tmp_path)][-2:] == ["t-4", "t-4"]


@pytest.fixture
async def claude(bus: Bus, tmp_path: Path) -> AsyncIterator[tuple[Node, Policy]]:
    """A node on a Claude model served by the fake Anthropic server, with a small context."""
    policy = Policy()
    async with FakeAnthropicServer(policy) as srv:
        llm = LLMSettings(model=MODEL, api_key="k", base_url=srv.base_url, max_retries=0)
        model = AnthropicModel(llm)
        node = Node(bus, settings(tmp_path, model=MODEL, max_context_tokens=5_000), model=model)
        await node.start()
        try:
            yield node, policy
        finally:
            await node.stop()
            await model.aclose()


async def test_a_compaction_is_a_span_under_its_render_with_the_summary_tokens(
    claude: tuple[Node, Policy], client: Client
) -> None:
    """A Claude conversation long enough to compact its context."""
    node, policy = claude
    long = " ".join(["context"] * 700)
    turns = []
    for i in range(4):
        policy.turns.append(say(answer=f"Answer {i}."))
        turns.append((await run_turn(client, f"Question {i}. " + long, "c-long")).turn_id)
    assert policy.summaries
    home = node.settings.home
    found = [await traced(home, turn) for turn in turns]
    compactions = [(f, s) for f in found for s in named(f["spans"], "compaction")]
    assert compactions, "no compaction span"
    for f, span in compactions:
        [render] = [s for s in f["spans"] if s["span_id"] == span["parent_id"]]
        assert render["name"] == "render" and render["attrs"]["compacted"] is True
        assert render["start"] <= span["start"] <= span["end"] <= render["end"]
    assert sum(s["attrs"]["output_tokens"] for _, s in compactions) > 0  # the summaries' cost


def test_a_tracer_keeps_the_statuses_of_the_newest_turns_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing, "KEPT_STATUSES", 3)
    tracer = tracing.Tracer([HeldSink()], node="n1")
    tracer.sinks[0].release.set()  # type: ignore[attr-defined]
    for turn in ("t-1", "t-2", "t-3", "t-2", "t-4"):
        session = tracer.session(turn, "c1")
        session.end(session.root)
        assert tracer.export_now(session.spans, None) == "ok"  # spans only: no status kept
        record = {"type": "session", "turn_id": turn, "status": "ok"}
        assert tracer.export_batch([(session.spans, record)]) == ["ok"]
    assert list(tracer.sessions) == ["t-3", "t-2", "t-4"]  # t-2 ended again: the newest
