"""Skills (actline.tools.skills): SKILL.md front matter, sk: reads through react.read, the skills in
the system prompt, and a skill's script run as an external tool through the real sandbox."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from actline.config import Config
from actline.llm.prompt import system_prompt
from actline.llm.replay import ReplayModel
from actline.runtime import Runtime
from actline.tools.errors import SkillError
from actline.tools.react.core import ReactTools
from actline.tools.registry import ToolContext, ToolOutput, ToolRegistry
from actline.tools.skills import SkillSet, node_skills, run_skill_script, split_front_matter

from .react.conversation import Conv
from .sandbox.sandbox_modes import AVAILABLE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "skills"


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    """A copy of the example skills, with a secret beside the folder."""
    root = tmp_path / "skills"
    shutil.copytree(EXAMPLES, root)
    (tmp_path / "secret.txt").write_text("top secret")
    return root


def test_the_example_skills_load_with_their_tools() -> None:
    skills = SkillSet.load(EXAMPLES)
    assert [s.name for s in skills.skills] == ["semver-bump", "unit-convert"]
    [bump] = skills.get("semver-bump").tools  # type: ignore[union-attr]
    assert bump.name == "bump" and bump.script.name == "bump.py"
    assert all(line and "\n" not in line for _, line in skills.listing())


def test_a_skill_file_and_the_files_beside_it_are_read_by_sk_path(skills_dir: Path) -> None:
    conv = Conv()
    conv.begin("t1")
    tools = ReactTools(skills=SkillSet.load(skills_dir))
    outcome = tools.run(
        "react.read", {"paths": ["sk:unit-convert/SKILL.md", "sk:unit-convert/units.md"]},
        conv.ctx(),
    )  # fmt: skip
    assert outcome.result["status"] == "ok"
    assert outcome.result["found"] == ["sk:unit-convert/SKILL.md", "sk:unit-convert/units.md"]
    texts = [b.content for b in outcome.blocks]
    assert "# Converting units" in texts[0] and "1609.344 m" in texts[1]
    assert [b.path for b in outcome.blocks] == outcome.result["found"]


def test_a_path_escaping_the_skill_folder_is_refused(skills_dir: Path) -> None:
    (skills_dir / "unit-convert" / "leak.md").symlink_to(skills_dir.parent / "secret.txt")
    skills = SkillSet.load(skills_dir)
    with pytest.raises(SkillError, match="outside the folder of skill 'unit-convert'") as caught:
        skills.read("sk:unit-convert/leak.md")
    assert caught.value.reason == "outside_skill"
    conv = Conv()
    conv.begin("t1")
    tools = ReactTools(skills=skills)
    paths = ["sk:unit-convert/leak.md", "sk:unit-convert/../../secret.txt", "sk:nope/SKILL.md"]
    outcome = tools.run("react.read", {"paths": paths}, conv.ctx())
    assert outcome.result["status"] == "error" and not outcome.blocks
    assert outcome.result["invalid"] == paths[:2]
    assert outcome.result["missing"] == ["sk:nope/SKILL.md"]
    assert not any("top secret" in n.message for n in outcome.notices)
    assert "outside_skill" in " ".join(n.message for n in outcome.notices)


def test_sk_reads_without_skills_say_none_are_configured() -> None:
    conv = Conv()
    conv.begin("t1")
    outcome = ReactTools().run("react.read", {"paths": ["sk:a/SKILL.md"]}, conv.ctx())
    assert next(n.code for n in outcome.notices) == "skills_unavailable"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter", "start the file with a --- line"),
        ("---\nname: x\n", "close the front matter"),
        ("---\nname: [x\n---\n", "not YAML"),
        ("---\nname: other\ndescription: d\n---\n", "differs from the folder's name"),
        ("---\nname: bad\n---\n", "description: write a non-empty string"),
        ("---\nname: bad\ndescription: d\ntools: [{name: t, script: ../x.py}]\n---\n",
         "name a file under the skill's folder"),
    ],
)  # fmt: skip
def test_a_broken_skill_is_refused_naming_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "SKILL.md").write_text(text)
    with pytest.raises(SkillError, match=message) as caught:
        SkillSet.load(tmp_path)
    assert str(tmp_path / "bad" / "SKILL.md") in str(caught.value)


def test_front_matter_is_yaml() -> None:
    data, body = split_front_matter("---\nname: a\ntools:\n  - name: t\n---\nbody\n", "f")
    assert data == {"name": "a", "tools": [{"name": "t"}]} and body == "body\n"


def test_the_system_prompt_lists_the_skills_stably() -> None:
    listing = SkillSet.load(EXAMPLES).listing()
    prompt = system_prompt({}, skills=listing)
    assert "# Skills" in prompt
    assert "- sk:semver-bump/SKILL.md: Decide the next semantic version" in prompt
    assert prompt.index("sk:semver-bump/") < prompt.index("sk:unit-convert/")
    assert system_prompt({}, skills=list(reversed(listing))) == prompt
    assert "# Skills" not in system_prompt({})


async def test_a_skill_script_runs_in_the_sandbox_as_an_external_tool(skills_dir: Path) -> None:
    class Settings:
        skills = skills_dir
        sandbox = "auto"
        exec_timeout_s = 20.0
        exec_memory_mb = 512
        exec_write_mb = 256

    registry = ToolRegistry()
    skills = node_skills(Settings(), registry)
    assert skills is not None
    assert registry.names() == ["skill.semver_bump.bump", "skill.unit_convert.convert"]
    tool = registry.get("skill.unit_convert.convert")
    assert tool is not None and tool.check_params({"args": ["12", "km", "mi"]}) == []
    deadline = asyncio.get_running_loop().time() + 30
    ctx = ToolContext("c1", "t1", "k1", tool.name, deadline)
    out = await tool.fn({"args": ["12", "km", "mi"]}, ctx)
    assert isinstance(out, ToolOutput) and out.error is None
    assert out.data["stdout"] == "12 km = 7.45645 mi\n" and out.data["sandbox"] in AVAILABLE
    bad = await tool.fn({"args": ["1", "km", "parsec"]}, ctx)
    assert isinstance(bad, ToolOutput) and bad.error == "convert.py failed with exit code 2"
    assert "cannot convert km to parsec" in bad.data["stderr"]


async def test_a_skill_script_cannot_read_outside_its_folder(skills_dir: Path) -> None:
    script = skills_dir / "semver-bump" / "scripts" / "peek.py"
    script.write_text(f"print(open({str(skills_dir.parent / 'secret.txt')!r}).read())\n")
    skills = SkillSet.load(skills_dir)
    [bump] = skills.get("semver-bump").tools  # type: ignore[union-attr]
    peek = type(bump)("peek", script, "reads a secret")
    out = await run_skill_script(peek, [])
    assert out.error is not None and "top secret" not in out.data["stdout"]


async def test_a_node_lists_reads_and_runs_skills_in_a_turn(skills_dir: Path) -> None:
    calls = [
        {"tool": "react.read", "params": {"paths": ["sk:unit-convert/SKILL.md"]}},
        {"tool": "skill.unit_convert.convert", "params": {"args": ["12", "km", "mi"]}},
    ]
    decision = json.dumps({"action": "call_tools", "calls": calls})
    model = ReplayModel.of(
        [
            f"<channel:thinking>reading the skill</channel:thinking>"
            f"<channel:decision>{decision}</channel:decision>",
            '<channel:thinking>done</channel:thinking><channel:decision>{"action": "complete"}'
            "</channel:decision><channel:answer>12 km is 7.456 mi.</channel:answer>",
        ]
    )
    home = skills_dir.parent / "home"
    env = {"ACTLINE_HOME": str(home), "ACTLINE_SKILLS": str(skills_dir)}
    config = Config.load(env={**env, "ACTLINE_FOLLOWUP_GRACE": "0", "ACTLINE_EMBEDDINGS": "off"})
    async with Runtime(config, model=model) as rt:
        result = await rt.ask("How many miles are 12 km?", timeout=60)
    assert result.status == "completed", result.error
    first, second = model.requests
    assert "- sk:unit-convert/SKILL.md: Convert lengths, masses" in first.system
    assert "skill.unit_convert.convert" in first.system
    seen = json.dumps([b.get("text", "") for b in second.blocks])
    assert "# Converting units" in seen and "12 km = 7.45645 mi" in seen
