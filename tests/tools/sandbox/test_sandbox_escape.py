"""Escape attempts aimed at the node that runs code.exec_python, under every sandbox mode.

The layout is a node's: ``ACTLINE_HOME`` holds a real LMDB store with another conversation's
secret, the code runs in ``workspaces/c1/<turn>`` with ``workspaces/c1`` readable (as
code.exec_python runs it), and ``workspaces/c2`` belongs to another conversation. Each attempt
runs under Landlock and under bubblewrap (where this machine has the layer; a layer it lacks
is checked to be refused, ``tests/tools/sandbox/sandbox_modes.py``) with the whole sandbox, then
with the kernel layer alone (no audit hook), and under ``unconfined`` (the audit hook alone, which
compiled code gets past: that is why it has to be asked for by name). When no layer is
available the code does not run at all. Whether an attempt escaped is read on the host: the
secret in the output, a file on the host, a changed store.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import pytest

from actline import tools
from actline.actors.client.client import Client
from actline.bus import Bus, EmbeddedNats
from actline.storage import Store
from actline.timeline.blocks import TOOL_CALL, TOOL_RESULT
from actline.tools.sandbox import confinement
from actline.tools.sandbox import runner as _sandbox_runner
from actline.tools.sandbox.confinement import SANDBOX_MODES, Confinement, Probe, choose, decide
from actline.tools.sandbox.sandbox import ExecResult, SandboxError, run_python
from tests.actors.harness import Scripted, run_turn, say, start_node

from .sandbox_modes import AVAILABLE, KERNEL_MODES, available_layer, running

ROOT = Path(__file__).resolve().parents[3]

SECRET = "c2 launch code 7431"
"""Stored in the other conversation's files and in the store: never in any output."""
REPO = Path(tools.__file__).resolve().parents[1]


@dataclass
class Node:
    """A node's disk as code.exec_python sees it (paths resolved)."""

    home: Path
    turn_root: Path
    conversation: Path
    other: Path
    host_files: tuple[Path, ...]
    """Files an escape would create outside every sandbox: removed after the test."""


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    home = (tmp_path / "home").resolve()
    with Store(home, sync=False) as store:
        with store.env.begin(write=True) as txn:
            txn.put(b"secret", SECRET.encode())
    conversation = home / "workspaces" / "c1"
    turn_root = conversation / "T1"
    (turn_root / "files").mkdir(parents=True)
    (conversation / "T0" / "files").mkdir(parents=True)
    (conversation / "T0" / "files" / "old.txt").write_text("an earlier turn of c1")
    other = home / "workspaces" / "c2"
    (other / "T9" / "files").mkdir(parents=True)
    (other / "T9" / "files" / "secret.txt").write_text(SECRET)
    tag = uuid.uuid4().hex[:12]
    host_files = (
        Path("/tmp") / f"actline-escape-{tag}.txt",
        REPO / f"actline-escape-{tag}.txt",
        Path.home() / f"actline-escape-{tag}.txt",
    )
    yield Node(home, turn_root, conversation, other, host_files)
    for path in host_files:
        path.unlink(missing_ok=True)


def store_values(home: Path) -> dict[bytes, bytes]:
    env = lmdb.open(str(home), readonly=True, lock=False, max_dbs=32)
    try:
        with env.begin() as txn:
            return {bytes(k): bytes(v) for k, v in txn.cursor()}
    finally:
        env.close()


@dataclass(frozen=True)
class Attempt:
    name: str
    code: str
    hook_blind: bool = False
    """Done from C code that raises no audit event: only a kernel layer stops it."""


