"""The ``actline`` command line: a thin layer over ``actline.Runtime``.

Every command's start-up problem (no NATS, a bad URL, a missing API key, an unwritable
``ACTLINE_HOME``, an unknown conversation) is one line on stderr naming the fix and exit
code 2; ``--debug`` shows the traceback instead. Ctrl-C exits with 130; SIGHUP (the terminal
closed) and SIGTERM end a command as cleanly, an embedded nats-server stopped too, with 129 and
143 (``actline.terminal.signals``). A turn that did not complete, or a DONE the node refused, exits
with 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from actline import __version__
from actline.actors.errors import DoneNotStored
from actline.bus import BusError
from actline.config import ConfigError
from actline.llm import APIS, ModelConfigError
from actline.messages import diag
from actline.messages.errors import LogConfigError
from actline.storage import StorageError
from actline.terminal.signals import run_until_signal
from actline.tools.errors import SkillError

__all__ = ["main"]

FAILURES: tuple[type[Exception], ...] = (
    ConfigError,
    BusError,
    ModelConfigError,
    StorageError,
    DoneNotStored,
    LogConfigError,
    SkillError,
)
"""Errors that mean "fix the setup": reported in one line, exit code 2."""
DEFAULT_WAIT_S = 300.0
DEFAULT_AGENT_TIMEOUT_S = 600.0


def _common() -> argparse.ArgumentParser:
    """Options accepted before or after the command name."""
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument(
        "--config", metavar="PATH", default=argparse.SUPPRESS, help="the actline.toml to read"
    )
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks"
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS,
        help="log at INFO (ids, sizes, timings); -vv at DEBUG (with prompt and tool bodies)",
    )
    common.add_argument(
        "--log-format",
        choices=diag.FORMATS,
        default=argparse.SUPPRESS,
        help="the log lines: text or json, one object a line (ACTLINE_LOG_FORMAT)",
    )
    common.add_argument(
        "--creds",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="NATS credentials (ACTLINE_NATS_CREDS; default: the embedded server's)",
    )
    common.add_argument(
        "--insecure",
        action="store_true",
        default=argparse.SUPPRESS,
        help="run without NATS authentication (ACTLINE_INSECURE=1): anyone can connect",
    )
    return common


def _nats(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--nats",
        metavar="URL",
        default=None,
        help=f"NATS server ({what}); a cluster's servers comma-separated",
    )


def model_options(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--api`` and ``--base-url``: the node's model and where it is served."""
    parser.add_argument(
        "--model",
        metavar="NAME",
        default=None,
        help="extractive (offline), a claude-* model, a [models.NAME] of actline.toml, or any "
        "name the server at --base-url serves (ACTLINE_MODEL)",
    )
    parser.add_argument(
        "--api",
        choices=APIS,
        default=None,
        help="how the model is reached: messages (the Anthropic Messages API, default) or "
        "openai (Chat Completions); ACTLINE_API",
    )
    parser.add_argument(
        "--base-url",
        metavar="URL",
        default=None,
        help="the model server, e.g. http://127.0.0.1:8080 for llama.cpp (ACTLINE_BASE_URL)",
    )


def _node_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--docs",
        metavar="DIR",
        type=Path,
        default=None,
        help="knowledge folder (default: ACTLINE_DOCS, else ./examples/kb when it exists)",
    )
    model_options(parser)
    parser.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="the node's store (ACTLINE_HOME)"
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        default=None,
        help="the turns' runtime profile: fast, balanced, deep, research or a custom one "
        "(actline profiles)",
    )


def _home(parser: argparse.ArgumentParser, what: str = "the node's store (ACTLINE_HOME)") -> None:
    parser.add_argument("--home", metavar="DIR", type=Path, default=None, help=what)


def _agent_flags(parser: argparse.ArgumentParser) -> None:
    _nats(parser, "default: NATS_URL, else the running actline serve of --home")
    _home(parser, "whose actline serve to join, and whose keys (ACTLINE_HOME)")
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=float,
        default=DEFAULT_AGENT_TIMEOUT_S,
        help="a task's command is killed after this long",
    )


