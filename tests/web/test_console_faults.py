"""The console's page measured in a real headless Chromium (real console process, nats-server
and node, only the model scripted): what a decided approval leaves clickable, how a plan and
a read result are laid out, the trace chart's labels, a 420 px wide window, a wrong token,
and the conversation list (dates, cost, search, rename, delete, fork)."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import BrowserContext, Locator, Page, expect

from actline.llm.pricing import format_usd

from ..actors.harness import say
from .browser import Backend, Console, screenshot, wait_until

DOC = "ks:pricing/tiers.md"
GATED = '{"approve_tools": ["react.search_knowledge"]}'
SEARCH = ("react.search_knowledge", {"query": "pricing tiers", "top_k": 3})
DECISIONS = (
    '[data-testid="approve"], [data-testid="deny"], [data-testid="skip"], [data-testid="cancel"]'
)


def ask(page: Page, text: str, settings: str = "") -> Locator:
    """Send ``text`` in a new conversation; the turn's element once it shows."""
    page.get_by_test_id("new-conversation").click()
    page.get_by_test_id("settings").fill(settings)
    page.get_by_test_id("prompt").fill(text)
    page.get_by_test_id("send").click()
    turn = page.locator("#turn .turn").last
    expect(turn).to_be_visible()
    return turn


def completed(turn: Locator) -> None:
    expect(turn.get_by_test_id("turn-status")).to_have_text("completed")


def all_disabled(buttons: Locator) -> bool:
    return bool(buttons.evaluate_all("bs => bs.length > 0 && bs.every(b => b.disabled)"))


CONTRAST = """label => {
  // WCAG contrast of the label's text colour against the background it is drawn on
  const rgb = (c) => c.match(/[\\d.]+/g).slice(0, 4).map(Number);
  let node = label, bg = null;
  while (node) {
    const c = rgb(getComputedStyle(node).backgroundColor);
    if (c.length < 4 || c[3] > 0) { bg = c; break; }
    node = node.parentElement;
  }
  bg = bg || [255, 255, 255];
  const lum = ([r, g, b]) => [r, g, b].map((v) => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  }).reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const [a, b] = [lum(rgb(getComputedStyle(label).color)), lum(bg)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}"""
WIDER = """() => Array.from(document.querySelectorAll('*'))
  .filter(n => n.getBoundingClientRect().right > 420.5)
  .map(n => `${n.tagName}.${n.className}#${n.id}`).slice(0, 12)"""


def test_approval_buttons_go_inert_once_decided_and_when_the_turn_ends(
    page: Page, backend: Backend
) -> None:
    backend.model.script("zgate", [say("Searching.", calls=[SEARCH]), say("Done.", answer="ok")])
    turn = ask(page, "zgate: search the tiers", GATED)
    card = turn.locator('[data-testid="card"][data-kind="waiting"]')
    expect(card.get_by_test_id("approve")).to_be_enabled()
    text = card.text_content() or ""
    for said in ("pricing tiers", "top_k", "react.search_knowledge"):  # each parameter once
        assert text.count(said) == 1, (said, text)
    card.get_by_test_id("approve").click()
    expect(card.get_by_test_id("approve")).to_be_disabled()
    expect(card.get_by_test_id("deny")).to_be_disabled()
    expect(card.locator(".verdict")).to_have_text("approved")
    completed(turn)
    expect(card.get_by_test_id("skip")).to_be_disabled()
    expect(card.get_by_test_id("cancel")).to_be_disabled()

    # decided elsewhere (another client): the page's buttons end with the turn
    later = backend.model.script(
        "zelsewhere", [say("Searching.", calls=[SEARCH]), say("Done.", answer="ok")]
    )
    turn = ask(page, "zelsewhere: search the tiers", GATED)
    card = turn.locator('[data-testid="card"][data-kind="waiting"]')
    expect(card.get_by_test_id("deny")).to_be_enabled()
    reply = backend.call(backend.rt.approve(later.model.requests[-1].turn_id))
    assert reply.kind == "ack", reply
    completed(turn)
    buttons = card.locator(DECISIONS)
    expect(buttons).to_have_count(4)
    assert all_disabled(buttons)


