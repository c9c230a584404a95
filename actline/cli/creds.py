"""``actline creds``: issue, list, renew and revoke the NATS credentials of a deployment.

The deployment's keys live under ``ACTLINE_HOME/auth`` (made when the embedded server
first starts, or by this command); each tenant (``--prefix``) is a NATS account of its
own. What each role may do is in the README's security section.

- ``actline creds ROLE [NAME]`` issues credentials to ``--out FILE`` (mode 0600), or to
  stdout when it is not a terminal (to pipe them to another machine), else under
  ``ACTLINE_HOME/auth/creds/``. ``--ttl`` sets their life (defaults per role: 12 h for
  agents, approvers and admins, 7 d for clients, 30 d for nodes). ``--approver`` (with
  ``--tools PATTERNS`` to limit it to some tools) lets a named client or an agent
  approve or deny pending tool calls. The holder connects with ``--creds FILE`` or
  ``ACTLINE_NATS_CREDS=FILE``.
- ``actline creds list`` shows what was issued, to whom, until when, and what is revoked.
- ``actline creds renew FILE`` gives the same key and identity a new expiry (a client
  reconnecting reads the file again: no restart).
- ``actline creds revoke USERKEY`` (``U…``, from the list) or ``revoke --all --prefix T``
  (every credential of tenant T issued so far) refuses them from then on; a running
  server is told at once (``--nats URL``, ``NATS_URL``, or the embedded server this
  home runs), and closes their connections.
- ``actline creds server`` prints the trust block a nats-server needs.
- ``actline creds http NAME`` issues a bearer token of the HTTP API (``actline serve
  --http``) for the client role of tenant ``--prefix`` (``--approver``: it may approve and
  deny too), printed once (or written to ``--out``, mode 0600); the home keeps only its
  hash (``actline.http.tokens``). ``list`` shows the tokens too; ``revoke NAME`` (or the
  token's id, or ``http:NAME``) revokes them, at once for a running server.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from actline.bus import AuthError, Authority
from actline.bus.auth import read_identity, write_secret
from actline.bus.claims import push_account
from actline.config import Config
from actline.errors import ConfigError
from actline.http.errors import ApiError
from actline.http.tokens import HttpToken, TokenStore
from actline.messages import SubjectError, subjects

from .turns import load_config

_DURATION = re.compile(r"^(\d+)\s*([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_ttl(text: str | None) -> int | None:
    """Seconds of a ``--ttl`` such as ``90m``, ``12h`` or ``30d`` (None: the role's default);
    ``ConfigError`` naming the form otherwise."""
    if text is None:
        return None
    match = _DURATION.match(text.strip())
    if match is None or int(match.group(1)) <= 0:
        raise ConfigError(f"--ttl {text!r}: use a positive number and s, m, h or d (e.g. 12h)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _when(seconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(seconds))


def _server_config(authority: Authority, args: argparse.Namespace, console: Console) -> int:
    """The operator and accounts a nats-server must trust (``include`` it in its config)."""
    text = authority.server_config()
    if args.out is None:
        sys.stdout.write(text)
        return 0
    write_secret(args.out, text)
    console.print(f"nats-server trust block: {args.out} (include it in the server's config)")
    return 0


def _list(authority: Authority, console: Console) -> int:
    revoked = authority.revocations()
    table = Table(title=f"credentials issued from {authority.root}")
    for column in ("tenant", "role", "name", "approves", "user key", "issued", "expires", "state"):
        table.add_column(column)
    now = time.time()
    for row in authority.issued():
        gone = revoked.get(row.tenant, {})
        if row.user in gone or row.issued <= gone.get("*", -1):
            state = "[red]revoked[/red]"
        elif row.expires <= now:
            state = "[yellow]expired[/yellow]"
        else:
            state = "[green]valid[/green]"
        table.add_row(
            row.tenant,
            row.role,
            row.name,
            ",".join(row.approves),
            row.user,
            _when(row.issued),
            _when(row.expires),
            state,
        )
    console.print(table)
    tokens = TokenStore(authority.root).tokens()
    if tokens:
        console.print(_token_table(authority, tokens, now))
    return 0


def _token_table(authority: Authority, tokens: list[HttpToken], now: float) -> Table:
    """The HTTP API's tokens: who, which tenant and role, until when, in what state."""
    table = Table(title=f"HTTP API tokens issued from {authority.root} (hashes only)")
    for column in ("tenant", "role", "name", "token id", "issued", "expires", "state"):
        table.add_column(column)
    colour = {"valid": "green", "expired": "yellow", "revoked": "red"}
    for token in tokens:
        state = token.state(now)
        table.add_row(
            token.tenant,
            token.role,
            token.name,
            token.id,
            _when(token.issued),
            _when(token.expires),
            f"[{colour[state]}]{state}[/{colour[state]}]",
        )
    return table


def _http_token(
    authority: Authority, args: argparse.Namespace, prefix: str, console: Console
) -> int:
    """``actline creds http NAME``: a new bearer token, shown once (module docstring)."""
    if not args.name:
        raise ConfigError("a token needs a name (who uses it): actline creds http NAME")
    if args.tools:
        raise ConfigError("--tools is for NATS credentials; an HTTP token approves every tool")
    authority.account(prefix)  # the tenant's account, made on first use
    token, record = TokenStore(authority.root).issue(
        args.name, tenant=prefix, approver=args.approver, ttl_s=parse_ttl(args.ttl)
    )
    if args.out is not None:
        write_secret(args.out, token + "\n")
        console.print(f"[bold]{record.name}[/bold] HTTP token {record.id}: {args.out} (mode 0600)")
    elif not sys.stdout.isatty():
        sys.stdout.write(token + "\n")
        return 0
    else:
        console.print(f"[bold]{record.name}[/bold] HTTP token (shown once, keep it): {token}")
    console.print(
        f"  tenant {record.tenant} · role {record.role} · id {record.id} · "
        f"valid until {_when(record.expires)}"
    )
    console.print(
        '  use: curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:PORT/v1/conversations'
    )
    console.print(f"  revoke: actline creds revoke {record.id}")
    return 0


def _revoke_http(authority: Authority, which: str, console: Console) -> int:
    """Revoke HTTP tokens by id or name; the running server sees the file change."""
    try:
        revoked = TokenStore(authority.root).revoke(which)
    except ApiError as exc:
        raise ConfigError(f"{exc.message} (see actline creds list)") from None
    for token in revoked:
        console.print(f"HTTP token {token.id} ({token.name}, tenant {token.tenant}) is revoked")
    return 0


def _renew(authority: Authority, args: argparse.Namespace, console: Console) -> int:
    if not args.name:
        raise ConfigError("renew which credentials? actline creds renew FILE")
    path = Path(args.name)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    write_secret(path, authority.renew(text, ttl_s=parse_ttl(args.ttl)))
    identity = read_identity(path)
    console.print(
        f"[bold]{identity.label}[/bold]: {path} renewed until {_when(identity.expires or 0)}"
    )
    return 0


def _server_url(config: Config) -> str | None:
    """Where to push a revocation: --nats / NATS_URL, else the embedded server this home
    runs (it writes its URL beside its store while it runs)."""
    if config.nats_url:
        return config.nats_url
    running = config.node.home / "nats" / "url"
    return running.read_text().strip() if running.is_file() else None


def _revoke(
    authority: Authority, config: Config, args: argparse.Namespace, console: Console
) -> int:
    if args.all:
        tenant = args.prefix or subjects.current().prefix
        authority.revoke_tenant(tenant)
        TokenStore(authority.root).revoke_tenant(tenant)
        console.print(
            f"every credential and HTTP token of tenant {tenant} issued until now is revoked"
        )
    elif args.name.startswith("http:"):
        return _revoke_http(authority, args.name.removeprefix("http:"), console)
    elif args.name and not any(row.user == args.name for row in authority.issued()):
        return _revoke_http(authority, args.name, console)
    elif args.name:
        tenant = authority.revoke_user(args.name)
        console.print(f"user {args.name} of tenant {tenant} is revoked")
    else:
        raise ConfigError(
            "revoke what? actline creds revoke USERKEY or HTTP_TOKEN_ID (see actline creds "
            "list), or actline creds revoke --all --prefix TENANT"
        )
    url = _server_url(config)
    if url is None:
        console.print(
            "[yellow]no running server named (--nats URL or NATS_URL): servers take the "
            "revocation when they start with `actline creds server`'s trust block[/yellow]"
        )
        return 0
    asyncio.run(push_account(url, authority, tenant))
    console.print(f"{url} has it: the revoked connections are closed")
    return 0


def run_creds(args: argparse.Namespace, console: Console) -> int:
    config = load_config(args)
    prefix = args.prefix or subjects.current().prefix
    try:
        subjects.check_tenant(prefix)
        authority = config.authority()
        match args.role:
            case "server":
                authority.account(prefix)  # the tenant it is asked for is among the accounts
                return _server_config(authority, args, console)
            case "list":
                return _list(authority, console)
            case "renew":
                return _renew(authority, args, console)
            case "revoke":
                return _revoke(authority, config, args, console)
            case "http":
                return _http_token(authority, args, prefix, console)
        return _issue(authority, args, prefix, console)
    except (AuthError, SubjectError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def _issue(authority: Authority, args: argparse.Namespace, prefix: str, console: Console) -> int:
    approves = tuple(p.strip() for p in (args.tools or "").split(",") if p.strip())
    approver = bool(args.approver or approves)
    if approver and args.role not in ("agent", "client"):
        raise ConfigError(f"--approver is for a client or an agent, not {args.role}")
    if args.role == "agent" and not args.name:
        raise ConfigError("an agent's credentials need its name: actline creds agent NAME")
    if approver and not args.name:
        raise ConfigError(f"an approver needs a name: actline creds {args.role} NAME --approver")
    if args.role not in ("agent", "client") and args.name:
        raise ConfigError(f"role {args.role} takes no name (only agent NAME does)")
    if args.role == "client" and args.name and not approver:
        raise ConfigError("a client's name is an approver's: add --approver, or drop the name")
    who = {
        "name": args.name,
        "prefix": prefix,
        "approves": approves or ((">",) if approver else ()),
        "ttl_s": parse_ttl(args.ttl),
    }
    if args.out is not None:
        path = write_secret(args.out, authority.issue(args.role, **who))
    elif not sys.stdout.isatty():
        sys.stdout.write(authority.issue(args.role, **who))
        return 0
    elif who["ttl_s"] is None and not approves:
        path = authority.creds_path(args.role, name=args.name, prefix=prefix, approver=approver)
    else:
        stem = f"{args.role}-{args.name}" if args.name else args.role
        path = write_secret(
            authority.root / "creds" / f"{stem}-{int(time.time())}@{prefix}.creds",
            authority.issue(args.role, **who),
        )
    identity = read_identity(path)
    console.print(f"[bold]{identity.label}[/bold] credentials: {path} (mode 0600)")
    console.print(f"  valid until {_when(identity.expires or 0)}: renew with actline creds renew")
    console.print(f"  use: ACTLINE_NATS_CREDS={path} actline …   or   --creds {path}")
    console.print(f"  nats-py: nats.connect(url, user_credentials='{path}',")
    console.print(f"                        inbox_prefix='{identity.inbox_prefix}')")
    if approver:
        tools = ", ".join(identity.approves) if identity.approves != (">",) else "every tool"
        console.print(f"  {args.name} may approve or deny pending calls of {tools}")
    if args.role == "admin":
        console.print(
            "[yellow]admin may do everything in its tenant: keep it for maintenance[/yellow]"
        )
    return 0
