"""The react.* tools of the versioned workspace: pull, patch, checkout and search_files.

Paths of the current turn are written ``files/<scope>/<rel>`` or ``outputs/<scope>/<rel>``
(or as ``fi:<current turn>.<area>/<rel>``); historical files are ``fi:<turn>.<area>/<rel>``.
Physical paths (``/abs``, ``./x``, ``../x``, ``C:\\x``), ``..`` segments, URLs and other prefixes
are refused with a notice naming the rule. Every tool works the same in both workspace modes: it
goes through the ``WorkspaceBackend`` and, for pulled refs, the ``LocalTree``.

- ``react.pull(paths)``: ``fi:`` refs of earlier turns only; a ``files/`` or ``outputs/`` folder
  pulls its subtree, attachments must be exact files. Copies land read-only under their own turn
  roots; the active workspace never changes.
- ``react.patch(path, patch)``: a unified diff (starts with ``---``/``+++``/``@@``) or the whole
  new content. A current-turn file is patched in place. A historical ``fi:`` file must be pulled
  first; its patched text becomes the current turn's version of the same file. A hunk that does
  not apply is a notice with the hunk; nothing is written.
- ``react.checkout(paths, mode)``: ordered ``fi:<turn>.files/...`` refs (files or folders, later
  entries win) build the current turn's ``files/``: ``replace`` starts clean, ``overlay`` keeps
  the files the refs do not name. A missing ref refuses the whole checkout, and so does one
  that would take the conversation past a quota (``QuotaExceeded``, checked before any write).
- ``react.search_files(root, name_regex, content_regex, max_bytes, max_hits)``: lists files of
  the current turn (``files``/``workdir`` or ``outputs``/``outdir``, optionally ``/<sub>``) with
  sizes and logical paths, never content.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Mapping
from typing import Any, Final

from actline.storage import NotStored
from actline.timeline.errors import PathError
from actline.timeline.paths import LogicalPath, fi_path, parse_path
from actline.tools.workspace.patching import PatchError, apply_patch, is_unified_diff
from actline.tools.workspace.workspace import WorkspaceBackend, check_room

from .base import Notice, ReactContext, ReactOutcome, failed, refuse

__all__ = ["CHECKOUT_MODES", "SEARCH_ROOTS", "checkout", "current_target", "patch", "pull"]

CHECKOUT_MODES: Final = ("replace", "overlay")
SEARCH_ROOTS: Final[Mapping[str, str]] = {
    "files": "files",
    "workdir": "files",
    "outputs": "outputs",
    "outdir": "outputs",
}
"""react.search_files roots and the area each one lists."""
MAX_PULL_PATHS: Final = 20
MAX_PULL_FILES: Final = 500
MAX_HITS: Final = 1000
DEFAULT_HITS: Final = 200
DEFAULT_MAX_BYTES: Final = 1_000_000
AREAS: Final = ("files", "outputs")


def _path_list(params: Mapping[str, Any], tool: str, limit: int) -> list[str] | Notice:
    raw = params.get("paths")
    if isinstance(raw, str):
        raw = [raw]
    if not (isinstance(raw, list | tuple) and raw and all(isinstance(p, str) for p in raw)):
        example = '["fi:<turn>.files/<scope>/"]'
        return Notice("bad_params", f"{tool}: paths must be a non-empty list like {example}.", tool)
    paths = list(dict.fromkeys(p.strip() for p in raw if p.strip()))
    if not paths:
        return Notice("bad_params", f"{tool}: paths are empty strings.", tool)
    if len(paths) > limit:
        return Notice("bad_params", f"{tool} takes at most {limit} paths per call.", tool)
    return paths


def _parse_fi(text: str, tool: str) -> LogicalPath | Notice:
    """A ``fi:`` ref; ``fi:<turn>.files`` (or ``.../``) means the whole files/ tree."""
    if text.startswith("fi:"):
        for area in AREAS:
            if text.endswith(f".{area}") or text.endswith(f".{area}/"):
                turn = text[3:].rsplit(".", 1)[0].removesuffix(f".{area}")
                try:
                    parse_path(f"fi:{turn}.{area}/x")
                except PathError as exc:
                    return Notice("bad_path", f"{text!r} ({exc.rule}): {exc.detail}", tool)
                return LogicalPath("fi", turn, area, rel="")
    try:
        lp = parse_path(text)
    except PathError as exc:
        return Notice("bad_path", f"{text!r} breaks the path rule {exc.rule}: {exc.detail}", tool)
    if lp.prefix != "fi":
        return Notice(
            "bad_path", f"{text!r} is not a fi: ref; {tool} takes fi:<turn>.<area>/... refs.", tool
        )
    return lp


def current_target(
    path: str, turn_id: str, tool: str
) -> tuple[str, str, LogicalPath | None] | Notice:
    """(area, rel, historical ref or None) of a path a tool writes in the current turn.

    ``files/<scope>/<rel>``, ``outputs/<scope>/<rel>`` and ``fi:<current turn>.<area>/<rel>``
    name the current turn; ``fi:<other turn>.<area>/<rel>`` is returned as the historical ref
    (the caller decides whether it may be used).
    """
    text = path.strip()
    advice = "use files/<scope>/<name> or outputs/<scope>/<name> of the current turn"
    if text.startswith("fi:"):
        try:
            lp = parse_path(text)
        except PathError as exc:
            return Notice(
                "bad_path", f"{path!r} breaks the path rule {exc.rule}: {exc.detail}", tool
            )
        if lp.name not in AREAS:
            return Notice("bad_path", f"{path!r} is not a files/ or outputs/ path; {advice}.", tool)
        if lp.is_folder:
            return Notice("bad_path", f"{path!r} is a folder; name a file. {advice}.", tool)
        historical = lp if lp.turn_id != turn_id else None
        return lp.name, lp.rel, historical
    area, slash, rel = text.partition("/")
    if area not in AREAS or not slash:
        try:
            parse_path(text)
        except PathError as exc:
            message = f"{path!r} is not a workspace path ({exc.rule}); {advice}."
            return Notice("bad_path", message, tool)
        return Notice("bad_path", f"{path!r} is not a workspace path; {advice}.", tool)
    try:
        fi_path(turn_id, area, rel)
    except PathError as exc:
        return Notice("bad_path", f"{path!r} breaks the path rule {exc.rule}: {exc.detail}", tool)
    if "/" not in rel or rel.endswith("/"):
        return Notice("bad_path", f"{path!r} names no file under a scope; {advice}.", tool)
    return area, rel, None


def _mime(rel: str, default: str = "text/plain") -> str:
    guessed, _ = mimetypes.guess_type(rel)
    return guessed or default


def _workspace(ctx: ReactContext, tool: str) -> WorkspaceBackend | ReactOutcome:
    workspace = ctx.files()
    if workspace is None:
        message = "No workspace is available here; write notes on the internal channel instead."
        return refuse(tool, "workspace_unavailable", message)
    return workspace


# -- react.pull ----------------------------------------------------------------------------------


def pull(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
    """``paths``: materialise historical ``fi:`` refs read-only under their turn roots."""
    tool = "react.pull"
    paths = _path_list(params, tool, MAX_PULL_PATHS)
    if isinstance(paths, Notice):
        return failed(paths)
    if ctx.local is None:
        return refuse(tool, "pull_unavailable", "This runtime keeps no files on disk to pull to.")
    pulled: list[dict[str, str]] = []
    missing: list[str] = []
    invalid: list[dict[str, str]] = []
    notices: list[Notice] = []
    for text in paths:
        lp = _parse_fi(text, tool)
        if isinstance(lp, Notice):
            invalid.append({"path": text, "reason": lp.message})
            notices.append(lp)
            continue
        if lp.turn_id == ctx.turn_id:
            reason = f"{text} is the active workspace of this turn; read or patch it directly."
            invalid.append({"path": text, "reason": reason})
            notices.append(Notice("pull_current_turn", reason, tool))
            continue
        folder = lp.is_folder or lp.rel == ""
        if folder and lp.name not in AREAS:
            reason = f"{text}: {lp.name} refs must be exact files, not folders."
            invalid.append({"path": text, "reason": reason})
            notices.append(Notice("bad_path", reason, tool))
            continue
        try:
            got = ctx.local.pull(lp)
        except (NotStored, PathError):
            missing.append(text)
            continue
        if len(pulled) + len(got) > MAX_PULL_FILES:
            reason = f"{text} holds too many files; pull a smaller subtree (≤ {MAX_PULL_FILES})."
            invalid.append({"path": text, "reason": reason})
            notices.append(Notice("pull_too_large", reason, tool))
            continue
        pulled.extend(
            {"logical_path": p.logical_path, "local_path": p.local_path, "kind": "file"}
            for p in got
        )
    if missing:
        message = (
            f"Nothing stored at: {', '.join(missing)}. Check the turn index "
            f"(ar:<turn>.react.turn.index) or react.search_files for the paths that exist."
        )
        notices.append(Notice("pull_paths_missing", message, tool))
    status = "ok" if pulled and not (missing or invalid) else "partial" if pulled else "error"
    result = {
        "status": status,
        "requested": paths,
        "pulled": pulled,
        "missing": missing,
        "invalid": invalid,
        "note": "pulled files are read-only copies; the active workspace is unchanged",
    }
    return ReactOutcome(result, [], notices)


# -- react.patch ---------------------------------------------------------------------------------


def patch(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
    """``path, patch``: apply a unified diff or a full replacement to a current-turn file."""
    tool = "react.patch"
    path, text = params.get("path"), params.get("patch")
    if not isinstance(path, str) or not path.strip() or not isinstance(text, str):
        message = "react.patch: path (a file of this turn) and patch (a string) are required."
        return refuse(tool, "bad_params", message)
    target = current_target(path, ctx.turn_id, tool)
    if isinstance(target, Notice):
        return failed(target)
    area, rel, historical = target
    workspace = _workspace(ctx, tool)
    if isinstance(workspace, ReactOutcome):
        return workspace
    current = fi_path(ctx.turn_id, area, rel)
    if historical is not None:
        if ctx.local is None or not ctx.local.is_pulled(historical):
            message = (
                f"{path} is a file of turn {historical.turn_id}: react.pull(paths=[{path!r}]) "
                f"first, then patch it; the result becomes {current}."
            )
            return refuse(tool, "patch_requires_pull", message)
        base_bytes: bytes | None = ctx.local.local_path(historical).read_bytes()
    else:
        try:
            base_bytes = workspace.read(current)
        except NotStored:
            base_bytes = None
    diff = is_unified_diff(text)
    if base_bytes is None and diff:
        message = f"{current} does not exist; create it with react.write, then patch it."
        return refuse(tool, "patch_target_missing", message)
    try:
        base = base_bytes.decode("utf-8") if base_bytes is not None else ""
    except UnicodeDecodeError:
        return refuse(tool, "patch_binary", f"{current} is not UTF-8 text; it cannot be patched.")
    if diff:
        try:
            new = apply_patch(base, text)
        except PatchError as exc:
            failure = {"status": "error", "code": exc.code, "path": current, "hunk": exc.hunk}
            message = f"{exc.message}" + (f"\nfailing hunk:\n{exc.hunk}" if exc.hunk else "")
            return ReactOutcome(failure, [], [Notice(exc.code, message, tool)])
    else:
        new = text
    data = new.encode("utf-8")
    mime = _mime(rel)
    try:
        stat = workspace.stat(current) if base_bytes is not None and historical is None else None
    except NotStored:
        stat = None
    if stat is not None and stat["mime"]:
        mime = stat["mime"]
    written = workspace.write(ctx.turn_id, area, rel, data, mime=mime, ts=ctx.now)
    result: dict[str, Any] = {
        "status": "ok",
        "path": written,
        "mode": "unified_diff" if diff else "replace",
        "size": len(data),
        "lines": new.count("\n") + (0 if new.endswith("\n") or not new else 1),
        "changed": base_bytes != data,
    }
    if historical is not None:
        result["based_on"] = str(historical)
    return ReactOutcome(result)


# -- react.checkout ------------------------------------------------------------------------------


def checkout(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
    """``paths, mode``: build the current turn's files/ from ordered ``fi:<turn>.files`` refs."""
    tool = "react.checkout"
    raw_mode = params.get("mode", "replace")
    if raw_mode not in CHECKOUT_MODES:
        message = f"mode {raw_mode!r} is not replace or overlay."
        return refuse(tool, "checkout_invalid_mode", message)
    mode = str(raw_mode)
    paths = _path_list(params, tool, MAX_PULL_PATHS)
    if isinstance(paths, Notice):
        return refuse(tool, "checkout_missing_paths", paths.message)
    workspace = _workspace(ctx, tool)
    if isinstance(workspace, ReactOutcome):
        return workspace
    chosen: dict[str, tuple[str, str]] = {}  # rel -> (source path, sha)
    invalid: list[str] = []
    missing: list[str] = []
    for text in paths:
        lp = _parse_fi(text, tool)
        if isinstance(lp, Notice) or lp.name != "files":
            reason = lp.message if isinstance(lp, Notice) else "checkout takes files/ refs only"
            invalid.append(f"{text} ({reason})")
            continue
        try:
            found = _files_at(workspace, lp)
        except (NotStored, PathError):
            found = {}
        if not found:
            missing.append(text)
            continue
        chosen.update(found)
    if invalid:
        message = f"Not fi:<turn>.files/... refs: {'; '.join(invalid)}. Nothing was changed."
        return refuse(tool, "checkout_invalid_paths", message)
    if missing:
        message = (
            f"Nothing stored at: {', '.join(missing)}. Nothing was changed; check the refs "
            "(ANNOUNCE lists the workspace, ar:<turn>.react.turn.index a turn's files)."
        )
        failure = {"status": "error", "code": "checkout_missing_paths", "missing": missing}
        return ReactOutcome(failure, [], [Notice("checkout_missing_paths", message, tool)])
    workspace.begin_turn(ctx.turn_id)
    before = workspace.tree(ctx.turn_id, "files")
    plan: list[tuple[str, str, int | None]] = []
    if mode == "replace":
        plan += [("files", rel, None) for rel in before if rel not in chosen]
    for rel, (source, sha) in chosen.items():
        if not (rel in before and before[rel]["sha"] == sha):
            plan.append(("files", rel, workspace.stat(source)["size"]))
    check_room(workspace, ctx.turn_id, plan)  # all of it fits, or nothing is changed
    removed: list[str] = []
    if mode == "replace":
        for rel in before:
            if rel not in chosen:
                workspace.delete(ctx.turn_id, "files", rel, ts=ctx.now)
                removed.append(rel)
    written: list[str] = []
    for rel, (source, sha) in chosen.items():
        if rel in before and before[rel]["sha"] == sha:
            continue
        data = workspace.read(source)
        stat = workspace.stat(source)
        workspace.write(ctx.turn_id, "files", rel, data, mime=stat["mime"], ts=ctx.now)
        written.append(rel)
    after = workspace.tree(ctx.turn_id, "files")
    result: dict[str, Any] = {
        "status": "ok",
        "mode": mode,
        "requested": paths,
        "checked_out": len(chosen),
        "written": len(written),
        "removed": removed,
        "files": [f"files/{rel}" for rel in after][:200],
        "file_count": len(after),
    }
    return ReactOutcome(result)


