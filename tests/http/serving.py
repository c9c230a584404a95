"""A real ``actline serve --http 0`` and a client of it made of the standard library only.

``Served`` starts the command as a subprocess (an embedded nats-server and a node with the
offline ``extractive`` model over ``examples/kb``, in a home of the test's), reads the
API's URL from its stdout, issues tokens with ``actline creds http`` (a child process of
its own), and speaks HTTP with ``urllib.request`` and, for server-sent events,
``http.client``. Nothing here imports actline: it is what an app that does not speak NATS
would do. Every wait is on a line read or a response, with a timeout.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
READY_S = 60.0
"""Upper bound for the server to print its URL (not a timing assertion)."""
URL = re.compile(r"HTTP API at (http://[0-9.]+:\d+)/v1")


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Event:
    id: str
    event: str
    data: dict[str, Any]


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NATS_URL", "ANTHROPIC_API_KEY") and not k.startswith("ACTLINE_")
    }
    env.update(ACTLINE_HOME=str(home), ACTLINE_EMBEDDINGS="off", PYTHONPATH=str(ROOT))
    env.update(COLUMNS="250", **extra)
    return env


class Served:
    """``actline serve --http 0`` in ``home`` (module docstring)."""

    def __init__(self, home: Path, **env: str) -> None:
        self.home = home
        self.env = clean_env(home, **env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "actline", "serve", "--http", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self._wait_url()
        self.host, port = self.url.removeprefix("http://").split(":")
        self.port = int(port)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _wait_url(self) -> str:
        while True:
            try:
                line = self.lines.get(timeout=READY_S)
            except queue.Empty:
                raise AssertionError(f"no HTTP API line (seen: {self.seen})") from None
            self.seen.append(line)
            if found := URL.search(line):
                return found.group(1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # -- tokens ------------------------------------------------------------------------------
    def creds(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "actline", "creds", *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def token(self, name: str, *args: str) -> str:
        """A new token (``actline creds http NAME ARGS``, read from its piped stdout)."""
        done = self.creds("http", name, *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    # -- requests ----------------------------------------------------------------------------
    def call(
        self,
        method: str,
        path: str,
        *,
        token: str | None = None,
        body: Any = None,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """One request; the answer's body parsed as JSON when it is JSON."""
        sent = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return _answer(response.status, response.read(), dict(response.headers))
        except urllib.error.HTTPError as error:
            return _answer(error.code, error.read(), dict(error.headers))

    def events(self, path: str, token: str, last_event_id: str | None = None) -> list[Event]:
        """The server-sent events of ``path`` until the stream ends (after the result)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            assert response.status == 200, (response.status, response.read())
            assert response.headers["content-type"].startswith("text/event-stream")
            return _parse_sse(response)
        finally:
            conn.close()


def _answer(status: int, data: bytes, headers: dict[str, str]) -> Answer:
    kind = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
    body: Any = json.loads(data) if kind.startswith("application/json") and data else data
    return Answer(status, body, {k.lower(): v for k, v in headers.items()})


def _parse_sse(response: http.client.HTTPResponse) -> list[Event]:
    """SSE frames (``id:``, ``event:``, ``data:`` lines, a blank line ends one) until the
    stream closes; comments (pings) skipped."""
    events: list[Event] = []
    frame: dict[str, str] = {}
    while True:
        line = response.readline()
        if not line:
            return events
        text = line.decode().rstrip("\r\n")
        if not text:
            if "data" in frame:
                data = json.loads(frame["data"])
                events.append(Event(frame.get("id", ""), frame.get("event", "message"), data))
            frame = {}
            continue
        if text.startswith(":"):
            continue
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        frame[name] = frame[name] + "\n" + value if name in frame else value
