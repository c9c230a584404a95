"""The workspace tools run both ways: by the node's own executor, and by a tool pool that does
not hold the conversation (the node runs with ``tool_workers=0``, a separate
``ToolExecutorActor`` without files serves ``tools.exec`` on the same nats-server) and reads and
writes the workspace through the owner node (``<prefix>.node.<node>.workspace``). The same
turns give the same results: reads, writes, versions, a path escape refused, a quota
refused, code.exec_python writing files. Real nats-server, LMDB and git in temp dirs, the
sandbox of the node's settings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.actors.pools.tool_executor import ToolExecutorActor
from actline.bus import Bus
from actline.messages import (
    Ack,
    ErrorReply,
    WorkspaceApply,
    WorkspaceChange,
    WorkspaceFetch,
    WorkspaceFiles,
)
from actline.storage import NotStored
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.tools.builtin import BuiltinConfig, register_builtins
from actline.tools.registry import ToolContext, ToolOutput, ToolRegistry
from tests.actors.harness import Scripted, run_turn, say, start_node
from tests.waiting import until

KIB = 1024
Start = Callable[..., Awaitable[Node]]


class Setup:
    """A node, and in the remote way the tool pool beside it."""

    def __init__(self, bus: Bus, tmp_path: Path, way: str) -> None:
        self.bus = bus
        self.tmp_path = tmp_path
        self.way = way
        self.node: Node | None = None
        self.pool: ToolExecutorActor | None = None
        self.registry = ToolRegistry()
        """The pool's tools."""
        self.node_registry = ToolRegistry()
        """The node's: it names the tools its turns may call."""

    async def start(
        self, model: Scripted, *, fetch_limit: int | None = None, **changes: Any
    ) -> Node:
        home = self.tmp_path / "home"
        if self.way == "local":
            self.node = await start_node(self.bus, home, model, **changes)
            return self.node
        self.node = await start_node(
            self.bus, home, model, registry=self.node_registry, tool_workers=0, **changes
        )
        settings = self.node.settings
        config = BuiltinConfig(
            exec_timeout_s=settings.exec_timeout_s,
            exec_memory_mb=settings.exec_memory_mb,
            exec_write_mb=settings.exec_write_mb,
            exec_sandbox=settings.sandbox,
        )
        register_builtins(self.registry, config)
        self.pool = ToolExecutorActor(
            self.bus,
            self.registry,
            node_id="pool-1",
            scratch=self.tmp_path / "pool",
            fetch_limit=fetch_limit,
        )
        await self.pool.start()
        return self.node

    def ran_remotely(self) -> None:
        """In the remote way the calls went to the pool, never to a node executor."""
        assert self.node is not None
        if self.way == "remote":
            assert self.node.executor is None
            assert self.pool is not None and self.pool.stats.calls > 0
            scratch = self.tmp_path / "pool"
            assert not any(scratch.iterdir())  # each call's copy is removed after it

    async def stop(self) -> None:
        if self.pool is not None:
            await self.pool.stop()
        if self.node is not None:
            await self.node.stop()


@pytest.fixture(params=["local", "remote"])
async def setup(request: Any, bus: Bus, tmp_path: Path) -> AsyncIterator[Setup]:
    made = Setup(bus, tmp_path, request.param)
    try:
        yield made
    finally:
        await made.stop()


def outcomes(node: Node, cid: str) -> list[tuple[str, dict[str, Any]]]:
    """(tool, result data) of every tool call of a conversation, in order."""
    tl = node.conversations[cid].tl
    calls = {b.call_id: b.data["tool"] for b in tl.blocks if b.type == TOOL_CALL and b.data}
    return [
        (calls[b.call_id], b.data)
        for b in tl.blocks
        if b.type == TOOL_RESULT and b.call_id in calls and b.path.startswith("tc:") and b.data
    ]


# -- the same turns both ways -------------------------------------------------------------


