"""``actline doctor``: what this machine can run, one line per check, and what to fix.

Checks: versions, NATS (the ``NATS_URL`` server and its JetStream, or the embedded
nats-server binary), the LMDB home (writable), the model (a claude model needs
``ANTHROPIC_API_KEY``), memsearch ranking (hybrid with the ``embeddings`` extra, BM25 alone
otherwise), the workspace mode (git needs the git binary) and the code.exec_python sandbox
(a real run under the ``ACTLINE_SANDBOX`` layer: Landlock, bubblewrap or none). Exit code 0
when nothing is broken, 2 when a check failed; a warning (say BM25 only) does not fail.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from rich.console import Console
from rich.table import Table

from actline import __version__

OK, WARN, FAIL = "ok", "warn", "fail"
PACKAGES = (
    "nats-py",
    "lmdb",
    "anthropic",
    "openai",
    "pydantic",
    "ray",
    "numpy",
    "tokenizers",
    "mcp",
)


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str
    detail: str


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


async def _nats(url: str | None) -> Check:
    from actline.bus import Bus, BusError
    from actline.bus.embedded import find_nats_server

    if not url:
        try:
            binary = find_nats_server()
        except Exception as exc:
            return Check("nats", FAIL, f"no NATS_URL and no embedded nats-server: {exc}")
        return Check("nats", OK, f"no NATS_URL: embedded nats-server {binary} (JetStream on)")
    try:
        bus = await Bus.connect(url, connect_timeout=3.0, connect_attempts=1)
    except (BusError, OSError, ValueError) as exc:
        return Check("nats", FAIL, str(exc))  # the bus error names the server and the fix
    try:
        await bus.jetstream_account()
    except BusError as exc:
        return Check("nats", FAIL, f"{url} has no JetStream ({exc}); run nats-server -js")
    finally:
        await bus.close()
    who = bus.identity.label if bus.identity else "WITHOUT authentication"
    return Check("nats", OK, f"{url} reachable as {who}, JetStream on")


def _lmdb(home: Path) -> Check:
    from actline.storage import StorageError, Store

    try:
        with Store(home, sync=False):
            pass
    except (StorageError, OSError) as exc:
        return Check("lmdb", FAIL, f"ACTLINE_HOME={home} is not writable: {exc}")
    return Check("lmdb", OK, f"{home.resolve()} writable")


def _model(name: str) -> Check:
    if name.startswith("claude"):
        if not os.environ.get("ANTHROPIC_API_KEY"):
            return Check("model", FAIL, f"{name} needs ANTHROPIC_API_KEY; export it")
        return Check("model", OK, f"{name} (Anthropic; ANTHROPIC_API_KEY set)")
    return Check("model", OK, f"{name} (offline)")


def _memsearch(enabled: bool, model: str) -> Check:
    from actline.tools.embeddings.embedders import embeddings_status

    if not enabled:
        return Check("memsearch", WARN, "BM25 only: ACTLINE_EMBEDDINGS is off")
    status = embeddings_status(model)
    if status["available"]:
        return Check("memsearch", OK, f"hybrid: BM25 + {status['model']} vectors (offline)")
    return Check("memsearch", WARN, f"BM25 only: {status['reason']}")


def _workspace(mode: str) -> Check:
    if mode == "git":
        git = shutil.which("git")
        if git is None:
            return Check("workspace", FAIL, "ACTLINE_WORKSPACE=git needs the git binary on PATH")
        return Check("workspace", OK, f"git mode ({git})")
    return Check("workspace", OK, f"{mode} mode (file versions in LMDB)")


async def _sandbox(mode: str) -> Check:
    from actline.tools.sandbox.confinement import choose
    from actline.tools.sandbox.sandbox import run_python

    layer = choose(mode)
    if not layer.usable:  # auto: the tool is off by design; a named mode: misconfigured
        return Check("sandbox", WARN if mode == "auto" else FAIL, layer.detail)
    with tempfile.TemporaryDirectory(prefix="actline-doctor-") as tmp:
        try:
            result = await run_python("print(6 * 7)", cwd=Path(tmp), timeout_s=15.0, sandbox=layer)
        except Exception as exc:
            return Check("sandbox", FAIL, f"code.exec_python cannot start Python: {exc}")
    if not result.ok or result.stdout.strip() != "42":
        return Check("sandbox", FAIL, f"code.exec_python failed: {result.stderr.strip()[:200]}")
    if layer.mode == "unconfined":
        return Check("sandbox", WARN, layer.detail)
    return Check("sandbox", OK, f"audit hook + {layer.detail}")


async def run_doctor(console: Console | None = None) -> int:
    """Print the checks; 0 when none failed, 2 otherwise."""
    from actline.actors.configuration.settings import NodeSettings

    out = console or Console()
    try:
        settings = NodeSettings.from_env()
    except ValueError as exc:
        out.print(f"[red]settings:[/red] {exc}")
        return 2
    checks = [
        Check(
            "versions",
            OK,
            f"actline {__version__}, Python {platform.python_version()}, "
            + ", ".join(f"{p} {_version(p)}" for p in PACKAGES),
        ),
        await _nats(os.environ.get("NATS_URL")),
        _lmdb(settings.home),
        _model(settings.model),
        _memsearch(settings.embeddings, settings.embed_model),
        _workspace(settings.workspace_mode),
        await _sandbox(settings.sandbox),
    ]
    table = Table(title="actline doctor", show_lines=False)
    table.add_column("check")
    table.add_column("")
    table.add_column("detail", overflow="fold")
    colour = {OK: "green", WARN: "yellow", FAIL: "red"}
    for check in checks:
        table.add_row(check.name, f"[{colour[check.status]}]{check.status}[/]", check.detail)
    out.print(table)
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        out.print(f"[red]{len(failed)} check(s) failed: {', '.join(failed)}[/red]")
        return 2
    out.print(f"[green]ready[/green] on {sys.platform}")
    return 0
