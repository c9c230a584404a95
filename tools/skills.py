"""Skills: folders of ``SKILL.md`` files the model lists, reopens by ``sk:`` path and runs.

A skills folder (node setting ``skills``, ``ACTLINE_SKILLS``) holds one folder per skill::

    skills/
      unit-convert/
        SKILL.md            front matter (name, description, tools) + the instructions
        units.md            any file beside it: sk:unit-convert/units.md
        scripts/convert.py  a script a ``tools:`` entry names

``SKILL.md`` opens with YAML front matter between ``---`` lines (read with PyYAML)::

    ---
    name: unit-convert                  # the folder's name: a-z, 0-9 and -, at most 64
    description: Convert lengths, ...   # one line in the system prompt (the first line)
    tools:                              # optional: scripts run as external tools
      - name: convert                   # the tool is skill.unit_convert.convert
        script: scripts/convert.py      # under the skill's folder
        description: convert a value    # the tool's description
    ---

``SkillSet.load`` reads every skill at once and refuses a broken one with ``SkillError``
naming the file and the key (no skill is skipped in silence). ``SkillSet.read("sk:<skill>/<rel>")``
returns a file of a skill; a path that resolves outside its skill's folder (a symlink, an
unknown skill) is refused (``outside_skill``), as is a file over ``MAX_FILE_BYTES``.
``SkillSet.listing()`` is the (name, one line) list for the system prompt, sorted by name so
the prompt stays byte-stable. ``register_skill_tools`` registers each ``tools:`` entry as an
external tool that runs the script with ``actline.tools.sandbox.sandbox.run_python`` (the script's
folder readable, a fresh scratch folder as its working directory, its ``args`` in ``sys.argv``).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from actline.timeline.errors import PathError
from actline.timeline.paths import parse_path
from actline.tools.sandbox.confinement import choose
from actline.tools.sandbox.sandbox import run_python

from .errors import SkillError
from .registry import ToolContext, ToolOutput, ToolRegistry

__all__ = [
    "MAX_FILE_BYTES",
    "SKILL_FILE",
    "Skill",
    "SkillFile",
    "SkillSet",
    "SkillTool",
    "node_skills",
    "register_skill_tools",
    "split_front_matter",
]

SKILL_FILE = "SKILL.md"
MAX_FILE_BYTES = 262_144
"""A skill file ``react.read`` returns (256 KiB)."""
MAX_DESCRIPTION_CHARS = 200
"""The description's first line in the system prompt, cut here."""
NAME_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
TOOL_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
MAX_ARGS = 32
MAX_SHOWN = 8_000


@dataclass(frozen=True, slots=True)
class SkillTool:
    """A script of a skill run as the external tool ``name`` (``skill.<skill>.<tool>``)."""

    name: str
    script: Path
    description: str


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill: its folder, front matter and tools."""

    name: str
    description: str
    folder: Path
    tools: tuple[SkillTool, ...] = ()

    @property
    def summary(self) -> str:
        """The description's first line, at most ``MAX_DESCRIPTION_CHARS`` characters."""
        line = self.description.strip().splitlines()[0].strip()
        cut = MAX_DESCRIPTION_CHARS
        return line if len(line) <= cut else line[: cut - 1].rstrip() + "…"


@dataclass(frozen=True, slots=True)
class SkillFile:
    """A file of a skill as ``react.read`` shows it."""

    path: str
    """``sk:<skill>/<rel>``."""
    text: str
    skill: str