def test_a_plan_shows_once_and_a_read_result_keeps_its_lines(page: Page, backend: Backend) -> None:
    steps = ["find the tiers", "compare their quotas"]
    backend.model.script(
        "zplanread",
        [
            say("Planning.", calls=[("react.plan", {"mode": "create", "steps": steps})]),
            say("Reading.", calls=[("react.read", {"paths": [DOC]})]),
            say("Done.", answer="Four tiers."),
        ],
    )
    turn = ask(page, "zplanread: compare the tiers")
    completed(turn)
    expect(turn.get_by_test_id("plan")).to_have_count(1)
    expect(turn.get_by_test_id("plan").locator("li")).to_have_text(
        ["□ 1. find the tiers", "□ 2. compare their quotas"]  # the result's, once it ran
    )
    first_result = turn.locator('[data-testid="card"][data-kind="tool_result"]').first
    expect(first_result).to_contain_text("shown in the plan above")
    shown = turn.evaluate("t => t.textContent")
    assert shown.count("find the tiers") == 1 and shown.count("compare their quotas") == 1, shown

    # the read page keeps its lines and wraps inside its box; the JSON status is indented
    page_result = turn.locator(".result").filter(has=page.get_by_text(DOC, exact=True))
    preview = page_result.locator(".preview")
    expect(preview).to_contain_text("Pricing tiers")
    lines = preview.evaluate(
        """p => { const s = getComputedStyle(p); return {
          white: s.whiteSpace, lines: p.clientHeight / parseFloat(s.lineHeight),
          overflow: p.scrollWidth - p.clientWidth }; }"""
    )
    assert lines["white"] == "pre-wrap" and lines["lines"] >= 5, lines
    assert lines["overflow"] <= 1, lines
    status = turn.locator(".result").filter(has=page.get_by_text(re.compile(r"^tc:.*c2-1")))
    status_box = status.locator(".preview")
    expect(status_box).to_contain_text('"found"')
    height = status_box.evaluate("p => p.clientHeight / parseFloat(getComputedStyle(p).lineHeight)")
    assert height >= 5 and "\n" in (status_box.text_content() or ""), height
    page_result.get_by_text(DOC, exact=True).click()  # the whole page, in place
    expect(preview).to_contain_text("Enterprise: custom pricing")
    assert preview.evaluate("p => p.textContent.split('\\n').length") > 10
    screenshot(page, "plan-and-read")


def test_the_trace_chart_labels_are_legible_nested_and_name_the_tools(
    page: Page, backend: Backend, console: Console
) -> None:
    script = backend.model.script(
        "ztracechart",
        [say("Reading.", calls=[("react.read", {"paths": [DOC]})]), say("Done.", answer="ok")],
    )
    completed(ask(page, "ztracechart: read the tiers"))
    turn_id = script.model.requests[-1].turn_id
    trace_url = f"{console.base}/api/turns/{turn_id}/trace"

    def traced() -> bool:
        """the turn's trace is written"""
        return page.request.get(trace_url).ok

    wait_until(traced)
    page.get_by_test_id("tab-traces").click()
    page.locator("#trace-turn").fill(turn_id)
    page.locator("#trace-load").click()
    chart = page.get_by_test_id("trace")
    tool = chart.locator('[data-testid="span"][data-name="tool"]')
    expect(tool.get_by_test_id("span-label")).to_contain_text("react.read")
    rows: list[dict[str, Any]] = chart.get_by_test_id("span").evaluate_all(
        """rows => rows.map(r => { const l = r.querySelector('[data-testid=span-label]');
          return { name: r.dataset.name, depth: Number(r.dataset.depth),
                   indent: l.getBoundingClientRect().left
                           + parseFloat(getComputedStyle(l).paddingLeft) }; })"""
    )
    depth = {r["name"]: r["depth"] for r in rows}
    assert depth["turn"] == 0 and depth["round"] == 1 and depth["tool"] == 2, rows
    by_depth = {r["depth"]: r["indent"] for r in rows}
    assert by_depth[0] < by_depth[1] < by_depth[2], by_depth  # indented by depth
    assert all(r["indent"] == by_depth[r["depth"]] for r in rows), rows
    for label in chart.get_by_test_id("span-label").all():
        ratio = label.evaluate(CONTRAST)
        assert ratio >= 4.5, (label.text_content(), ratio)
    screenshot(page, "trace-chart")


