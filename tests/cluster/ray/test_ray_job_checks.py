"""The Ray job's checks before any Ray starts: its knowledge folder, the Python that runs
it, its help, and the closing summary it prints of a batch's results."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from actline.actors.cluster.options import job_parser
from actline.actors.cluster.ray_job import _parse, job_settings, main
from actline.actors.cluster.summary import TIMED_OUT, answer_kind, summarise
from actline.actors.errors import SettingsError
from actline.llm import register_models
from actline.llm.extractive import DECLINE
from actline.messages import ReActResult

ROOT = Path(__file__).resolve().parents[3]
KB = ROOT / "examples" / "kb"
JOB = ["--nats", "nats://127.0.0.1:1", "--insecure"]


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("ACTLINE_", "ANTHROPIC_", "OPENAI_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no ./actline.toml, no ./examples/kb
    yield
    register_models(())


def test_a_job_without_a_knowledge_folder_refuses_to_start_naming_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*JOB, "--requests", str(ROOT / "examples" / "cluster_turns.jsonl")]) == 2
    said = capsys.readouterr().err
    assert "no knowledge folder" in said and "--docs examples/kb" in said and "--no-docs" in said


def test_a_missing_or_empty_knowledge_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"nowhere \(--docs\) does not exist"):
        job_settings(_parse([*JOB, "--docs", "nowhere"]))
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    (tmp_path / "empty" / "notes.pdf").write_bytes(b"%PDF")
    with pytest.raises(SettingsError, match=r"empty \(--docs\) holds no \.md or \.txt file"):
        job_settings(_parse([*JOB, "--docs", "empty"]))


def test_the_job_takes_the_knowledge_folder_and_profile_as_actline_serve_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "actline.toml"
    config.write_text(f'docs = "{KB}"\nprofile = "deep"\n', encoding="utf-8")
    nodes, _, _ = job_settings(_parse(JOB))  # ./actline.toml
    assert (nodes["knowledge_dir"], nodes["profile"]) == (KB, "deep")
    monkeypatch.setenv("ACTLINE_DOCS", str(tmp_path / "gone"))
    with pytest.raises(SettingsError, match=r"gone \(ACTLINE_DOCS\) does not exist"):
        job_settings(_parse(JOB))
    nodes, _, _ = job_settings(_parse([*JOB, "--docs", str(KB), "--profile", "fast"]))
    assert (nodes["knowledge_dir"], nodes["profile"]) == (KB, "fast")
    nodes, _, _ = job_settings(_parse([*JOB, "--no-docs"]))  # told it wants none
    assert nodes["knowledge_dir"] is None


def test_every_option_of_the_job_says_what_it_does() -> None:
    actions = [a for a in job_parser()._actions if a.option_strings]
    names = {name for a in actions for name in a.option_strings}
    assert {"--docs", "--no-docs", "--profile", "--home", "--cpus-per-node"} <= names
    assert [a.option_strings for a in actions if not (a.help or "").strip()] == []


def test_a_python_without_the_dependencies_gets_one_line_naming_the_fix() -> None:
    # -S: no site-packages, as a bare system Python; the checkout itself is still importable
    bare = [sys.executable, "-S", "-m", "actline.actors.cluster.ray_job", "--help"]
    run = subprocess.run(bare, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 1 and run.stdout == ""
    (line,) = run.stderr.splitlines()
    assert "has no msgpack, nats" in line
    assert ".venv/bin/python -m actline.actors.cluster.ray_job" in line and "runtime_env" in line


def result(turn: str, status: str = "completed", **fields: object) -> ReActResult:
    data: dict[str, object] = {"conversation_id": "c1", "turn_id": turn, "status": status}
    return ReActResult.model_validate({**data, **fields})


def test_the_summary_counts_answers_by_whether_they_cite_a_source() -> None:
    results = [
        result("t1", answer="Relay has three tiers [[S:1]].", sources_used=[1]),
        result("t2", answer=f"{DECLINE} 'platinum': I could not find it.", rounds=3),
        result("t3", answer="From memory: yes."),
        result("t4", "budget_exhausted", answer="Best effort: maybe."),
        result("t5", "failed", error="model call failed: model_unreachable"),
        result("t6", "failed", error=f"{TIMED_OUT} 300s: no result of turn t6 within 300s"),
        result("t7", "cancelled"),
    ]
    kinds = [answer_kind(r) for r in results]
    assert kinds == [
        "sourced",
        "unsourced",
        "unsourced",
        "best_effort",
        "failed",
        "timed_out",
        "failed",
    ]
    summary = summarise(results)
    assert (summary.completed, summary.declined, summary.uncited) == (3, 1, 3)
    assert not summary.all_completed
    first, warning = summary.lines(KB)
    assert first.startswith("3/7 turns completed: 1 citing sources, 2 citing none (1 declined")
    assert "1 best-effort" in first and "2 failed" in first and "1 timed out" in first
    assert warning == f"3 of 4 answers cite no source: is the knowledge folder right? ({KB})"
    (only,) = summarise(results[:1]).lines(KB)  # every answer cites: nothing to warn of
    assert summarise(results[:1]).all_completed and only.startswith("1/1 turns completed")
    (_, without) = summarise(results[1:3]).lines(None)
    assert "2 of 2 answers cite no source: the job has no knowledge folder" in without
