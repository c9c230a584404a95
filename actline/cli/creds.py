"""``actline creds ROLE [NAME]``: issue NATS credentials for a node, a client or an agent.

The deployment's keys live under ``ACTLINE_HOME/auth`` (made when the embedded server
first starts, or by this command). The credentials go to ``--out FILE`` (mode 0600), or
to stdout when it is not a terminal (to pipe them to another machine), else under
``ACTLINE_HOME/auth/creds/``. The holder connects with ``--creds FILE`` or
``ACTLINE_NATS_CREDS=FILE``; what each role may do is in the README's security section.
``--approver`` gives an agent the right to approve or deny pending tool calls.
``actline creds server`` prints the trust block a nats-server needs (operator, accounts).
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from actline.bus import AuthError, Authority
from actline.bus.auth import read_identity, write_secret
from actline.errors import ConfigError
from actline.messages import Subjects, subjects

from .turns import load_config


def _server_config(authority: Authority, args: argparse.Namespace, console: Console) -> int:
    """The operator and accounts a nats-server must trust (``include`` it in its config)."""
    text = authority.server_config()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    write_secret(args.out, text)
    console.print(f"nats-server trust block: {args.out} (include it in the server's config)")
    return 0


def run_creds(args: argparse.Namespace, console: Console) -> int:
    config = load_config(args)
    prefix = args.prefix or subjects.current().prefix
    try:
        Subjects(prefix)
        authority = config.authority()
        if args.role == "server":
            return _server_config(authority, args, console)
        if args.role == "agent" and not args.name:
            raise ConfigError("an agent's credentials need its name: actline creds agent NAME")
        if args.role != "agent" and args.name:
            raise ConfigError(f"role {args.role} takes no name (only agent NAME does)")
        approver = bool(getattr(args, "approver", False))
        if approver and args.role != "agent":
            raise ConfigError(
                f"--approver is for agents (actline creds agent NAME --approver), not {args.role}"
            )
        who = {"name": args.name, "prefix": prefix, "approver": approver}
        if args.out is not None:
            path = write_secret(args.out, authority.issue(args.role, **who))
        elif not sys.stdout.isatty():
            sys.stdout.write(authority.issue(args.role, **who))
            return 0
        else:
            path = authority.creds_path(args.role, **who)
    except (AuthError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    identity = read_identity(path)
    console.print(f"[bold]{identity.label}[/bold] credentials: {path} (mode 0600)")
    console.print(f"  use: ACTLINE_NATS_CREDS={path} actline …   or   --creds {path}")
    console.print(f"  nats-py: nats.connect(url, user_credentials='{path}',")
    console.print(f"                        inbox_prefix='{identity.inbox_prefix}')")
    if approver:
        console.print(f"  {args.name} may approve or deny pending tool calls (actline approve)")
    if args.role == "admin":
        console.print("[yellow]admin may do everything: keep it for maintenance[/yellow]")
    return 0