def test_at_420_px_nothing_overflows_the_window(page: Page, backend: Backend) -> None:
    long = "https://docs.lumen-relay.example/" + "a-very-long-path-segment/" * 8
    backend.model.script(
        "znarrow",
        [
            say("Reading.", calls=[("react.read", {"paths": [DOC]})]),
            say("Done.", answer=f"Four tiers: see {long} and `{'x' * 120}`."),
        ],
    )
    page.set_viewport_size({"width": 420, "height": 800})
    completed(ask(page, "znarrow: read the tiers"))

    def fits(view: str) -> None:
        width = page.evaluate("document.documentElement.scrollWidth")
        wide = page.evaluate(WIDER)  # named in the message when the test fails
        assert width <= 420, (view, width, wide)
        panels = page.locator(
            "header, aside, main, #turn .turn, .card, #prompt, #send, #timeline, #trace, #agents"
        )
        outside = panels.evaluate_all(
            """ns => ns.filter(n => n.offsetParent !== null)
              .map(n => [n.id || n.className || n.tagName, n.getBoundingClientRect()])
              .filter(([, r]) => r.left < 0 || r.right > 420.5).map(([n]) => n)"""
        )
        assert outside == [], (view, outside)

    fits("turn")
    screenshot(page, "narrow-turn")
    for tab in ("timeline", "agents", "traces"):
        page.get_by_test_id(f"tab-{tab}").click()
        fits(tab)
    screenshot(page, "narrow-traces")


def test_a_wrong_or_expired_token_is_told_apart_from_a_missing_one(
    context: BrowserContext, console: Console
) -> None:
    page = context.new_page()
    missing = page.goto(console.base + "/")
    assert missing is not None and missing.status == 401
    expect(page.locator("body")).to_contain_text("token required")

    wrong = page.goto(console.base + "/?token=not-" + console.token)
    assert wrong is not None and wrong.status == 401
    body = page.locator("body")
    expect(body).to_contain_text("wrong or expired")
    expect(body).to_contain_text("open the URL")
    expect(body).not_to_contain_text("token required")

    # the cookie an earlier start left: expired, and removed
    host = console.base.split("//", 1)[1].split(":", 1)[0]
    context.add_cookies([{"name": "actline_console", "value": "old", "domain": host, "path": "/"}])
    stale = page.goto(console.base + "/")
    assert stale is not None and stale.status == 401
    expect(body).to_contain_text("wrong or expired")
    assert "actline_console" not in {c["name"] for c in context.cookies()}
    api = context.request.get(console.base + "/api/conversations?token=nope")
    assert api.status == 401 and "wrong or expired" in api.text()


def item(page: Page, cid: str) -> Locator:
    return page.locator(f'[data-testid="conversation-item"][data-cid="{cid}"]')


