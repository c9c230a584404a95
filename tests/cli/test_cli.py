"""The command line and the README's quick start, run for real."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from actline.cli.main import main
from actline.config import Config, ConfigError

ROOT = Path(__file__).resolve().parents[2]


def run(
    *args: str, timeout: float = 60, cwd: Path = ROOT, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env["COLUMNS"] = "120"
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "actline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_demo_shows_every_capability_once(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL" and not k.startswith("ACTLINE_")}
    env["COLUMNS"] = "200"
    result = subprocess.run(
        [sys.executable, "-m", "actline", "demo"],
        cwd=tmp_path,  # the demo keeps its LMDB under ./.actline
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    assert "nats-server ready at nats://127.0.0.1:" in out and "JetStream on" in out
    turns = out.split("turn 2:")
    first, later = turns[0], turns[1]
    for seen in (
        "tool call  react.plan",
        "tool call  react.search_knowledge",
        "tool call  react.read",
        "tool call  react.write",  # the internal note
        "tool call  agent.send -> reviewer",
        "[reviewer] task",
        "waiting  waiting for reviewer",
        "tool result  DONE from reviewer",
        "DONE sent for task-",  # the reviewer heard the node's verdict
        "https://docs.lumen-relay.example/",  # citations resolved to links
        "follow-ups:",
    ):
        assert seen in first, seen
    second, third = later.split("turn 3:")
    assert "tool call  react.memsearch" in second
    assert "Earlier in this conversation (turn t-" in second
    assert "you (while the turn runs)> Also, which tier includes the support SLA?" in third
    assert "joined the running turn" in third
    assert "Searching the knowledge space for: tier includes support sla" in third
    assert third.count("complete  completed") == 1
    assert "cache read" in out and "timeline stored in" in out
    assert re.search(r"actline timeline demo-\w+ --rendered", out)
    assert (tmp_path / ".actline" / "data.mdb").exists()
    assert "Traceback" not in out + result.stderr


def test_demo_against_an_unreachable_server_says_what_to_do(tmp_path: Path) -> None:
    # in a folder of its own: no keys under ./.actline from an earlier demo
    result = run("demo", "--nats", "nats://127.0.0.1:9", cwd=tmp_path)
    assert result.returncode == 1
    assert "needs credentials: pass --creds FILE or set ACTLINE_NATS_CREDS" in result.stdout
    result = run("demo", "--nats", "nats://127.0.0.1:9", cwd=tmp_path, ACTLINE_INSECURE="1")
    assert result.returncode == 1
    assert "cannot reach NATS at nats://127.0.0.1:9" in result.stdout
    assert "NATS_URL" in result.stdout


def test_version_and_help() -> None:
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("actline ")
    bare = run()
    assert bare.returncode == 2 and "demo" in bare.stderr


def test_readme_quick_start_is_exactly_make_demo_and_make_test() -> None:
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(?:sh|bash)?\n(.*?)```", quick, re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]


def test_make_demo_from_the_readme_runs() -> None:
    assert shutil.which("make"), "make is required (README quick start); install make"
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    # Use the environment running the tests as the project venv, as `make test` does.
    result = subprocess.run(
        ["make", "demo", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "agent.send -> reviewer" in result.stdout and "timeline stored in" in result.stdout


def test_ci_entry_runs_make_test_then_the_interop_suite() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[-2:] == ["make test", "make interop"]
    assert all(line.startswith(("set ", "cd ")) for line in lines[:-2])


def test_doctor_reports_each_check_and_bm25_only_without_embeddings(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env.update(COLUMNS="160", ACTLINE_HOME=str(tmp_path / "home"), ACTLINE_EMBEDDINGS="off")
    result = subprocess.run(
        [sys.executable, "-m", "actline", "doctor"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("versions", "nats", "lmdb", "model", "memsearch", "workspace", "sandbox"):
        assert name in result.stdout
    assert "BM25 only" in result.stdout
    hybrid = subprocess.run(
        [sys.executable, "-m", "actline", "doctor"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "ACTLINE_EMBEDDINGS": "on", "NATS_URL": "nats://127.0.0.1:9"},
        check=False,
    )
    assert hybrid.returncode == 2
    assert "hybrid: BM25 + all-MiniLM-L6-v2" in hybrid.stdout
    assert "cannot reach NATS at nats://127.0.0.1:9" in hybrid.stdout


def test_an_unknown_option_is_said_with_the_commands_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["ask", "--question", "x"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("usage: actline ask") and "unrecognized arguments: --question" in err


def test_an_abbreviated_option_is_not_taken_for_the_long_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["ask", "--conv", "c-1", "hello"])
    assert "unrecognized arguments: --conv" in capsys.readouterr().err


@pytest.mark.parametrize("patterns", ["agent.send", "code.*,agent.*"])
def test_approve_tools_naming_agent_send_is_refused(tmp_path: Path, patterns: str) -> None:
    env = {"ACTLINE_HOME": str(tmp_path), "ACTLINE_APPROVE_TOOLS": patterns}
    refused = r"ACTLINE_APPROVE_TOOLS is agent\.(send|\*).*never waits"
    with pytest.raises(ConfigError, match=refused):
        Config.load(env=env)
    everything = Config.load(env={**env, "ACTLINE_APPROVE_TOOLS": "*"})
    assert everything.node.approve_tools == "*"


def test_insecure_is_warned_once(tmp_path: Path) -> None:
    result = run("result", "--insecure", "--home", str(tmp_path), "t-1")
    assert result.returncode == 1
    assert result.stderr.count("WITHOUT authentication") == 1, result.stderr
    assert result.stderr.count("WARNING") == 1
