"""``ray job submit`` of the README's command against a local ``ray start --head``.

The command is taken from the README (so the two cannot drift) and run as written, with the
cluster's addresses, the credentials, the project's Python and the batch files of this test
put in for the deployment's (hosts ``H1``..``H3``, ``/home/ubuntu/actline/...``,
``turns.jsonl``, the results path); the knowledge folder (``--docs examples/kb``) is read from
the uploaded checkout.
Two changes to its runtime environment, both because this NATS is local: no
``ACTLINE_NATS_CA`` (the test server has no TLS) and ``ANTHROPIC_BASE_URL`` pointing at the
local Messages API. The job uploads this checkout (``--working-dir .``) and runs the copy; its
node actors answer with the claude model through the key the runtime environment carries.

The head is ``ray start --head --block`` in a session of its own, stopped by its pid at the
end (it takes its processes down with it): ``ray stop`` would stop every Ray on the machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.bus import EmbeddedNats
from actline.llm import ReplayModel
from actline.llm.fake_anthropic import FakeAnthropicServer, ServerThread
from tests.actors.harness import say
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
KEY = "sk-ant-test-submit"
RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
}


def readme_job_command() -> list[str]:
    """The README's ``ray job submit`` line of the Ray section, as argv."""
    section = README.split("## Running on a Ray cluster", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("ray job submit ")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class RayHead:
    """A local Ray head (``ray start --head --block``) with the job server on ``address``."""

    def __init__(self, temp_dir: Path, env: dict[str, str]) -> None:
        gcs, dashboard, client, agent, metrics = free_ports(5)
        self.temp_dir = temp_dir
        self.address = f"http://127.0.0.1:{dashboard}"
        self.agent_port = agent
        ray = Path(sys.executable).with_name("ray")
        command = [str(ray), "start", "--head", "--block", f"--port={gcs}"]
        command += ["--include-dashboard=true", "--dashboard-host=127.0.0.1"]
        command += [f"--dashboard-port={dashboard}", f"--ray-client-server-port={client}"]
        command += [f"--dashboard-agent-listen-port={agent}", f"--metrics-export-port={metrics}"]
        command += ["--num-cpus=2", f"--temp-dir={temp_dir}", "--node-ip-address=127.0.0.1"]
        self.log = (temp_dir / "head.log").open("w")
        self.process = subprocess.Popen(
            command, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def ready(self) -> bool:
        """The head is up and so is its dashboard agent, which runs the jobs: the job server
        refuses a submission (\"No available agent\") until the agent listens and has
        registered, and on a loaded machine that comes seconds after the head."""
        assert self.process.poll() is None, (self.temp_dir / "head.log").read_text()
        if "This command will now block" not in (self.temp_dir / "head.log").read_text():
            return False
        try:
            socket.create_connection(("127.0.0.1", self.agent_port), timeout=1).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        """SIGTERM to the head (it stops what it started), then whatever of its session is left."""
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the session's stragglers, if any
        except ProcessLookupError:
            pass
        self.log.close()

    def uploads(self) -> list[Path]:
        """The working directories the jobs were given, as unpacked on the head."""
        found = self.temp_dir.glob("session_*/runtime_resources/working_dir_files/*")
        return sorted({p.resolve() for p in found if p.is_dir()})  # session_latest: a link


@pytest.fixture
def ray_head() -> Iterator[RayHead]:
    temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))  # short: Ray's socket paths
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    env |= RAY_ENV | {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    head = RayHead(temp_dir, env)
    try:
        asyncio.run(until(head.ready, timeout=60))
        yield head
    finally:
        head.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def messages_api() -> Iterator[ServerThread]:
    policy = ReplayModel.of([say("from claude", answer="Answered by Claude.")] * 10)
    with FakeAnthropicServer(policy).run_in_thread() as thread:
        yield thread


def localised(
    words: list[str], head: RayHead, nats: EmbeddedNats, api: ServerThread, tmp: Path
) -> list[str]:
    """The README's command with this test's addresses and files."""
    at = words.index("--runtime-env-json")
    runtime_env: dict[str, Any] = json.loads(words[at + 1])
    env_vars = runtime_env["env_vars"]
    assert env_vars.pop("ACTLINE_NATS_CA").endswith("deploy/tls/ca.pem")
    assert env_vars["ANTHROPIC_API_KEY"] == "$ANTHROPIC_API_KEY"  # expanded by the shell
    env_vars |= {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": api.base_url}
    words[at + 1] = json.dumps(runtime_env)
    swaps = {
        "http://H1:8265": head.address,
        "tls://H1:4222,tls://H2:4222,tls://H3:4222": nats.url,
        "/home/ubuntu/actline/deploy/node.creds": str(nats.creds_path("node")),
        "/home/ubuntu/actline/.venv/bin/python": sys.executable,  # the project's Python
        "turns.jsonl": str(tmp / "turns.jsonl"),
        "/srv/actline/results.jsonl": str(tmp / "results.jsonl"),
    }
    for word in swaps:
        assert word in words, word
    out = [swaps.get(word, word) for word in words]
    out += ["--nodes", "2", "--cpus-per-node", "0.5", "--home", str(tmp / "home")]
    return out


@pytest.mark.timeout(300)
def test_the_readme_job_command_runs_on_a_local_head(
    ray_head: RayHead, fresh_nats: EmbeddedNats, messages_api: ServerThread, tmp_path: Path
) -> None:
    rows = [
        {"conversation_id": f"c{c}", "turn_id": f"c{c}-t{t}", "text": "What are the quotas?"}
        for c in range(3)
        for t in (1, 2)
    ]
    (tmp_path / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    command = localised(readme_job_command(), ray_head, fresh_nats, messages_api, tmp_path)
    assert command[:3] == ["ray", "job", "submit"] and "--working-dir" in command
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ANTHROPIC_API_KEY")}
    env |= RAY_ENV | {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    for _ in range(3):  # the refusal below creates no job and asks to try again later
        job = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150, check=False
        )
        logs = job.stdout + job.stderr
        if "No available agent to submit job" not in logs:
            break
    assert job.returncode == 0, logs
    assert re.search(r"Job 'raysubmit_\w+' succeeded", logs), logs
    results = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["turn_id"] for r in results] == [r["turn_id"] for r in rows]
    assert {r["status"] for r in results} == {"completed"}, [r["error"] for r in results]
    assert {r["answer"] for r in results} == {"Answered by Claude."}
    # the closing summary: every turn completed, none citing a source (the model cites none)
    assert "6/6 turns completed: 0 citing sources, 6 citing none" in logs, logs
    assert "6 of 6 answers cite no source: is the knowledge folder right? (examples/kb)" in logs
    models = [r.body["model"] for r in messages_api.server.calls]
    # one call per turn at least (a call tried again on a loaded machine adds one)
    assert set(models) == {"claude-sonnet-4-6"} and len(models) >= 6, models
    (upload,) = ray_head.uploads()  # the job ran the uploaded copy of this checkout
    names = {p.name for p in upload.iterdir()}
    assert {"actors", "llm", "README.md"} <= names
    assert not names & {".venv", ".actline", ".mypy_cache", ".git"}
    size = sum(p.stat().st_size for p in upload.rglob("*") if p.is_file())
    assert size < 50 * 1024 * 1024, size
