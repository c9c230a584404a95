"""The ``actline`` command line: one module per command, each a thin layer over
``actline.Runtime`` and the client; ``main`` parses the arguments and dispatches.
May import everything below the facade (``actline.actors``, ``actline.tools``, …) and
the facade itself, never the web console's internals beyond its entry point."""

from .main import main

__all__ = ["main"]
