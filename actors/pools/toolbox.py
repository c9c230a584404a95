"""The external tools a node serves, built from its settings: one function for the node
and for a tool pool process (``actline pool tools``), so both serve the same registry.

``register_node_tools`` adds, in this order, the built-in tools (``code.exec_python``,
``files.*``, ``http.fetch``; unless ``builtin_tools`` is off), the tools of the skills
folder (``skills``) and the tools of every MCP server of ``mcp_config``. The MCP servers
run until ``servers`` (an ``AsyncExitStack`` the caller closes when it stops) is closed.
A broken skill raises ``SkillError``; an MCP server that does not start raises its error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from actline.actors.configuration.settings import NodeSettings, load_mcp_config
from actline.tools.builtin import BuiltinConfig, register_builtins
from actline.tools.registry import ToolRegistry
from actline.tools.skills import SkillSet, node_skills

__all__ = ["builtin_config", "register_node_tools", "start_mcp"]

log = logging.getLogger(__name__)


def builtin_config(settings: NodeSettings) -> BuiltinConfig:
    """The limits of the built-in tools under ``settings``."""
    hosts = [h.strip() for h in settings.http_allowed_hosts.split(",") if h.strip()]
    return BuiltinConfig(
        exec_timeout_s=settings.exec_timeout_s,
        exec_memory_mb=settings.exec_memory_mb,
        exec_write_mb=settings.exec_write_mb,
        exec_sandbox=settings.sandbox,
        http_allowed_hosts=hosts or None,
    )


async def register_node_tools(
    settings: NodeSettings, registry: ToolRegistry, servers: contextlib.AsyncExitStack
) -> SkillSet | None:
    """Register the tools a node with ``settings`` serves in ``registry``; returns its
    skills (None without a skills folder)."""
    if settings.builtin_tools:
        register_builtins(registry, builtin_config(settings))
    skills = await asyncio.to_thread(node_skills, settings, registry)
    if settings.mcp_config is not None:
        await start_mcp(settings.mcp_config, registry, servers)
    return skills


async def start_mcp(
    config: Path, registry: ToolRegistry, servers: contextlib.AsyncExitStack
) -> None:
    """Start the MCP servers of ``config`` (kept running by ``servers``) and register
    their tools."""
    from actline.tools.mcp_bridge import McpServer, register_mcp_server

    for name, spec in load_mcp_config(config).items():
        server = McpServer(
            name,
            spec["command"],
            spec.get("args", ()),
            env=spec.get("env"),
            cwd=spec.get("cwd"),
        )
        await servers.enter_async_context(server)
        names = await register_mcp_server(registry, server, approval=spec["approval"])
        log.info("MCP server %s: %d tools", name, len(names))
