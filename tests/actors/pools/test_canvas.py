"""Canvas and displays reach clients, and unresolved citations are marked and noticed,
through a real node on a real nats-server (the CLI's printer renders what arrived)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from actline.actors.client.client import Client, TurnHandle
from actline.actors.pools.streamer import WHOLE_CANVAS_KEY, whole_canvas
from actline.bus import Bus
from actline.channels import ChannelDelta
from actline.messages import StreamDelta
from actline.terminal.cards import CanvasPanels, TurnPrinter
from tests.actors.harness import Scripted, run_turn, say, start_node

DOC = "ks:pricing/tiers.md"
REPORT = "outputs/notes/report.md"
CANVAS = {
    "summary": "Three tiers [[S:1]], one more [[S:7]].",
    "table": {"team": 20, "pro": 50},
}


def canvas(obj: object) -> str:
    return f"<channel:canvas>```json\n{json.dumps(obj)}\n```</channel:canvas>"


def keyed(handle: TurnHandle) -> dict[str, list[StreamDelta]]:
    """The turn's canvas deltas by key."""
    out: dict[str, list[StreamDelta]] = {}
    for d in handle.deltas:
        if d.channel == "canvas":
            assert d.key is not None, f"raw canvas text reached the client: {d.text!r}"
            out.setdefault(d.key, []).append(d)
    return out


def printed(handle: TurnHandle) -> str:
    """What ``actline ask`` prints for the turn (a recording console, not a terminal)."""
    console = Console(record=True, width=100, color_system=None)
    printer = TurnPrinter(console)
    for event in [*handle.events, handle.result.result()]:
        printer.show(event)
    return console.export_text()


async def test_canvas_keys_and_displayed_writes_arrive_as_keyed_deltas_and_panels(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    write = {"path": REPORT, "channel": "canvas", "content": "# Report\n\nAll *good*.\n"}
    model = Scripted(
        {
            "c1": [
                say(
                    "Reading and writing.",
                    calls=[("react.read", {"paths": [DOC]}), ("react.write", write)],
                ),
                say("Answering.", answer="See the canvas [[S:1]].") + canvas(CANVAS),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model)
    local: list[ChannelDelta] = []  # the node's in-process channel subscribers
    assert node.streamer is not None
    node.streamer.subscribers.subscribe("canvas", local.append)
    try:
        handle = await run_turn(client, "Compare the tiers on a canvas", "c1")
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed", result.error
    assert {d.key for d in local if d.key is not None} == {"summary"}  # streamed string keys
    by_key = keyed(handle)
    [written] = [k for k in by_key if k.endswith("report.md")]
    assert set(by_key) == {written, "summary", "table"}
    # the written display: whole content, replacing the panel, then completed
    shown = by_key[written]
    assert [(d.text, d.replace, d.completed) for d in shown] == [
        (write["content"], True, False),
        ("", False, True),
    ]
    assert shown[0].format == "markdown" and shown[0].round == 1
    # a string key streams with citations resolved; a missing source is marked
    summary = by_key["summary"]
    text = "".join(d.text for d in summary)
    assert "[[S:" not in text and "[?7]" in text and "tiers" in text
    assert summary[0].replace and summary[-1].completed and summary[-1].unresolved == [7]
    assert {d.format for d in summary} == {"markdown"}
    # a value that is not a string goes whole, as JSON
    table = by_key["table"]
    assert json.loads(table[0].text) == CANVAS["table"] and table[0].format == "json"
    assert table[-1].completed
    seqs = [d.seq for d in handle.deltas]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # the model sees that source 7 is not in the pool
    notices = [c.detail for c in handle.cards if c.phase == "notice"]
    assert any("unresolved_citation" in n and "7" in n for n in notices), notices
    # the CLI: one titled panel per key, with the rendered content
    out = printed(handle)
    for title in (written, "summary", "table"):
        assert f" {title} " in out, out
    assert "Report" in out and "All good." in out and '"team": 20' in out
    assert "no source for citation(s) 7" in out
    assert '{"summary"' not in out  # never the raw canvas JSON
    # what `actline ask --json` prints under "canvas", built from the same deltas
    panels = CanvasPanels()
    for d in handle.deltas:
        if d.key is not None:
            panels.add(d)
    shown = panels.as_json()
    assert list(shown) == [written, "summary", "table"]
    assert shown["table"]["value"] == CANVAS["table"] and shown["summary"]["unresolved"] == [7]
    assert shown[written]["text"] == write["content"]


async def test_an_unresolved_citation_is_marked_for_the_client_and_noticed_next_round(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "c1": [
                say("Answering from memory.", answer="It ships in May [[S:99]]."),
                say("Fixing it.", answer="It ships in May."),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model)
    try:
        first = await run_turn(client, "When does it ship?", "c1")
        second = await run_turn(client, "Are you sure?", "c1")
    finally:
        await node.stop()
    result = first.result.result()
    assert result.status == "completed", result.error
    # the client: the marker in the text and the list on the completed delta
    assert first.text("answer") == "It ships in May [?99]."
    assert result.answer == "It ships in May [?99]."
    [done] = [d for d in first.deltas if d.channel == "answer" and d.completed]
    assert done.unresolved == [99]
    assert "no source for citation(s) 99" in printed(first)
    # the model: a notice in what the next round renders
    assert second.result.result().status == "completed"
    seen = model.models["c1"].requests[-1]
    texts = [str(p.get("text", "")) for p in seen.blocks]
    noticed = [t for t in texts if "unresolved_citation" in t]
    assert noticed and "99" in noticed[0], texts[-6:]
    assert not any(
        "unresolved_citation" in str(p.get("text", ""))
        for p in model.models["c1"].requests[0].blocks
    )


def test_canvas_parts_no_key_carried_go_whole_at_the_end() -> None:
    obj = {"s": "streamed", "n": 3, "nested": {"a": [1]}}
    whole = whole_canvas(json.dumps(obj), obj, {"s"})
    assert [(d.key, d.format, d.completed) for d in whole] == [
        ("n", "json", False),
        ("n", "json", True),
        ("nested", "json", False),
        ("nested", "json", True),
    ]
    assert json.loads(whole[2].text) == {"a": [1]}
    # not an object: the canvas whole, JSON when it parses, else its text
    [listed, _] = whole_canvas("```json\n[1, 2]\n```", [1, 2], set())
    assert (listed.key, listed.format, listed.text) == (WHOLE_CANVAS_KEY, "json", "[1, 2]")
    [broken, _] = whole_canvas("not json {", None, set())
    assert (broken.format, broken.text) == ("text", "not json {")
    assert whole_canvas('{"s": "cut', None, {"s"}) == []  # its keys already went
    assert whole_canvas("", None, set()) == []


async def test_sources_cited_only_on_the_canvas_are_the_turns_sources_used_too(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "c1": [
                say("Reading.", calls=[("react.read", {"paths": [DOC]})]),
                say("Answering.", answer="The tiers are on the canvas.")
                + canvas({"summary": "Three tiers [[S:1]]."}),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await run_turn(client, "Compare the tiers on a canvas", "c1")
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed", result.error
    assert "[[S:" not in result.answer and "[1]" not in result.answer  # no answer citation
    assert result.sources_used == [1]  # the canvas cited source 1
