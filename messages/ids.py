"""Identifiers: validated value types and time-sortable ids.

Ids travel inside NATS subjects, so they are restricted to characters that are
safe in a subject token: letters, digits, ``_``, ``-`` and ``:`` (no ``.``,
wildcards or whitespace). ``new_id()`` returns a 26-character ULID-style id
(48-bit millisecond time + 80 random bits, Crockford base32) whose string order
is creation order, also for ids created within one millisecond by one process.

The random bits come from ``random.getrandbits``: ids must be unique, not secret (nothing
is authorised by knowing one), and the module's generator is seeded from ``os.urandom``
and seeded again in a forked child. ``os.urandom`` costs a system call per id, and a
round makes several.
"""

from __future__ import annotations

import random
import re
import threading
import time
from typing import Annotated

from pydantic import StringConstraints

ID_PATTERN = r"^[A-Za-z0-9_:\-]{1,128}$"
NAME_PATTERN = r"^[A-Za-z0-9_\-]{1,64}$"

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
"""A conversation, turn, task, call or signal id."""

AgentName = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
"""An outside agent's routing key (its name), e.g. ``reviewer``."""

_ID_RE = re.compile(ID_PATTERN)
_NAME_RE = re.compile(NAME_PATTERN)
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)
"""Every 10-bit value as its two characters: an id is 13 of them."""
_SHIFTS = tuple(range(120, -1, -10))
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def is_valid_id(value: str) -> bool:
    """True when ``value`` can be used as an id (and so as a subject token)."""
    return bool(_ID_RE.match(value))


def is_valid_name(value: str) -> bool:
    """True when ``value`` can be used as an agent name."""
    return bool(_NAME_RE.match(value))


def new_id(prefix: str = "") -> str:
    """Return a new time-sortable id, optionally prefixed (``new_id("t-")``)."""
    global _last_ms, _last_rand
    with _lock:
        now = time.time_ns() // 1_000_000
        if now <= _last_ms:
            now = _last_ms
            rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            rand = random.getrandbits(80)
        _last_ms, _last_rand = now, rand
    value = (now << 80) | rand
    return prefix + "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])