def _split_agent_command(args: argparse.Namespace) -> None:
    """``agent NAME --nats URL -- CMD``: argparse's REMAINDER also takes the options after NAME,
    so parse what comes before ``--`` as the agent's options and keep the rest as CMD."""
    rest = list(args.cmd)
    if "--" in rest:
        cut = rest.index("--")
        flags = argparse.ArgumentParser(
            prog="actline agent NAME", parents=[_common()], allow_abbrev=False
        )
        _agent_flags(flags)
        flags.parse_args(rest[:cut], namespace=args)
        rest = rest[cut + 1 :]
    elif rest[:1] and rest[0].startswith("-"):
        raise ConfigError(f"put the command after --: actline agent {args.name} [options] -- CMD")
    args.cmd = rest


def _parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="actline",
        description="A timeline-native ReAct agent runtime: actors over NATS, a Ray cluster job.",
        parents=[_common()],  # its own copy: set_defaults below changes the actions' defaults
        allow_abbrev=False,  # --conv is not --conversation: an option is spelled out
    )
    parser.set_defaults(config=None, debug=False, verbose=0, log_format=None)
    parser.add_argument("--version", action="version", version=f"actline {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name, help=help, description=help, parents=[common], allow_abbrev=False
        )

    demo = command("demo", "start an embedded nats-server and show a turn going through it")
    _nats(demo, "default: an embedded one")
    model_options(demo)
    command(
        "doctor",
        "check NATS, JetStream, LMDB, the model, memsearch ranking and the exec sandbox",
    )

    serve = command("serve", "run a node until Ctrl-C (an embedded nats-server without NATS_URL)")
    _nats(serve, "default: NATS_URL, else an embedded one")
    _node_options(serve)
    serve.add_argument(
        "--port", metavar="N", type=int, default=None,
        help="the embedded nats-server's port, kept across restarts (default 4222 when free)",
    )  # fmt: skip
    serve.add_argument(
        "--http", metavar="PORT", type=int, default=None,
        help="also serve the HTTP API on this port (bearer tokens: actline creds http)",
    )  # fmt: skip
    serve.add_argument(
        "--http-host", metavar="HOST", default="127.0.0.1",
        help="the HTTP API's interface (default loopback)",
    )  # fmt: skip

    ask = command("ask", "ask one question and stream the turn")
    ask.add_argument("question", help="the user's message")
    ask.add_argument("--conversation", metavar="ID", default=None, help="continue this one")
    _nats(ask, "default: NATS_URL, else the running actline serve of --home, else embedded")
    _node_options(ask)
    ask.add_argument("--json", action="store_true", help="print only the result as JSON")
    ask.add_argument("--no-thinking", action="store_true", help="hide the thinking stream")
    ask.add_argument(
        "--local-node", action="store_true", help="run a node in this process even with NATS_URL"
    )
    ask.add_argument(
        "--timeout", metavar="S", type=float, default=DEFAULT_WAIT_S, help="wait this long"
    )
    ask.add_argument(
        "--attach", metavar="FILE", action="append", default=[],
        help="attach this file to the turn (repeatable; ACTLINE_MAX_ATTACHMENT_BYTES each)",
    )  # fmt: skip

    result = command("result", "print a turn's stored result (kept ACTLINE_RESULT_RETENTION)")
    result.add_argument("turn", metavar="TURN_ID", help="the turn's id")
    _nats(result, "default: NATS_URL, else the running actline serve of --home, else its store")
    result.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="the node's store (ACTLINE_HOME)"
    )
    result.add_argument("--json", action="store_true", help="print the result as JSON")

    chat = command("chat", "an interactive conversation in the terminal")
    chat.add_argument("--conversation", metavar="ID", default=None, help="continue this one")
    _nats(chat, "default: NATS_URL, else the running actline serve of --home, else an embedded one")
    _node_options(chat)
    chat.add_argument(
        "--local-node", action="store_true",
        help="run a node in this process even when a server is running",
    )  # fmt: skip

    web = command("console", "a web console: live turns, timelines, agents, traces")
    web.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    web.add_argument("--host", default="127.0.0.1", help="the interface (default loopback)")
    web.add_argument(
        "--allow-remote", action="store_true", help="allow a non-loopback --host (token kept)"
    )
    _nats(web, "default: NATS_URL, else an embedded one with a node")
    _node_options(web)

    agent = command("agent", "answer an outside agent's tasks by running a command")
    agent.add_argument("name", help="the agent's name (the model hands work to it)")
    _agent_flags(agent)
    agent.add_argument(
        "cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="task text on its stdin"
    )

    done = command("done", "send agent.done for an outside agent and print the verdict")
    done.add_argument("name", help="the agent's name")
    done.add_argument("summary", help="what the agent did")
    done.add_argument("--task", metavar="ID", default=None, help="the task id (else the oldest)")
    done.add_argument("--turn", metavar="ID", default=None, help="the turn id")
    _nats(done, "default: NATS_URL, else the running actline serve of --home")
    _home(done, "whose actline serve to join, and whose keys (ACTLINE_HOME)")

    feedback = command("feedback", "rate a turn and say why: the model sees it next turn")
    feedback.add_argument("conversation", metavar="CID", help="the conversation's id")
    feedback.add_argument("text", nargs="?", default="", help="what was good or wrong")
    feedback.add_argument(
        "--turn", metavar="ID", default=None,
        help="the turn (default: the latest, with a node here; name it when joining a server)",
    )  # fmt: skip
    feedback.add_argument(
        "--rating", metavar="R", default="0", help="-1, 0 or 1 (also: down, up); default 0"
    )
    _nats(
        feedback,
        "default: NATS_URL, else the running actline serve of --home, else an embedded one",
    )
    feedback.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="the node's store (ACTLINE_HOME)"
    )

    skill = command(
        "agent-skill", "write a SKILL.md that makes a terminal AI (Claude Code) agent NAME"
    )
    skill.add_argument("name", help="the agent's name")
    skill.add_argument(
        "--out", metavar="DIR", type=Path, default=Path(".claude") / "skills",
        help="the skills folder (default .claude/skills: DIR/actline-NAME/SKILL.md)",
    )  # fmt: skip
    skill.add_argument("--nats", metavar="URL", default=None, help="write this NATS URL in it")
    skill.add_argument("--force", action="store_true", help="replace an existing file")

    for verb, what in (("approve", "approve"), ("deny", "deny")):
        decide = command(verb, f"{what} a turn's pending tool call(s) (see its waiting card)")
        decide.add_argument("turn", metavar="TURN_ID", help="the waiting turn's id")
        decide.add_argument(
            "--approval", metavar="ID", default=None, help="one approval (default: all pending)"
        )
        decide.add_argument("--reason", metavar="TEXT", default="", help="why (the model sees it)")
        decide.add_argument(
            "--by",
            metavar="NAME",
            default=None,
            help="who, on a server without authentication only (else: your credentials)",
        )
        decide.add_argument(
            "--timeout", metavar="S", type=float, default=5.0, help="wait this long for the node"
        )
        _nats(decide, "default: NATS_URL, else the running actline serve of --home")
        _home(decide, "whose actline serve to join, and whose keys (ACTLINE_HOME)")

    creds = command(
        "creds",
        "issue NATS credentials from this deployment's keys (under ACTLINE_HOME/auth)",
    )
    creds.add_argument(
        "role",
        choices=[
            "client",
            "agent",
            "node",
            "pool-models",
            "pool-tools",
            "admin",
            "server",
            "list",
            "renew",
            "revoke",
            "http",
        ],
        help="what the holder may do (pool-models, pool-tools: an actline pool process); "
        "server: the trust block of a nats-server's config; "
        "http NAME: a bearer token of the HTTP API (actline serve --http); "
        "list, renew FILE, revoke USERKEY|TOKEN_ID|http:NAME: what was issued",
    )
    creds.add_argument(
        "name",
        nargs="?",
        default="",
        help="the agent's, approver's or HTTP token's name; renew: the .creds file; "
        "revoke: the user key, or an HTTP token's id or name",
    )
    creds.add_argument(
        "--approver",
        action="store_true",
        help="a named client or an agent that may approve or deny pending tool calls",
    )
    creds.add_argument(
        "--tools",
        metavar="PATTERNS",
        default=None,
        help="approve calls of these tools only (comma-separated, NATS wildcards: ops.*,mcp.>)",
    )
    creds.add_argument(
        "--ttl", metavar="TIME", default=None, help="how long they last: 90m, 12h, 30d"
    )
    creds.add_argument(
        "--all", action="store_true", help="revoke: every credential of the tenant so far"
    )
    _nats(creds, "revoke: the running server to tell; else NATS_URL or this home's")
    creds.add_argument(
        "--prefix", metavar="P", default=None, help="the tenant (ACTLINE_SUBJECT_PREFIX)"
    )
    creds.add_argument(
        "--out", metavar="FILE", type=Path, default=None, help="write here (mode 0600)"
    )
    creds.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="whose keys (ACTLINE_HOME)"
    )

    pool = command("pool", "serve model calls or tool calls alone, in their queue group")
    pool.add_argument("kind", choices=["models", "tools"], help="what this process serves")
    _nats(pool, "required: NATS_URL or --nats")
    model_options(pool)
    pool.add_argument(
        "--concurrency", metavar="N", type=int, default=None,
        help="calls run at once (default ACTLINE_STREAMERS / ACTLINE_TOOL_WORKERS)",
    )  # fmt: skip
    pool.add_argument(
        "--queue", metavar="N", type=int, default=None,
        help="calls that may wait for a slot; past them a call is answered busy and the node "
        "asks another member (default: the concurrency)",
    )  # fmt: skip
    pool.add_argument(
        "--home", metavar="DIR", type=Path, default=None,
        help="where its traces go and whose keys give its credentials (ACTLINE_HOME)",
    )  # fmt: skip

    tap = command("tap", "print every message under the prefix as it passes, decoded")
    _nats(tap, "default: NATS_URL, else the embedded server of --home")
    tap.add_argument(
        "--conversation", metavar="CID", default=None, help="only this conversation's messages"
    )
    tap.add_argument("--kinds", metavar="K1,K2", default=None, help="only these kinds")
    tap.add_argument(
        "--jsonl", metavar="FILE", default=None, help="also write one JSON object per message"
    )
    tap.add_argument("--count", metavar="N", type=int, default=None, help="stop after N")
    tap.add_argument("--seconds", metavar="S", type=float, default=None, help="stop after S s")
    tap.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="whose keys (ACTLINE_HOME)"
    )

    agents = command("agents", "list outside agents: connected or not, last seen, open tasks")
    _nats(agents, "default: NATS_URL, else the running actline serve of --home")
    _home(agents, "whose actline serve to join, and whose keys (ACTLINE_HOME)")
    agents.add_argument("--json", action="store_true", help="one JSON object per agent")

    profiles = command("profiles", "show the runtime profiles a turn may name, as resolved here")
    profiles.add_argument("name", nargs="?", default=None, help="only this one")
    profiles.add_argument("--json", action="store_true", help="as turn config tables")

    evals = command("eval", "run eval cases (JSONL) against a model and profile, and score them")
    evals.add_argument("cases", metavar="CASES.jsonl", help="one case per line (README)")
    _node_options(evals)
    evals.add_argument("--json", metavar="OUT", default=None, help="write the report here")
    evals.add_argument("--only", metavar="ID,...", default=None, help="run only these cases")
    evals.add_argument(
        "--min-score", metavar="X", type=float, default=None, help="exit 1 below this score"
    )
    evals.add_argument(
        "--timeout", metavar="S", type=float, default=120.0, help="wait this long per turn"
    )

    conversations = command(
        "conversations", "list, rename, delete, export or search the stored conversations"
    )
    conversations.add_argument(
        "action", nargs="?", default="list",
        choices=["list", "show", "rename", "delete", "export", "search"],
        help="list (default), show CID, rename CID TITLE, delete CID, export CID, search TEXT",
    )  # fmt: skip
    conversations.add_argument("args", nargs="*", metavar="ARG", help="CID, TITLE or TEXT")
    conversations.add_argument(
        "--format", choices=["json", "markdown"], default="json", help="export: the format"
    )
    conversations.add_argument(
        "--out", metavar="FILE", type=Path, default=None, help="export: write here"
    )
    conversations.add_argument("--yes", action="store_true", help="delete without asking")
    conversations.add_argument("--json", action="store_true", help="print JSON")
    _nats(conversations, "default: NATS_URL, else the running actline serve of --home")
    conversations.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="the node's store (ACTLINE_HOME)"
    )

    fork = command("fork", "a new conversation whose timeline is this one up to a turn")
    fork.add_argument("conversation", metavar="CID", help="the conversation to fork")
    fork.add_argument(
        "--at", metavar="TURN", required=True,
        help="the last turn kept: its id or its number (1 = the first turn)",
    )  # fmt: skip
    fork.add_argument("--title", metavar="TEXT", default=None, help="the new one's title")
    fork.add_argument("--json", action="store_true", help="print the new conversation as JSON")
    _nats(fork, "default: NATS_URL, else the running actline serve of --home")
    fork.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="the node's store (ACTLINE_HOME)"
    )

    timeline = command("timeline", "show a stored conversation (no NATS needed)")
    timeline.add_argument("conversation", nargs="?", metavar="CID", default=None)
    timeline.add_argument(
        "--rendered", action="store_true", help="the view the model sees next, with cache marks"
    )
    timeline.add_argument("--json", action="store_true", help="the stored blocks as JSON lines")
    timeline.add_argument("--list", action="store_true", help="the stored conversations")
    timeline.add_argument(
        "--home", metavar="DIR", type=Path, default=None, help="the node's store (ACTLINE_HOME)"
    )
    trace = command("trace", "a turn's span tree: timings, tokens, cache reads (no NATS needed)")
    trace.add_argument("turn", nargs="?", metavar="TURN_ID", default=None)
    trace.add_argument("--last", action="store_true", help="the latest turn traced")
    trace.add_argument("--json", action="store_true", help="the session and its spans as JSON")
    trace.add_argument(
        "--home", metavar="DIR", type=Path, action="append", default=None,
        help="whose traces (ACTLINE_HOME); repeat to join spans served on other nodes",
    )  # fmt: skip
    return parser


