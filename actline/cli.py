"""The ``actline`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from actline import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="actline",
        description="A timeline-native ReAct agent runtime: actors over NATS, a Ray cluster job.",
    )
    parser.add_argument("--version", action="version", version=f"actline {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="start an embedded nats-server and show a turn going through it"
    )
    demo.add_argument(
        "--nats",
        metavar="URL",
        default=None,
        help="use this NATS server instead of an embedded one",
    )
    commands.add_parser(
        "doctor",
        help="check NATS, JetStream, LMDB, the model, memsearch ranking and the exec sandbox",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "demo":
        from actline.demo import run_demo

        try:
            return asyncio.run(run_demo(nats_url=args.nats))
        except KeyboardInterrupt:
            return 130
    if args.command == "doctor":
        from actline.doctor import run_doctor

        return asyncio.run(run_doctor())
    _parser().print_help(sys.stderr)
    return 2
