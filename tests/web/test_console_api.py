"""The console's HTTP side on real parts: an embedded nats-server and node (the offline
model over examples/kb), the Starlette app served by uvicorn on a free port, and aiohttp as
the browser (token, JSON API, server-sent events)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvicorn

from actline.actors.client.client import Client
from actline.actors.conversation.title import heuristic_title
from actline.bus import Bus
from actline.config import Config
from actline.runtime import Runtime
from actline.web import make_app
from tests.waiting import until

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"
TOKEN = "test-token-0123456789"
Event = dict[str, Any]


def RESULT(event: Event) -> bool:
    return bool(event["type"] == "result")


def WAITING(event: Event) -> bool:
    return bool(event["type"] == "card" and event["card_kind"] == "waiting")


@dataclass
class Console:
    rt: Runtime
    base: str
    http: aiohttp.ClientSession
    """A session that sent the token once (the page's cookie)."""

    async def get(self, path: str) -> Any:
        async with self.http.get(self.base + path) as res:
            assert res.status == 200, await res.text()
            return await res.json()

    async def post(self, path: str, body: dict[str, Any], status: int = 200) -> Any:
        async with self.http.post(self.base + path, json=body) as res:
            assert res.status == status, await res.text()
            return await res.json()

    async def events(
        self, cid: str, last: Callable[[Event], bool] = RESULT, into: list[Event] | None = None
    ) -> list[Event]:
        """The conversation's SSE events (from the first) up to the first ``last`` holds for,
        appended to ``into`` as they come."""
        seen: list[Event] = [] if into is None else into
        async with self.http.get(f"{self.base}/events/{cid}") as res:
            assert res.headers["content-type"].startswith("text/event-stream")
            async for raw in res.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:].strip()))
                    if last(seen[-1]):
                        return seen
        raise AssertionError(f"the stream ended first: {seen}")


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[Console]:
    env = {"ACTLINE_HOME": str(tmp_path / "home"), "ACTLINE_DOCS": str(KB)}
    env["ACTLINE_FOLLOWUP_GRACE"] = "0"
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    async with Runtime(Config.load(env=env)) as rt:
        server = uvicorn.Server(
            uvicorn.Config(make_app(rt, TOKEN), log_level="warning", lifespan="on")
        )
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        await until(lambda: server.started)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        jar = aiohttp.CookieJar(unsafe=True)  # the cookie of an IP address host
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            async with http.get(f"{base}/?token={TOKEN}") as res:
                assert res.status == 200
            yield Console(rt, base, http)
        server.should_exit = True
        await serving


async def test_without_the_token_every_route_is_refused_and_the_page_sets_a_cookie(
    console: Console,
) -> None:
    async with aiohttp.ClientSession() as stranger:
        for path in ("/", "/api/conversations", "/events/c1", "/static/console.js"):
            async with stranger.get(console.base + path) as res:
                assert res.status == 401 and "token required" in await res.text(), path
        async with stranger.get(f"{console.base}/api/agents?token=wrong") as res:
            assert res.status == 401
        async with stranger.get(f"{console.base}/?token={TOKEN}") as res:
            cookie = res.headers["set-cookie"]
            page = await res.text()
    assert "actline_console=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert 'data-testid="connection"' in page and "/static/console.js" in page
    assert await console.get("/api/conversations") == []  # the cookie alone is enough