def _dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    console = Console(highlight=False, emoji=False)
    match args.command:
        case "demo":
            from actline.cli.demo import run_demo

            return run_until_signal(
                run_demo(nats_url=args.nats, model=args.model, api=args.api, base_url=args.base_url)
            )
        case "doctor":
            from actline.cli.doctor import run_doctor

            return run_until_signal(run_doctor())
        case "serve":
            from .turns import run_serve

            return run_until_signal(run_serve(args, console))
        case "ask":
            from .turns import run_ask

            return run_until_signal(run_ask(args, console))
        case "result":
            from .turns import run_result

            return run_until_signal(run_result(args, console))
        case "chat":
            from .turns import run_chat

            return run_until_signal(run_chat(args, console))
        case "console":
            from .console import run_console

            return run_until_signal(run_console(args, console))
        case "agent":
            from .agent import run_agent

            _split_agent_command(args)
            return run_until_signal(run_agent(args, console))
        case "done":
            from .agent import run_done

            return run_until_signal(run_done(args, console))
        case "feedback":
            from .feedback import run_feedback

            return run_until_signal(run_feedback(args, console))
        case "agent-skill":
            from .skill import run_agent_skill

            return run_agent_skill(args, console)
        case "approve" | "deny":
            from .turns import run_approval

            return run_until_signal(run_approval(args, console))
        case "creds":
            from .creds import run_creds

            return run_creds(args, console)
        case "pool":
            from .wire.pool import run_pool

            return run_until_signal(run_pool(args, console))
        case "tap":
            from .wire.tap import run_tap

            return run_until_signal(run_tap(args, console))
        case "agents":
            from .agent import run_agents

            return run_until_signal(run_agents(args, console))
        case "profiles":
            from .profiles import run_profiles

            return run_profiles(args, console)
        case "eval":
            from .evaluate import run_eval

            return run_until_signal(run_eval(args, console))
        case "conversations":
            from .conversations import run_conversations

            return run_until_signal(run_conversations(args, console))
        case "fork":
            from .conversations import run_fork

            return run_until_signal(run_fork(args, console))
        case "timeline":
            from .stored.timeline import run_timeline

            return run_until_signal(run_timeline(args, console))
        case "trace":
            from .stored.trace import run_trace

            return run_trace(args, console)
    parser.print_help(sys.stderr)
    return 2


def _command_parser(
    parser: argparse.ArgumentParser, command: str | None
) -> argparse.ArgumentParser:
    """The parser of ``command`` (the top level's when there is none)."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    """The log level: ``-vv`` DEBUG, ``-v`` INFO, else ``ACTLINE_LOG_LEVEL`` (default WARNING);
    the format: ``--log-format``, else ``ACTLINE_LOG_FORMAT`` (default text)."""
    level = None
    if args.verbose:
        level = logging.DEBUG if args.verbose > 1 else logging.INFO
    diag.configure_from_env(level, args.log_format)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said with the command's usage, not the top level's
        _command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        _configure_logging(args)
        return _dispatch(args, parser)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `actline ... | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except FAILURES as exc:
        if args.debug:
            raise
        message = " ".join(str(exc).split())
        print(f"actline {args.command}: {message}", file=sys.stderr)
        return 2
