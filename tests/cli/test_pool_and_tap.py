"""``actline pool models|tools`` and ``actline tap`` as real processes against a real node.

- ``actline tap`` records a turn of a node (the offline extractive model): the request, the
  acceptance, the deltas, the result, each decodable by ``actline.messages``.
- A node with ``streamers=0`` and ``tool_workers=0`` and two pool processes on pool
  credentials (``actline creds pool-models`` / ``pool-tools``): a turn whose model (a local
  Messages API server, reached by the model pool through ``--base-url``) calls
  ``http.fetch`` completes, and the tap sees the round's ``llm.generate``, ``llm.result``,
  ``tool.call`` and ``tool.result``. With the model pool killed the next turn fails at
  once, naming the missing streamer; a model pool started again serves the turn after.
- A pool without NATS, or with credentials that may not serve it, exits 2 naming the fix.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.node.node import Node
from actline.bus import Bus, EmbeddedNats, NoResponders, RequestTimeout, read_identity
from actline.llm import ExtractiveModel
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest, Subjects, from_dict
from actline.tools import KnowledgeSpace
from tests.actors.harness import KB, say, settings
from tests.creds import creds_cli, creds_env
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[2]
READY_S = 60.0
"""Upper bound for a child to print its ready line (not a timing assertion)."""
MODEL = "claude-sonnet-4-5"
PAGE = (
    b"<html><head><title>Widget specs</title></head><body><h1>Widget</h1>"
    b"<p>The widget weighs 4.2 kg and ships in blue.</p></body></html>"
)
FETCHED = "ships in blue"
"""Text of the page that is in a model request only once the tool result is."""


# -- children --------------------------------------------------------------------------------------
class Child:
    """One ``python -m actline ...`` process: started, its stdout kept line by line."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = env
        self.log = log
        self.lines: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, ready: str) -> str:
        """Start it; returns its first line holding ``ready`` (RuntimeError if it exits)."""
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "actline", *self.args,
                cwd=ROOT, env=self.env, stdout=asyncio.subprocess.PIPE, stderr=log,
            )  # fmt: skip
        self._reader = asyncio.create_task(self._read())
        await until(lambda: self.said(ready) is not None or self.exited, timeout=READY_S)
        line = self.said(ready)
        if line is None:
            raise RuntimeError(f"{self.args} exited: {self.lines} {self.log.read_text()}")
        return line

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def said(self, text: str) -> str | None:
        return next((line for line in self.lines if text in line), None)

    @property
    def exited(self) -> bool:
        return self.proc is not None and self.proc.returncode is not None

    async def stop(self, sig: int = signal.SIGINT) -> int:
        """Send ``sig`` and wait for the exit code (SIGKILL if it hangs)."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        try:
            code = await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            code = await self.proc.wait()
        if self._reader is not None:
            await self._reader
        return code


def child_env(prefix: str, home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ACTLINE_") and k not in ("NATS_URL", "ANTHROPIC_API_KEY")
    }
    env |= {"ACTLINE_SUBJECT_PREFIX": prefix, "PYTHONPATH": str(ROOT), "ACTLINE_HOME": str(home)}
    env |= {"ACTLINE_EMBEDDINGS": "0", "COLUMNS": "250"}
    return env | extra


@pytest.fixture
async def children() -> AsyncIterator[list[Child]]:
    """Children of the test, each stopped after it."""
    started: list[Child] = []
    yield started
    for child in started:
        if child.proc is not None:
            await child.stop(signal.SIGKILL)


def tap(url: str, prefix: str, tmp_path: Path, jsonl: Path, *extra: str) -> Child:
    creds = creds_env(url, "admin", prefix=prefix)["ACTLINE_NATS_CREDS"]
    args = ["tap", "--nats", url, "--creds", creds, "--jsonl", str(jsonl), *extra]
    return Child(args, child_env(prefix, tmp_path / "tap-home"), tmp_path / "tap.log")


def records(jsonl: Path) -> list[dict[str, Any]]:
    if not jsonl.exists():
        return []
    lines = jsonl.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def kinds_of(jsonl: Path) -> set[str]:
    return {r["kind"] for r in records(jsonl) if r["kind"]}


# -- the tap on a node's turn ----------------------------------------------------------------------
async def test_the_tap_records_a_turns_messages_each_decodable(
    nats_server: EmbeddedNats,
    bus: Bus,
    subject_names: Subjects,
    tmp_path: Path,
    children: list[Child],
) -> None:
    node = Node(
        bus,
        settings(tmp_path / "home"),
        model=ExtractiveModel(),
        knowledge=KnowledgeSpace(KB),
    )
    await node.start()
    client = Client(bus)
    jsonl, three = tmp_path / "tap.jsonl", tmp_path / "three.jsonl"
    watcher = tap(nats_server.url, subject_names.prefix, tmp_path, jsonl)
    counted = tap(nats_server.url, subject_names.prefix, tmp_path, three, "--count", "3")
    timed = tap(
        nats_server.url, subject_names.prefix, tmp_path, tmp_path / "t.jsonl", "--seconds", "0.5"
    )
    children.extend([watcher, counted, timed])
    try:
        ready, *_ = await asyncio.gather(
            watcher.start("tapping"), counted.start("tapping"), timed.start("tapping")
        )
        assert "_INBOX.>" in ready  # admin credentials: the replies too
        await bus.nc.publish(subject_names.stream("c1"), b"\xc1 not msgpack")
        handle = await client.submit("How do the pricing tiers differ?", conversation_id="c1")
        result = await handle.wait(60)
        assert result.status == "completed"
        await until(lambda: "turn.result" in kinds_of(jsonl), timeout=20)
        assert await watcher.stop(signal.SIGINT) == 0
        await until(lambda: counted.exited and timed.exited, timeout=20)  # on their own
        assert (await counted.stop(), await timed.stop()) == (0, 0)
    finally:
        await client.close()
        await node.stop()
    assert len(records(three)) == 3
    assert counted.lines[-1].startswith("tap: 3 messages")
    seen = records(jsonl)
    garbage = [r for r in seen if r["kind"] is None]
    assert len(garbage) == 1 and "msgpack" in garbage[0]["error"]  # shown, the tap went on
    assert "undecodable" in "\n".join(watcher.lines)
    seen = [r for r in seen if r["kind"] is not None]
    kinds = {r["kind"] for r in seen}
    assert {"turn.request", "turn.accepted", "stream.delta", "turn.result"} <= kinds, kinds
    assert "react.progress" in kinds
    for record in seen:  # every message of the turn decodes, and its dict is the message
        message = from_dict(record["message"])
        assert message.kind == record["kind"]
        assert record["size"] > 0
        assert record["subject"].startswith(subject_names.prefix + ".") or record[
            "subject"
        ].startswith("_INBOX.")
    mine = [r for r in seen if r["ids"].get("turn_id") == handle.turn_id]
    assert [r["kind"] for r in mine].count("turn.request") == 1  # not again as delivered
    assert {"turn.request", "turn.accepted", "stream.delta", "turn.result"} <= {
        r["kind"] for r in mine
    }
    shown = "\n".join(watcher.lines)
    assert f"{subject_names.prefix}.stream.c1 stream.delta" in shown
    assert watcher.lines[-1].startswith("tap: ")


# -- pools as processes ----------------------------------------------------------------------------
class FetchingPolicy:
    """A model that fetches the page first, then answers from it."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        seen = json.dumps(request.blocks)
        if FETCHED in seen:
            yield say("The page says.", answer="The widget weighs 4.2 kg.")
        else:
            yield say("Fetching the page.", calls=[("http.fetch", {"url": self.url})])


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
        yield f"http://127.0.0.1:{server.server_address[1]}/specs"
    finally:
        server.shutdown()
        server.server_close()


