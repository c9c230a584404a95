"""The web console in a real headless Chromium: a real ``actline console``
process, a real nats-server and node, only the model scripted (``ByPrompt``).

Each test types a prompt carrying a marker word that picks its script, and waits on page
conditions (Playwright's ``expect``) or on the node's state (``Backend.until``), never on a
fixed sleep. Screenshots of the main views land in ``tests/web/results/``.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from playwright.sync_api import BrowserContext, Locator, Page, expect

from ..actors.harness import say
from .browser import ROOT, Backend, Console, Script, screenshot, wait_until

DOC = "ks:pricing/tiers.md"
SEARCH = ("react.search_knowledge", {"query": "pricing tiers"})
CONNECTED = re.compile(r"(?<!dis)connected")


def sent_to(agent: str) -> tuple[str, dict[str, Any]]:
    return ("agent.send", {"name": agent, "text": f"please review this, {agent}"})


def ask(page: Page, text: str) -> None:
    """Start a new conversation and send ``text`` in it."""
    page.get_by_test_id("new-conversation").click()
    type_and_send(page, text)


def type_and_send(page: Page, text: str) -> None:
    page.get_by_test_id("prompt").fill(text)
    page.get_by_test_id("send").click()


def status(page: Page) -> Locator:
    return page.get_by_test_id("turn-status").last


def waiting_card(page: Page, agent: str) -> Locator:
    card = page.locator('[data-testid="card"][data-kind="waiting"]').filter(has_text=agent)
    expect(card.last).to_be_visible()
    return card.last


def turn_id_of(script: Script) -> str:
    return script.model.requests[-1].turn_id


def test_a_question_streams_an_answer_whose_citations_open_their_source(
    page: Page, backend: Backend
) -> None:
    backend.model.script(
        "zcite",
        [
            say("Searching the docs.", calls=[SEARCH]),
            say("Reading the tiers page.", calls=[("react.read", {"paths": [DOC]})]),
            say(
                "Answering.",
                answer="The **Team** plan is the middle tier [[S:1]].",
                followups=["What does Enterprise add?"],
            ),
        ],
    )
    ask(page, "zcite: what plans are there?")
    answer = page.get_by_test_id("answer").last
    expect(answer).to_contain_text("plan is the middle tier")
    expect(status(page)).to_have_text(re.compile("completed"))
    expect(answer).not_to_contain_text("[[S:1]]")
    expect(answer.locator("strong")).to_have_text("Team")  # markdown rendered
    kinds = page.get_by_test_id("card").evaluate_all("cs => cs.map(c => c.dataset.kind)")
    assert {"thinking", "tool_call", "tool_result", "complete"} <= set(kinds), kinds
    expect(page.get_by_test_id("followup-button")).to_contain_text(["What does Enterprise add?"])
    expect(page.get_by_test_id("usage").last).to_contain_text("cache read")

    if os.environ.get("ACTLINE_UPDATE_SCREENSHOT"):  # the one committed: docs/console.png
        page.screenshot(path=str(ROOT / "docs" / "console.png"))

    citation = answer.get_by_test_id("citation").first
    expect(citation).to_have_attribute("href", "#source-1")
    citation.click()
    source = page.locator("#source-1")
    expect(source).to_have_attribute("data-testid", "source")
    expect(source).to_be_in_viewport()
    expect(source).to_contain_text(re.compile("tiers", re.I))
    screenshot(page, "turn")


def test_a_turn_waits_for_an_outside_agent_and_completes_after_its_done(
    page: Page, backend: Backend
) -> None:
    script = backend.model.script(
        "zwait",
        [
            say("Asking the reviewer.", calls=[sent_to("reviewer")]),
            say("The reviewer answered.", answer="The plan is reviewed."),
        ],
    )
    ask(page, "zwait: get the plan reviewed")
    card = waiting_card(page, "reviewer")
    expect(status(page)).to_have_text(re.compile("waiting"))
    expect(card.get_by_test_id("skip")).to_be_visible()
    expect(card.get_by_test_id("cancel")).to_be_visible()
    screenshot(page, "waiting")
    page.get_by_test_id("tab-agents").click()
    agent = page.locator('[data-testid="agent"][data-name="reviewer"]')
    expect(agent).to_contain_text(turn_id_of(script))
    expect(page.get_by_test_id("done-form")).to_be_visible()
    screenshot(page, "agents")
    page.get_by_test_id("tab-turn").click()

    reply = backend.call(
        backend.rt.client.send_done("reviewer", "looks good", turn_id=turn_id_of(script))
    )
    assert reply.kind == "ack" and reply.detail == "applied", reply
    expect(page.get_by_test_id("answer").last).to_contain_text("The plan is reviewed.")
    expect(status(page)).to_have_text(re.compile("completed"))
    assert script.model.calls == 2


def test_skip_resumes_the_turn_and_cancel_ends_it(page: Page, backend: Backend) -> None:
    skipped = backend.model.script(
        "zskip",
        [
            say("Asking the critic.", calls=[sent_to("critic")]),
            say("Going on without it.", answer="Unreviewed plan."),
        ],
    )
    ask(page, "zskip: review the plan")
    waiting_card(page, "critic").get_by_test_id("skip").click()
    expect(page.get_by_test_id("answer").last).to_contain_text("Unreviewed plan.")
    expect(status(page)).to_have_text(re.compile("completed"))
    second = skipped.model.requests[1]
    assert any("wait_skipped" in str(b.get("text", "")) for b in second.blocks)

    cancelled = backend.model.script(
        "zcancel", [say("Asking the critic.", calls=[sent_to("critic")])]
    )
    ask(page, "zcancel: review the plan")
    waiting_card(page, "critic").get_by_test_id("cancel").click()
    expect(status(page)).to_have_text(re.compile("cancelled"))
    assert cancelled.model.calls == 1


def test_a_followup_typed_while_the_turn_runs_joins_it(page: Page, backend: Backend) -> None:
    script = backend.model.script(
        "zjoin",
        [
            say("Searching.", calls=[SEARCH]),
            say("Both answered.", answer="Team is the middle tier; Enterprise adds SSO."),
        ],
        hold={1},
    )
    ask(page, "zjoin: what plans are there?")
    backend.until(lambda: script.holding)
    expect(status(page)).to_have_text(re.compile("running"))
    sso = {"name": "sso.md", "mimeType": "text/markdown", "buffer": b"SSO comes with Okta."}
    page.get_by_test_id("attach").set_input_files(sso)  # picked while the turn runs
    type_and_send(page, "and what does Enterprise add?")
    cid = script.conversation_id

    def joined() -> bool:
        conv = backend.rt.node.conversations.get(cid) if backend.rt.node else None
        return conv is not None and any(
            "what does Enterprise add?" in (b.text or "") for b in conv.tl.blocks
        )

    backend.until(joined)
    note = page.locator('[data-testid="card"][data-kind="note"]').last
    expect(note).to_have_text("followup sent: and what does Enterprise add? (attached: sso.md)")
    expect(page.locator("#attached")).to_have_text("")  # the picker is cleared once it joined
    backend.release(script)
    expect(page.get_by_test_id("answer").last).to_contain_text("Enterprise adds SSO")
    expect(status(page)).to_have_text(re.compile("completed"))
    first, second = script.model.requests
    assert first.turn_id == second.turn_id  # one turn
    assert any("what does Enterprise add?" in str(b.get("text", "")) for b in second.blocks)
    where = f"fi:{first.turn_id}.external.followup.attachments/"
    [file] = [str(b.get("text")) for b in second.blocks if where in str(b.get("text"))]
    assert "/sso.md" in file and "SSO comes with Okta." in file  # the model saw the file


def test_a_turn_another_client_submits_shows_live_on_the_page(page: Page, backend: Backend) -> None:
    script = backend.model.script(
        "zjob",
        [
            say("Greeting.", answer="Hello from the page's turn."),
            say("Searching.", calls=[SEARCH]),
            say("Answering the job.", answer="The job's answer: four tiers."),
        ],
    )
    ask(page, "zjob: hello")
    expect(status(page)).to_have_text(re.compile("completed"))
    cid = script.conversation_id
    # a Ray job (here the backend's own client) asks in the conversation the page shows
    handle = backend.call(backend.rt.client.submit("and the tiers?", conversation_id=cid))
    turn = page.locator(f'.turn[data-turn="{handle.turn_id}"]')
    expect(turn.get_by_test_id("answer")).to_contain_text("The job's answer: four tiers.")
    expect(turn.get_by_test_id("turn-status")).to_have_text("completed")
    kinds = turn.get_by_test_id("card").evaluate_all("cs => cs.map(c => c.dataset.kind)")
    assert kinds.count("tool_call") == 1 and kinds.count("complete") == 1, kinds


def test_canvas_keys_and_a_displayed_write_become_titled_panels(
    page: Page, backend: Backend
) -> None:
    report = {
        "path": "outputs/notes/report.md",
        "channel": "canvas",
        "content": "# Report\n\nAll *good*.\n",
    }
    board = {"summary": "Three tiers [[S:1]], one more [[S:7]].", "table": {"team": 20}}
    canvas = f"<channel:canvas>```json\n{json.dumps(board)}\n```</channel:canvas>"
    backend.model.script(
        "zpanel",
        [
            say(
                "Reading and writing.",
                calls=[("react.read", {"paths": [DOC]}), ("react.write", report)],
            ),
            say("Answering.", answer="See the canvas [[S:1]].") + canvas,
        ],
    )
    ask(page, "zpanel: compare the tiers on a canvas")
    expect(status(page)).to_have_text(re.compile("completed"))
    panels = page.get_by_test_id("canvas-panel")
    keys = panels.evaluate_all("ps => ps.map(p => p.dataset.key)")
    [written] = [k for k in keys if k.endswith("report.md")]
    assert sorted(keys) == sorted([written, "summary", "table"]), keys
    shown = page.locator(f'[data-testid="canvas-panel"][data-key="{written}"]')
    expect(shown.locator("h4")).to_have_text(written)
    expect(shown.locator("em")).to_have_text("good")  # markdown rendered
    expect(shown.locator(".body")).to_have_css("white-space", "normal")  # no blank lines added
    summary = page.locator('[data-testid="canvas-panel"][data-key="summary"]')
    expect(summary).to_contain_text("Three tiers")
    expect(summary).not_to_contain_text("[[S:")
    expect(summary.locator(".error")).to_have_text("no source for 7")
    table = page.locator('[data-testid="canvas-panel"][data-key="table"] .body')
    assert json.loads(table.inner_text()) == board["table"]
    screenshot(page, "canvas")


def test_turn_settings_typed_on_the_page_go_with_new_turns(page: Page, backend: Backend) -> None:
    script = backend.model.script(
        "zset",
        [say("Searching.", calls=[SEARCH]), say("Answering.", answer="Four tiers.")],
    )
    page.get_by_test_id("new-conversation").click()
    page.get_by_test_id("settings").fill("{max_iterations: 1}")
    type_and_send(page, "zset: how many tiers?")
    expect(page.locator("#ask-error")).to_contain_text("turn settings are not JSON")
    assert script.model.calls == 0  # nothing was sent
    page.get_by_test_id("settings").fill('{"max_iterations": 1}')
    page.get_by_test_id("send").click()
    expect(status(page)).to_have_text("budget_exhausted")  # one round was all it could have
    expect(page.get_by_test_id("usage").last).to_contain_text("1 round(s)")
    assert script.model.requests[0].turn_id == turn_id_of(script)


def test_the_timeline_shows_three_cache_marks_opens_a_path_in_place_and_the_trace_its_spans(
    page: Page, backend: Backend, console: Console
) -> None:
    script = backend.model.script(
        "ztimeline",
        [
            say("Reading the tiers page.", calls=[("react.read", {"paths": [DOC]})]),
            say("Answering.", answer="Three tiers [[S:1]]."),
        ],
    )
    ask(page, "ztimeline: how many tiers?")
    expect(status(page)).to_have_text(re.compile("completed"))
    page.get_by_test_id("tab-timeline").click()
    timeline = page.get_by_test_id("timeline")
    blocks = timeline.get_by_test_id("block")
    expect(blocks.first).to_be_visible()
    expect(page.get_by_test_id("rendered").get_by_test_id("cache-mark")).to_have_count(3)
    states = blocks.evaluate_all("bs => bs.map(b => b.dataset.state)")
    assert set(states) <= {"visible", "hidden", "pruned", "summarised"}, states

    # the read page's block: its row shows the start, the path opens the whole page in place
    block = timeline.locator(f'[data-testid="block"][data-path="{DOC}"]').first
    expect(block).not_to_contain_text("Enterprise: custom pricing")
    block.get_by_text(DOC, exact=True).first.click()
    view = page.get_by_test_id("path-view")
    expect(view).to_be_visible()
    expect(view).to_contain_text("Enterprise: custom pricing")
    read = page.request.get(
        f"{console.base}/api/conversations/{script.conversation_id}/read", params={"path": DOC}
    )
    assert read.ok, read.text()
    assert "Enterprise: custom pricing" in read.json()["text"]
    screenshot(page, "timeline")

    # the turn's trace: one span element per span the API reads from the node's JSONL traces
    trace_url = f"{console.base}/api/turns/{turn_id_of(script)}/trace"

    def traced() -> bool:
        """the turn's trace is written"""
        return page.request.get(trace_url).ok

    wait_until(traced)
    spans = page.request.get(trace_url).json()["spans"]
    names = [s["name"] for s in spans]
    assert names.count("turn") == 1 and names.count("round") == 2, names  # two model calls
    page.get_by_test_id("tab-traces").click()
    chart = page.get_by_test_id("trace")
    expect(chart.get_by_test_id("span")).to_have_count(len(spans))
    expect(chart.locator('[data-testid="span"][data-name="round"]')).to_have_count(2)
    screenshot(page, "trace")


