"""The built-in external tools: code.exec_python, files.read, files.write and http.fetch.

``register_builtins(registry, config)`` adds them to a node's ``ToolRegistry``; they run on the
ToolExecutorActor of the node that serves the conversation (the decision loop sends them to
``al.tools.exec.<node>``), where ``ToolContext.files`` gives the running turn's workspace.

- ``code.exec_python(code, timeout_s, memory_mb)`` runs the code in a subprocess
  (``actline.tools.sandbox.sandbox``) whose working directory is the turn root: ``files/`` holds the
  active workspace, ``outputs/`` is for produced artifacts, pulled refs are read-only at
  ``../<turn>/...``. Writes anywhere else are refused. What the run wrote becomes ``fi:``
  versions of the turn (files elsewhere in the root land in ``outputs/exec/``). A run whose
  files would take the conversation past a quota stores none of them: the result is an error
  naming the quota (``data["code"] == "quota_exceeded"``), with the run's output. The
  kernel layer under it is ``BuiltinConfig.exec_sandbox`` (``ACTLINE_SANDBOX``, see
  ``actline.tools.sandbox.confinement``); when that layer is unavailable every call is refused
  (``data["code"] == "sandbox_unavailable"``) with what to install or set.
- ``files.read(path)`` / ``files.write(path, content)``: text files of the workspace by logical
  path; writes only in the current turn's ``files/`` or ``outputs/``.
- ``http.fetch(url)``: a page as text. Its ``data["sources"]`` row joins the conversation's
  sources pool (stable SIDs by normalised URL) when the result is contributed.
"""

from __future__ import annotations

import asyncio
import mimetypes
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from actline.messages import ArtifactRef
from actline.storage import NotStored, QuotaExceeded
from actline.timeline.errors import PathError
from actline.timeline.paths import fi_path, parse_path
from actline.tools.react.base import Notice
from actline.tools.react.files import current_target
from actline.tools.sandbox.confinement import choose
from actline.tools.sandbox.sandbox import run_python

from .http_fetch import FetchError, fetch
from .registry import ToolContext, ToolOutput, ToolRegistry

__all__ = ["BUILTIN_TOOLS", "BuiltinConfig", "register_builtins"]

BUILTIN_TOOLS: Final = ("code.exec_python", "files.read", "files.write", "http.fetch")
MAX_READ_CHARS: Final = 100_000
MAX_WRITE_BYTES: Final = 5_000_000
SHOWN_OUTPUT: Final = 4_000


@dataclass(frozen=True, slots=True)
class BuiltinConfig:
    """Limits of the built-in tools (a call may ask for less, never for more)."""

    exec_timeout_s: float = 30.0
    exec_memory_mb: int = 512
    exec_write_mb: int = 256
    """What one run may write into its workspace and temp dir, all files together."""
    exec_sandbox: str = "auto"
    """The ``ACTLINE_SANDBOX`` mode: auto, landlock, bwrap or unconfined."""
    http_allowed_hosts: Collection[str] | None = None
    """None: any host."""
    http_timeout_s: float = 20.0


def _no_files(tool: str) -> ToolOutput:
    message = (
        f"{tool} needs the conversation's workspace, which is not on this node; the call "
        "must go to the executor of the node that serves the conversation."
    )
    return ToolOutput(error=message, data={"code": "workspace_unavailable"})


def _refused(notice: Notice) -> ToolOutput:
    return ToolOutput(error=notice.message, data={"code": notice.code})


def _tail(text: str, limit: int = SHOWN_OUTPUT) -> str:
    return text if len(text) <= limit else f"[… {len(text) - limit} chars]\n" + text[-limit:]


