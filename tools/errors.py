"""Errors of the tools package.

Hierarchy::

    ToolError
    ├── KnowledgeError          a knowledge-space path or root that cannot be read (path, reason,
    │                           detail)
    ├── EmbeddingsUnavailable   actline.tools.embeddings.minilm: an embedding model's extra,
    packages or │                           weights are missing (reason, model_dir, model, hint)
    ├── MissingPart             actline.tools.embeddings.model_parts: a part package of a split
    model is absent │                           (package, detail); actline.tools.embeddings.mpnet
    turns it into the above ├── GitError                actline.tools.workspace.gitcmd: a git call
    of the git workspace failed ├── SkillError              actline.tools.skills: a skill that
    cannot be loaded or a sk: path refused │                           (path, reason, detail)
    ├── SandboxError            actline.tools.sandbox.sandbox: code.exec_python could not start the
    code at all ├── FetchError              actline.tools.http_fetch: a URL that cannot be read as a
    source (code) └── McpError                actline.tools.mcp_bridge: an MCP server or one of its
    tools failed (code)

Each lives next to the code that raises it (their advice tables too) and subclasses ToolError,
so ``except ToolError`` catches every one.

Every error keeps its fields and pickles (they cross Ray process boundaries). ``reason`` is a
stable code that callers can turn into a notice for the model; the message says what to do.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KNOWLEDGE_REASONS", "KnowledgeError", "SkillError", "ToolError"]

KNOWLEDGE_REASONS: dict[str, str] = {
    "bad_path": "write a knowledge path such as ks:pricing/tiers.md",
    "outside_root": "the path leaves the knowledge space; use a ks: path from the search results",
    "not_found": "no such document; search the knowledge space for the ks: paths that exist",
    "not_a_document": "only .md and .txt files that are not hidden are documents; use a ks: "
    "path from the search results",
    "too_large": "the file is over the knowledge-space size limit; split it into smaller files",
    "missing_root": "create the folder or point the knowledge space at an existing folder",
}
"""Each ``KnowledgeError.reason`` with the advice its message carries when no detail is given."""


class ToolError(Exception):
    """Base of every error raised by the tools package."""


class KnowledgeError(ToolError):
    """A knowledge-space path (or the root folder) that cannot be read.

    ``reason`` is one of ``KNOWLEDGE_REASONS``; ``detail`` replaces the default advice when the
    caller knows better (for example the grammar rule a ``ks:`` path broke).
    """

    def __init__(self, path: str, reason: str, detail: str = "") -> None:
        self.path = path
        self.reason = reason
        self.detail = detail
        advice = detail or KNOWLEDGE_REASONS.get(reason, "")
        text = f"{reason}: {path!r}"
        super().__init__(f"{text}: {advice}" if advice else text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason, self.detail))


class SkillError(ToolError):
    """A skill that cannot be loaded (``where`` is its ``SKILL.md``) or an ``sk:`` path that
    cannot be read; ``reason`` is a stable code (``bad_front_matter``, ``missing_root``,
    ``unknown_skill``, ``outside_skill``, ``not_found``, ``too_large``, ...)."""

    def __init__(self, where: str, reason: str, detail: str) -> None:
        self.where = where
        self.reason = reason
        self.detail = detail
        super().__init__(f"{where}: {reason}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.where, self.reason, self.detail))
