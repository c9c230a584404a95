"""``TurnPrinter``'s canvas panels: live on a terminal, once elsewhere; the unresolved
citation line. Built from the ``stream.delta`` messages a node sends."""

from __future__ import annotations

import io

from rich.console import Console

from actline.messages import StreamDelta
from actline.terminal.cards import CanvasPanels, TurnPrinter


def delta(text: str, seq: int, **fields: object) -> StreamDelta:
    base: dict[str, object] = {"conversation_id": "c1", "turn_id": "t1", "channel": "canvas"}
    return StreamDelta.model_validate({**base, "text": text, "seq": seq, **fields})


KEYED = [
    delta("Plan ", 0, key="plan", format="markdown", replace=True),
    delta("**one**", 1, key="plan", format="markdown"),
    delta("", 2, key="plan", format="markdown", completed=True),
    delta("old", 3, key="data", format="text", replace=True),
    delta("new", 4, key="data", format="text", replace=True),  # a later write of the key
    delta("", 5, key="data", format="text", completed=True, unresolved=[4]),
]


def test_on_a_terminal_each_key_is_one_live_panel_that_stays() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=60, color_system=None)
    printer = TurnPrinter(console)
    for d in KEYED[:2]:
        printer.show(d)
    assert printer._live is not None  # redrawn while the key streams
    for d in KEYED[2:]:
        printer.show(d)
    assert printer._live is None
    assert {k: p.text for k, p in printer.canvas.panels.items()} == {
        "plan": "Plan **one**",
        "data": "new",
    }
    text = out.getvalue()
    assert "plan" in text and "Plan one" in text and "no source for citation(s) 4" in text


def test_elsewhere_each_key_prints_once_complete() -> None:
    console = Console(record=True, width=60, color_system=None)
    printer = TurnPrinter(console)
    for d in KEYED:
        printer.show(d)
    printer.show(delta("It ships [?9].", 6, channel="answer"))
    printer.show(delta("", 7, channel="answer", completed=True, unresolved=[9]))
    text = console.export_text()
    assert text.count(" plan ") == 1 and text.count(" data ") == 1
    assert "Plan one" in text and "new" in text and "old" not in text
    assert "It ships [?9]." in text and "! answer: no source for citation(s) 9" in text


def test_the_panels_as_json_what_ask_json_prints_under_canvas() -> None:
    panels = CanvasPanels()
    for d in [*KEYED, delta('{"team": 20}', 6, key="table", format="json", replace=True)]:
        panels.add(d)
    panels.add(delta("not json", 7, key="raw", format="json", replace=True))
    assert panels.as_json() == {
        "plan": {"format": "markdown", "text": "Plan **one**", "unresolved": []},
        "data": {"format": "text", "text": "new", "unresolved": [4]},  # replaced, then cited
        "table": {
            "format": "json",
            "text": '{"team": 20}',
            "value": {"team": 20},
            "unresolved": [],
        },
        "raw": {"format": "json", "text": "not json", "unresolved": []},  # the text as it came
    }
    assert [p.completed for p in panels.panels.values()] == [True, True, False, False]
