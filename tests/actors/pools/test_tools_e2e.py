"""Built-in external tools and the workspace inside real turns: a node over a real nats-server,
LMDB in a temp dir, subprocess sandboxes, a local HTTP server on 127.0.0.1 and git."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.storage import Store
from actline.timeline.blocks import NOTICE, TOOL_CALL, TOOL_RESULT
from tests.actors.harness import Scripted, run_turn, say, start_node

PAGE = (
    b"<html><head><title>Widget specs</title></head><body><h1>Widget</h1>"
    b"<p>The widget weighs 4.2 kg and ships in blue.</p></body></html>"
)


@pytest.fixture
def site() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def results(node: Node, cid: str) -> dict[str, dict[str, Any]]:
    """Tool results of a conversation by the tool that was called."""
    tl = node.conversations[cid].tl
    calls = {b.call_id: b.data["tool"] for b in tl.blocks if b.type == TOOL_CALL and b.data}
    out: dict[str, dict[str, Any]] = {}
    for block in tl.blocks:
        if block.type == TOOL_RESULT and block.call_id in calls and block.path.startswith("tc:"):
            assert block.data is not None
            out[calls[block.call_id]] = block.data
    return out


EXEC_CODE = """
import json, pathlib
data = json.loads(pathlib.Path("files/data/input.json").read_text())
pathlib.Path("outputs/report").mkdir(parents=True, exist_ok=True)
pathlib.Path("outputs/report/total.txt").write_text(str(sum(data["values"])))
pathlib.Path("files/data/input.json").write_text(json.dumps({"values": data["values"] + [4]}))
pathlib.Path("scratch.csv").write_text("a,b\\n1,2\\n")
print("total", sum(data["values"]))
"""


@pytest.mark.parametrize("mode", ["custom", "git"])
async def test_exec_python_runs_in_the_turn_workspace_and_its_files_become_versions(
    bus: Bus, client: Client, tmp_path: Path, mode: str
) -> None:
    write = {
        "path": "files/data/input.json",
        "channel": "timeline_text",
        "content": '{"values": [1, 2, 3]}',
        "kind": "file",
    }
    model = Scripted(
        {
            "c1": [
                say("Writing the data.", calls=[("react.write", write)]),
                say("Running.", calls=[("code.exec_python", {"code": EXEC_CODE})]),
                say("Done.", answer="The total is 6."),
            ],
            "c2": [],
        }
    )
    node = await start_node(bus, tmp_path / "home", model, workspace_mode=mode)
    try:
        handle = await run_turn(client, "sum the values", "c1")
        assert handle.result.result().status == "completed"
        exec_result = results(node, "c1")["code.exec_python"]
        workspace = node.conversations["c1"].workspace
        tid = handle.turn_id
        total = workspace.read(f"fi:{tid}.outputs/report/total.txt")
        data = workspace.read(f"fi:{tid}.files/data/input.json")
        turn_root = tmp_path / "home" / "workspaces" / "c1" / tid
        for _ in range(200):  # the turn's folders are cleared just after its result
            if not turn_root.exists():
                break
            await asyncio.sleep(0.05)
    finally:
        await node.stop()
    assert exec_result["status"] == "ok", exec_result
    assert "total 6" in exec_result["content"]
    written = set(exec_result["data"]["files"])
    assert written == {
        f"fi:{tid}.outputs/report/total.txt",
        f"fi:{tid}.files/data/input.json",
        f"fi:{tid}.outputs/exec/scratch.csv",
    }
    assert {a["path"] for a in exec_result["artifacts"]} == written
    assert total == b"6"
    assert data == b'{"values": [1, 2, 3, 4]}'
    # the turn folders on disk are gone once the turn ended (the workspace holds everything)
    assert not turn_root.exists()


ESCAPE = """
import pathlib
pathlib.Path("../../escaped.txt").write_text("out")
"""


async def test_exec_python_failures_come_back_as_errors_the_model_sees(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "c1": [
                say(
                    "Trying.",
                    calls=[
                        ("code.exec_python", {"code": "while True:\n    pass", "timeout_s": 1}),
                    ],
                ),
                say("Again.", calls=[("code.exec_python", {"code": ESCAPE})]),
                say("Done.", answer="Both failed."),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model, exec_timeout_s=5.0)
    try:
        handle = await run_turn(client, "try it", "c1")
        tl = node.conversations["c1"].tl
    finally:
        await node.stop()
    assert handle.result.result().status == "completed"
    outcomes = [b.data for b in tl.blocks if b.type == TOOL_RESULT and b.data and b.call_id]
    timeout, escape = (o for o in outcomes if o.get("data", {}).get("code"))
    assert timeout["status"] == "error" and timeout["data"]["code"] == "exec_timeout"
    assert escape["status"] == "error" and escape["data"]["code"] in ("exec_refused", "exec_failed")
    assert not (tmp_path / "escaped.txt").exists()
    assert not (tmp_path / "home" / "escaped.txt").exists()


WRITER = """
for i in range(40):
    with open(f"part-{i}.bin", "wb") as out:
        out.write(b"x" * 100_000)