async def test_files_tools_read_write_and_refuse_escapes(setup: Setup, client: Client) -> None:
    model = Scripted(
        {
            "c1": [
                say(
                    "Writing.",
                    calls=[
                        ("files.write", {"path": "files/notes/a.md", "content": "alpha"}),
                        ("files.write", {"path": "../outside.md", "content": "x"}),
                        ("files.read", {"path": "/etc/hostname"}),
                        ("files.write", {"path": "outputs/report/r.md", "content": "# r"}),
                    ],
                ),
                say("Reading.", calls=[("files.read", {"path": "files/notes/a.md"})]),
                say("Done.", answer="ok"),
            ]
        }
    )
    node = await setup.start(model)
    handle = await run_turn(client, "notes", "c1")
    tid = handle.turn_id
    workspace = node.conversations["c1"].workspace
    assert handle.result.result().status == "completed"
    datas = [d for _, d in outcomes(node, "c1")]
    assert [d["status"] for d in datas] == ["ok", "error", "error", "ok", "ok"]
    assert datas[1]["data"]["code"] == "bad_path" and datas[2]["data"]["code"] == "bad_path"
    assert datas[0]["data"] == {"path": f"fi:{tid}.files/notes/a.md", "size": 5}
    assert datas[4]["content"] == "alpha"
    assert workspace.read(f"fi:{tid}.files/notes/a.md") == b"alpha"
    assert workspace.read(f"fi:{tid}.outputs/report/r.md") == b"# r"
    assert not (setup.tmp_path / "outside.md").exists()
    assert not (setup.tmp_path / "home" / "outside.md").exists()
    setup.ran_remotely()


ESCAPE = """
import pathlib
pathlib.Path("../../escaped.txt").write_text("out")
"""


async def test_exec_python_cannot_write_outside_the_turn_root(setup: Setup, client: Client) -> None:
    model = Scripted(
        {
            "c1": [
                say("Escape.", calls=[("code.exec_python", {"code": ESCAPE})]),
                say("Missing.", calls=[("files.read", {"path": "files/notes/none.md"})]),
                say("Done.", answer="Refused."),
            ]
        }
    )
    node = await setup.start(model)
    handle = await run_turn(client, "try it", "c1")
    assert handle.result.result().status == "completed"
    (_, escape), (_, missing) = outcomes(node, "c1")
    assert escape["status"] == "error"
    assert escape["data"]["code"] in ("exec_refused", "exec_failed")
    assert escape["data"]["files"] == []
    assert missing["status"] == "error" and missing["data"]["code"] == "not_found"
    assert not list(setup.tmp_path.rglob("escaped.txt"))
    setup.ran_remotely()


EXEC_CODE = """
import json, pathlib
data = json.loads(pathlib.Path("files/data/input.json").read_text())
pathlib.Path("outputs/report").mkdir(parents=True, exist_ok=True)
pathlib.Path("outputs/report/total.txt").write_text(str(sum(data["values"])))
pathlib.Path("files/data/input.json").write_text(json.dumps({"values": data["values"] + [4]}))
pathlib.Path("files/data/old.txt").unlink()
pathlib.Path("scratch.csv").write_text("a,b\\n1,2\\n")
print("total", sum(data["values"]))
"""


@pytest.mark.parametrize("mode", ["custom", "git"])
async def test_exec_python_writes_files_that_become_versions_of_the_turn(
    setup: Setup, client: Client, mode: str
) -> None:
    model = Scripted(
        {
            "c1": [
                say(
                    "Writing the data.",
                    calls=[
                        (
                            "files.write",
                            {"path": "files/data/input.json", "content": '{"values": [1, 2, 3]}'},
                        ),
                        ("files.write", {"path": "files/data/old.txt", "content": "old"}),
                    ],
                ),
                say("Running.", calls=[("code.exec_python", {"code": EXEC_CODE})]),
                say("Done.", answer="The total is 6."),
            ]
        }
    )
    node = await setup.start(model, workspace_mode=mode)
    handle = await run_turn(client, "sum the values", "c1")
    assert handle.result.result().status == "completed"
    tid = handle.turn_id
    exec_result = outcomes(node, "c1")[-1][1]
    workspace = node.conversations["c1"].workspace
    assert exec_result["status"] == "ok", exec_result
    assert "total 6" in exec_result["content"]
    assert set(exec_result["data"]["files"]) == {
        f"fi:{tid}.outputs/report/total.txt",
        f"fi:{tid}.files/data/input.json",
        f"fi:{tid}.outputs/exec/scratch.csv",
    }
    assert workspace.read(f"fi:{tid}.outputs/report/total.txt") == b"6"
    assert workspace.read(f"fi:{tid}.files/data/input.json") == b'{"values": [1, 2, 3, 4]}'
    assert workspace.read(f"fi:{tid}.outputs/exec/scratch.csv") == b"a,b\n1,2\n"
    with pytest.raises(NotStored):
        workspace.read(f"fi:{tid}.files/data/old.txt")
    setup.ran_remotely()


