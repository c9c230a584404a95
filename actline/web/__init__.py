"""``actline console``'s web side: a Starlette app (``make_app``), live events (``Hub``) and
the static page (``static/``: plain HTML, CSS and JavaScript, nothing fetched from outside).
It may import the facade and every sub-package beneath it, and ``actline.terminal`` (the
checks on attached files), never ``actline.cli``."""

from .app import make_app

__all__ = ["make_app"]
