"""The Ray job's command line, and the check of its knowledge folder.

The options are ``actline serve``'s where they mean the same (``--docs``, ``--model``,
``--api``, ``--base-url``, ``--profile``, ``--config``, ``--home``, ``--creds``,
``--insecure``) and the job's own (``--nodes``, ``--requests``, pools, resources).

The knowledge folder comes from ``--docs``, else ``ACTLINE_DOCS``, else ``docs`` in the
settings file. A job without one answers every question with "the documents do not
cover it" and completes: so it refuses to start without one unless told it wants none
(``--no-docs``), and refuses a folder that does not exist or holds no document.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from actline.actors.errors import SettingsError
from actline.llm import APIS

__all__ = ["DOC_SUFFIXES", "check_knowledge", "job_parser", "parse"]

PROG = "python -m actline.actors.cluster.ray_job"
DOC_SUFFIXES = (".md", ".txt")
"""The files a knowledge folder's search reads (``actline.tools.search.knowledge``)."""
EXAMPLE = "--docs examples/kb"


def parse(argv: Sequence[str] | None, description: str | None = None) -> argparse.Namespace:
    """The job's arguments (``SystemExit`` from argparse on a bad one)."""
    return job_parser(description).parse_args(argv)


def job_parser(description: str | None = None) -> argparse.ArgumentParser:
    """The job's argument parser; every option says what it does."""
    parser = argparse.ArgumentParser(
        prog=PROG, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add(
        "--nats",
        metavar="URL",
        default=os.environ.get("NATS_URL"),
        help="the NATS servers, comma-separated (NATS_URL)",
    )
    add("--nodes", metavar="N", type=int, default=2, help="node actors to start (2)")
    add(
        "--requests",
        metavar="FILE",
        type=Path,
        default=None,
        help="JSON lines of turn.request dicts to submit; without it the job serves until "
        "SIGINT/SIGTERM",
    )
    add(
        "--out",
        metavar="FILE",
        type=Path,
        default=None,
        help="where the turn results go, one JSON line each (default: the requests file "
        "with .results.jsonl); an absolute path under ray job submit",
    )
    add(
        "--home",
        metavar="DIR",
        type=Path,
        default=Path(".actline-cluster"),
        help="each node actor keeps its LMDB and traces in DIR/<node id> (.actline-cluster); "
        "actline timeline --home DIR and actline trace --home DIR read them",
    )
    docs = parser.add_mutually_exclusive_group()
    docs.add_argument(
        "--docs",
        metavar="DIR",
        type=Path,
        default=None,
        help="the knowledge folder the turns search (.md and .txt files; default: "
        "ACTLINE_DOCS, else docs in the settings file); required unless --no-docs",
    )
    docs.add_argument(
        "--no-docs",
        action="store_true",
        help="run without a knowledge folder (the answers then cite no source)",
    )
    add(
        "--model",
        metavar="NAME",
        default=None,
        help="the nodes' model: extractive (offline), a claude-* model, a [models.NAME] of the "
        "settings file, or any name the server at --base-url serves (ACTLINE_MODEL; default "
        "extractive)",
    )
    add(
        "--api",
        choices=APIS,
        default=None,
        help="the model's API: messages (Anthropic) or openai (Chat Completions); ACTLINE_API",
    )
    add("--base-url", metavar="URL", default=None, help="the model server (ACTLINE_BASE_URL)")
    add(
        "--profile",
        metavar="NAME",
        default=None,
        help="the turns' runtime profile: fast, balanced, deep, research or a custom one "
        "(ACTLINE_PROFILE; actline profiles)",
    )
    add(
        "--config",
        metavar="FILE",
        type=Path,
        default=None,
        help="settings file (default: ACTLINE_CONFIG, else ./actline.toml when it exists)",
    )
    add(
        "--cpus-per-node",
        metavar="CPUS",
        type=float,
        default=1.0,
        help="the num_cpus each node actor declares to Ray (1)",
    )
    add(
        "--model-pools",
        metavar="N",
        type=int,
        default=0,
        help="model pool actors; the node actors then send every model call to them (0)",
    )
    add(
        "--tool-pools",
        metavar="N",
        type=int,
        default=0,
        help="tool pool actors; the node actors then send every tool call to them (0)",
    )
    add(
        "--timeout",
        metavar="S",
        type=float,
        default=300.0,
        help="seconds the driver waits for each turn's result before counting it timed out (300)",
    )
    add(
        "--ack-wait",
        metavar="S",
        type=float,
        default=None,
        help="a turn whose node went silent is delivered again after S seconds (ACTLINE_ACK_WAIT)",
    )
    add(
        "--creds",
        metavar="FILE",
        type=Path,
        default=os.environ.get("ACTLINE_NATS_CREDS") or None,
        help="node credentials (ACTLINE_NATS_CREDS; `actline creds node`)",
    )
    add("--insecure", action="store_true", help="the NATS server has no authentication")
    return parser


def docs_origin(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """Which setting named the knowledge folder."""
    if args.docs is not None:
        return "--docs"
    if env.get("ACTLINE_DOCS"):
        return "ACTLINE_DOCS"
    return "docs in the settings file"


def has_documents(folder: Path) -> bool:
    """Whether ``folder`` holds a document the knowledge search reads."""
    for _, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(not f.startswith(".") and f.lower().endswith(DOC_SUFFIXES) for f in files):
            return True
    return False


def check_knowledge(
    args: argparse.Namespace, folder: Path | None, env: Mapping[str, str] | None = None
) -> None:
    """Refuse a job without a knowledge folder (unless ``--no-docs``), or with one that does
    not exist or holds no document: a ``SettingsError`` naming the fix. ``folder``: the one
    the settings resolved."""
    source = os.environ if env is None else env
    if args.no_docs:
        return
    if folder is None:
        raise SettingsError(
            "--docs",
            "",
            f"the job has no knowledge folder: pass {EXAMPLE} (or your own folder of .md/.txt "
            "files), set ACTLINE_DOCS or docs in actline.toml, or --no-docs to run without one",
        )
    origin = docs_origin(args, source)
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise SettingsError(
            origin,
            str(folder),
            f"the knowledge folder {folder} ({origin}) {what} here ({Path.cwd()}); name a "
            f"folder of .md/.txt files, e.g. {EXAMPLE}, relative to the job's working "
            "directory (ray job submit --working-dir .) or absolute",
        )
    if not has_documents(folder):
        raise SettingsError(
            origin,
            str(folder),
            f"the knowledge folder {folder} ({origin}) holds no .md or .txt file; put the "
            f"documents there or name another folder, e.g. {EXAMPLE}",
        )