def attempts(n: Node, nats_port: int) -> list[Attempt]:
    tmp_file, repo_file, home_file = (str(p) for p in n.host_files)
    secret = str(n.other / "T9" / "files" / "secret.txt")
    return [
        Attempt(
            "the store through the LMDB extension",
            "import lmdb\n"
            f"env = lmdb.open({str(n.home)!r}, create=False, max_dbs=32)\n"
            "with env.begin(write=True) as txn:\n"
            "    print(bytes(txn.get(b'secret')))\n"
            "    txn.put(b'pwned', b'by the sandbox')\n",
            hook_blind=True,
        ),
        Attempt("another conversation's file", f"print(open({secret!r}).read())"),
        Attempt(
            "a write into another conversation",
            f"open({str(n.other / 'planted.txt')!r}, 'w').write('x')",
        ),
        Attempt(
            "a write into another conversation through SQLite ATTACH",
            "import sqlite3\ndb = sqlite3.connect('ok.db')\n"
            f"db.execute(\"ATTACH DATABASE '{n.other / 'attached.db'}' AS x\")\n"
            "db.execute('create table x.t(v)')\ndb.commit()\n",
            hook_blind=True,
        ),
        Attempt("a write into the host's /tmp", f"open({tmp_file!r}, 'w').write('x')"),
        Attempt("a write into the repository", f"open({repo_file!r}, 'w').write('x')"),
        Attempt("a write into the host's $HOME", f"open({home_file!r}, 'w').write('x')"),
        Attempt("reading /etc/shadow", "print(open('/etc/shadow').read())"),
        Attempt("reading /etc/passwd", "print(open('/etc/passwd').read())"),
        Attempt(
            "a connection to the local nats-server",
            "import socket\n"
            f"s = socket.create_connection(('127.0.0.1', {nats_port}), timeout=5)\n"
            "print(s.recv(4096))\n",
        ),
    ]


def escaped(n: Node, result: ExecResult) -> list[str]:
    """What the run reached on the host, as seen from the host."""
    found = []
    output = result.stdout + result.stderr
    if SECRET in output:
        found.append("the secret is in the output")
    if "root:" in output:
        found.append("a host account file is in the output")
    if "server_id" in output:
        found.append("the nats-server answered")
    for path in (*n.host_files, n.other / "planted.txt", n.other / "attached.db"):
        if path.exists():
            found.append(f"{path} exists")
    if b"pwned" in store_values(n.home):
        found.append("the store was written")
    return found


async def run_in(
    n: Node, code: str, sandbox: str | Confinement, *, audit_hook: bool = True
) -> ExecResult:
    return await run_python(
        code,
        cwd=n.turn_root,
        read_roots=[n.conversation],
        timeout_s=20.0,
        sandbox=sandbox,
        audit_hook=audit_hook,
    )


# --- the attempts, per mode ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", [*AVAILABLE, "unconfined"])
async def test_escape_attempts_with_the_whole_sandbox(
    node: Node, nats_server: EmbeddedNats, mode: str
) -> None:
    layer = available_layer(mode) if mode != "unconfined" else choose("unconfined")
    outcomes = {}
    for attempt in attempts(node, nats_server.port):
        result = await run_in(node, attempt.code, layer)
        assert result.confinement == mode
        outcomes[attempt.name] = (attempt, result, escaped(node, result))
        if outcomes[attempt.name][2]:  # undo, so the next attempt is judged alone
            (node.other / "attached.db").unlink(missing_ok=True)
            _drop_pwned(node.home)
    for name, (attempt, result, reached) in outcomes.items():
        if mode == "unconfined" and attempt.hook_blind:
            # The documented hole without a kernel layer: ACTLINE_SANDBOX=unconfined says so.
            assert reached, (name, result)
        else:
            assert reached == [], (name, result)
            assert result.exit_code == 1, (name, result)


@pytest.mark.parametrize("mode", AVAILABLE)
async def test_escape_attempts_with_the_kernel_layer_alone(
    node: Node, nats_server: EmbeddedNats, mode: str
) -> None:
    layer = available_layer(mode)
    for attempt in attempts(node, nats_server.port):
        result = await run_in(node, attempt.code, layer, audit_hook=False)
        assert result.refused == ()  # no hook: only the kernel said no
        assert escaped(node, result) == [], (attempt.name, result)


def _drop_pwned(home: Path) -> None:
    env = lmdb.open(str(home), max_dbs=32)
    try:
        with env.begin(write=True) as txn:
            txn.delete(b"pwned")
    finally:
        env.close()


