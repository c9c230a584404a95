"""actline: a timeline-native ReAct agent runtime whose actors talk over NATS.

This package is the facade: ``Runtime`` (the Python API), ``Config`` (one settings object)
and the ``actline`` command line, which is a thin layer over them.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("actline")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+source"

from .config import Config
from .errors import ActlineError, ConfigError, RuntimeNotStarted
from .runtime import Runtime

__all__ = [
    "ActlineError",
    "Config",
    "ConfigError",
    "Runtime",
    "RuntimeNotStarted",
    "__version__",
]
