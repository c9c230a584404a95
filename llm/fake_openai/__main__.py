"""``python -m actline.llm.fake_openai``: serve until interrupted; prints ``listening on URL``."""

from __future__ import annotations

from collections.abc import Sequence

from ..fake_anthropic.command import parse, parser_for, serve_until_interrupted
from .server import FakeOpenAIServer


def main(argv: Sequence[str] | None = None) -> int:
    parser = parser_for("python -m actline.llm.fake_openai", "A local OpenAI Chat Completions API.")
    parser.add_argument("--report-cached", action="store_true", help="report cached tokens")
    args, policy = parse(parser, argv)
    server = FakeOpenAIServer(
        policy,
        host=args.host,
        port=args.port,
        report_cached=args.report_cached,
        context_window=args.context_window,
    )
    return serve_until_interrupted(server)


if __name__ == "__main__":
    raise SystemExit(main())