@pytest.mark.parametrize("mode", [*AVAILABLE, "unconfined"])
async def test_process_bombs_are_stopped_and_the_limits_hold(node: Node, mode: str) -> None:
    layer = available_layer(mode) if mode != "unconfined" else choose("unconfined")
    forks = await run_in(node, "import os\nwhile True:\n    os.fork()\n", layer)
    assert forks.exit_code == 1 and any("os.fork" in r for r in forks.refused)
    threads = await run_in(
        node,
        "import threading, time\nn = 0\ntry:\n    while True:\n"
        "        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
        "        n += 1\nexcept (RuntimeError, MemoryError) as e:\n"
        "    print('stopped after', n, type(e).__name__)\n",
        layer,
    )
    assert threads.ok and threads.stdout.startswith("stopped after"), threads
    limits = await run_python(
        "import resource as r\nprint([r.getrlimit(getattr(r, 'RLIMIT_' + k))[0] for k in "
        "('AS', 'CPU', 'FSIZE', 'NOFILE', 'CORE')])\n"
        "r.setrlimit(r.RLIMIT_AS, (-1, -1))\n",
        cwd=node.turn_root,
        timeout_s=5.0,
        memory_mb=256,
        sandbox=layer,
    )
    assert limits.stdout == f"{[256 * 2**20, 6, 256 * 2**20, 256, 0]}\n"
    assert any("resource.setrlimit" in r for r in limits.refused)
    assert running(node.turn_root) == []


async def test_ordinary_code_works_under_every_mode(node: Node) -> None:
    (node.turn_root / "files" / "data.csv").write_text("a,b\n1,2\n3,4\n")
    code = (
        "import csv, json, pathlib, statistics\n"
        "rows = list(csv.DictReader(open('files/data.csv')))\n"
        "total = sum(int(r['a']) + int(r['b']) for r in rows)\n"
        "pathlib.Path('outputs').mkdir(exist_ok=True)\n"
        "pathlib.Path('outputs/total.json').write_text(json.dumps({'total': total}))\n"
        "print(total, statistics.mean([1, 2, 3]), open('../T0/files/old.txt').read())\n"
    )
    ran = 0
    for mode in [*KERNEL_MODES, "unconfined"]:
        layer = choose(mode)
        if not layer.usable:
            continue
        result = await run_in(node, code, layer)
        assert result.ok and result.confinement == mode, result
        assert result.stdout == "10 2 an earlier turn of c1\n"
        assert (node.turn_root / "outputs" / "total.json").read_text() == '{"total": 10}'
        (node.turn_root / "outputs" / "total.json").unlink()
        ran += 1
    assert ran >= 2  # unconfined and at least one kernel layer


async def test_exec_latency_per_mode_is_reported(node: Node) -> None:
    """Prints the median wall time of a trivial run per mode (``pytest -s`` shows it)."""
    figures = []
    for mode in [*KERNEL_MODES, "unconfined"]:
        layer = choose(mode)
        if not layer.usable:
            continue
        await run_in(node, "print(1)", layer)  # warm the page cache
        times = []
        for _ in range(10):
            started = time.perf_counter()
            result = await run_in(node, "print(1)", layer)
            times.append(time.perf_counter() - started)
            assert result.ok
        figures.append(f"{mode} {statistics.median(times) * 1000:.1f} ms")
    print("exec latency (median of 10, print(1)):", ", ".join(figures))
    assert figures