def pool(kind: str, url: str, prefix: str, tmp_path: Path, *extra: str, **env: str) -> Child:
    creds = creds_env(url, f"pool-{kind}", prefix=prefix)["ACTLINE_NATS_CREDS"]
    args = ["pool", kind, "--nats", url, "--creds", creds, "--concurrency", "4", *extra]
    home = tmp_path / f"pool-{kind}"
    return Child(args, child_env(prefix, home, **env), tmp_path / f"pool-{kind}.log")


async def no_streamer(admin: Bus, subject: str) -> bool:
    """True once the server has no subscriber left on ``subject`` (a killed pool's
    connection is gone)."""
    try:
        await admin.request(subject, GenerateRequest(conversation_id="x", turn_id="x"), timeout=0.5)
    except NoResponders:
        return True
    except RequestTimeout:
        return False
    return False


async def test_pools_as_processes_serve_a_turn_and_a_killed_pool_fails_the_next_at_once(
    nats_server: EmbeddedNats,
    bus: Bus,
    subject_names: Subjects,
    tmp_path: Path,
    site: str,
    children: list[Child],
) -> None:
    url, prefix = nats_server.url, subject_names.prefix
    admin_creds = creds_env(url, "admin", prefix=prefix)["ACTLINE_NATS_CREDS"]
    admin = await Bus.connect(url, subject_names=subject_names, creds=admin_creds)
    async with FakeAnthropicServer(FetchingPolicy(site)) as llm:
        model_args = ("--model", MODEL, "--base-url", llm.base_url)
        models = pool("models", url, prefix, tmp_path, *model_args, ANTHROPIC_API_KEY="test")
        tools = pool("tools", url, prefix, tmp_path, ACTLINE_HTTP_ALLOW="127.0.0.1")
        jsonl = tmp_path / "tap.jsonl"
        watcher = tap(url, prefix, tmp_path, jsonl, "--kinds", "llm.generate,llm.result,"
                      "tool.call,tool.result", "--conversation", "c1")  # fmt: skip
        children.extend([models, tools, watcher])
        started = await asyncio.gather(
            models.start("serving"), tools.start("serving"), watcher.start("tapping")
        )
        assert f"pool models serving {subject_names.llm_generate}" in started[0]
        assert "http.fetch" in started[1]
        node = Node(
            bus,
            settings(tmp_path / "home", model=MODEL, streamers=0, tool_workers=0),
            knowledge=KnowledgeSpace(KB),
        )
        await node.start()
        client = Client(bus)
        try:
            assert node.streamer is None and node.executor is None
            first = await (
                await client.submit("What does the widget weigh?", conversation_id="c1")
            ).wait(60)
            assert first.status == "completed", first.error
            assert "4.2 kg" in first.answer
            want = {"llm.generate", "llm.result", "tool.call", "tool.result"}
            await until(lambda: want <= kinds_of(jsonl), timeout=20)
            assert await watcher.stop() == 0

            assert await models.stop(signal.SIGKILL) == -signal.SIGKILL
            await until(lambda: no_streamer(admin, subject_names.llm_generate), timeout=20)
            second = await (await client.submit("And its colour?", conversation_id="c2")).wait(60)
            assert second.status == "failed"
            assert "no streamer answered" in (second.error or ""), second.error

            again = pool("models", url, prefix, tmp_path, *model_args, ANTHROPIC_API_KEY="t")
            children.append(again)
            await again.start("serving")
            third = await (
                await client.submit("What does the widget weigh?", conversation_id="c3")
            ).wait(60)
            assert third.status == "completed", third.error
            assert await again.stop(signal.SIGTERM) == 0
            assert await tools.stop(signal.SIGINT) == 0
        finally:
            await client.close()
            await node.stop()
            await admin.close()
    tapped = records(jsonl)
    assert {r["ids"].get("conversation_id") for r in tapped} == {"c1"}
    calls = [r for r in tapped if r["kind"] == "tool.call"]
    assert calls and calls[0]["message"]["tool"] == "http.fetch"
    results = [r for r in tapped if r["kind"] == "tool.result"]
    assert results[0]["message"]["ok"] is True
    assert any(r["subject"].startswith("_INBOX.") for r in results)
    assert "pool models stopping" in again.lines[-1]