async def test_a_turn_streams_in_order_and_shows_in_the_list_timeline_and_read(
    console: Console,
) -> None:
    turn = await console.post("/api/turns", {"text": "How do the pricing tiers differ?"})
    cid = turn["conversation_id"]
    events = await console.events(cid)
    types = [e["type"] for e in events]
    assert types[0] == "connection" and events[0]["state"] == "connected"
    assert types.index("accepted") < types.index("card") < types.index("result")
    cards = [e for e in events if e["type"] == "card"]
    assert cards[0]["card_kind"] == "thinking" and cards[-1]["card_kind"] == "complete"
    answer = "".join(e["text"] for e in events if e["type"] == "delta" and e["channel"] == "answer")
    result = events[-1]
    assert result["status"] == "completed" and result["turn_id"] == turn["turn_id"]
    assert answer.strip() and result["answer"]
    [source] = result["sources"]
    assert source["sid"] in result["sources_used"] and source["url"] in result["answer"]
    assert "cache_read_pct" in result and result["prompt_tokens"] > 0

    call_card = next(c for c in cards if c["card_kind"] == "tool_call")
    calls = await console.get(
        f"/api/turns/{turn['turn_id']}/rounds/{call_card['round']}/calls?conversation_id={cid}"
    )
    assert [c["tool"] for c in calls] == call_card["detail"].split(", ")
    assert calls[0]["params"] and calls[0]["results"][0]["path"].startswith("tc:")

    traced: list[Event] = []

    async def flushed() -> bool:  # the trace sink may write just after the result
        async with console.http.get(f"{console.base}/api/turns/{turn['turn_id']}/trace") as res:
            traced.append(await res.json())
            return res.status == 200

    await until(flushed)
    trace = traced[-1]
    assert trace["session"]["turn_id"] == turn["turn_id"] and trace["spans"]
    assert all(span["offset_ms"] >= 0 for span in trace["spans"])

    [row] = await console.get("/api/conversations")
    assert row["conversation_id"] == cid and row["turns"] == 1
    # titled by the gate: offline, the first question's key phrase
    assert row["title"] == heuristic_title("How do the pricing tiers differ?")
    assert row["last_status"] == "completed"

    [stored] = await console.get(f"/api/conversations/{cid}/turns")
    assert stored["turn_id"] == turn["turn_id"]
    assert stored["prompt"] == "How do the pricing tiers differ?"
    assert stored["answer"].strip()

    timeline = await console.get(f"/api/conversations/{cid}/timeline")
    assert len(timeline["rendered"]["cache_marks"]) == 3
    states = {b["state"] for b in timeline["blocks"]}
    assert states <= {"visible", "hidden", "pruned", "summarised"} and "visible" in states
    block = next(b for b in timeline["blocks"] if b["path"] and b["text"])
    read = await console.get(f"/api/conversations/{cid}/read?path={block['path']}")
    assert read["path"] == block["path"] and block["text"][:40] in read["text"]

    notes = [{"name": "notes.md", "content_b64": "IyBub3Rlcwo="}]
    attached = await console.post(
        "/api/turns", {"text": "Summarise my notes", "attachments": notes}
    )
    assert attached["turn_id"] and attached["conversation_id"] != cid
    wrong = [{"name": "notes.md", "content_b64": "not base64!"}]
    refused = await console.post("/api/turns", {"text": "x", "attachments": wrong}, status=400)
    assert "attachments[0].content_b64" in refused["error"]
    bad = await console.post("/api/turns", {"text": ""}, status=400)
    assert "'text'" in bad["error"]
    missing = await console.post("/api/turns", {"text": "x", "conversation_id": "a b"}, status=400)
    assert "conversation_id" in missing["error"]


async def test_a_turn_another_client_submits_streams_live_to_the_page_once(
    console: Console,
) -> None:
    """A Ray job or ``actline ask`` drives the conversation; the page that shows it sees the
    turn live (cards, deltas, result with its sources), each event once."""
    first = await console.post("/api/turns", {"text": "How do the pricing tiers differ?"})
    cid = first["conversation_id"]
    await console.events(cid)  # the page shows the conversation (its own turn, to the result)
    creds = console.rt.config.creds_for("client")
    other_bus = await Bus.connect(console.rt.nats_url, name="another-client", creds=creds)
    other = Client(other_bus)
    try:
        seen: list[Event] = []

        def theirs(event: Event) -> bool:
            return RESULT(event) and event["turn_id"] != first["turn_id"]

        watching = asyncio.ensure_future(console.events(cid, theirs, into=seen))
        await until(lambda: bool(seen))  # the stream is open: the console follows cid
        handle = await other.submit("What does the SLA cover?", conversation_id=cid)
        result = await handle.wait(30)
        await asyncio.wait_for(watching, 30)
        listed = await console.get("/api/conversations")
    finally:
        await other.close()
        await other_bus.close()
    tid = handle.turn_id
    live = [e for e in seen if e.get("turn_id") == tid]
    kinds = [e["type"] for e in live]
    assert kinds[0] == "accepted" and kinds[-1] == "result" and kinds.count("result") == 1
    wire = [c.round for c in handle.cards]
    assert [e["round"] for e in live if e["type"] == "card"] == wire  # each card once, in order
    answer = "".join(e["text"] for e in live if e["type"] == "delta" and e["channel"] == "answer")
    assert answer == handle.text("answer") and answer.strip()
    shown = live[-1]
    assert shown["status"] == "completed" == result.status and shown["answer"] == result.answer
    assert {s["sid"] for s in shown["sources"]} == set(result.sources_used)
    own = [e for e in seen if e.get("turn_id") == first["turn_id"]]
    assert len([e for e in own if e["type"] == "result"]) == 1  # the console's own: not twice
    [row] = [c for c in listed if c["conversation_id"] == cid]
    assert row["turns"] == 2