async def test_a_later_turn_writes_a_new_version_and_reads_the_old_one(
    setup: Setup, client: Client
) -> None:
    model = Scripted(
        {
            "c1": [
                say("v1.", calls=[("files.write", {"path": "files/app/main.py", "content": "v1"})]),
                say("ok", answer="ok"),
            ]
        }
    )
    node = await setup.start(model)
    t1 = (await run_turn(client, "write v1", "c1")).turn_id
    reader = f"print(open('../{t1}/files/app/main.py').read().strip())"
    model.script(
        "c1",
        [
            say("v2.", calls=[("files.write", {"path": "files/app/main.py", "content": "v2"})]),
            say(
                "Old one.",
                calls=[
                    ("files.read", {"path": f"fi:{t1}.files/app/main.py"}),
                    ("files.read", {"path": "files/app/main.py"}),
                    ("react.pull", {"paths": [f"fi:{t1}.files/app/main.py"]}),
                ],
            ),
            say("Run it.", calls=[("code.exec_python", {"code": reader})]),
            say("ok", answer="ok"),
        ],
    )
    h2 = await run_turn(client, "write v2", "c1")
    t2 = h2.turn_id
    assert h2.result.result().status == "completed"
    workspace = node.conversations["c1"].workspace
    results = [d for tool, d in outcomes(node, "c1") if not tool.startswith("react.")]
    old, new, ran = results[-3], results[-2], results[-1]
    assert old["content"] == "v1" and new["content"] == "v2"
    assert ran["status"] == "ok" and "v1" in ran["content"]
    assert [v["turn_id"] for v in workspace.versions("files", "app/main.py")] == [t1, t2]
    assert workspace.read(f"fi:{t1}.files/app/main.py") == b"v1"
    assert workspace.read(f"fi:{t2}.files/app/main.py") == b"v2"
    setup.ran_remotely()


ROWS = "".join(f"row {i:06d}\n" for i in range(7000))  # 77,000 bytes
BIG_RUN = """
import pathlib
pathlib.Path("files/data").mkdir(parents=True, exist_ok=True)
pathlib.Path("files/data/big.bin").write_bytes(b"x" * (200 * 1024))
pathlib.Path("files/data/small.txt").write_text("small")
print("wrote")
"""


async def test_a_run_or_a_write_past_the_quota_is_refused_and_nothing_is_kept(
    setup: Setup, client: Client
) -> None:
    model = Scripted(
        {
            "c1": [
                say(
                    "Notes.",
                    calls=[("files.write", {"path": "files/notes/a.md", "content": "# kept"})],
                ),
                say("Running.", calls=[("code.exec_python", {"code": BIG_RUN})]),
                say(
                    "Big.",
                    calls=[("files.write", {"path": "files/notes/b.md", "content": ROWS})],
                ),
                say("Done.", answer="Too large."),
            ]
        }
    )
    node = await setup.start(model, quota_workspace_bytes=64 * KIB)
    handle = await run_turn(client, "write a lot", "c1")
    assert handle.result.result().status == "completed"
    tid = handle.turn_id
    (_, wrote), (_, ran), (_, big) = outcomes(node, "c1")
    workspace = node.conversations["c1"].workspace
    assert wrote["status"] == "ok"
    assert ran["status"] == "error", ran
    data = ran["data"]
    assert data["code"] == "quota_exceeded" and data["quota"] == "quota_workspace_bytes"
    assert (data["usage"], data["limit"]) == (len(b"# kept"), 64 * KIB)
    assert data["needed"] >= 200 * KIB and data["files"] == []
    assert "quota_workspace_bytes" in ran["error"] and "wrote" in ran["content"]
    assert big["status"] == "error" and big["data"]["code"] == "quota_exceeded"
    with pytest.raises(NotStored):
        workspace.read(f"fi:{tid}.files/data/small.txt")
    with pytest.raises(NotStored):
        workspace.read(f"fi:{tid}.files/notes/b.md")
    assert node.store.usage("c1").workspace_bytes == len(b"# kept")
    setup.ran_remotely()


