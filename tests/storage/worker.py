"""A store worker process for the crash and concurrency tests, and the checks of what it leaves.

Run from the repository root as ``python -m tests.storage.worker MODE DIR ...``. A worker
opens the store once (one environment per process), reports each step as one flushed
line on stdout and takes its cues from lines on stdin, so that the parent follows it
without sleeping. Modes:

``append DIR CID``
    Loads CID (if stored) and appends turns ``t<n>``, ``n = revision + 1, ...``, each
    persisted by one ``Store.persist``. Prints ``opened``, ``ready <revision> <map_size>``,
    then ``<revision> <map_size>`` after every committed persist, and ``done`` after
    ``--turns`` turns (without it, it appends until killed). ``--wait-go`` waits for one
    line before the first turn, ``--step`` for one line before every turn.
``read DIR CID``
    Reads the header, starts ``iter_blocks`` (one read transaction) and prints
    ``reading <stored_seq>`` after the first block; waits for one line (``--step``: one
    line before every further block, answering ``at <seq>``), then prints
    ``read <seqs as JSON>``.
``hold-write DIR``
    Opens a write transaction, puts one key into ``SCRATCH_DB``, prints ``holding`` and
    commits only after a line arrives; then prints ``committed``.
``keep DIR``
    Keeps the environment open and answers each line with ``readers <pids as JSON>``:
    the processes in the reader table (live or not).

The parent side lives here too: ``Worker`` drives a worker process, ``add_turn`` and
``expected_turn`` define the turns, and ``check_whole`` checks a stored conversation.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

import lmdb

from actline.storage import NotStored, Store
from actline.storage.layout import unpack
from actline.timeline import SourceRow, Timeline
from tests.timeline.builders import T0, Build

ROOT = Path(__file__).resolve().parents[2]
SMALL_MAP = 256 << 10
"""A map small enough that the turns below make it grow several times."""
SCRATCH_DB = "vectors"
"""A named database the tests write stray keys into (its keys never look like these)."""

# -- the turns a worker appends -------------------------------------------------------------


def result_sizes(n: int) -> list[int]:
    """Tool result sizes of turn ``n``: 1-6 small ones; every third turn also has a large one."""
    rng = random.Random(n)
    sizes = [rng.randint(20, 4000) for _ in range(rng.randint(1, 6))]
    if n % 3 == 0:
        sizes[rng.randrange(len(sizes))] = rng.randint(100_000, 250_000)
    return sizes


def filler(label: str, size: int) -> str:
    """``size`` characters that repeat ``label`` (a torn or misplaced value would not match)."""
    unit = f"{label};"
    return (unit * (size // len(unit) + 1))[:size]


def last_text(turn_id: str) -> str:
    """The completion that closes a turn: a turn stored without it is torn."""
    return f"end of {turn_id}"


def source_of(n: int, title: str = "") -> SourceRow:
    """The source turn ``t<n>`` adds to the pool (SID ``n``); the next turn lengthens its title."""
    return SourceRow(0, url=f"https://example.com/t{n}", title=title or f"source of t{n}")


def add_turn(tl: Timeline, n: int) -> str:
    """Append turn ``t<n>``: header, prompt, call/result rounds, then the closing completion.

    The turn also adds source ``n`` to the pool, lengthens the title of source ``n - 1``
    and makes a new plan ``p<n>`` current (``p<n - 1>`` becomes open): header rows that a
    persist adds and changes.
    """
    turn_id = f"t{n}"
    build = Build(tl, t0=T0 + 1000.0 * n)
    build.turn(turn_id, f"prompt of {turn_id}")
    for i, size in enumerate(result_sizes(n)):
        build.tool(f"c{i}", filler(f"{turn_id}.c{i}", size))
    tl.sources.add_rows([source_of(n)])
    if n > 1:
        tl.sources.add_rows([source_of(n - 1, f"source of t{n - 1}, seen again")])
    build.plan([f"step of {turn_id}"], plan_id=f"p{n}")
    build.completion(last_text(turn_id))
    return turn_id


@functools.cache
def expected_turn(n: int) -> tuple[tuple[str, str, str, str], ...]:
    """(turn id, type, path, text) of each block of turn ``t<n>`` in append order."""
    tl = Timeline("expected")
    add_turn(tl, n)
    return tuple((b.turn_id, b.type, b.path, b.text) for b in tl.blocks)


# -- the worker process ---------------------------------------------------------------------


def say(text: str) -> None:
    print(text, flush=True)


def cue() -> None:
    """Wait for one line from the parent; a closed stdin ends the worker."""
    if not sys.stdin.readline():
        raise SystemExit(0)


def run_append(args: argparse.Namespace) -> None:
    store = Store(args.dir, map_size=args.map_size)
    say("opened")
    try:
        tl = store.load(args.cid).timeline
    except NotStored:
        tl = Timeline(args.cid)
    header = store.header(args.cid) or {}
    revision = int(header.get("revision", 0))
    if len(tl.turn_ids()) != revision:
        raise SystemExit(f"{len(tl.turn_ids())} turns stored at revision {revision}")
    say(f"ready {revision} {store.map_size}")
    if args.wait_go:
        cue()
    appended = 0
    while args.turns is None or appended < args.turns:
        if args.step:
            cue()
        add_turn(tl, revision + 1)
        revision = store.persist(tl)
        appended += 1
        say(f"{revision} {store.map_size}")
    say("done")


def run_read(args: argparse.Namespace) -> None:
    store = Store(args.dir, map_size=args.map_size)
    say("opened")
    header = store.header(args.cid) or {}
    blocks = store.iter_blocks(args.cid)
    seqs = [next(blocks)["seq"]]
    say(f"reading {header.get('stored_seq', 0)}")
    cue()
    for block in blocks:
        seqs.append(block["seq"])
        if args.step:
            say(f"at {block['seq']}")
            cue()
    say(f"read {json.dumps(seqs)}")


def run_hold_write(args: argparse.Namespace) -> None:
    store = Store(args.dir, map_size=args.map_size)

    def hold(txn: lmdb.Transaction) -> None:
        txn.put(held_key(os.getpid()), b"", db=store.db[SCRATCH_DB])
        say("holding")
        cue()

    store.write(hold)
    say("committed")


def run_keep(args: argparse.Namespace) -> None:
    store = Store(args.dir, map_size=args.map_size)
    say("opened")
    while sys.stdin.readline():
        say(f"readers {json.dumps(reader_pids(store.env))}")


def held_key(pid: int) -> bytes:
    """The key ``hold-write`` puts into ``SCRATCH_DB``."""
    return f"held-by/{pid}".encode()


def reader_pids(env: lmdb.Environment) -> list[int]:
    """Pids in the environment's reader table (``env.readers()``: a header line, then slots)."""
    return [int(m.group(1)) for m in re.finditer(r"^\s*(\d+)\s+\S+\s+\S+\s*$", env.readers(), re.M)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.storage.worker")
    parser.add_argument("mode", choices=["append", "read", "hold-write", "keep"])
    parser.add_argument("dir")
    parser.add_argument("cid", nargs="?", default="c1")
    parser.add_argument("--map-size", type=int, default=SMALL_MAP)
    parser.add_argument("--turns", type=int)
    parser.add_argument("--wait-go", action="store_true")
    parser.add_argument("--step", action="store_true")
    args = parser.parse_args(argv)
    modes = {"append": run_append, "read": run_read, "hold-write": run_hold_write}
    modes.get(args.mode, run_keep)(args)


# -- the parent side ------------------------------------------------------------------------

_numbers = itertools.count(1)


class Worker:
    """A worker process: lines in, lines out, stderr to a file named after it in ``log_dir``."""

    def __init__(self, mode: str, *args: object, log_dir: Path) -> None:
        self.mode = mode
        self.stderr_path = log_dir / f"worker-{next(_numbers)}-{mode}.stderr"
        command = [sys.executable, "-m", "tests.storage.worker", mode, *map(str, args)]
        with self.stderr_path.open("wb") as stderr:
            self.proc = subprocess.Popen(
                command,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def line(self) -> str:
        """The next line the worker prints (fails with its stderr when it ended instead)."""
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text.endswith("\n"):
            code = self.proc.wait()
            raise AssertionError(
                f"{self.mode} worker {self.pid} exited ({code}) instead of printing a line; "
                f"stderr:\n{self.stderr()}"
            )
        return text[:-1]

    def expect(self, word: str) -> str:
        """The next line, which must start with ``word``; returns the rest of it."""
        text = self.line()
        head, _, rest = text.partition(" ")
        assert head == word, f"{self.mode} worker {self.pid}: expected {word!r}, got {text!r}"
        return rest

    def send(self, text: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self) -> list[str]:
        """SIGKILL the worker and return the whole lines it printed that were not read yet."""
        os.kill(self.pid, signal.SIGKILL)
        code = self.proc.wait()
        assert code == -signal.SIGKILL, (
            f"{self.mode} worker {self.pid} ended by itself ({code}) before the kill; "
            f"stderr:\n{self.stderr()}"
        )
        return self._rest()

    def finish(self) -> list[str]:
        """Close stdin, wait for a clean exit and return the lines not read yet."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        rest = self._rest()
        code = self.proc.wait()
        assert code == 0, f"{self.mode} worker {self.pid} exited {code}; stderr:\n{self.stderr()}"
        return rest

    def _rest(self) -> list[str]:
        assert self.proc.stdout is not None
        return self.proc.stdout.read().split("\n")[:-1]  # a torn last line is left out

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass

    def __enter__(self) -> Worker:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def prefixed(store: Store, db: str, cid: str) -> dict[str, bytes]:
    """The rows of ``db`` under ``<cid>/`` (key without the prefix -> value), in key order."""
    prefix = f"{cid}/".encode()

    def fn(txn: lmdb.Transaction) -> dict[str, bytes]:
        cursor = txn.cursor(db=store.db[db])
        rows: dict[str, bytes] = {}
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not bytes(key).startswith(prefix):
                    break
                rows[bytes(key)[len(prefix) :].decode()] = bytes(value)
        return rows

    return store.read(fn)


def first_difference(actual: list[Any], expected: list[Any]) -> str:
    for i, (got, want) in enumerate(zip(actual, expected, strict=False)):
        if got != want:
            return f"at {i}: got {str(got)[:160]}, expected {str(want)[:160]}"
    return f"lengths differ: got {len(actual)}, expected {len(expected)}"


def check_whole(store: Store, cid: str) -> int:
    """Check that ``cid`` holds only whole ``add_turn`` turns, one persist each; its revision.

    Whole means: seqs 0..stored_seq-1 without gaps; revision == number of turns, and the
    turns are t1..t<revision> with exactly the blocks ``add_turn`` makes (each closed by
    its completion); a turn log entry per turn naming exactly its blocks; a path row per
    block; and a load whose restored snapshot is the stored one and holds every block.
    """
    header = store.header(cid)
    blocks = list(store.iter_blocks(cid))
    turnlog = {key: unpack(value) for key, value in prefixed(store, "turnlog", cid).items()}
    paths = set(prefixed(store, "paths", cid))
    if header is None:
        assert not blocks and not turnlog and not paths, f"{cid}: rows stored without a header"
        return 0
    revision = int(header["revision"])
    stored_seq = int(header["stored_seq"])
    seqs = [b["seq"] for b in blocks]
    assert seqs == list(range(stored_seq)), (
        f"{cid}: stored_seq {stored_seq} but seqs {first_difference(seqs, list(range(stored_seq)))}"
    )
    turns = [f"t{n}" for n in range(1, revision + 1)]
    stored_turns = list(dict.fromkeys(b["turn_id"] for b in blocks))
    assert stored_turns == turns, f"{cid}: revision {revision}, turns {stored_turns[-3:]}"
    assert header["next_seq"] == stored_seq, f"{cid}: next_seq {header['next_seq']}"
    assert store.cursor(cid) == (revision, stored_seq), f"{cid}: cursor row {store.cursor(cid)}"
    assert header["current_turn_id"] == (turns[-1] if turns else None)

    actual = [(b["turn_id"], b["type"], b.get("path", ""), b.get("text", "")) for b in blocks]
    expected = [row for n in range(1, revision + 1) for row in expected_turn(n)]
    assert actual == expected, f"{cid}: blocks differ {first_difference(actual, expected)}"

    assert sorted(turnlog) == sorted(turns), f"{cid}: turn log {sorted(turnlog)} for {turns}"
    for turn_id in turns:
        mine = [b["seq"] for b in blocks if b["turn_id"] == turn_id]
        entry = turnlog[turn_id]
        assert entry["seqs"] == mine, f"{cid}/{turn_id}: logged {entry['seqs']}, stored {mine}"
        assert entry["blocks_count"] == len(mine)
    rows = {f"{b.get('path', '')}\x00{b['seq']:012d}" for b in blocks if b.get("path")}
    assert paths == rows, f"{cid}: {len(paths)} path rows for {len(rows)} blocks with a path"

    loaded = store.load(cid)
    snapshot = loaded.timeline.snapshot()
    assert snapshot == {key: header[key] for key in snapshot}, f"{cid}: restored snapshot differs"
    assert [b.seq for b in loaded.timeline] == seqs, f"{cid}: load is not the whole log"
    assert loaded.revision == revision
    expected_tl = Timeline(cid)
    for n in range(1, revision + 1):
        add_turn(expected_tl, n)
    assert loaded.timeline.sources.to_dict() == expected_tl.sources.to_dict(), f"{cid}: pool"
    assert loaded.timeline.plans.to_dict() == expected_tl.plans.to_dict(), f"{cid}: plans"
    return revision


if __name__ == "__main__":
    main()
