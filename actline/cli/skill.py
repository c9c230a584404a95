"""``actline agent-skill NAME [--out DIR]``: a ``SKILL.md`` that makes a terminal AI agent NAME.

The handshake for terminal AIs (Claude Code and the like): a skill file, loaded with
``/actline-<name>``, tells the AI who it is (the agent name is the routing key: the one it
must answer with), where its tasks arrive (the model's ``agent.send(NAME, ...)`` lands in the
agent's durable inbox: pasted into the terminal with its task and turn ids, listed by
``actline agents``, or run by ``actline agent NAME -- CMD``) and how to answer: ``actline done
NAME "summary" --task ID --turn ID``, whose exit code says whether the node took it, or,
under ``actline agent``, a ``DONE(summary)`` line of its own output.

The ids and subjects it names are the runtime's: task ids ``task-…``, turn ids ``t-…``,
conversation ids ``c-…``, and the agent's subjects under the tenant's prefix
(``ACTLINE_SUBJECT_PREFIX``, default ``al``). The file goes to
``DIR/actline-<name>/SKILL.md`` (``DIR`` default ``.claude/skills``, Claude Code's layout);
an existing file is replaced only with ``--force``.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rich.console import Console
from rich.text import Text

from actline.config import ConfigError
from actline.messages import subjects
from actline.messages.ids import is_valid_name

__all__ = [
    "DEFAULT_DIR",
    "ID_PREFIXES",
    "agent_skill_text",
    "run_agent_skill",
    "skill_name",
    "write_agent_skill",
]

DEFAULT_DIR = Path(".claude") / "skills"
ID_PREFIXES = {"task": "task-", "turn": "t-", "conversation": "c-"}
"""How the ids an agent sees start (``messages.new_id`` with these prefixes)."""


def skill_name(agent: str) -> str:
    """``actline-<agent>`` in the characters a skill name may have (a-z, 0-9, -)."""
    slug = re.sub(r"[^a-z0-9]+", "-", agent.lower()).strip("-")
    return f"actline-{slug}"[:64].rstrip("-")


def agent_skill_text(agent: str, nats_url: str = "", prefix: str = "") -> str:
    """The ``SKILL.md`` that teaches a terminal AI to be the outside agent ``agent``, whose
    subjects are under ``prefix`` (default: ``ACTLINE_SUBJECT_PREFIX``, else ``al``)."""
    name = skill_name(agent)
    url = nats_url or "$NATS_URL"
    nats = f" --nats {nats_url}" if nats_url else ""
    names = subjects.Subjects(prefix) if prefix else subjects.current()
    task, turn, conv = ID_PREFIXES["task"], ID_PREFIXES["turn"], ID_PREFIXES["conversation"]
    return f"""---
name: {name}
description: >-
  Be the outside agent "{agent}" of an actline runtime - take the tasks its model hands
  to "{agent}", do them, and answer each with `actline done {agent}`. Use when a message
  starts with /{name} or names an actline task for {agent}.
---
# You are the actline agent `{agent}`

An actline runtime (a ReAct agent whose actors talk over NATS at {url}) hands work to
outside agents by name. Your name there is **`{agent}`**. It is the routing key: every
answer you send must carry exactly `{agent}`, never your model's or tool's name.

## Where your tasks arrive
The runtime's model calls `agent.send("{agent}", text)`. The task is stored in the durable
inbox of `{agent}` (`{names.agent_inbox(agent)}`) until it is answered, and the turn waits
for your DONE. A task's text ends with the ids to answer it with: its **task id**
(`{task}...`), its **turn id** (`{turn}...`) and the subject its DONE goes to. A task
reaches you in one of these ways:
- pasted into this terminal after `/{name}`;
- listed with `actline agents{nats}`: the open tasks of `{agent}`, each as
  `TASK_ID (turn TURN_ID)`;
- run by `actline agent {agent}{nats} -- COMMAND`, which starts COMMAND once per task with
  the text on stdin and `ACTLINE_AGENT`, `ACTLINE_TASK_ID`, `ACTLINE_TURN_ID` and
  `ACTLINE_CONVERSATION_ID` (`{conv}...`) in its environment. There COMMAND answers by
  printing, on a line of its own, `DONE(SUMMARY)` or `DONE({agent}, SUMMARY)`: the first
  such line answers the task at once (a DONE inside a longer line or a code block does
  not count, nor one naming another agent). Without one, its whole output is the answer
  when it exits. Either way you need not run `actline done` yourself.

## How to answer
When the task is done (or cannot be done), run exactly once per task:

```
actline done {agent} "SUMMARY" --task TASK_ID --turn TURN_ID{nats}
```

- SUMMARY is what you did and what came of it, in a few sentences (the model continues from
  it; at most 64 KiB unless the deployment says otherwise). Name files by path and give
  numbers and verdicts plainly.
- Exit code 0 prints `accepted`: the waiting turn resumes (or, when no node has taken it
  yet, it is stored and applied when one does). Exit code 1 prints `refused: CODE: why`
  (an unknown or already answered task, a summary over the limit): fix what it says and
  send again. Exit code 2 is a setup problem (no NATS, no credentials).
- Without `--task` the oldest open task of `{agent}` is answered (refused as
  `ambiguous_done` when its open tasks are in several turns: then name one).
- If you cannot do the task, still answer, saying why: the turn must not wait for nothing.

The DONE is stored on your own subject `{names.agent_done_of(agent)}`; a DONE that names
another agent there is refused.

## Setup
Commands need the runtime's NATS server: `NATS_URL={url}` (or `--nats URL`) and
credentials of the agent role, `ACTLINE_NATS_CREDS=FILE`, made where the deployment's keys
are with `actline creds agent {agent} --out FILE`.
"""


def write_agent_skill(agent: str, out: Path = DEFAULT_DIR, *, nats_url: str = "",
                      force: bool = False) -> Path:  # fmt: skip
    """Write ``out/actline-<agent>/SKILL.md``; returns its path. ``ConfigError`` for a bad
    agent name, or a file already there without ``force``."""
    if not is_valid_name(agent):
        raise ConfigError(f"{agent!r} is not an agent name (letters, digits, _ and -, up to 64)")
    path = out / skill_name(agent) / "SKILL.md"
    if path.exists() and not force:
        raise ConfigError(f"{path} exists already: pass --force to replace it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(agent_skill_text(agent, nats_url), encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}; choose --out DIR") from None
    return path


def run_agent_skill(args: argparse.Namespace, console: Console) -> int:
    """``actline agent-skill NAME``: write the file and say how to use it."""
    path = write_agent_skill(args.name, args.out, nats_url=args.nats or "", force=args.force)
    console.print(Text(f"wrote {path}", "green"), highlight=False)
    hint = f"in the terminal AI: /{skill_name(args.name)} then paste a task of {args.name}"
    console.print(Text(hint, "dim"), highlight=False)
    return 0
