"""``actline console``'s web side: a Starlette app (``make_app``), live events (``Hub``) and
the static page (``static/``: plain HTML, CSS and JavaScript, nothing fetched from outside)."""

from .app import make_app

__all__ = ["make_app"]
