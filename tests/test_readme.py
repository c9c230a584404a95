"""The README's Python examples run as written (with their free names supplied)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from actline.bus import Bus, EmbeddedNats, Envelope
from actline.messages import Message, TurnRequest
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, re.S)


def _block(marker: str) -> str:
    matches = [b for b in BLOCKS if marker in b]
    assert len(matches) == 1, marker
    return matches[0]


def test_the_channels_example_runs() -> None:
    sent: list[Any] = []
    chunks = [
        "<channel:thinking>hm</channel:thinking><channel:ans",
        "wer>See [[S:1",
        "]].</channel:answer>",
    ]
    scope: dict[str, Any] = {"model_chunks": chunks, "send": sent.append}
    exec(_block("ChannelStream"), scope)
    answer = "".join(d.text for d in sent if d.channel == "answer")
    assert answer == "See [Release notes](https://example.com/notes)."
    assert scope["stream"].result["answer"].raw == "See [[S:1]]."


async def test_the_wire_example_publishes_a_turn_request(nats_server: EmbeddedNats) -> None:
    listener = await Bus.connect(nats_server.url)
    got: list[Message] = []

    async def on_turn(msg: Message, env: Envelope) -> None:
        got.append(msg)

    await listener.subscribe(listener.subjects.turn_submit, on_turn)
    code = _block("turn.request").replace("nats://127.0.0.1:4222", nats_server.url)
    code = code.replace('"client.creds"', repr(str(nats_server.creds_path("client"))))
    scope: dict[str, Any] = {}
    exec(
        "async def _example():\n" + textwrap.indent(code, "    ") + "    await bus.close()\n", scope
    )
    await scope["_example"]()
    await listener.flush()
    await listener.close()  # drains: the published message has been handled
    assert len(got) == 1 and isinstance(got[0], TurnRequest)
    assert got[0].text == "What changed in the release?"


def test_the_timeline_example_runs() -> None:
    scope: dict[str, Any] = {}
    exec(_block("Renderer(tl"), scope)
    result = scope["result"]
    assert result.marks == (0, 1)
    assert result.parts()[-1]["text"].startswith("[ANNOUNCE]")
    assert "ar:t1.user.prompt" in result.text()


def test_the_storage_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from actline.timeline import Block, Timeline

    monkeypatch.chdir(tmp_path)
    timeline = Timeline("c-1")
    timeline.begin_turn("t1", 1.0)
    timeline.append(Block.new("user.prompt", "t1", 2.0, path="ar:t1.user.prompt", text="Hi"))
    scope: dict[str, Any] = {"timeline": timeline}
    exec(_block('Store(".actline")'), scope)
    assert scope["revision"] == 1
    assert [b.text for b in scope["loaded"].blocks] == ["", "Hi"]


def test_the_models_example_reads_from_the_cache_the_second_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exec(_block("FakeAnthropicServer()"), {"__name__": "readme"})
    written, read = (int(x) for x in capsys.readouterr().out.split())
    assert written > 1024 and read == written


def test_the_actors_example_runs_a_turn(capsys: pytest.CaptureFixture[str]) -> None:
    exec(_block("Node(bus, settings"), {"__name__": "readme"})
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("completed ")
    assert "'thinking'" in out[1] and "'complete'" in out[1]
    assert out[2].strip()


def test_the_tools_example_writes_and_patches_a_versioned_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    exec(_block('open_workspace("custom"'), {"__name__": "readme"})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "fi:t2.files/app/hello.py"
    assert out[1] == "b\"print('hello')\\n\" b\"print('hello, world')\\n\""


def test_the_python_api_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the runtime keeps its LMDB under ./.actline
    monkeypatch.delenv("NATS_URL", raising=False)
    code = _block("from actline import Config, Runtime").replace(
        'docs="examples/kb"', f'docs="{ROOT / "examples" / "kb"}"'
    )
    exec(code, {"__name__": "readme"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("completed ")
    assert lines[1] == "TurnAccepted" and lines[-1] == "ReActResult"
    assert "StreamDelta" in lines and "ReActProgress" in lines


def test_the_custom_tool_example_runs_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NATS_URL", raising=False)
    exec(_block("@hooks.pre"), {"__name__": "readme"})
    paris, atlantis = capsys.readouterr().out.strip().splitlines()
    assert "It is 18 degrees and sunny in Paris." in paris  # the offline model called the tool
    assert "refused by pre hook no_atlantis: Atlantis is not on the map" in atlantis


def _actline(line: str) -> list[str]:
    """A README command line as argv, run with this interpreter."""
    words = shlex.split(line.split("  #", 1)[0].rstrip(" &"))
    assert words[0] == "actline", line
    return [sys.executable, "-m", "actline", *words[1:]]


def test_the_command_line_example_runs(tmp_path: Path) -> None:
    block = re.search(r"## Command line.*?```sh\n(.*?)```", README, re.S)
    assert block is not None
    lines = [line for line in block.group(1).splitlines() if line.strip()]
    serve, agent, ask, chat = lines
    assert _actline(chat)[3:] == ["chat"]  # interactive: tests/cli/test_serve_client.py drives it
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env.update(ACTLINE_HOME=str(tmp_path / "home"), COLUMNS="200")
    env["ACTLINE_DOCS"] = str(ROOT / "examples" / "kb")
    # a port of its own: tests beside it may hold 4222 (serve's default when free)
    argv = [*_actline(serve), "--port", str(free_port())]
    server = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    workers = [server]
    try:
        assert server.stdout is not None
        assert "serving on nats://127.0.0.1:" in server.stdout.readline()
        # agent and ask find the running serve through the home, with no NATS_URL
        reviewer = subprocess.Popen(
            _actline(agent), cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
        )
        workers.append(reviewer)
        assert reviewer.stdout is not None
        assert "reviewer" in reviewer.stdout.readline()  # listening
        result = subprocess.run(
            _actline(ask), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
    finally:
        for process in workers:
            process.send_signal(signal.SIGINT)
        for process in workers:
            process.wait(10)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "checked: Please review them" in result.stdout