async def test_a_pool_without_nats_or_with_client_credentials_says_what_to_do(
    nats_server: EmbeddedNats, subject_names: Subjects, tmp_path: Path
) -> None:
    env = child_env(subject_names.prefix, tmp_path / "home")
    nowhere = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "actline", "pool", "tools",
        cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    _, err = await nowhere.communicate()
    assert nowhere.returncode == 2
    assert "--nats URL" in err.decode()

    closed = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "actline", "pool", "models", "--nats", "nats://127.0.0.1:9",
        "--insecure", "--model", "extractive",
        cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    _, err = await closed.communicate()
    assert closed.returncode == 2
    assert "cannot reach NATS at nats://127.0.0.1:9" in err.decode()
    assert "--nats URL" in err.decode()

    client = creds_env(nats_server.url, "client", prefix=subject_names.prefix)
    wrong = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "actline", "pool", "models", "--nats", nats_server.url,
        "--creds", client["ACTLINE_NATS_CREDS"], "--model", "extractive",
        cwd=ROOT, env=env, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    _, err = await wrong.communicate()
    text = " ".join(err.decode().split())
    assert wrong.returncode == 2, text
    assert f"may not subscribe to '{subject_names.llm_generate}'" in text
    assert "actline creds pool-models" in text


def test_creds_issues_the_pool_roles(tmp_path: Path) -> None:
    for role, serves in (("pool-models", "al.llm.generate"), ("pool-tools", "al.tools.exec")):
        out = tmp_path / f"{role}.creds"
        done = creds_cli(tmp_path / "home", role, "--out", str(out))
        assert done.returncode == 0, done.stderr
        identity = read_identity(out)
        assert (identity.role, identity.prefix) == (role, "al")
        assert identity.permissions.may_subscribe(serves)
        assert not identity.permissions.may_subscribe("al.turn.submit")
