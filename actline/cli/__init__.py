"""The ``actline`` command line: one module per command, each a thin layer over
``actline.Runtime`` (an outside agent's inbox: ``actline.actors.client.agent``), and ``main``,
which parses the arguments and dispatches. It owns the commands' arguments, their output and
their exit codes. It may import the facade (``actline.config``, ``actline.runtime``, ...),
every sub-package beneath it (``actline.actors``, ``actline.tools``, ``actline.storage``, ...)
and ``actline.terminal`` for what it shows on a terminal (progress cards, the chat session,
attachments, signals) and ``actline.web`` for ``actline console``. Neither imports it back:
what the CLI and the web console both read (stored conversations, traces, the agent list)
lives in the facade (``actline.stored``, ``actline.traces``, ``actline.agents``)."""

from .main import main

__all__ = ["main"]
