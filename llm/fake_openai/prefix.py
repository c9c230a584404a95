"""Prompt accounting as a local server does it: tokens of a prompt, and a prefix cache.

``prompt_text`` lays a request's messages out the way a chat template does (role
headers, then content), so two requests that share their first messages share a
prefix. ``PrefixCache`` answers how much of a new prompt an earlier one already
covered — the longest common prefix with any of the last ``slots`` prompts, as
llama.cpp's automatic prefix caching reuses a slot's KV cache — and never the whole
prompt: at least one token is always evaluated.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from actline.timeline.tokens import DEFAULT_COUNTER


def _part_text(part: Any) -> str:
    if not isinstance(part, Mapping):
        return ""
    kind = part.get("type")
    if kind == "image_url":
        return str((part.get("image_url") or {}).get("url", ""))
    if kind == "file":
        return str((part.get("file") or {}).get("file_data", ""))
    return str(part.get("text") or part.get("refusal") or "")


def prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt of a (validated) body as one string, in a chat template's layout."""
    out: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(_part_text(p) for p in content)
        out.append(f"<|{message.get('role')}|>\n{content or ''}<|end|>\n")
    out.append("<|assistant|>\n")
    return "".join(out)


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def prompt_tokens(text: str) -> int:
    return DEFAULT_COUNTER.count(text)


class PrefixCache:
    """The prompts of the last ``slots`` requests; ``cached(prompt)`` is the tokens of the
    longest prefix ``prompt`` shares with one of them."""

    def __init__(self, slots: int = 4) -> None:
        self._prompts: deque[str] = deque(maxlen=max(1, slots))

    def cached(self, prompt: str) -> int:
        """Tokens of ``prompt`` already in the cache (at most all but one)."""
        shared = max((common_prefix(prompt, p) for p in self._prompts), default=0)
        total = prompt_tokens(prompt)
        return max(0, min(prompt_tokens(prompt[:shared]), total - 1))

    def store(self, prompt: str) -> None:
        """Keep ``prompt`` (its slot is the oldest one's when all are taken)."""
        if prompt in self._prompts:
            self._prompts.remove(prompt)
        self._prompts.append(prompt)