LARGE_RUN = """
import pathlib
data = pathlib.Path("files/big/in.txt").read_text()
pathlib.Path("outputs/big").mkdir(parents=True, exist_ok=True)
pathlib.Path("outputs/big/out.txt").write_text(data.upper() * 2)
"""


async def test_files_larger_than_a_message_bound_go_in_chunks(setup: Setup, client: Client) -> None:
    text = "".join(f"line {i:05d}\n" for i in range(600))  # 6,600 bytes
    model = Scripted(
        {
            "c1": [
                say(
                    "Write.", calls=[("files.write", {"path": "files/big/in.txt", "content": text})]
                ),
                say(
                    "Use it.",
                    calls=[
                        ("files.read", {"path": "files/big/in.txt"}),
                        ("code.exec_python", {"code": LARGE_RUN}),
                    ],
                ),
                say("Done.", answer="ok"),
            ]
        }
    )
    node = await setup.start(model, fetch_limit=1000)
    handle = await run_turn(client, "big files", "c1")
    assert handle.result.result().status == "completed"
    tid = handle.turn_id
    _, read, ran = (d for _, d in outcomes(node, "c1"))
    assert read["content"] == text
    assert ran["status"] == "ok", ran
    workspace = node.conversations["c1"].workspace
    assert workspace.read(f"fi:{tid}.outputs/big/out.txt") == (text.upper() * 2).encode()
    setup.ran_remotely()


# -- what the owner refuses -----------------------------------------------------------------


@pytest.fixture
async def held(bus: Bus, tmp_path: Path) -> AsyncIterator[Setup]:
    made = Setup(bus, tmp_path, "remote")
    try:
        yield made
    finally:
        await made.stop()


