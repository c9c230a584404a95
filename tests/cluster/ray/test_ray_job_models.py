"""The Ray job hands the model's API, base URL and configured models to its node actors.

``job_settings`` resolves them as ``actline serve`` does; a ``NodeActor`` (here built in this
process, as a worker would) rebuilds the same ``LLMSettings``, registers the configured models
and reads the key of that API from its own environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.actors.cluster.ray_job import NodeActor, _parse, job_settings, key_variable
from actline.llm import model_spec, register_models

TABLE = """
model = "qwen"

[models.qwen]
api = "openai"
base_url = "http://127.0.0.1:8000/v1"
context_window = 32768
cache = "automatic"
"""


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("ACTLINE_", "ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(name)
    register_models(())
    yield
    register_models(())


def test_node_actors_get_the_api_base_url_and_configured_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "actline.toml"
    config.write_text(TABLE, encoding="utf-8")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-driver")
    nodes, llm, key = job_settings(
        _parse(["--nats", "nats://x:1", "--no-docs", "--config", str(config)])
    )
    assert (llm["api"], llm["base_url"]) == ("openai", "http://127.0.0.1:8000/v1")
    assert key == "sk-openai-driver"  # handed to the actors in their runtime env
    assert "api_key" not in llm and [s.name for s in llm["models"]] == ["qwen"]
    assert key_variable(llm["api"]) == "OPENAI_API_KEY"

    register_models(())  # a worker process: nothing registered yet
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-worker")
    nodes["home"] = tmp_path / "home"
    settings = NodeActor("nats://x:1", nodes, llm=llm).llm_settings()
    assert (settings.model, settings.api, settings.api_key) == (
        "qwen",
        "openai",
        "sk-openai-worker",
    )
    assert model_spec("qwen").cache == "automatic" and model_spec("qwen").context_window == 32768


def test_the_flags_of_the_job_win_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "actline.toml"
    config.write_text(TABLE, encoding="utf-8")
    args = ["--nats", "nats://x:1", "--no-docs", "--config", str(config), "--api", "messages"]
    _, llm, _ = job_settings(_parse([*args, "--base-url", "http://127.0.0.1:9"]))
    assert (llm["api"], llm["base_url"]) == ("messages", "http://127.0.0.1:9")
