"""The model servers the interop suite runs against, and how actline is configured for them.

An ``Endpoint`` is one model served at one base URL through one API (``messages``: the
Anthropic Messages API; ``openai``: Chat Completions). actline reaches it as a
``[models.NAME]`` table of an ``actline.toml`` kept in the run's ``ACTLINE_HOME``, the way a
user configures a model of their own.

Two kinds of server:

- ``local``: the project's own servers (``FakeAnthropicServer``, ``FakeOpenAIServer``) in
  this event loop, answering with the offline ``ExtractiveModel`` over ``examples/kb``;
- ``llama``: llama.cpp's ``llama-server`` (``scripts/llama-server.sh`` builds it into
  ``.venv/bin``) serving SmolLM2-135M-Instruct on loopback; one process serves both APIs.
  ``LlamaServer`` starts it on a free port, waits until ``GET /health`` says ok and stops it
  with terminate-then-kill. Its OpenMP threads wait passively (``OMP_WAIT_POLICY=passive``):
  spinning on every core of a two-core machine beside the node that streams its reply slows
  generation twentyfold.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from actline.config import Config
from actline.llm import ExtractiveModel
from actline.llm.fake_anthropic import FakeAnthropicServer
from actline.llm.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "examples" / "kb"
VENV = ROOT / ".venv"
LLAMA_BINARY = VENV / "bin" / "llama-server"
LLAMA_MODEL = VENV / "share" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
Api = Literal["messages", "openai"]
Kind = Literal["local", "llama"]
APIS: tuple[Api, ...] = ("messages", "openai")
LLAMA_CONTEXT = 8192
LLAMA_OUTPUT = 192
"""max_output_tokens of the llama model: room for a thinking line and a decision. SmolLM2
writes 13-19 tokens a second on these two cores, so a reply that runs to the limit takes
10-15 s, and a turn's four calls (three of them repairs) stay near a minute."""
LLAMA_NAME = "smollm2"
LOCAL_NAME = "local-extractive"
LLAMA_ENV = {"OMP_WAIT_POLICY": "passive"}
HEALTH_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A model by name at a base URL, through one API, as a ``[models.NAME]`` table."""

    kind: Kind
    api: Api
    model: str
    base_url: str
    context_window: int = 200_000
    max_output_tokens: int = 4096
    cache: str = "automatic"

    @property
    def label(self) -> str:
        return f"{self.kind}-{self.api}"

    def table(self) -> str:
        """The ``actline.toml`` that names this model and its table."""
        return (
            f'model = "{self.model}"\n\n'
            f"[models.{self.model}]\n"
            f'api = "{self.api}"\n'
            f'base_url = "{self.base_url}"\n'
            f"context_window = {self.context_window}\n"
            f"max_output_tokens = {self.max_output_tokens}\n"
            "input_price = 0.0\n"
            "output_price = 0.0\n"
            f'cache = "{self.cache}"\n'
        )

    def write_toml(self, home: Path) -> Path:
        """``home/actline.toml`` holding ``table()``; the folder is made when missing."""
        home.mkdir(parents=True, exist_ok=True)
        path = home / "actline.toml"
        path.write_text(self.table(), encoding="utf-8")
        return path

    def env(self, home: Path) -> dict[str, str]:
        """The ``ACTLINE_*`` settings of a run in ``home`` (the TOML file written there)."""
        env = {
            "ACTLINE_HOME": str(home),
            "ACTLINE_CONFIG": str(self.write_toml(home)),
            "ACTLINE_DOCS": str(KB),
            "ACTLINE_EMBEDDINGS": "off",
        }
        if self.kind == "local":  # the offline model answers at once: no grace to wait out
            env["ACTLINE_FOLLOWUP_GRACE"] = "0"
        return env

    def config(self, home: Path, **changes: str) -> Config:
        """The ``Config`` of an in-process runtime in ``home`` (embedded NATS)."""
        return Config.load(env={**self.env(home), **changes})


# -- local: the project's own servers ------------------------------------------------------------


LOCAL_DELAY_S = 0.002
"""Between two 16-character chunks of the offline model: a turn lasts long enough (about a
second) for a followup to join it, and the suite stays fast."""


@contextlib.asynccontextmanager
async def local_endpoint(api: Api) -> AsyncIterator[Endpoint]:
    """The local server of ``api`` with the offline model, running while the block runs."""
    policy = ExtractiveModel(delay=LOCAL_DELAY_S)
    server = FakeAnthropicServer(policy) if api == "messages" else FakeOpenAIServer(policy)
    async with server:
        yield Endpoint("local", api, LOCAL_NAME, server.base_url)


# -- llama: llama.cpp's llama-server ------------------------------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on now (llama-server cannot report a port 0 it took)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServerFailed(Exception):
    """llama-server exited or never became healthy; ``log_tail`` says what it printed."""

    def __init__(self, reason: str, log_tail: str, returncode: int | None = None) -> None:
        super().__init__(reason, log_tail, returncode)
        self.reason = reason
        self.log_tail = log_tail
        self.returncode = returncode

    def __str__(self) -> str:
        return f"llama-server {self.reason}; its log ends:\n{self.log_tail}"


class LlamaServer:
    """A ``llama-server`` process on loopback serving ``model`` under ``alias``."""

    def __init__(
        self,
        log_path: Path,
        *,
        binary: Path = LLAMA_BINARY,
        model: Path = LLAMA_MODEL,
        alias: str = LLAMA_NAME,
        context: int = LLAMA_CONTEXT,
        threads: int = 2,
    ) -> None:
        self.binary = binary
        self.model = model
        self.alias = alias
        self.context = context
        self.threads = threads
        self.log_path = log_path
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.started_s = 0.0
        """Seconds from the process start until ``/health`` said ok."""

    @staticmethod
    def missing() -> str | None:
        """Why the suite cannot start llama-server here (None: it can)."""
        for path, what in ((LLAMA_BINARY, "binary"), (LLAMA_MODEL, "model")):
            if not path.is_file():
                return f"no llama-server {what} at {path}: run `sh scripts/llama-server.sh`"
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def endpoint(self, api: Api, max_output_tokens: int = LLAMA_OUTPUT) -> Endpoint:
        """The model as actline reaches it through ``api`` (Chat Completions under ``/v1``)."""
        base = self.url if api == "messages" else f"{self.url}/v1"
        return Endpoint("llama", api, self.alias, base, self.context, max_output_tokens)

    def argv(self) -> list[str]:
        return [
            str(self.binary),
            "-m",
            str(self.model),
            "--alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "-c",
            str(self.context),
            "-t",
            str(self.threads),
            "-np",
            "1",
        ]

    def start(self, timeout: float = HEALTH_TIMEOUT_S) -> LlamaServer:
        """Start the process and return once ``/health`` answers ok."""
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("wb")
        began = time.monotonic()
        self.proc = subprocess.Popen(
            self.argv(),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **LLAMA_ENV},
        )
        deadline = began + timeout
        while not self.healthy():
            if self.proc.poll() is not None:
                self.stop()
                code = self.proc.returncode
                raise LlamaServerFailed(f"exited with code {code}", self.tail(), code)
            if time.monotonic() > deadline:
                self.stop()
                raise LlamaServerFailed(f"not healthy within {timeout:g} s", self.tail())
            time.sleep(0.1)  # polling /health: the server raises no event of its own
        self.started_s = time.monotonic() - began
        return self

    def healthy(self) -> bool:
        """``GET /health`` answers 200 with status ok (503 while the model loads)."""
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2.0) as reply:
                body = json.loads(reply.read() or b"{}")
        except (OSError, ValueError):
            return False
        return isinstance(body, dict) and body.get("status") == "ok"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Terminate, then kill after ``STOP_TIMEOUT_S``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def facts(self) -> dict[str, object]:
        """The build facts a report states: the binary, the model file and its size."""
        return {
            "binary": str(self.binary),
            "binary_bytes": self.binary.stat().st_size if self.binary.exists() else None,
            "model": str(self.model),
            "model_bytes": self.model.stat().st_size if self.model.exists() else None,
            "context": self.context,
            "threads": self.threads,
            "startup_s": round(self.started_s, 3),
            "env": dict(LLAMA_ENV),
            "argv": " ".join(["llama-server", *self.argv()[1:]]),
        }

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