async def test_the_owner_refuses_conflicts_escapes_quotas_and_turns_not_running(
    held: Setup, bus: Bus, client: Client
) -> None:
    """A pool tool holds its copy of the workspace while the file changes on the owner: its
    write is refused as a conflict, never stored over the newer version. Direct requests show
    the owner's other refusals."""
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        files = ctx.files
        assert files is not None
        before = await asyncio.to_thread(files.workspace.read, f"fi:{ctx.turn_id}.files/notes/a.md")
        started.set()
        await release.wait()
        await asyncio.to_thread(
            files.workspace.write, ctx.turn_id, "files", "notes/a.md", before + b"!"
        )
        return ToolOutput(content="appended")

    held.registry.register("test.hold", hold, schema={"type": "object"})
    held.node_registry.register("test.hold", hold, schema={"type": "object"})
    model = Scripted(
        {
            "c1": [
                say(
                    "Write.",
                    calls=[("files.write", {"path": "files/notes/a.md", "content": "one"})],
                ),
                say("Hold.", calls=[("test.hold", {})]),
                say("Done.", answer="ok"),
            ]
        }
    )
    node = await held.start(model, quota_workspace_bytes=1 * KIB)
    subject = bus.subjects.node_workspace(node.node_id)
    handle = await client.submit("hold it", conversation_id="c1")
    tid = handle.turn_id
    await asyncio.wait_for(started.wait(), 20)
    workspace = node.conversations["c1"].workspace
    workspace.write(tid, "files", "notes/a.md", b"two")  # newer than what the pool read

    async def apply(*changes: WorkspaceChange) -> Any:
        msg = WorkspaceApply(conversation_id="c1", turn_id=tid, call_id="k9", changes=list(changes))
        return await bus.request(subject, msg, raise_remote=False)

    escape = await apply(WorkspaceChange(area="files", rel="notes/../../x.md", data=b"x", size=1))
    attachment = await apply(
        WorkspaceChange(area="user.attachments", rel="x/x.md", data=b"x", size=1)
    )
    big = await apply(
        WorkspaceChange(area="files", rel="data/big.bin", data=b"z" * 2048, size=2048)
    )
    fetched = await bus.request(
        subject,
        WorkspaceFetch(conversation_id="c1", turn_id=tid, areas=["files"]),
        raise_remote=False,
    )
    ok = await apply(WorkspaceChange(area="outputs", rel="o/o.txt", data=b"o", size=1))
    release.set()
    await handle.wait(30)
    assert handle.result.result().status == "completed"
    assert isinstance(escape, ErrorReply) and escape.code == "bad_path"
    assert isinstance(attachment, ErrorReply) and attachment.code == "bad_path"
    assert isinstance(big, ErrorReply) and big.code == "quota_exceeded"
    assert big.detail["quota"] == "quota_workspace_bytes"
    assert isinstance(fetched, WorkspaceFiles)
    assert [(f.path, f.data) for f in fetched.files] == [(f"fi:{tid}.files/notes/a.md", b"two")]
    assert fetched.quota["workspace_bytes"] == 1 * KIB
    assert isinstance(ok, Ack) and ok.detail == f"fi:{tid}.outputs/o/o.txt"
    (_, held_result) = outcomes(node, "c1")[-1]
    assert held_result["status"] == "error"
    assert held_result["data"]["code"] == "workspace_conflict"
    assert held_result["data"]["paths"] == ["files/notes/a.md"]
    assert "were not kept" in held_result["error"]
    assert workspace.read(f"fi:{tid}.files/notes/a.md") == b"two"
    assert workspace.read(f"fi:{tid}.outputs/o/o.txt") == b"o"
    with pytest.raises(NotStored):
        workspace.read(f"fi:{tid}.files/data/big.bin")
    # the turn has ended: it is not served any more; another conversation is not held here
    ended = await bus.request(
        subject, WorkspaceFetch(conversation_id="c1", turn_id=tid), raise_remote=False
    )
    other = await bus.request(
        subject, WorkspaceFetch(conversation_id="c2", turn_id=tid), raise_remote=False
    )
    assert isinstance(ended, ErrorReply) and ended.code == "turn_not_running"
    assert isinstance(other, ErrorReply) and other.code == "not_held"


async def test_a_pool_call_whose_owner_does_not_answer_fails_with_a_clear_error(
    bus: Bus, tmp_path: Path
) -> None:
    from actline.messages import ToolCall, ToolResult

    registry = ToolRegistry()
    register_builtins(registry)
    pool = ToolExecutorActor(bus, registry, scratch=tmp_path / "pool")
    await pool.start()
    try:
        call = ToolCall(
            conversation_id="c1",
            turn_id="t1",
            call_id="k1",
            tool="files.read",
            params={"path": "files/notes/a.md"},
            owner="gone-node",
        )
        reply = await bus.request(bus.subjects.tools_exec, call, timeout=40)
    finally:
        await pool.stop()
    assert isinstance(reply, ToolResult) and not reply.ok
    assert reply.data["code"] == "workspace_unavailable"
    assert "gone-node" in (reply.error or "")
    await until(lambda: not any((tmp_path / "pool").iterdir()))


def test_the_workspace_subject_of_a_node() -> None:
    from actline.messages import SubjectError, Subjects

    assert Subjects("x").node_workspace("n1") == "x.node.n1.workspace"
    with pytest.raises(SubjectError):
        Subjects("x").node_workspace("a.b")