async def test_a_turn_takes_its_settings_and_bad_ones_are_refused_naming_the_key(
    console: Console,
) -> None:
    turn = await console.post(
        "/api/turns", {"text": "How do the pricing tiers differ?", "config": {"max_iterations": 1}}
    )
    events = await console.events(turn["conversation_id"])
    result = events[-1]
    assert result["turn_id"] == turn["turn_id"] and result["rounds"] == 1  # one round allowed
    for config, named in (
        ({"max_iterations": 0}, "config.max_iterations"),
        ({"temperature": 2}, "config.temperature"),
        ("fast", "'config' must be an object"),
    ):
        refused = await console.post("/api/turns", {"text": "x", "config": config}, status=400)
        assert named in refused["error"], refused
    unknown = await console.post(
        "/api/turns", {"text": "How much is Team?", "config": {"profile": "no-such-profile"}}
    )
    shown = (await console.events(unknown["conversation_id"]))[-1]
    assert shown["status"] == "failed" and "no-such-profile" in shown["error"]


async def test_a_waiting_turn_lists_its_agent_and_completes_on_a_done_from_the_console(
    console: Console,
) -> None:
    ask = "Check the retention settings and ask reviewer to review them"
    turn = await console.post("/api/turns", {"text": ask})
    cid, tid = turn["conversation_id"], turn["turn_id"]
    waiting = await console.events(cid, WAITING)
    assert "reviewer" in waiting[-1]["detail"] and waiting[-1]["turn_id"] == tid
    agents: list[dict[str, Any]] = []

    async def listed() -> bool:
        agents[:] = await console.get("/api/agents")
        return any(a["name"] == "reviewer" and a["open_tasks"] for a in agents)

    await until(listed, timeout=30)
    [reviewer] = [a for a in agents if a["name"] == "reviewer"]
    [task] = reviewer["open_tasks"]
    assert task["turn_id"] == tid and "reviewer" in task["text"]
    wrong = [{"name": "../up.md", "content_b64": "eA=="}]
    refused = await console.post(
        f"/api/turns/{tid}/followup",
        {"conversation_id": cid, "text": "x", "attachments": wrong},
        status=409,
    )
    assert refused["code"] == "invalid_input" and "attachments[0].name" in refused["error"]
    schedule = [{"name": "schedule.md", "content_b64": "YmFja3VwcyBhdCAwMjowMAo="}]
    joined = await console.post(
        f"/api/turns/{tid}/followup",
        {"conversation_id": cid, "text": "also the backups", "attachments": schedule},
    )
    assert joined["ok"] is True
    done = {"task_id": task["task_id"], "summary": "retention looks right"}
    assert (await console.post("/api/agents/reviewer/done", done))["ok"] is True
    events = await console.events(cid)
    result = events[-1]
    assert result["status"] == "completed" and "retention looks right" in result["answer"]
    kinds = [e["card_kind"] for e in events if e["type"] == "card"]
    assert "waiting" in kinds and kinds.index("waiting") < len(kinds) - 1
    timeline = await console.get(f"/api/conversations/{cid}/timeline")
    [attached] = [b for b in timeline["blocks"] if str(b["path"]).endswith("/schedule.md")]
    assert f"fi:{tid}.external.followup.attachments/" in attached["path"]
    assert "backups at 02:00" in attached["text"]
    late = await console.post("/api/agents/reviewer/done", done, status=409)
    assert late["code"] and late["error"]


async def test_skip_from_the_console_resumes_a_waiting_turn(console: Console) -> None:
    turn = await console.post("/api/turns", {"text": "Ask reviewer to check the quotas"})
    cid, tid = turn["conversation_id"], turn["turn_id"]
    await console.events(cid, WAITING)
    assert (await console.post(f"/api/turns/{tid}/skip", {"conversation_id": cid}))["ok"]
    events = await console.events(cid)
    assert events[-1]["status"] == "completed" and events[-1]["turn_id"] == tid


