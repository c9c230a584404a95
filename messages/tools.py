"""Tool-execution messages between a decision loop and the ToolExecutorActor pool, and
between a tool executor and the node that holds a call's conversation.

A tool executor that runs a workspace tool for a conversation held elsewhere asks the owner on
``<prefix>.node.<owner>.workspace`` (``Subjects.node_workspace``): ``workspace.fetch`` is
answered ``workspace.files`` (the turn's tree with contents inline up to a bound; larger files
are fetched again by path, one chunk per request from ``offset``), ``workspace.apply`` is
answered ``ack`` (every change stored) or ``error.reply`` (none stored: the turn is not
running there, a path is refused, a quota would be exceeded, or a file changed on the owner
since it was fetched). Changes larger than a message go in several ``workspace.apply`` of the
same call, the last one ``final``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import ArtifactRef, UtcDatetime, WireModel, utcnow
from .ids import Id


class ToolCall(WireModel):
    """One call of an external tool."""

    kind: Literal["tool.call"] = "tool.call"
    conversation_id: Id
    turn_id: Id
    call_id: Id
    tool: str
    params: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = 60.0
    owner: str = ""
    """The node that holds the conversation: an executor without its files fetches them from
    there and sends the changes back (``<prefix>.node.<owner>.workspace``)."""
    ts: UtcDatetime = Field(default_factory=utcnow)


class ToolResult(WireModel):
    """The outcome of one tool call; ``ok`` is False with ``error`` set on failure."""

    kind: Literal["tool.result"] = "tool.result"
    conversation_id: Id
    turn_id: Id
    call_id: Id
    tool: str
    ok: bool = True
    content: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    error: str | None = None
    ts: UtcDatetime = Field(default_factory=utcnow)


class WorkspaceFile(WireModel):
    """One file of a fetched tree, or one chunk of a file fetched by path."""

    path: str
    """Its ``fi:`` path as of the turn asked about (``fi:<turn>.<area>/<rel>``)."""
    version: str = ""
    """The version's own path: ``fi:<turn that wrote it>.<area>/<rel>``."""
    sha: str = ""
    """The sha256 of the whole file."""
    size: int = 0
    """The whole file's size in bytes."""
    mime: str = ""
    ts: float = 0.0
    data: bytes | None = None
    """The bytes from ``offset`` (the whole file or one chunk); None: not sent, fetch by path."""
    offset: int = 0


class WorkspaceFetch(WireModel):
    """Ask the owner for the running turn's files (``workspace.files`` answers)."""

    kind: Literal["workspace.fetch"] = "workspace.fetch"
    conversation_id: Id
    turn_id: Id
    """The running turn: the owner answers only while it runs there."""
    areas: list[str] = Field(default_factory=list)
    """The areas whose trees to list (``files``, ``outputs``)."""
    as_of: str = ""
    """List the trees as of this earlier turn instead (empty: the running turn)."""
    contents: bool = True
    """Send the listed files' bytes inline, up to ``limit`` together."""
    paths: list[str] = Field(default_factory=list)
    """``fi:`` paths whose bytes to send from ``offset``, up to ``limit`` together."""
    offset: int = 0
    limit: int = 0
    """Bytes of content in the answer at most (0: the owner's own bound)."""
    ts: UtcDatetime = Field(default_factory=utcnow)


class WorkspaceFiles(WireModel):
    """The owner's answer to ``workspace.fetch``."""

    kind: Literal["workspace.files"] = "workspace.files"
    conversation_id: Id
    turn_id: Id
    mode: str = "custom"
    files: list[WorkspaceFile] = Field(default_factory=list)
    """The trees asked for, area by area, sorted by path."""
    read: list[WorkspaceFile] = Field(default_factory=list)
    """The ``paths`` asked for that exist."""
    missing: list[str] = Field(default_factory=list)
    """The ``paths`` asked for that hold no file."""
    pulled: list[str] = Field(default_factory=list)
    """The ``fi:`` refs of earlier turns pulled read-only on the owner (``react.pull``)."""
    usage: dict[str, int] = Field(default_factory=dict)
    """What the conversation holds against its quotas; empty when the mode is not counted."""
    quota: dict[str, int] = Field(default_factory=dict)
    """The conversation's quotas (0: no limit); empty when the mode is not counted."""
    ts: UtcDatetime = Field(default_factory=utcnow)


class WorkspaceChange(WireModel):
    """One file a remote tool run wrote or deleted in the running turn."""

    area: str
    rel: str
    data: bytes | None = None
    """The bytes from ``offset`` (a chunk of a larger file); None: the file was deleted."""
    offset: int = 0
    size: int = 0
    """The whole file's size."""
    base: str = ""
    """The sha256 of the version the run started from; empty: there was no file."""
    mime: str = ""
    ts: float = 0.0


class WorkspaceApply(WireModel):
    """Store what a remote tool run changed (``ack``, or ``error.reply`` and nothing stored)."""

    kind: Literal["workspace.apply"] = "workspace.apply"
    conversation_id: Id
    turn_id: Id
    call_id: Id
    changes: list[WorkspaceChange] = Field(default_factory=list)
    final: bool = True
    """The last part: the owner checks and stores every part of the call at once."""
    ts: UtcDatetime = Field(default_factory=utcnow)
