"""Real node processes for the crash tests: ``python -m actline.cli.node`` started, SIGKILLed and
started again on the same home (``NodeProcess``), and the processes of one run (``Fleet``).

A node runs with the defaults (the caller's ``ACTLINE_*`` variables are not passed on)
except what ``NodeOptions`` names: the offline extractive model with a per-chunk delay,
``examples/kb``, the followup grace, optionally ``--ack-wait``. Its log goes to a file,
its stdout is read to the end (the ready line first), so no pipe fills.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.creds import creds_env

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT / "examples" / "kb"
READY_S = 60.0
"""Upper bound for a node process to print its ready line (not a timing assertion)."""


@dataclass(frozen=True, slots=True)
class NodeOptions:
    """How the node processes run: everything not named here is the node's default."""

    model_delay_s: float = 0.01
    grace_s: float = 0.0
    ack_wait_s: float | None = None
    """None: the node's default (the figure the kill runs measure)."""
    env: tuple[tuple[str, str], ...] = ()


class NodeProcess:
    """One ``python -m actline.cli.node`` process, started again on the same home after a kill."""

    def __init__(
        self,
        url: str,
        prefix: str,
        home: Path,
        logs: Path,
        options: NodeOptions,
        *,
        node_id: str | None = None,
        cluster: bool = False,
    ) -> None:
        self.url = url
        self.prefix = prefix
        self.home = home
        self.logs = logs
        self.options = options
        self.fixed_id = node_id
        self.cluster = cluster
        self.proc: asyncio.subprocess.Process | None = None
        self.node_id = node_id or ""
        self.starts = 0
        self.spawned_at = 0.0
        """When this incarnation was started (``time.monotonic``)."""
        self.ready_at = 0.0
        self._stdout: asyncio.Task[None] | None = None
        """Reads what the node prints after its ready line, so that the pipe never fills."""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self) -> float:
        """Start the process; returns the seconds from spawn to its ready line."""
        env = {  # the defaults: nothing of the caller's actline settings
            k: v
            for k, v in os.environ.items()
            if not k.startswith("ACTLINE_") and k not in ("NATS_URL", "ANTHROPIC_API_KEY")
        }
        env |= {"ACTLINE_SUBJECT_PREFIX": self.prefix, "PYTHONPATH": str(ROOT)}
        env |= {"ACTLINE_EMBEDDINGS": "0", "ACTLINE_CLUSTER": "1" if self.cluster else "0"}
        env |= creds_env(self.url, "node", prefix=self.prefix)
        env |= dict(self.options.env)
        args = ["--nats", self.url, "--home", str(self.home), "--docs", str(KB)]
        args += ["--model-delay", str(self.options.model_delay_s)]
        args += ["--grace", str(self.options.grace_s)]
        if self.options.ack_wait_s is not None:
            args += ["--ack-wait", str(self.options.ack_wait_s)]
        if self.fixed_id is not None:
            args += ["--node-id", self.fixed_id]
        self.logs.mkdir(parents=True, exist_ok=True)
        name = self.fixed_id or self.home.name
        log_path = self.logs / f"{name}-{self.starts}.log"
        self.starts += 1
        began = self.spawned_at = time.monotonic()
        with log_path.open("wb") as log_file:  # the child keeps its own descriptor
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "actline.cli.node",
                *args,
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=log_file,
            )
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), READY_S)
        if b"ready" not in line:
            raise RuntimeError(f"node did not start ({line!r}); see {log_path}")
        self.node_id = line.decode().split()[1]
        self.ready_at = time.monotonic()
        self._stdout = asyncio.create_task(_discard(self.proc.stdout), name=f"stdout:{name}")
        return self.ready_at - began

    async def kill(self) -> float:
        """SIGKILL; returns the moment it was sent (``time.monotonic``)."""
        assert self.proc is not None
        at = time.monotonic()
        self.proc.send_signal(signal.SIGKILL)
        await self.proc.wait()
        return at

    async def stop(self) -> None:
        """SIGTERM (the node hands its unfinished turns back), SIGKILL if it hangs."""
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 20)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def _discard(stream: asyncio.StreamReader) -> None:
    while await stream.read(65536):
        pass


class Fleet:
    """The node processes of one run; ``up`` is clear while one is killed and restarting."""

    def __init__(self, nodes: Sequence[NodeProcess], workdir: Path) -> None:
        self.nodes = list(nodes)
        self.workdir = workdir
        """Homes and node logs."""
        self.up = asyncio.Event()
        self.start_s: list[float] = []

    async def start(self) -> None:
        for node in self.nodes:
            self.start_s.append(await node.start())
        self.up.set()

    async def stop(self) -> None:
        await asyncio.gather(*(n.stop() for n in self.nodes))

    def by_id(self, node_id: str) -> NodeProcess | None:
        return next((n for n in self.nodes if n.node_id == node_id and n.alive), None)


__all__ = ["KB", "ROOT", "Fleet", "NodeOptions", "NodeProcess"]
