"""A real web console to drive with a real browser.

``Backend``: an embedded nats-server and a node whose model is scripted per prompt
(``ByPrompt``), running on an event loop of their own thread, so that the tests can
use Playwright's sync API on theirs. ``Console``: ``actline console --port 0 --nats
URL --home HOME`` as a real subprocess, a client of that server (its credentials come
from the keys under HOME/auth, which the embedded server trusts); the URL with the token
is read from its first stdout line. ``chromium()``: the system Chromium (the Debian
``chromium`` package, installed by ``make browser-deps``), never a downloaded build.

Every wait here is on a condition (a line read, a future, an event) with a timeout.
"""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from actline.config import Config
from actline.llm import ReplayModel
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest
from actline.runtime import Runtime

from ..waiting import POLL_S, until

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "examples" / "kb"
RESULTS = Path(__file__).with_name("results")
"""Screenshots of the main views (gitignored)."""
TIMEOUT = 20.0
T = TypeVar("T")


def chromium_path() -> str:
    """The system Chromium; an error naming the package (and ``make browser-deps``)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path("/usr/bin/chromium").exists():
        found = "/usr/bin/chromium"
    if found is None:
        raise RuntimeError(
            "the browser tests need the system Chromium: run `make browser-deps` "
            "(or apt-get install chromium); `playwright install` is never used"
        )
    return found


def chromium_args() -> list[str]:
    """Chromium refuses to run as root with its sandbox on."""
    return ["--no-sandbox"] if os.geteuid() == 0 else []


# --- the scripted model -------------------------------------------------------------------------


@dataclass
class Script:
    """The outputs of one conversation; ``hold`` gates call numbers (1-based) until released."""

    outputs: list[str]
    hold: set[int] = field(default_factory=set)
    model: ReplayModel = field(init=False)
    released: asyncio.Event = field(init=False)
    holding: bool = False
    """True while a held call waits for ``release``."""
    conversation_id: str = ""
    """The conversation whose first call picked this script."""

    def __post_init__(self) -> None:
        self.model = ReplayModel.of(self.outputs, chunk_chars=12)
        self.released = asyncio.Event()


class ByPrompt:
    """A model scripted per conversation, picked by a marker word of its first prompt.

    The console makes the conversation ids, so the tests key their scripts on a word
    they type (``cite-1``, ``wait-2``...); a conversation keeps the script its first
    call matched. A prompt matching no marker fails its turn, naming the markers.
    """

    name = "by-prompt"

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.by_conversation: dict[str, Script] = {}

    def script(self, marker: str, outputs: Iterable[str], *, hold: Iterable[int] = ()) -> Script:
        script = Script(list(outputs), set(hold))
        self.scripts[marker] = script
        return script

    def _pick(self, request: GenerateRequest) -> Script:
        cid = request.conversation_id
        if cid not in self.by_conversation:
            text = "\n".join(str(b.get("text", "")) for b in request.blocks)
            matches = [s for marker, s in self.scripts.items() if marker in text]
            if len(matches) != 1:
                raise LookupError(
                    f"conversation {cid}: {len(matches)} scripts match; markers: "
                    f"{sorted(self.scripts)}"
                )
            self.by_conversation[cid] = matches[0]
            matches[0].conversation_id = cid
        return self.by_conversation[cid]

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        script = self._pick(request)
        if script.model.calls + 1 in script.hold:
            script.holding = True
            await script.released.wait()
            script.holding = False
        async for chunk in script.model.stream(request):
            yield chunk


# --- the node side ------------------------------------------------------------------------------


class Backend:
    """An embedded nats-server + node (``ByPrompt`` model) on an event loop in a thread."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.model = ByPrompt()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runtime: Runtime | None = None

    def start(self) -> Backend:
        self._thread.start()
        env = {
            "ACTLINE_HOME": str(self.home),
            "ACTLINE_DOCS": str(KB),
            "ACTLINE_FOLLOWUP_GRACE": "0",
            "ACTLINE_SYNC": "0",
            "ACTLINE_TRACE": "1",  # JSONL traces under the home, read by the console
        }
        self.runtime = Runtime(Config.load(env=env), model=self.model)
        self.call(self.runtime.start())
        return self

    @property
    def rt(self) -> Runtime:
        assert self.runtime is not None, "Backend.start() first"
        return self.runtime

    @property
    def url(self) -> str:
        return self.rt.nats_url

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = TIMEOUT) -> T:
        """Run ``coro`` on the backend's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def until(self, check: Callable[[], bool | Awaitable[bool]], timeout: float = TIMEOUT) -> None:
        """Wait on the backend's loop until ``check()`` holds (it reads the node's state)."""
        self.call(until(check, timeout), timeout + 5)

    def release(self, script: Script) -> None:
        self.loop.call_soon_threadsafe(script.released.set)

    def stop(self) -> None:
        if self.runtime is not None:
            self.call(self.runtime.close(), 30)
        self.call(_cancel_the_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


async def _cancel_the_rest() -> None:
    """Cancel what the node left on the loop (a turn still waiting when the module ends)."""
    current = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not current]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


# --- the console process ------------------------------------------------------------------------


class Console:
    """``actline console --port 0`` as a subprocess; ``url`` carries the token."""

    PREFIX = "actline console: "

    def __init__(self, nats_url: str, home: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        env.pop("NATS_URL", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "actline",
                "console",
                "--port",
                "0",
                "--nats",
                nats_url,
                "--home",
                str(home),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=ROOT,
        )
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self._wait_url()
        self.base = self.url.split("?", 1)[0].rstrip("/")
        self.token = self.url.split("token=", 1)[1]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    def _wait_url(self) -> str:
        while True:
            try:
                line = self._lines.get(timeout=TIMEOUT)
            except queue.Empty:
                self.stop()
                raise AssertionError(f"no URL from the console: {self.tail()}") from None
            if line is None:
                raise AssertionError(f"the console exited: {self.tail()}")
            if line.startswith(self.PREFIX):
                return line[len(self.PREFIX) :].strip()

    def tail(self) -> str:
        return "\n".join(self.output[-30:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def wait_until(check: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """Return once ``check()`` holds (polled, as ``tests.waiting.until``); else TimeoutError."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout} s: {check.__doc__ or check}")
        threading.Event().wait(POLL_S)


def screenshot(page: Any, name: str) -> Path:
    """Save a screenshot of the page under ``tests/web/results/``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
