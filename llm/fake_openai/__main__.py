"""``python -m actline.llm.fake_openai``: serve until interrupted; prints ``listening on URL``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence

from ..errors import ModelConfigError
from ..fake_anthropic.policy import load_policy
from .server import FakeOpenAIServer


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m actline.llm.fake_openai",
        description="A local OpenAI Chat Completions API.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--replay", metavar="FILE.jsonl", help="reply with a ReplayModel script")
    parser.add_argument("--policy", metavar="MODULE:NAME", help="a policy object or factory")
    parser.add_argument("--report-cached", action="store_true", help="report cached tokens")
    parser.add_argument("--context-window", type=int, default=None)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    try:
        policy = load_policy(args.replay, args.policy)
    except ModelConfigError as exc:
        parser.error(str(exc))

    async def serve() -> None:
        server = FakeOpenAIServer(
            policy,
            host=args.host,
            port=args.port,
            report_cached=args.report_cached,
            context_window=args.context_window,
        )
        async with server:
            print(f"listening on {server.base_url}", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
