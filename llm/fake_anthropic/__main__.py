"""``python -m actline.llm.fake_anthropic``: serve until interrupted; prints ``listening on
URL``."""

from __future__ import annotations

from collections.abc import Sequence

from .command import parse, parser_for, serve_until_interrupted
from .server import FakeAnthropicServer


def main(argv: Sequence[str] | None = None) -> int:
    parser = parser_for(
        "python -m actline.llm.fake_anthropic",
        "A local Anthropic Messages API with prompt-cache accounting.",
    )
    parser.add_argument("--min-cache-tokens", type=int, default=None)
    args, policy = parse(parser, argv)
    server = FakeAnthropicServer(
        policy,
        host=args.host,
        port=args.port,
        min_cache_tokens=args.min_cache_tokens,
        context_window=args.context_window,
    )
    return serve_until_interrupted(server)


if __name__ == "__main__":
    raise SystemExit(main())