# --- no layer: the code does not run -------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "machine", "mode", "fragments"),
    [
        ("auto", Probe(6, "/usr/bin/bwrap", "0.8.0"), "landlock", ["Landlock ABI 6"]),
        ("auto", Probe(0, "/usr/bin/bwrap", "0.8.0"), "bwrap", ["no Landlock", "0.8.0"]),
        ("bwrap", Probe(6, "/usr/bin/bwrap", "0.8.0"), "bwrap", ["/usr/bin/bwrap"]),
        (
            "auto",
            Probe(0),
            "refused",
            ["disabled", "apt-get install bubblewrap", "ACTLINE_SANDBOX=unconfined"],
        ),
        ("landlock", Probe(0, "/usr/bin/bwrap"), "refused", ["ACTLINE_SANDBOX=landlock"]),
        (
            "bwrap",
            Probe(6, bwrap_problem="namespaces: Operation not permitted"),
            "refused",
            ["ACTLINE_SANDBOX=bwrap", "Operation not permitted", "install bubblewrap"],
        ),
        ("unconfined", Probe(6, "/usr/bin/bwrap"), "unconfined", ["audit hook"]),
        ("firejail", Probe(6, "/usr/bin/bwrap"), "refused", ["not a sandbox mode"]),
    ],
)
def test_the_mode_is_the_one_asked_for_or_a_refusal_that_names_it(
    requested: str, machine: Probe, mode: str, fragments: list[str]
) -> None:
    chosen = decide(requested, machine)
    assert chosen.mode == mode and chosen.usable == (mode != "refused")
    assert all(f in chosen.detail for f in fragments), chosen.detail


async def test_without_a_layer_the_code_does_not_run(node: Node) -> None:
    refused = decide("auto", Probe(0))
    marker = node.turn_root / "ran.txt"
    with pytest.raises(SandboxError) as error:
        await run_in(node, "open('ran.txt', 'w')", refused)
    assert error.value.code == "sandbox_unavailable"
    assert "ACTLINE_SANDBOX=unconfined" in error.value.message
    assert not marker.exists()