def register_builtins(registry: ToolRegistry, config: BuiltinConfig | None = None) -> list[str]:
    """Register the built-in tools that are not registered yet; returns the names added."""
    cfg = config or BuiltinConfig()

    async def exec_python(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run Python code in the turn's workspace: cwd is the turn root (files/ = the active
        workspace, outputs/ = produced artifacts, pulled refs read-only at ../<turn>/...).
        Files written become fi: versions of this turn. Params: code, timeout_s, memory_mb."""
        files = ctx.files
        if files is None:
            return _no_files("code.exec_python")
        confinement = await asyncio.to_thread(choose, cfg.exec_sandbox)
        if not confinement.usable:
            return ToolOutput(
                error=confinement.detail,
                data={"code": "sandbox_unavailable", "sandbox": cfg.exec_sandbox},
            )
        timeout = min(float(params.get("timeout_s") or cfg.exec_timeout_s), cfg.exec_timeout_s)
        timeout = max(0.1, min(timeout, ctx.time_left() - 1.0))
        memory = min(int(params.get("memory_mb") or cfg.exec_memory_mb), cfg.exec_memory_mb)
        local = files.local
        async with files.lock:
            snapshot = await asyncio.to_thread(local.materialize, files.turn_id)
            result = await run_python(
                str(params["code"]),
                cwd=local.turn_root(files.turn_id),
                timeout_s=timeout,
                memory_mb=memory,
                write_limit_mb=cfg.exec_write_mb,
                read_roots=[local.root],
                sandbox=confinement,
            )
            over: QuotaExceeded | None = None
            try:
                written = await asyncio.to_thread(local.collect, snapshot, ts=time.time())
            except QuotaExceeded as exc:  # checked before anything is read or stored
                written, over = [], exc
        data: dict[str, Any] = {
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "memory_exceeded": result.memory_exceeded,
            "refused": list(result.refused),
            "duration_s": round(result.duration_s, 3),
            "sandbox": result.confinement,
            "files": written,
        }
        lines = [f"exit code {result.exit_code} in {result.duration_s:.2f}s"]
        if result.stdout:
            lines.append("stdout:\n" + _tail(result.stdout))
        if result.stderr:
            lines.append("stderr:\n" + _tail(result.stderr))
        if written:
            lines.append("files written: " + ", ".join(written))
        error = None
        if over is not None:
            error = f"{over}. The files this run wrote were not kept."
            data.update(over.as_dict())
        elif result.write_limit_exceeded:
            error = (
                f"the code wrote more than its {cfg.exec_write_mb} MB write limit and was "
                "stopped; the files it created were removed (ACTLINE_EXEC_WRITE_MB raises it)"
            )
            data["code"] = "exec_write_limit"
        elif result.timed_out:
            error = f"the code ran past {timeout:g}s and was killed"
            data["code"] = "exec_timeout"
        elif result.memory_exceeded:
            error = f"the code ran out of its {memory} MB memory limit"
            data["code"] = "exec_memory"
        elif result.refused:
            error = "the sandbox refused: " + "; ".join(result.refused[:3])
            data["code"] = "exec_refused"
        elif result.exit_code != 0:
            error = f"the code failed with exit code {result.exit_code}"
            data["code"] = "exec_failed"
        artifacts = tuple(
            ArtifactRef(path=p, mime=mimetypes.guess_type(p)[0] or "application/octet-stream")
            for p in written
        )
        return ToolOutput(content="\n".join(lines), data=data, artifacts=artifacts, error=error)

    async def files_read(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Read a text file of the workspace: files/<scope>/..., outputs/<scope>/... of this
        turn, or any fi:<turn>.<area>/<rel>. Params: path."""
        files = ctx.files
        if files is None:
            return _no_files("files.read")
        text = str(params["path"]).strip()
        if text.startswith("fi:"):
            try:
                path = str(parse_path(text))
            except PathError as exc:
                return _refused(Notice("bad_path", f"{text!r} ({exc.rule}): {exc.detail}"))
        else:
            target = current_target(text, files.turn_id, "files.read")
            if isinstance(target, Notice):
                return _refused(target)
            path = fi_path(files.turn_id, target[0], target[1])
        try:
            data = await asyncio.to_thread(files.workspace.read, path)
        except (NotStored, PathError):
            message = f"{path} does not exist; react.search_files lists the files there are"
            return ToolOutput(error=message, data={"code": "not_found", "path": path})
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            message = f"{path} is binary ({len(data)} bytes); use code.exec_python to inspect it"
            return ToolOutput(error=message, data={"code": "binary", "path": path})
        truncated = len(content) > MAX_READ_CHARS
        shown = content[:MAX_READ_CHARS]
        info = {"path": path, "size": len(data), "truncated": truncated}
        return ToolOutput(content=shown, data=info)

    async def files_write(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Write a text file of the current turn: files/<scope>/<name> (the workspace) or
        outputs/<scope>/<name> (an artifact). Params: path, content."""
        files = ctx.files
        if files is None:
            return _no_files("files.write")
        target = current_target(str(params["path"]), files.turn_id, "files.write")
        if isinstance(target, Notice):
            return _refused(target)
        area, rel, historical = target
        if historical is not None:
            message = f"{params['path']} is a file of turn {historical.turn_id}; write this turn's"
            return _refused(Notice("bad_path", message + f" {area}/{rel} instead"))
        data = str(params["content"]).encode("utf-8")
        if len(data) > MAX_WRITE_BYTES:
            return _refused(Notice("too_large", f"content over {MAX_WRITE_BYTES:,} bytes"))
        mime = mimetypes.guess_type(rel)[0] or "text/plain"
        async with files.lock:
            try:
                written = await asyncio.to_thread(
                    files.workspace.write, files.turn_id, area, rel, data, mime=mime, ts=time.time()
                )
            except QuotaExceeded as exc:
                return ToolOutput(error=str(exc), data=exc.as_dict())
        return ToolOutput(
            content=f"wrote {written} ({len(data)} bytes)",
            data={"path": written, "size": len(data)},
            artifacts=(ArtifactRef(path=written, mime=mime),),
        )

    async def http_fetch(params: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """Fetch a web page (http/https) as text; it becomes a source [S:n] to cite.
        Params: url."""
        url = str(params["url"])
        timeout = max(0.1, min(cfg.http_timeout_s, ctx.time_left() - 0.5))
        try:
            page = await fetch(url, timeout_s=timeout, allowed_hosts=cfg.http_allowed_hosts)
        except FetchError as exc:
            return ToolOutput(error=str(exc), data={"code": exc.code, "url": url})
        source = {"url": page.final_url or page.url, "title": page.title or page.final_url}
        data = {
            "url": page.url,
            "final_url": page.final_url,
            "status": page.status,
            "mime": page.mime,
            "title": page.title,
            "truncated": page.truncated,
            "sources": [{**source, "text": page.text[:2000]}],
        }
        return ToolOutput(content=page.text, data=data)

    specs: list[tuple[str, Any, dict[str, Any], float | None]] = [
        (
            "code.exec_python",
            exec_python,
            {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "minLength": 1},
                    "timeout_s": {"type": "number", "exclusiveMinimum": 0},
                    "memory_mb": {"type": "integer", "minimum": 64},
                },
                "required": ["code"],
                "additionalProperties": False,
            },
            cfg.exec_timeout_s + 15.0,
        ),
        (
            "files.read",
            files_read,
            {
                "type": "object",
                "properties": {"path": {"type": "string", "minLength": 1}},
                "required": ["path"],
                "additionalProperties": False,
            },
            None,
        ),
        (
            "files.write",
            files_write,
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1},
                    "content": {"type": "string"},
                },
                "required": ["path", "content"],
                "additionalProperties": False,
            },
            None,
        ),
        (
            "http.fetch",
            http_fetch,
            {
                "type": "object",
                "properties": {"url": {"type": "string", "minLength": 1}},
                "required": ["url"],
                "additionalProperties": False,
            },
            cfg.http_timeout_s + 5.0,
        ),
    ]
    added: list[str] = []
    for name, fn, schema, timeout_s in specs:
        if name in registry:
            continue
        registry.register(name, fn, schema=schema, timeout_s=timeout_s)
        added.append(name)
    return added
