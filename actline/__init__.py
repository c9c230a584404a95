"""actline: a timeline-native ReAct agent runtime whose actors talk over NATS.

This package is the facade: the command-line entry point and (as the runtime
grows) the public Python API.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("actline")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
