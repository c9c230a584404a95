"""What a running ``actline serve`` leaves in its home, so other commands can find it.

While it runs, ``actline serve`` writes ``<home>/serve.json``: the URL its embedded
nats-server listens on, its process id, the client credentials to join it with, and whether
it runs without authentication. ``chat``, ``ask``, ``result`` and the other commands that
join a server read it when neither ``NATS_URL`` nor ``--nats`` names one (``find``). The file
is removed on a clean stop; a file whose process is gone or whose port no longer answers is
stale: ``find`` ignores it and says why.

The port the embedded server listened on is also kept, in ``<home>/nats/port``, after the
server stops: ``pick_port`` reuses it next time when 4222 is taken, so a restarted server
has the URL its agents and clients reconnect to.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_PORT",
    "STATE_FILE",
    "PortTaken",
    "Served",
    "find",
    "forget",
    "pick_port",
    "port_holder",
    "record",
]

STATE_FILE = "serve.json"
"""The file under the home that says a server runs there."""
PORT_FILE = Path("nats") / "port"
"""The port of the home's embedded server, kept across restarts."""
DEFAULT_PORT = 4222
"""NATS's usual client port: the first choice of ``actline serve``."""
PROBE_S = 0.5


@dataclass(frozen=True, slots=True)
class Served:
    """A running ``actline serve``: where it listens and how to join it."""

    url: str
    pid: int
    creds: Path | None
    """The client credentials to join it with (None: it runs without authentication)."""
    insecure: bool = False


@dataclass(frozen=True, slots=True)
class PortTaken(Exception):
    """A port asked for is held by another process (``holder``: who, when known)."""

    port: int
    holder: str = ""

    def __str__(self) -> str:
        who = f" by {self.holder}" if self.holder else " by another process"
        return f"port {self.port} is taken{who}"


def record(home: Path, served: Served) -> Path:
    """Write the state file of ``served`` under ``home`` and keep its port; the file's path."""
    path = home / STATE_FILE
    data = {
        "url": served.url,
        "pid": served.pid,
        "creds": str(served.creds) if served.creds is not None else None,
        "insecure": served.insecure,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data) + "\n")
    tmp.replace(path)
    port = _port_of(served.url)
    if port is not None:
        (home / PORT_FILE).parent.mkdir(parents=True, exist_ok=True)
        (home / PORT_FILE).write_text(f"{port}\n")
    return path


def forget(home: Path, pid: int) -> None:
    """Remove the state file when it is the one process ``pid`` wrote."""
    path = home / STATE_FILE
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()


def find(home: Path) -> tuple[Served | None, str]:
    """The server running for ``home``, and "" ; or None and why a state file found there
    was ignored ("" when there is none)."""
    path = home / STATE_FILE
    try:
        data = json.loads(path.read_text())
        served = Served(
            url=str(data["url"]),
            pid=int(data["pid"]),
            creds=Path(data["creds"]) if data.get("creds") else None,
            insecure=bool(data.get("insecure", False)),
        )
    except OSError:  # none (or no home yet: the command says what is wrong with it)
        return None, ""
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"ignored {path}: it is not a state file of actline serve ({exc})"
    if not _alive(served.pid):
        with contextlib.suppress(OSError):
            path.unlink()
        return None, f"ignored {path}: actline serve (pid {served.pid}) is no longer running"
    port = _port_of(served.url)
    if port is None or not _answers(port):
        return None, f"ignored {path}: nothing listens on {served.url} any more"
    return served, ""


def recorded_port(home: Path) -> int | None:
    """The port the home's embedded server listened on last time, if kept."""
    try:
        port = int((home / PORT_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def pick_port(home: Path, asked: int | None, *, default: int = DEFAULT_PORT) -> int:
    """The port for the home's embedded server: ``asked`` (``PortTaken`` when held), else
    ``default`` (4222) when free, else the one kept from the last run when free, else a
    free one."""
    if asked is not None:
        if not _free(asked):
            raise PortTaken(asked, port_holder(asked))
        return asked
    for port in (default, recorded_port(home)):
        if port is not None and _free(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_holder(port: int) -> str:
    """Who listens on ``port`` on this machine ("pid N (command)"), "" when not known."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()  # local address, state (0A: listening), inode
                if len(fields) > 9 and fields[3] == "0A" and fields[1].endswith(f":{port:04X}"):
                    inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return ""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                    return f"pid {proc.name} ({command.strip()[:120]})"
    return ""


def _port_of(url: str) -> int | None:
    try:
        return int(url.rsplit(":", 1)[1].split("/")[0])
    except (IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), PROBE_S):
        return True
    return False


def _free(port: int) -> bool:
    """True when nothing listens on ``port`` of the loopback (nor of every interface)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nats-server binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return not _answers(port)
