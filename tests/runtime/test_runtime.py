"""actline.Runtime and actline.Config: the public Python API on real parts (embedded NATS,
LMDB in a temp dir, the offline model over examples/kb)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actline.config import Config, ConfigError
from actline.messages import ErrorReply, ReActProgress, ReActResult, StreamDelta, TurnAccepted
from actline.runtime import Runtime

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"


def config(tmp_path: Path, **env: str) -> Config:
    base = {"ACTLINE_HOME": str(tmp_path / "home"), "ACTLINE_DOCS": str(KB)}
    base["ACTLINE_FOLLOWUP_GRACE"] = "0"
    return Config.load(env={**base, **env})


async def test_ask_and_stream_on_the_embedded_defaults(tmp_path: Path) -> None:
    async with Runtime(config(tmp_path)) as rt:
        assert rt.nats_url.startswith("nats://127.0.0.1:")
        result = await rt.ask("How do the pricing tiers differ?")
        assert result.status == "completed" and result.sources_used
        events = [e async for e in rt.stream("And the quotas?", result.conversation_id)]
    kinds = {type(e) for e in events}
    assert {TurnAccepted, ReActProgress, StreamDelta, ReActResult} <= kinds
    assert isinstance(events[-1], ReActResult) and events[-1].status == "completed"
    assert events[-1].conversation_id == result.conversation_id
    answer = "".join(e.text for e in events if isinstance(e, StreamDelta) and e.channel == "answer")
    assert answer.strip() and "[[S:" not in answer  # citations resolved for clients
    phases = [e.phase for e in events if isinstance(e, ReActProgress)]
    assert phases[0] == "thinking" and phases[-1] == "complete"


async def test_send_done_answers_an_outside_agent_and_followup_joins(tmp_path: Path) -> None:
    async with Runtime(config(tmp_path)) as rt:
        handle = await rt.submit("Check the retention settings and ask reviewer to review them")
        waiting = await handle.wait_for("waiting", timeout=30)
        assert "reviewer" in waiting.detail
        joined = await rt.followup(handle, "also mention the backup schedule")
        assert joined.kind == "ack"
        verdict = await rt.send_done("reviewer", "retention looks right")
        assert verdict.kind == "ack"
        result = await handle.wait(30)
        wrong = await rt.send_done("reviewer", "late again")
    assert result.status == "completed" and "retention looks right" in result.answer
    assert isinstance(wrong, ErrorReply) and wrong.code == "no_outstanding_task"


async def test_approve_and_deny_decide_a_gated_tool_call(tmp_path: Path) -> None:
    gated = {"approve_tools": ["react.search_knowledge"]}
    async with Runtime(config(tmp_path)) as rt:
        handle = await rt.submit("How do the pricing tiers differ?", config=gated)
        card = await handle.wait_for("waiting", detail="approval", timeout=30)
        [pending] = card.data["approvals"]
        assert pending["tool"] == "react.search_knowledge" and pending["params"]
        wrong = await rt.deny(handle.turn_id, approval_id="ap-nope", reason="typo")
        verdict = await rt.approve(handle.turn_id, reason="read-only search")
        result = await handle.wait(30)
        finished = await rt.deny(handle.turn_id, timeout=1.0)
    assert isinstance(wrong, ErrorReply) and wrong.code == "unknown_approval", wrong
    assert verdict.kind == "ack" and "approved by" in verdict.detail, verdict
    assert result.status == "completed" and result.sources_used
    assert isinstance(finished, ErrorReply) and finished.code == "no_node", finished


async def test_an_unreachable_server_is_a_config_error_naming_the_fix(tmp_path: Path) -> None:
    env = {"ACTLINE_HOME": str(tmp_path / "h"), "ACTLINE_INSECURE": "1"}
    cfg = Config.load(env=env, nats_url="nats://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"cannot reach NATS at nats://127\.0\.0\.1:9"):
        await Runtime(cfg).start()


async def test_a_server_url_without_credentials_is_a_config_error_naming_the_fix(
    tmp_path: Path,
) -> None:
    cfg = Config.load(env={"ACTLINE_HOME": str(tmp_path / "h")}, nats_url="nats://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"needs credentials: pass --creds FILE"):
        await Runtime(cfg).start()
    with pytest.raises(ConfigError, match="choose one"):
        Config.load(env={"ACTLINE_NATS_CREDS": "x.creds", "ACTLINE_INSECURE": "1"})


async def test_a_claude_model_without_a_key_and_an_unwritable_home_are_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        await Runtime(config(tmp_path, ACTLINE_MODEL="claude-sonnet-4-6")).start()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigError, match="not writable"):
        await Runtime(config(tmp_path, ACTLINE_HOME=str(blocker / "home"))).start()


def test_config_precedence_is_defaults_toml_env_then_flags(tmp_path: Path) -> None:
    toml = tmp_path / "actline.toml"
    toml.write_text(
        'nats_url = "nats://10.0.0.1:4222"\nhome = "/tmp/from-toml"\nmax_iterations = 7\n'
        'workspace = "git"\n[llm]\nmax_retries = 1\n'
    )
    from_file = Config.load(toml, env={})
    assert from_file.nats_url == "nats://10.0.0.1:4222" and from_file.source == toml
    assert from_file.node.home == Path("/tmp/from-toml") and from_file.node.max_iterations == 7
    assert from_file.node.workspace_mode == "git" and from_file.llm.max_retries == 1
    env = {"ACTLINE_MAX_ITERATIONS": "9", "NATS_URL": "nats://10.0.0.2:4222"}
    from_env = Config.load(toml, env=env)
    assert from_env.node.max_iterations == 9 and from_env.nats_url == "nats://10.0.0.2:4222"
    assert from_env.node.home == Path("/tmp/from-toml")
    flags = Config.load(toml, env=env, max_iterations=3, nats_url="nats://10.0.0.3:4222")
    assert flags.node.max_iterations == 3 and flags.nats_url == "nats://10.0.0.3:4222"
    assert Config.load(env={}).nats_url is None  # embedded server


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("nats_url = 'http://x'\n", "nats://host:4222"),
        ("colour = 'blue'\n", "unknown setting 'colour'"),
        ("max_iterations = 'many'\n", "must be a number"),
        ("[llm]\napi_key = 'sk-x'\n", "ANTHROPIC_API_KEY"),
        ("workspace = 'svn'\n", "ACTLINE_WORKSPACE"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_bad_config_files_say_what_to_fix(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "actline.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=match):
        Config.load(path, env={})


def test_a_missing_config_file_is_named() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        Config.load("/nonexistent/actline.toml", env={})


async def test_a_claude_node_takes_its_llm_table_and_serves_the_claude_model_a_turn_names(
    tmp_path: Path,
) -> None:
    from actline.llm import ReplayModel
    from actline.llm.fake_anthropic import FakeAnthropicServer
    from tests.actors.harness import say

    policy = ReplayModel.of([say("from claude", answer="Answered by Claude.")] * 4)
    async with FakeAnthropicServer(policy) as srv:
        toml = tmp_path / "actline.toml"  # the key stays in the environment
        toml.write_text(f'model = "claude-sonnet-4-6"\n[llm]\nbase_url = "{srv.base_url}"\n')
        env = {"ACTLINE_HOME": str(tmp_path / "home"), "ACTLINE_FOLLOWUP_GRACE": "0"}
        env["ACTLINE_MODEL_TITLES"] = "0"  # the calls below are the turns' rounds only
        cfg = Config.load(toml, env={**env, "ANTHROPIC_API_KEY": "sk-test"})
        async with Runtime(cfg) as rt:
            own = await rt.ask("hello")
            named = await rt.ask("again", config={"model": "claude-haiku-4-5"})
            unknown = await rt.ask("and?", config={"model": "gpt-9"})
    assert own.status == named.status == "completed" and own.answer == "Answered by Claude."
    assert [r.body["model"] for r in srv.calls] == ["claude-sonnet-4-6", "claude-haiku-4-5"]
    assert unknown.status == "failed" and "model 'gpt-9': unknown model" in (unknown.error or "")