def split_front_matter(text: str, where: str) -> tuple[dict[str, Any], str]:
    """The YAML front matter of ``text`` (a mapping) and the body after it.

    ``SkillError`` (``bad_front_matter``) naming ``where`` when there is none, it does not
    close, it is not YAML or not a mapping."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillError(where, "bad_front_matter", "start the file with a --- line")
    for end in range(1, len(lines)):
        if lines[end].strip() == "---":
            break
    else:
        raise SkillError(where, "bad_front_matter", "close the front matter with a --- line")
    try:
        data = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise SkillError(where, "bad_front_matter", f"not YAML: {detail}") from None
    if not isinstance(data, dict):
        raise SkillError(where, "bad_front_matter", "the front matter must be a mapping")
    return data, "".join(lines[end + 1 :])


def _text(data: Mapping[str, Any], key: str, where: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SkillError(where, "bad_front_matter", f"{key}: write a non-empty string")
    return value.strip()


def _tools(data: Mapping[str, Any], folder: Path, where: str) -> tuple[SkillTool, ...]:
    raw = data.get("tools") or []
    if not isinstance(raw, list):
        raise SkillError(where, "bad_front_matter", "tools: write a list of {name, script}")
    found: dict[str, SkillTool] = {}
    for i, entry in enumerate(raw):
        key = f"tools[{i}]"
        if not isinstance(entry, dict):
            raise SkillError(where, "bad_front_matter", f"{key}: write {{name, script}}")
        name = _text(entry, "name", where)
        if TOOL_RE.fullmatch(name) is None or name in found:
            detail = f"{key}.name {name!r}: a-z, 0-9 and _, starting with a letter, unique"
            raise SkillError(where, "bad_front_matter", detail)
        rel = _text(entry, "script", where)
        script = (folder / rel).resolve()
        if not script.is_relative_to(folder.resolve()) or not script.is_file():
            detail = f"{key}.script {rel!r}: name a file under the skill's folder"
            raise SkillError(where, "bad_front_matter", detail)
        description = str(entry.get("description") or f"runs {rel}").strip()
        found[name] = SkillTool(name, script, description)
    return tuple(found.values())


def load_skill(folder: Path) -> Skill:
    """The skill of ``folder`` (its ``SKILL.md``); ``SkillError`` naming the file and key."""
    file = folder / SKILL_FILE
    where = str(file)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(where, "unreadable", str(exc)) from None
    data, _ = split_front_matter(text, where)
    name = _text(data, "name", where)
    if NAME_RE.fullmatch(name) is None:
        detail = f"name {name!r}: a-z, 0-9 and -, at most 64 characters"
        raise SkillError(where, "bad_front_matter", detail)
    if name != folder.name:
        detail = f"name {name!r} differs from the folder's name {folder.name!r}: make them equal"
        raise SkillError(where, "bad_front_matter", detail)
    return Skill(name, _text(data, "description", where), folder, _tools(data, folder, where))


class SkillSet:
    """The skills of one folder (see the module docstring)."""

    def __init__(self, root: Path, skills: Sequence[Skill]) -> None:
        self.root = root
        self.skills = tuple(sorted(skills, key=lambda s: s.name))
        self._by_name = {s.name: s for s in self.skills}

    @classmethod
    def load(cls, root: Path) -> SkillSet:
        """Every skill under ``root``: each sub-folder that holds a ``SKILL.md``.

        ``SkillError``: ``missing_root`` when ``root`` is not a folder; a broken skill as
        ``load_skill`` says."""
        if not root.is_dir():
            raise SkillError(
                str(root), "missing_root", "create it or fix the setting skills (ACTLINE_SKILLS)"
            )
        folders = sorted(p for p in root.iterdir() if (p / SKILL_FILE).is_file())
        return cls(root, [load_skill(folder) for folder in folders])

    def get(self, name: str) -> Skill | None:
        return self._by_name.get(name)

    def listing(self) -> list[tuple[str, str]]:
        """``(name, one line)`` of every skill, sorted by name."""
        return [(s.name, s.summary) for s in self.skills]

    def read(self, path: str) -> SkillFile:
        """The file at ``sk:<skill>/<rel>`` (``sk:<skill>`` alone means its ``SKILL.md``).

        ``SkillError``: ``bad_path`` (not an ``sk:`` path), ``unknown_skill``,
        ``outside_skill`` (it resolves outside the skill's folder), ``not_found``,
        ``too_large``, ``not_text``."""
        try:
            parsed = parse_path(path)
        except PathError as exc:
            raise SkillError(path, "bad_path", f"{exc.rule}: {exc.detail}") from None
        if parsed.prefix != "sk":
            raise SkillError(path, "bad_path", "write sk:<skill>/SKILL.md")
        name, _, rel = parsed.name.partition("/")
        skill = self._by_name.get(name)
        if skill is None:
            known = ", ".join(self._by_name) or "none"
            raise SkillError(path, "unknown_skill", f"no skill {name!r}; the skills: {known}")
        rel = rel or SKILL_FILE
        base = skill.folder.resolve()
        target = (skill.folder / rel).resolve()
        if not target.is_relative_to(base):
            detail = f"it resolves outside the folder of skill {name!r}; read files inside it"
            raise SkillError(path, "outside_skill", detail)
        if target.is_dir():
            listing = sorted(
                f"sk:{name}/{p.relative_to(base)}" for p in target.rglob("*") if p.is_file()
            )
            return SkillFile(f"sk:{name}/{rel}", "\n".join(listing), name)
        if not target.is_file():
            raise SkillError(path, "not_found", f"skill {name!r} has no file {rel!r}")
        size = target.stat().st_size
        if size > MAX_FILE_BYTES:
            detail = f"{size} bytes, over the {MAX_FILE_BYTES} bytes a skill file may have"
            raise SkillError(path, "too_large", detail)
        try:
            text = target.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise SkillError(path, "not_text", "only UTF-8 text files can be read") from None
        return SkillFile(f"sk:{name}/{rel}", text, name)


def tool_name(skill: Skill, tool: SkillTool) -> str:
    """``skill.<skill name with _ for ->.<tool>``: a valid external tool name."""
    return f"skill.{skill.name.replace('-', '_')}.{tool.name}"


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "args": {"type": "array", "items": {"type": "string"}, "maxItems": MAX_ARGS},
    },
    "additionalProperties": False,
}
"""A skill tool's params: the script's command-line arguments."""

_LAUNCH = (
    "import runpy, sys\n"
    "sys.argv = [{script}] + {args}\n"
    "runpy.run_path({script}, run_name='__main__')\n"
)


async def run_skill_script(
    tool: SkillTool,
    args: Sequence[str],
    *,
    sandbox: str = "auto",
    timeout_s: float = 30.0,
    memory_mb: int = 512,
    write_mb: int = 256,
) -> ToolOutput:
    """Run ``tool``'s script with ``args`` in the sandbox; its output as a ``ToolOutput``
    (``error`` set when the sandbox is unavailable or the script failed); ``write_mb``
    bounds what the run writes, all files together."""
    confinement = await asyncio.to_thread(choose, sandbox)
    if not confinement.usable:
        return ToolOutput(
            error=confinement.detail, data={"code": "sandbox_unavailable", "sandbox": sandbox}
        )
    script = json.dumps(str(tool.script))
    code = _LAUNCH.format(script=script, args=json.dumps(list(args)))
    scratch = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="actline-skill-"))
    try:
        result = await run_python(
            code,
            cwd=scratch,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            write_limit_mb=write_mb,
            read_roots=[tool.script.parent.resolve()],
            sandbox=confinement,
        )
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch, True)
    data = {
        "exit_code": result.exit_code,
        "stdout": result.stdout[:MAX_SHOWN],
        "stderr": result.stderr[:MAX_SHOWN],
        "timed_out": result.timed_out,
        "refused": list(result.refused),
        "sandbox": result.confinement,
    }
    lines = [f"exit code {result.exit_code} in {result.duration_s:.2f}s"]
    if result.stdout:
        lines.append("stdout:\n" + result.stdout[:MAX_SHOWN])
    if result.stderr:
        lines.append("stderr:\n" + result.stderr[:MAX_SHOWN])
    error = None
    if result.write_limit_exceeded:
        error = f"{tool.script.name} wrote more than its {write_mb} MB write limit and was stopped"
        data["code"] = "exec_write_limit"
    elif result.timed_out:
        error = f"{tool.script.name} ran past {timeout_s:g}s and was killed"
    elif result.refused:
        error = "the sandbox refused: " + "; ".join(result.refused[:3])
    elif result.exit_code != 0:
        error = f"{tool.script.name} failed with exit code {result.exit_code}"
    return ToolOutput(content="\n".join(lines), data=data, error=error)


def register_skill_tools(
    registry: ToolRegistry,
    skills: SkillSet,
    *,
    sandbox: str = "auto",
    timeout_s: float = 30.0,
    memory_mb: int = 512,
    write_mb: int = 256,
) -> list[str]:
    """Register every skill's ``tools:`` as external tools; returns the names added."""
    added: list[str] = []
    for skill in skills.skills:
        for tool in skill.tools:

            async def run(
                params: dict[str, Any], ctx: ToolContext, tool: SkillTool = tool
            ) -> ToolOutput:
                limit = max(0.1, min(timeout_s, ctx.time_left() - 1.0))
                args = [str(a) for a in params.get("args") or []]
                return await run_skill_script(
                    tool,
                    args,
                    sandbox=sandbox,
                    timeout_s=limit,
                    memory_mb=memory_mb,
                    write_mb=write_mb,
                )

            name = tool_name(skill, tool)
            description = f"{tool.description} (skill {skill.name}; params: args, a list)"
            registry.register(name, run, schema=SCHEMA, description=description)
            added.append(name)
    return added


class SkillSettings(Protocol):
    """What ``node_skills`` reads of a node's settings (``NodeSettings`` is one)."""

    @property
    def skills(self) -> Path | None: ...
    @property
    def sandbox(self) -> str: ...
    @property
    def exec_timeout_s(self) -> float: ...
    @property
    def exec_memory_mb(self) -> int: ...
    @property
    def exec_write_mb(self) -> int: ...


def node_skills(settings: SkillSettings, registry: ToolRegistry) -> SkillSet | None:
    """A node's skills (None without a ``skills`` folder), their tools registered in
    ``registry`` to run under the node's sandbox and exec limits. Blocking: call it from a
    thread in async code. ``SkillError`` when the folder or a skill is broken."""
    if settings.skills is None:
        return None
    skills = SkillSet.load(settings.skills)
    register_skill_tools(
        registry,
        skills,
        sandbox=settings.sandbox,
        timeout_s=settings.exec_timeout_s,
        memory_mb=settings.exec_memory_mb,
        write_mb=settings.exec_write_mb,
    )
    return skills
