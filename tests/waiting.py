"""Waiting on a condition in tests: the one polling loop, for states that raise no event of
their own (a key aged out by the server, a connection dropped, a counter on another task)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

POLL_S = 0.02


async def until(check: Callable[[], bool | Awaitable[bool]], timeout: float = 20.0) -> None:
    """Return once ``check()`` (plain or async) holds; ``TimeoutError`` after ``timeout``."""
    async with asyncio.timeout(timeout):
        while True:
            held = check()
            if inspect.isawaitable(held):
                held = await held
            if held:
                return
            await asyncio.sleep(POLL_S)