def test_the_list_has_dates_costs_and_a_search_and_renames_forks_and_deletes(
    page: Page, backend: Backend, console: Console
) -> None:
    first = backend.model.script(
        "zlistone",
        [
            say("Answering.", answer="Team costs 490 dollars."),
            say("Answering.", answer="Enterprise adds zebrafish support."),
        ],
    )
    completed(ask(page, "zlistone: what does Team cost?"))
    page.get_by_test_id("prompt").fill("and Enterprise?")
    page.get_by_test_id("send").click()
    expect(page.get_by_test_id("answer").last).to_contain_text("zebrafish")
    completed(page.locator("#turn .turn").last)
    second = backend.model.script("zlisttwo", [say("Answering.", answer="Community is free.")])
    completed(ask(page, "zlisttwo: is there a free tier?"))
    one, two = first.conversation_id, second.conversation_id
    t1 = first.model.requests[0].turn_id

    # dates (local, short), turns and cost, as the API has them
    rows = {
        r["conversation_id"]: r
        for r in page.request.get(console.base + "/api/conversations").json()
    }
    dates = item(page, one).get_by_test_id("conversation-dates")
    expect(dates).to_have_text(re.compile(r"^updated today \d\d:\d\d · created today \d\d:\d\d$"))
    cost = format_usd(rows[one]["cost_usd"])
    expect(item(page, one).get_by_test_id("conversation-meta")).to_contain_text(
        f"2 turn(s) · {cost}"
    )
    assert rows[one]["cost_usd"] > 0 and rows[one]["created"] <= rows[one]["updated"]
    older = page.evaluate(
        """() => { const y = new Date(Date.now() - 86400000);
          return [humanTime(new Date(2024, 10, 27, 14, 2).getTime() / 1000),
                  humanTime(new Date(y.getFullYear(), y.getMonth(), y.getDate(), 9, 5)
                            .getTime() / 1000)]; }"""
    )
    assert older == ["Nov 27, 2024", "yesterday 09:05"], older

    # the search is the server's: words of an answer, of a question
    search = page.get_by_test_id("conversation-search")
    search.fill("zebrafish")
    expect(page.get_by_test_id("conversation-item")).to_have_count(1)
    expect(item(page, one)).to_be_visible()
    search.fill("free tier")
    expect(page.get_by_test_id("conversation-item")).to_have_count(1)
    expect(item(page, two)).to_be_visible()
    found = page.request.get(console.base + "/api/conversations", params={"search": "ZEBRAFISH"})
    assert [r["conversation_id"] for r in found.json()] == [one]
    search.fill("")
    expect(item(page, two)).to_be_visible()

    # rename: the list shows the new title, and the search finds its words
    item(page, one).get_by_test_id("rename").click()
    page.get_by_test_id("rename-input").fill("Tiers and their quotas")
    page.get_by_test_id("rename-input").press("Enter")
    expect(item(page, one).get_by_test_id("conversation-title")).to_have_text(
        "Tiers and their quotas"
    )
    search.fill("quotas")
    expect(page.get_by_test_id("conversation-item")).to_have_count(1)
    search.fill("")

    # fork at the first turn: a new conversation with that turn alone, its cost per turn
    item(page, one).click()
    page.locator(f'.turn[data-turn="{t1}"] button.fork').click()
    note = page.get_by_test_id("list-note")
    expect(note).to_contain_text(f"forked {one} after turn {t1}")
    fork = (note.text_content() or "").rsplit(": ", 1)[1]
    parent = item(page, fork).get_by_test_id("forked-from")
    expect(parent).to_have_text("forked from Tiers and their quotas")
    expect(parent).to_have_attribute("data-cid", one)
    expect(item(page, fork).get_by_test_id("conversation-meta")).to_contain_text("1 turn(s)")
    past = page.locator("#history .turn.past")
    expect(past).to_have_count(1)
    expect(past.locator(".prompt")).to_have_text("zlistone: what does Team cost?")
    expect(past.get_by_test_id("past-cost")).to_contain_text(re.compile(r"cost \$\d+\.\d{4}"))

    # delete asks first, then says what went
    page.once("dialog", lambda dialog: dialog.dismiss())
    item(page, two).get_by_test_id("delete").click()
    expect(item(page, two)).to_be_visible()
    messages: list[str] = []

    def accept(dialog: Any) -> None:
        messages.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    item(page, two).get_by_test_id("delete").click()
    expect(note).to_contain_text(re.compile(rf"deleted {two}: 1 turn\(s\), \d+ block\(s\)"))
    expect(item(page, two)).to_have_count(0)
    assert "removed for good" in messages[0], messages
    gone = page.request.delete(f"{console.base}/api/conversations/{two}")
    assert gone.status == 404, gone.text()
    screenshot(page, "conversations")