"""


async def test_an_exec_run_past_its_write_limit_is_stopped_and_the_model_sees_why(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    """40 files of 100 KB, each far under the per-file limit, 4 MB together: over the
    node's 1 MB write limit (``ACTLINE_EXEC_WRITE_MB``)."""
    model = Scripted(
        {
            "c1": [
                say("Writing.", calls=[("code.exec_python", {"code": WRITER})]),
                say("Done.", answer="It was stopped."),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model, exec_write_mb=1)
    try:
        handle = await run_turn(client, "write a lot", "c1")
        tl = node.conversations["c1"].tl
    finally:
        await node.stop()
    assert handle.result.result().status == "completed"
    [outcome] = [b.data for b in tl.blocks if b.type == TOOL_RESULT and b.data and b.call_id]
    assert outcome["status"] == "error" and outcome["data"]["code"] == "exec_write_limit"
    assert "1 MB write limit" in outcome["error"] and "ACTLINE_EXEC_WRITE_MB" in outcome["error"]
    assert outcome["data"]["files"] == []


async def test_http_fetch_results_join_the_sources_pool_with_stable_sids(
    bus: Bus, client: Client, tmp_path: Path, site: str
) -> None:
    url = f"{site}/widget"
    fetch = ("http.fetch", {"url": url})
    model = Scripted(
        {
            "c1": [
                say("Fetching.", calls=[fetch]),
                say("Again.", calls=[("http.fetch", {"url": url + "#specs"})]),
                say("Done.", answer="The widget weighs 4.2 kg [[S:1]]."),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model, http_allowed_hosts="127.0.0.1")
    try:
        handle = await run_turn(client, "how heavy is the widget?", "c1")
        tl = node.conversations["c1"].tl
    finally:
        await node.stop()
    result = handle.result.result()
    assert result.status == "completed" and result.sources_used == [1]
    rows = tl.sources.rows()
    assert [(r.sid, r.title) for r in rows] == [(1, "Widget specs")]
    fetched = [
        b.data for b in tl.blocks if b.type == TOOL_RESULT and b.data and "sources" in b.data
    ]
    assert len(fetched) == 2 and all(d["sources"][0]["sid"] == 1 for d in fetched)
    assert fetched[0]["content"].startswith("[S:1] Widget specs")
    assert "4.2 kg" in fetched[0]["content"]


async def test_files_tools_are_confined_to_the_workspace(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    model = Scripted(
        {
            "c1": [
                say(
                    "Writing.",
                    calls=[
                        ("files.write", {"path": "files/notes/a.md", "content": "alpha"}),
                        ("files.write", {"path": "../outside.md", "content": "x"}),
                        ("files.read", {"path": "/etc/hostname"}),
                    ],
                ),
                say("Reading.", calls=[("files.read", {"path": "files/notes/a.md"})]),
                say("Done.", answer="ok"),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model)
    try:
        handle = await run_turn(client, "notes", "c1")
        tl = node.conversations["c1"].tl
        stored = node.conversations["c1"].workspace.read(f"fi:{handle.turn_id}.files/notes/a.md")
    finally:
        await node.stop()
    assert handle.result.result().status == "completed"
    datas = [b.data for b in tl.blocks if b.type == TOOL_RESULT and b.data and b.call_id]
    statuses = [d["status"] for d in datas]
    assert statuses == ["ok", "error", "error", "ok"]
    assert datas[1]["data"]["code"] == "bad_path" and datas[2]["data"]["code"] == "bad_path"
    assert datas[3]["content"] == "alpha"
    assert stored == b"alpha"
    assert not (tmp_path / "outside.md").exists()


async def test_a_later_turn_sees_the_workspace_in_announce_and_pulls_history(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    first = {
        "path": "files/app/main.py",
        "channel": "timeline_text",
        "content": "print('v1')\n",
        "kind": "file",
    }
    model = Scripted(
        {"c1": [say("Write.", calls=[("react.write", first)]), say("ok", answer="ok")]}
    )
    home = tmp_path / "home"
    store = Store(home)
    node = await start_node(bus, home, model, store=store)
    try:
        h1 = await run_turn(client, "write v1", "c1")
        t1 = h1.turn_id
        reader = f"print(open('../{t1}/files/app/main.py').read().strip())"
        model.script(
            "c1",
            [
                say("Pull.", calls=[("react.pull", {"paths": [f"fi:{t1}.files/app/main.py"]})]),
                say("Read it.", calls=[("code.exec_python", {"code": reader})]),
                say("ok", answer="ok"),
            ],
        )
        h2 = await run_turn(client, "look at v1", "c1")
        seen = model.models["c1"].requests
        tl = node.conversations["c1"].tl
    finally:
        await node.stop()
        store.close()
    assert h2.result.result().status == "completed"
    announce = seen[0].blocks[-1]["text"]
    assert "active files: 1" in announce and "files/app/main.py" in announce
    assert f"fi:{t1}.files/app/main.py" in seen[2].blocks[-1]["text"]  # pulled, in ANNOUNCE
    outs = [
        b.data for b in tl.blocks if b.type == TOOL_RESULT and b.data and b.turn_id == h2.turn_id
    ]
    assert any("v1" in str(d.get("content", "")) for d in outs)
    assert not [b for b in tl.blocks if b.type == NOTICE and b.turn_id == h2.turn_id]
    await asyncio.sleep(0)


async def test_memsearch_recalls_an_earlier_turn_through_the_persisted_index(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    query = {
        "query": "who is responsible for moving invoices to the new system?",
        "targets": ["user", "assistant"],
    }
    model = Scripted({"c1": [say("Noted.", answer="Noted: Priya owns the billing migration.")]})
    home = tmp_path / "home"
    store = Store(home)
    node = await start_node(bus, home, model, store=store)
    try:
        h1 = await run_turn(client, "Priya owns the billing migration this quarter.", "c1")
        for i in range(3):
            model.script("c1", [say("ok", answer=f"Filler answer {i} about lunch.")])
            await run_turn(client, f"What is for lunch on day {i}?", "c1")
        model.script(
            "c1",
            [say("Searching.", calls=[("react.memsearch", query)]), say("ok", answer="Priya.")],
        )
        await run_turn(client, "remind me who runs that", "c1")
        found = results(node, "c1")["react.memsearch"]
        rows = store.index_rows("c1")
    finally:
        await node.stop()
        store.close()
    assert found["status"] == "ok" and found["ranking"] == "hybrid"
    assert found["hits"][0]["turn_id"] == h1.turn_id
    assert found["hits"][0]["path"] == f"ar:{h1.turn_id}.react.turn.index"
    first = [r for r in rows if r["turn_id"] == h1.turn_id]
    assert {r["role"] for r in first} == {"user", "assistant"}  # written when the turn persisted


async def test_an_mcp_server_from_the_config_serves_tools_in_a_turn(
    bus: Bus, client: Client, tmp_path: Path
) -> None:
    server = Path(__file__).parents[2] / "tools" / "mcp_echo_server.py"
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "echo": {"command": sys.executable, "args": [str(server)], "approval": ["add"]}
                }
            }
        )
    )
    model = Scripted(
        {
            "c1": [
                say("Echo.", calls=[("mcp.echo.echo", {"text": "over stdio"})]),
                say("ok", answer="done"),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model, mcp_config=config)
    try:
        assert "mcp.echo.add" in node.registry
        assert node.registry.approval_required() == ["mcp.echo.add"]  # echo runs unasked
        handle = await run_turn(client, "echo something", "c1")
        echoed = results(node, "c1")["mcp.echo.echo"]
        prompt = node.services.system_prompt if node.services else ""
    finally:
        await node.stop()
    assert handle.result.result().status == "completed"
    assert echoed["status"] == "ok" and echoed["content"] == "over stdio"
    assert "mcp.echo.echo" in prompt