async def test_a_named_mode_that_is_missing_is_an_error_not_a_fallback(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    with pytest.raises(SandboxError) as error:
        await run_in(node, "open('ran.txt', 'w')", "bwrap")
    assert error.value.code == "sandbox_unavailable"
    assert "ACTLINE_SANDBOX=bwrap" in error.value.message
    assert "bwrap is not on PATH" in error.value.message
    assert not (node.turn_root / "ran.txt").exists()


FULL_LANDLOCK = """
import asyncio, ctypes, os, sys
from actline.tools.sandbox import runner as r
from actline.tools.sandbox.confinement import Confinement
from actline.tools.sandbox.sandbox import SandboxError, run_python

# Sixteen stacked Landlock domains (each handles only making character devices), the
# kernel's limit: the runner's own restriction, a seventeenth, is refused.
syscall, prctl = r._libc()
c_long = ctypes.c_long
assert prctl(r._PR_SET_NO_NEW_PRIVS, c_long(1), c_long(0), c_long(0), c_long(0)) == 0
attr = ctypes.c_uint64(r._FS_MAKE_CHAR)
create, restrict = c_long(r._SYS_LANDLOCK_CREATE_RULESET), c_long(r._SYS_LANDLOCK_RESTRICT_SELF)
for _ in range(16):
    fd = int(syscall(create, ctypes.byref(attr), c_long(8), c_long(0)))
    assert fd >= 0 and syscall(restrict, c_long(fd), c_long(0)) == 0
    os.close(fd)
try:
    asyncio.run(run_python("open('ran.txt', 'w')", cwd=sys.argv[1], read_roots=[sys.argv[2]],
                           timeout_s=20.0, sandbox=Confinement("landlock", "forced")))
except SandboxError as exc:
    print("refused:", exc.message)
"""


async def test_a_landlock_the_kernel_cannot_apply_stops_the_run(node: Node) -> None:
    if _sandbox_runner.landlock_abi() == 0:  # no Landlock here: forcing it is refused as is
        with pytest.raises(SandboxError) as error:
            await run_in(node, "open('ran.txt', 'w')", Confinement("landlock", "forced"))
        refusal = error.value.message
    else:  # Landlock here: a process already at the kernel's limit of domains cannot add one
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            FULL_LANDLOCK,
            str(node.turn_root),
            str(node.conversation),
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await child.communicate()
        assert child.returncode == 0, err.decode()
        refusal = out.decode()
    assert "did not apply it" in refusal
    assert not (node.turn_root / "ran.txt").exists()


def test_an_unknown_sandbox_setting_is_refused_at_startup() -> None:
    from actline.actors.configuration.settings import NodeSettings
    from actline.actors.errors import SettingsError

    with pytest.raises(SettingsError) as error:
        NodeSettings.from_env({"ACTLINE_SANDBOX": "off"})
    assert error.value.name == "ACTLINE_SANDBOX"
    assert all(mode in error.value.reason for mode in SANDBOX_MODES)
    assert NodeSettings.from_env({"ACTLINE_SANDBOX": "bwrap"}).sandbox == "bwrap"


# --- through a real node ---------------------------------------------------------------------

STORE_DUMP = """
import os
try:
    import lmdb
    env = lmdb.open("../../..", readonly=True, lock=False, create=False, max_dbs=64)
    print("store opened")
except Exception as exc:
    print("store:", type(exc).__name__)
for name in ("../../c2", "../../../data.mdb"):
    try:
        print(name, os.listdir(name) if name.endswith("c2") else len(open(name, "rb").read()))
    except Exception as exc:
        print(name, type(exc).__name__)
"""
WORK = """
import pathlib
pathlib.Path("outputs").mkdir(exist_ok=True)
pathlib.Path("outputs/sum.txt").write_text(str(sum(range(10))))
print("sum", sum(range(10)))
"""


def _results(node: Any, cid: str) -> list[dict[str, Any]]:
    tl = node.conversations[cid].tl
    calls = {b.call_id for b in tl.blocks if b.type == TOOL_CALL}
    return [
        b.data
        for b in tl.blocks
        if b.type == TOOL_RESULT and b.call_id in calls and b.data and b.path.startswith("tc:")
    ]


@pytest.mark.parametrize("workspace", ["custom", "git"])
@pytest.mark.parametrize("mode", AVAILABLE)
async def test_exec_python_through_a_node_works_and_keeps_the_store_closed(
    bus: Bus, tmp_path: Path, mode: str, workspace: str
) -> None:
    available_layer(mode)
    home = tmp_path / "home"
    model = Scripted(
        {
            "c2": [say("Noted.", answer="Noted.")],
            "c1": [
                say("Working.", calls=[("code.exec_python", {"code": WORK})]),
                say("Looking around.", calls=[("code.exec_python", {"code": STORE_DUMP})]),
                say("Done.", answer="45"),
            ],
        }
    )
    node = await start_node(bus, home, model, sandbox=mode, workspace_mode=workspace)
    client = Client(bus)
    try:
        assert (await run_turn(client, SECRET, "c2")).result.result().status == "completed"
        handle = await run_turn(client, "sum it", "c1")
        assert handle.result.result().status == "completed"
        work, dump = _results(node, "c1")
    finally:
        await client.close()
        await node.stop()
    assert work["status"] == "ok" and "sum 45" in work["content"], work
    assert work["data"]["sandbox"] == mode
    assert work["data"]["files"] == [f"fi:{handle.turn_id}.outputs/sum.txt"]
    assert dump["data"]["sandbox"] == mode
    assert "store opened" not in dump["content"] and SECRET not in dump["content"]
    assert "store:" in dump["content"], dump


async def test_exec_python_through_a_node_is_refused_without_a_layer(
    bus: Bus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sandbox_runner, "landlock_abi", lambda: 0)  # a kernel without it
    monkeypatch.setattr(confinement, "_chosen", {})
    monkeypatch.setenv("PATH", str(tmp_path))  # and no bubblewrap
    model = Scripted(
        {
            "c1": [
                say("Running.", calls=[("code.exec_python", {"code": "open('ran', 'w')"})]),
                say("Done.", answer="It was refused."),
            ]
        }
    )
    node = await start_node(bus, tmp_path / "home", model)
    client = Client(bus)
    try:
        handle = await run_turn(client, "run it", "c1")
        assert handle.result.result().status == "completed"
        (outcome,) = _results(node, "c1")
    finally:
        await client.close()
        await node.stop()
    assert outcome["status"] == "error" and outcome["data"]["code"] == "sandbox_unavailable"
    assert "install bubblewrap" in outcome["error"]
    assert "ACTLINE_SANDBOX=unconfined" in outcome["error"]
    assert not list((tmp_path / "home").rglob("ran"))
