"""actline: a timeline-native ReAct agent runtime whose actors talk over NATS.

This package is the facade: ``Runtime`` (the Python API), ``Config`` (one settings object)
and the ``actline`` command line, which is a thin layer over them. Everything else of
actline installs beneath it: ``actline.actors``, ``actline.bus``, ``actline.messages``,
``actline.storage``, ``actline.timeline``, ``actline.channels``, ``actline.tools`` and
``actline.llm``. The names below load on first use, so importing a sub-package (the
client side, say) does not pull in the node.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _layout

# In a checkout the namespace's sub-packages (actline.actors, actline.bus, ...) are the
# top-level folders beside this one (see _layout); an installed wheel holds them inside.
_layout.install(Path(__file__).resolve().parent)

try:
    __version__ = version("actline")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

if TYPE_CHECKING:
    from .config import Config
    from .conversations import (
        ConversationBusy,
        ConversationInfo,
        ConversationNotFound,
        Conversations,
        DeletedConversation,
    )
    from .errors import ActlineError, ConfigError, RuntimeNotStarted
    from .runtime import Runtime
    from .tools.hooks import Allow, Deny, ToolHooks, ToolUse
    from .tools.registry import ToolContext, ToolOutput, ToolRegistry
    from .tools.typed import TypedTool, tool

_WHERE = {
    "ActlineError": "errors",
    "Config": "config",
    "ConfigError": "errors",
    "ConversationBusy": "conversations",
    "ConversationInfo": "conversations",
    "ConversationNotFound": "conversations",
    "Conversations": "conversations",
    "DeletedConversation": "conversations",
    "Runtime": "runtime",
    "RuntimeNotStarted": "errors",
    "Allow": "tools.hooks",
    "Deny": "tools.hooks",
    "ToolContext": "tools.registry",
    "ToolHooks": "tools.hooks",
    "ToolOutput": "tools.registry",
    "ToolRegistry": "tools.registry",
    "ToolUse": "tools.hooks",
    "TypedTool": "tools.typed",
    "tool": "tools.typed",
}

__all__ = [
    "ActlineError",
    "Allow",
    "Config",
    "ConfigError",
    "ConversationBusy",
    "ConversationInfo",
    "ConversationNotFound",
    "Conversations",
    "DeletedConversation",
    "Deny",
    "Runtime",
    "RuntimeNotStarted",
    "ToolContext",
    "ToolHooks",
    "ToolOutput",
    "ToolRegistry",
    "ToolUse",
    "TypedTool",
    "__version__",
    "tool",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
