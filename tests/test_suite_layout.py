"""The layout of `make test`: the serial list names tests that exist, and the Makefile runs
the parallel pass and then the serial pass over the serial list's files."""

from __future__ import annotations

import re
from pathlib import Path

from tests.serial import SERIAL, files

ROOT = Path(__file__).resolve().parent.parent


def test_every_serial_entry_names_an_existing_test_file_or_test() -> None:
    for entry in SERIAL:
        path, _, name = entry.partition("::")
        file = ROOT / path
        assert file.is_file(), f"SERIAL names {path}, which does not exist"
        if name:
            assert re.search(rf"^(async )?def {re.escape(name)}", file.read_text(), re.M), (
                f"SERIAL names {entry}, but {path} has no test starting with {name}"
            )


def test_make_test_runs_the_parallel_pass_and_then_the_serial_pass() -> None:
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    passes = re.findall(r"pytest .*?-m (\"not serial\"|serial)(?=\s)", recipe)
    assert passes == ['"not serial"', "serial"], recipe
    # then the turn behaviours with every hop over NATS
    assert "ACTLINE_LOCAL_SHORTCUT=0 $(BIN)/python -m pytest" in recipe.splitlines()[-2], recipe
    assert "-n 2" in recipe and "rc=$$?" in recipe  # both passes run; either fails the target
    assert "$$($(BIN)/python -m tests.serial)" in recipe  # the serial pass: its files only


def test_the_serial_files_are_those_of_the_entries_each_once() -> None:
    assert files() == sorted({entry.split("::")[0] for entry in SERIAL})
    assert "tests/cli/test_cli.py" in files() and len(files()) == len(set(files()))