def test_a_page_without_the_token_is_refused(context: BrowserContext, console: Console) -> None:
    page = context.new_page()
    response = page.goto(console.base + "/")
    assert response is not None and response.status == 401
    expect(page.locator("body")).to_contain_text("token required")
    api = context.request.get(console.base + "/api/conversations")
    assert api.status == 401 and "token required" in api.text()
    wrong = page.goto(console.base + "/?token=not-" + console.token)
    assert wrong is not None and wrong.status == 401


def test_the_console_says_reconnecting_and_keeps_working_when_nats_restarts(
    page: Page, backend: Backend
) -> None:
    connection = page.get_by_test_id("connection")
    expect(connection).to_contain_text(CONNECTED)
    server = backend.rt.server
    assert server is not None
    server.kill()
    expect(connection).to_contain_text("reconnecting")
    screenshot(page, "reconnecting")
    server.restart()
    expect(connection).to_contain_text(CONNECTED, timeout=30_000)
    expect(connection).not_to_contain_text("reconnecting")

    backend.model.script("zafter", [say("Answering.", answer="Still here after the restart.")])
    ask(page, "zafter: are you there?")
    expect(page.get_by_test_id("answer").last).to_contain_text("Still here after the restart.")
    expect(status(page)).to_have_text(re.compile("completed"))
