"""Running a command so that closing its terminal or a ``kill`` stops it cleanly.

``run_until_signal(main)`` is ``asyncio.run(main)`` that also ends on SIGHUP (the terminal was
closed) and SIGTERM: the signal cancels ``main``, whose cleanup runs as on Ctrl-C (a
``Runtime`` closes, so an embedded nats-server, which runs in a session of its own and gets no
signal from the terminal, is stopped too), and the exit code is 128 + the signal's number
(129, 143). SIGINT keeps ``asyncio.run``'s handling (``KeyboardInterrupt``, exit 130). A
command may install its own handlers for these signals while it runs (``actline chat``,
``serve``, ``agent``); they take precedence.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any

__all__ = ["STOP_SIGNALS", "run_until_signal"]

STOP_SIGNALS = (signal.SIGHUP, signal.SIGTERM)


async def _guarded(main: Coroutine[Any, Any, int]) -> int:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    caught: list[int] = []

    def on_signal(signum: int) -> None:
        if not caught:  # a second signal does not cut the cleanup short
            caught.append(signum)
            task.cancel()

    installed: list[int] = []
    for number in STOP_SIGNALS:
        signum = int(number)
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    try:
        return await main
    except asyncio.CancelledError:
        if not caught:
            raise
        task.uncancel()
        return 128 + caught[0]
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def run_until_signal(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` to its exit code, or to 128 + N when signal N of ``STOP_SIGNALS`` came."""
    return asyncio.run(_guarded(main))