async def test_cancel_from_the_console_ends_a_waiting_turn(console: Console) -> None:
    turn = await console.post("/api/turns", {"text": "Ask reviewer to check the quotas"})
    cid, tid = turn["conversation_id"], turn["turn_id"]
    await console.events(cid, WAITING)
    assert (await console.post(f"/api/turns/{tid}/cancel", {"conversation_id": cid}))["ok"]
    events = await console.events(cid)
    assert events[-1]["status"] == "cancelled"


async def test_a_nats_restart_is_announced_and_the_console_keeps_working(
    console: Console,
) -> None:
    seen: list[Event] = []

    async def collect() -> None:
        await console.events("c-watch", lambda e: False, into=seen)

    watching = asyncio.create_task(collect())
    server = console.rt.server
    assert server is not None
    try:
        await until(lambda: len(seen) > 0)
        await asyncio.to_thread(server.restart)

        def back() -> bool:
            states = [e["state"] for e in seen if e["type"] == "connection"]
            return states[-2:] == ["reconnecting", "connected"]

        await until(back, timeout=30)
    finally:
        watching.cancel()
    turn = await console.post("/api/turns", {"text": "How do the pricing tiers differ?"})
    events = await console.events(turn["conversation_id"])
    assert events[-1]["status"] == "completed"


async def test_a_gated_tool_call_is_approved_from_the_console(console: Console) -> None:
    gated = {"approve_tools": ["react.search_knowledge"]}
    handle = await console.rt.submit("How do the pricing tiers differ?", config=gated)
    card = await handle.wait_for("waiting", detail="approval", timeout=30)
    [pending] = card.data["approvals"]
    path = f"/api/turns/{handle.turn_id}"
    wrong = await console.post(f"{path}/deny", {"approval_id": "ap-nope"}, status=409)
    assert wrong["code"] == "unknown_approval"
    ok = await console.post(f"{path}/approve", {"approval_id": pending["approval_id"]})
    assert ok["ok"] is True and "approved by client " in ok["detail"], ok
    assert (await handle.wait(30)).status == "completed"


async def test_conversations_are_searched_renamed_forked_and_deleted_but_not_while_busy(
    console: Console,
) -> None:
    first = await console.post("/api/turns", {"text": "How do the pricing tiers differ?"})
    cid = first["conversation_id"]
    assert (await console.events(cid))[-1]["status"] == "completed"
    waiting = await console.post(
        "/api/turns", {"text": "Ask reviewer to check the quotas", "conversation_id": cid}
    )
    await console.events(cid, WAITING)

    async def call(method: str, path: str, body: Any = None, status: int = 200) -> Any:
        async with console.http.request(method, console.base + path, json=body) as res:
            assert res.status == status, await res.text()
            return await res.json()

    busy = await call("PATCH", f"/api/conversations/{cid}", {"title": "Tiers"}, status=409)
    assert busy["code"] == "conversation_busy" and waiting["turn_id"] in busy["error"]
    await call("DELETE", f"/api/conversations/{cid}", status=409)
    fork = await call(
        "POST", f"/api/conversations/{cid}/fork", {"at": 1, "title": "Tiers zanzibar"}
    )
    assert fork["forked_from"] == [cid, first["turn_id"]] and fork["turns"] == 1, fork
    await call("POST", f"/api/conversations/{cid}/fork", {}, status=400)  # no 'at'
    assert await console.post(f"/api/turns/{waiting['turn_id']}/cancel", {"conversation_id": cid})
    await console.events(cid)

    renamed = await call("PATCH", f"/api/conversations/{cid}", {"title": "Pricing tiers"})
    assert renamed["title"] == "Pricing tiers"
    found = await console.get("/api/conversations?search=pricing%20TIERS")
    assert {r["conversation_id"] for r in found} == {cid, fork["conversation_id"]}
    assert all(r["cost_usd"] is not None and r["created"] <= r["updated"] for r in found)
    assert [
        r["conversation_id"] for r in await console.get("/api/conversations?search=zanzibar")
    ] == [fork["conversation_id"]]
    gone = await call("DELETE", f"/api/conversations/{cid}")
    assert gone["conversation_id"] == cid and gone["turns"] == 2 and gone["blocks"] > 0, gone
    await call("DELETE", f"/api/conversations/{cid}", status=404)
    left = await console.get("/api/conversations")
    assert [r["conversation_id"] for r in left] == [fork["conversation_id"]]
