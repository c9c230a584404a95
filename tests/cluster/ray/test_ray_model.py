"""The model on Ray: node actors run the Claude path against the local Messages API.

The driver (``actline.actors.cluster.ray_job.main``) resolves the settings as ``actline serve`` does
(here from an ``actline.toml`` and the environment: ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``),
checks them once and hands them to the node actors, the key through each actor's runtime
environment (merged with the job's: the job's ``PYTHONPATH`` still reaches the workers).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.actors.cluster.ray_job import main
from actline.bus import EmbeddedNats
from actline.llm import ReplayModel
from actline.llm.fake_anthropic import FakeAnthropicServer, ServerThread
from tests.actors.harness import say

ROOT = Path(__file__).resolve().parents[3]
KEY = "sk-ant-test-ray"
MODEL = "claude-haiku-4-5"


@pytest.fixture(scope="module")
def ray_local() -> Iterator[Any]:
    import ray

    workers = {"env_vars": {"PYTHONPATH": str(ROOT)}}  # the workers import this checkout
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env=workers)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def messages_api() -> Iterator[ServerThread]:
    policy = ReplayModel.of([say("from claude", answer="Answered by Claude.")] * 20)
    with FakeAnthropicServer(policy).run_in_thread() as thread:
        yield thread


@pytest.fixture
def job_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The driver's environment without the caller's model settings."""
    for name in list(os.environ):
        if name.startswith(("ACTLINE_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    return monkeypatch


def test_node_actors_answer_with_the_claude_model_and_an_unknown_model_fails_with_why(
    ray_local: Any,
    fresh_nats: EmbeddedNats,
    tmp_path: Path,
    messages_api: ServerThread,
    job_env: pytest.MonkeyPatch,
) -> None:
    job_env.setenv("ANTHROPIC_API_KEY", KEY)
    job_env.setenv("ANTHROPIC_BASE_URL", messages_api.base_url)
    config = tmp_path / "actline.toml"
    config.write_text(f'model = "{MODEL}"\nfollowup_grace_s = 0.0\n[llm]\nmax_retries = 0\n')
    rows: list[dict[str, Any]] = [
        {"conversation_id": f"c{c}", "turn_id": f"c{c}-t1", "text": "What are the quotas?"}
        for c in range(4)
    ]
    rows.append(
        {"conversation_id": "c9", "turn_id": "c9-t1", "text": "hi", "config": {"model": "gpt-9"}}
    )
    turns, out = tmp_path / "turns.jsonl", tmp_path / "results.jsonl"
    turns.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--nats", fresh_nats.url, "--creds", str(fresh_nats.creds_path("node"))]
    args += ["--nodes", "2", "--cpus-per-node", "0.5", "--config", str(config), "--no-docs"]
    args += ["--requests", str(turns), "--out", str(out), "--home", str(tmp_path / "home")]
    status = main(args)
    results = {r["turn_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert status == 1  # one turn did not complete
    for c in range(4):
        result = results[f"c{c}-t1"]
        assert result["status"] == "completed", result["error"]
        assert result["answer"] == "Answered by Claude."
    failed = results["c9-t1"]
    assert failed["status"] == "failed"
    assert failed["error"].startswith("model call failed: model_config: model 'gpt-9': ")
    assert f"this node serves {MODEL}, extractive, claude-*" in failed["error"]
    seen = messages_api.server.calls
    models = [r.body["model"] for r in seen]
    # only the claude turns called it, each at least once (a call tried again on a loaded
    # machine adds one)
    assert set(models) == {MODEL} and len(models) >= 4, models
    for record in seen:  # the key reached the actors
        headers = {k.lower(): v for k, v in record.headers.items()}
        assert KEY in (headers.get("x-api-key", ""), headers.get("authorization", "")[7:])


def test_the_driver_refuses_a_claude_model_without_a_key_before_any_actor_starts(
    job_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["--nats", "nats://127.0.0.1:9", "--insecure", "--model", MODEL, "--no-docs"]
    assert main([*args, "--home", str(tmp_path)]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert f"model {MODEL}: needs an Anthropic API key: export ANTHROPIC_API_KEY=" in error
    assert list(tmp_path.iterdir()) == []  # no node actor made its home
