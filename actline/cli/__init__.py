"""The ``actline`` command line: one module per command, each a thin layer over
``actline.Runtime`` (an outside agent's inbox: ``actline.actors.client.agent``), and ``main``,
which parses the arguments and dispatches. It owns the commands' arguments, their output and
their exit codes. It may import the facade (``actline.config``, ``actline.runtime``, ...),
every sub-package beneath it (``actline.actors``, ``actline.tools``, ``actline.storage``, ...)
and ``actline.terminal`` for what it shows on a terminal (progress cards, the chat session,
attachments, signals); ``actline.terminal`` never imports it back. Of the web console it
imports only the entry point (``actline.web.make_app``, inside ``actline console``), while the
console reuses a few of its read helpers (listing agents, stored conversations, timelines and
traces)."""

from .main import main

__all__ = ["main"]
