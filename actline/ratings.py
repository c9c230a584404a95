"""The ratings a person may give a turn (``actline feedback --rating``, chat's ``/feedback``)."""

from __future__ import annotations

from .config import ConfigError

__all__ = ["RATING_WORDS", "parse_rating"]

RATING_WORDS = {"-1": -1, "0": 0, "1": 1, "+1": 1, "up": 1, "down": -1, "good": 1, "bad": -1}
"""What ``--rating`` and ``/feedback`` accept, and the wire rating (-1, 0, 1) of each."""


def parse_rating(text: str) -> int:
    """-1, 0 or 1 from ``text`` (``RATING_WORDS``); ``ConfigError`` otherwise."""
    rating = RATING_WORDS.get(text.strip().lower())
    if rating is None:
        raise ConfigError(f"rating {text!r}: write -1, 0 or 1 (or down, up)")
    return rating
