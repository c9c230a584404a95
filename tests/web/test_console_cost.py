"""What a turn cost, in the web console: the live turn's cost and what caching saved, the
same figure on the turn when its conversation is opened again (from the stored result), and
on the trace; and the JSON the page gets (``event_json``, ``views.turns``) on a real store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from actline.llm.pricing import format_usd, price
from actline.messages import ReActResult, Usage
from actline.storage import Store
from actline.web import views
from actline.web.live import event_json
from tests.timeline.builders import Build, words

from ..actors.harness import say
from .browser import Backend, Console, wait_until

COST = re.compile(r"cost \$\d+\.\d{4} · caching saved (-?\$\d+\.\d{4}|\$0) · priced as replay")


def result(turn_id: str, usage: Usage, *, priced: bool) -> ReActResult:
    cost = price(usage) if priced else None
    return ReActResult(
        conversation_id="c-cost", turn_id=turn_id, status="completed", usage=usage, cost=cost
    )


def test_the_json_of_the_page_has_each_turns_cost_and_what_caching_saved(tmp_path: Path) -> None:
    usage = Usage(input_tokens=2_000, cache_read_tokens=50_000, output_tokens=300, model="replay")
    shown = event_json(result("t1", usage, priced=True))
    assert shown is not None
    assert shown["cost"]["total_usd"] == pytest.approx(price(usage).total_usd)
    assert shown["cost"]["saved_usd"] == pytest.approx(50_000 * 3e-6 * 0.9)
    unpriced = event_json(result("t1", usage, priced=False))  # from an older node
    assert unpriced is not None and unpriced["cost"] == shown["cost"]

    b = Build()
    b.tl.conversation_id = "c-cost"
    for n in (1, 2, 3):
        b.turn(f"t{n}", f"question {n}")
        b.completion(words(6))
    old = result("t2", usage, priced=False).model_dump(mode="json")
    del old["cost"]  # stored before turns were priced
    records = {
        "t1": {
            "status": "completed",
            "result": result("t1", usage, priced=True).model_dump(mode="json"),
        },
        "t2": {"status": "completed", "result": old},
        "t3": {"status": "running", "round": 1},
    }
    with Store(tmp_path / "db", sync=False) as store:
        store.persist(b.tl, turn_records=records)
        rows = {r["turn_id"]: r for r in views.turns(store, "c-cost")}
    assert rows["t1"]["cost"]["total_usd"] == pytest.approx(price(usage).total_usd)
    assert rows["t2"]["cost"] == rows["t1"]["cost"]  # the old record's usage, priced
    assert "cost" not in rows["t3"]  # still running: no result yet


def test_the_console_shows_the_turns_cost_live_stored_and_on_its_trace(
    page: Page, backend: Backend, console: Console
) -> None:
    # a turn another client ran: the console shows it from the store when it is opened
    earlier = backend.model.script("zstored", [say("Answering.", answer="Three tiers.")])

    async def run_elsewhere() -> ReActResult:
        handle = await backend.rt.submit("zstored: how many tiers?")
        return await handle.wait(30)

    done = backend.call(run_elsewhere(), 40)
    assert done.status == "completed" and done.cost is not None
    page.reload()
    page.locator(f'[data-testid="conversation-item"][data-cid="{earlier.conversation_id}"]').click()
    past = page.locator(f'.turn.past[data-turn="{done.turn_id}"]').get_by_test_id("past-cost")
    expect(past).to_contain_text(f"cost {format_usd(done.cost.total_usd)} · caching saved")

    # a turn asked here: its cost closes the live turn, as the store has it
    script = backend.model.script("zcost", [say("Answering.", answer="Four tiers.")])
    page.get_by_test_id("new-conversation").click()
    page.get_by_test_id("prompt").fill("zcost: how many tiers?")
    page.get_by_test_id("send").click()
    live = page.get_by_test_id("cost").last
    expect(live).to_contain_text(COST)
    turn_id = script.model.requests[-1].turn_id
    cid = script.conversation_id
    turns = page.request.get(f"{console.base}/api/conversations/{cid}/turns").json()
    [stored] = [t for t in turns if t["turn_id"] == turn_id]
    figure = f"cost {format_usd(stored['cost']['total_usd'])}"
    expect(live).to_contain_text(f"{figure} · caching saved")

    trace_url = f"{console.base}/api/turns/{turn_id}/trace"

    def traced() -> bool:
        """the turn's trace is written"""
        return page.request.get(trace_url).ok

    wait_until(traced)
    page.get_by_test_id("tab-traces").click()
    page.locator("#trace-turn").fill(turn_id)
    page.locator("#trace-load").click()
    expect(page.get_by_test_id("trace-note")).to_contain_text(f"{figure}, caching saved")
    model = page.locator('[data-testid="span"][data-name="model"]')
    expect(model.first).to_contain_text(re.compile(r"\$\d+\.\d{4}"))