def _files_at(workspace: WorkspaceBackend, lp: LogicalPath) -> dict[str, tuple[str, str]]:
    """rel -> (the ref's path of that file, sha) for a file or folder ref."""
    if lp.is_folder or lp.rel == "":
        assert lp.turn_id is not None
        tree = workspace.tree(lp.turn_id, "files")
        under = lp.rel
        return {
            rel: (info["path"], info["sha"]) for rel, info in tree.items() if rel.startswith(under)
        }
    stat = workspace.stat(lp)
    return {lp.rel: (str(lp), stat["sha"])}


# -- react.search_files --------------------------------------------------------------------------


def search_files(params: Mapping[str, Any], ctx: ReactContext) -> ReactOutcome:
    """``root, name_regex, content_regex, max_bytes, max_hits``: list current-turn files."""
    tool = "react.search_files"
    root = params.get("root", "files")
    if not isinstance(root, str) or not root.strip():
        return refuse(
            tool, "search_files_invalid_root", "root must be files/<sub> or outputs/<sub>."
        )
    head, _, sub = root.strip().strip("/").partition("/")
    area = SEARCH_ROOTS.get(head)
    if area is None:
        roots = ", ".join(SEARCH_ROOTS)
        message = (
            f"root {root!r} is not one of {roots} (optionally followed by /<sub>); fi: paths "
            "are read with react.read or pulled with react.pull."
        )
        return refuse(tool, "search_files_invalid_root", message)
    if sub:
        try:
            fi_path(ctx.turn_id, area, sub + "/x")
        except PathError as exc:
            message = f"root {root!r} breaks the path rule {exc.rule}: {exc.detail}"
            return refuse(tool, "search_files_invalid_root", message)
    patterns: dict[str, re.Pattern[str] | None] = {}
    for name in ("name_regex", "content_regex"):
        value = params.get(name)
        if value in (None, ""):
            patterns[name] = None
            continue
        if not isinstance(value, str):
            return refuse(tool, "bad_params", f"{name} must be a regular expression string.")
        try:
            patterns[name] = re.compile(value)
        except re.error as exc:
            return refuse(tool, "bad_params", f"{name} {value!r} is not a valid regex: {exc}.")
    max_hits = params.get("max_hits", DEFAULT_HITS)
    max_bytes = params.get("max_bytes", DEFAULT_MAX_BYTES)
    for name, value in (("max_hits", max_hits), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return refuse(tool, "bad_params", f"{name} must be a positive integer.")
    workspace = _workspace(ctx, tool)
    if isinstance(workspace, ReactOutcome):
        return workspace
    try:
        tree = workspace.tree(ctx.turn_id, area)
    except NotStored:
        tree = {}
    prefix = f"{sub}/" if sub else ""
    name_re, content_re = patterns["name_regex"], patterns["content_regex"]
    hits: list[dict[str, Any]] = []
    skipped_large = 0
    truncated = False
    for rel, info in tree.items():
        if not rel.startswith(prefix):
            continue
        base = rel.rsplit("/", 1)[-1]
        if name_re is not None and not name_re.search(base):
            continue
        if content_re is not None:
            if info["size"] > max_bytes:
                skipped_large += 1
                continue
            text = workspace.read(info["path"]).decode("utf-8", "replace")
            if not content_re.search(text):
                continue
        if len(hits) >= min(max_hits, MAX_HITS):
            truncated = True
            break
        hits.append(
            {
                "path": rel[len(prefix) :],
                "size_bytes": info["size"],
                "logical_path": fi_path(ctx.turn_id, area, rel),
                "mime": info["mime"],
                "turn_id": info["turn_id"],
            }
        )
    result: dict[str, Any] = {"status": "ok", "root": f"{head}/{sub}".rstrip("/"), "hits": hits}
    if truncated:
        result["truncated"] = True
    if skipped_large:
        result["skipped_over_max_bytes"] = skipped_large
    return ReactOutcome(result)
