"""The command line both local model servers share (``python -m actline.llm.fake_anthropic``,
``python -m actline.llm.fake_openai``): where to listen, the policy that writes the
replies, the context window and the log level; then serve until interrupted, printing
``listening on URL`` once the port is open."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence

from ..errors import ModelConfigError
from .policy import Policy, load_policy
from .serving import LocalServer


def parser_for(prog: str, description: str) -> argparse.ArgumentParser:
    """The shared options; a server adds its own."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--replay", metavar="FILE.jsonl", help="reply with a ReplayModel script")
    parser.add_argument("--policy", metavar="MODULE:NAME", help="a policy object or factory")
    parser.add_argument("--context-window", type=int, default=None)
    parser.add_argument("--log-level", default="INFO")
    return parser


def parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, Policy]:
    """The options and the policy they name (a bad one exits with the parser's error)."""
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        return args, load_policy(args.replay, args.policy)
    except ModelConfigError as exc:
        parser.error(str(exc))


def serve_until_interrupted(server: LocalServer) -> int:
    """Run ``server`` until Ctrl-C."""

    async def serve() -> None:
        async with server:
            print(f"listening on {server.base_url}", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0
