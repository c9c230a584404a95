"""``--model``, ``--api`` and ``--base-url`` on the commands that run a node.

``actline ask`` runs as a child process with a clean environment (no key, no actline
settings) against the local Messages API server, serving a model of any name there.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.cli.main import _parser
from actline.llm import ExtractiveModel
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.fake_anthropic.thread import ServerThread

ROOT = Path(__file__).resolve().parents[2]
NODE_COMMANDS = ("serve", "ask", "chat", "console", "eval", "demo")


def clean_env(home: Path) -> dict[str, str]:
    """No NATS, no key, no base URL and no actline settings of the caller."""
    dropped = ("NATS_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in dropped and not k.startswith("ACTLINE_")}
    env.update(
        COLUMNS="120", ACTLINE_HOME=str(home), ACTLINE_EMBEDDINGS="off", PYTHONPATH=str(ROOT)
    )
    return env


def actline(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.fixture
def local_api() -> Iterator[ServerThread]:
    with FakeAnthropicServer(ExtractiveModel(chunk_chars=64)).run_in_thread() as thread:
        yield thread


def test_ask_serves_any_model_name_at_a_base_url_without_a_key(
    tmp_path: Path, local_api: ServerThread
) -> None:
    result = actline(
        "ask",
        "--model",
        "my-local",
        "--base-url",
        local_api.base_url,
        "--api",
        "messages",
        "--docs",
        str(ROOT / "examples" / "kb"),
        "--json",
        "What are the limits?",
        env=clean_env(tmp_path / "home"),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert '"status":"completed"' in result.stdout.replace(" ", "")
    bodies = [r.body for r in local_api.server.calls]
    assert bodies and all(body["model"] == "my-local" for body in bodies)


def test_ask_refuses_a_model_it_cannot_reach_naming_the_fix(tmp_path: Path) -> None:
    result = actline(
        "ask", "--model", "my-local", "hello", env=clean_env(tmp_path / "home"), cwd=tmp_path
    )
    assert result.returncode == 2
    assert "model 'my-local': is not a built-in model and has no base URL" in result.stderr
    assert "--base-url URL" in result.stderr


def test_ask_refuses_a_model_server_that_does_not_answer_before_any_turn(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    home = tmp_path / "home"
    result = actline(
        "ask", "--model", "my-local", "--base-url", url, "hi", env=clean_env(home), cwd=tmp_path
    )
    assert result.returncode == 2
    assert f"base URL {url}: the model server for 'my-local' (messages API) does not answer" in (
        result.stderr
    )
    assert "accepted" not in result.stdout  # no turn was taken


@pytest.mark.parametrize("command", NODE_COMMANDS)
def test_every_node_command_takes_the_model_flags(command: str) -> None:
    extra = {"ask": ["q"], "eval": ["cases.jsonl"]}.get(command, [])
    args = _parser().parse_args(
        [command, *extra, "--model", "m", "--api", "openai", "--base-url", "http://h:1/v1"]
    )
    assert (args.model, args.api, args.base_url) == ("m", "openai", "http://h:1/v1")


def test_an_unknown_api_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["serve", "--api", "soap"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "argument --api: invalid choice: 'soap' (choose from" in err
    assert "messages" in err and "openai" in err


def test_the_node_process_takes_the_model_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from actline.cli.node import main

    for var in ("ANTHROPIC_API_KEY", "ACTLINE_CONFIG", "ACTLINE_BASE_URL", "ACTLINE_API"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    nowhere = ["--nats", "nats://127.0.0.1:9", "--home", str(tmp_path / "home")]
    assert main([*nowhere, "--model", "qwen", "--api", "openai"]) == 2
    assert "the openai API needs a base URL" in capsys.readouterr().err


def test_the_demo_runs_its_turns_on_a_named_model_at_a_base_url(tmp_path: Path) -> None:
    policy = ExtractiveModel(chunk_chars=64)
    with FakeAnthropicServer(policy).run_in_thread() as local_api:
        result = actline(
            "demo",
            "--model",
            "my-local",
            "--base-url",
            local_api.base_url,
            env={**clean_env(tmp_path / "home"), "COLUMNS": "200"},
            cwd=tmp_path,  # the demo keeps its LMDB under ./.actline
        )
        models = {r.body["model"] for r in local_api.server.calls}
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"model my-local (messages API at {local_api.base_url})" in result.stdout
    assert result.stdout.count("complete  completed") == 3
    assert models == {"my-local"}


def test_the_demo_refuses_a_model_it_cannot_reach(tmp_path: Path) -> None:
    result = actline("demo", "--model", "my-local", env=clean_env(tmp_path / "h"), cwd=tmp_path)
    assert result.returncode == 2
    assert "is not a built-in model and has no base URL" in result.stdout
