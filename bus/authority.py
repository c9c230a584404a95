"""The keys of a deployment: one operator, a system account, one account per tenant.

An ``Authority`` is a folder (``$ACTLINE_HOME/auth`` by default, mode 0700) of seeds, each
0600: ``operator.nk``, ``system.nk`` and ``accounts/<tenant>.nk``. A tenant (a subject
prefix, ``actline.messages.subjects``) is a NATS account of its own, made on first use:
the server keeps every account's subjects, streams, buckets and inboxes apart, so no
credential of one tenant reaches anything of another, whatever its permissions say. A new
tenant whose name differs from an existing one only by its ``-`` (``acme-eu`` and
``acmeeu``) is refused, naming both.

What the authority writes:

- ``server_config``: the trust block of a nats-server (the operator, the system account,
  the built-in ``full`` account resolver with every tenant's account preloaded, and the
  ``max_control_line`` a node's credentials need). The resolver takes pushed updates, so
  a new tenant or a revocation reaches a running server without a restart
  (``actline.bus.claims``).
- ``issue``: a user's ``.creds`` (``auth.creds_text``), signed by its tenant's account,
  with an expiry: ``ttl_s``, by default ``DEFAULT_TTL_S`` of its role (hours for agents,
  approvers and admins, a week for clients, 30 days for nodes and pools). Each issue is recorded
  in ``issued.jsonl`` (who, which key, until when), which ``actline creds list`` shows.
- ``renew``: the same user key with a new expiry (a revoked key is not renewed).
- ``revoke_user`` / ``revoke_tenant``: recorded in ``revocations.json`` and carried by the
  tenant's account JWT (NATS revocations: a user JWT issued at or before the revocation
  time is refused, and the server closes its connections once it has the update).
"""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import nkeys

from actline.messages.subjects import check_tenant

from .auth import (
    creds_text,
    encode_jwt,
    jwt_claims,
    new_seed,
    parse_creds,
    public_key,
    write_secret,
)
from .errors import CredsInvalid, RoleUnknown, TenantRefused
from .roles import ROLES, permissions

HOUR = 3600
DEFAULT_TTL_S: dict[str, int] = {
    "node": 30 * 24 * HOUR,
    "client": 7 * 24 * HOUR,
    "agent": 12 * HOUR,
    "approver": 12 * HOUR,
    "pool-models": 30 * 24 * HOUR,
    "pool-tools": 30 * 24 * HOUR,
    "admin": 12 * HOUR,
    "system": HOUR,
}
"""How long a credential of each role lasts unless ``ttl_s`` says otherwise (an agent or
client with the right to approve counts as ``approver``)."""
RENEW_FRACTION = 0.5
"""``creds_path`` renews a kept credential once less than this part of its life is left."""
MAX_CONTROL_LINE = 65536
"""A node's credentials name the JetStream API of each of its streams: its CONNECT line
is ~7 KB, over nats-server's default 4 KB ``max_control_line``."""
_UNLIMITED = {"subs": -1, "data": -1, "payload": -1}
ALL = "*"
"""The revocation key that revokes every user of an account issued until then."""


@dataclass(frozen=True, slots=True)
class Issued:
    """One credential the authority issued (a line of ``issued.jsonl``)."""

    user: str
    role: str
    name: str
    tenant: str
    approves: tuple[str, ...]
    issued: int
    expires: int


def _ttl_role(role: str, approves: tuple[str, ...]) -> str:
    return "approver" if approves else role


class Authority:
    """The keys that make a NATS deployment's trust: see the module docstring."""

    SEEDS: ClassVar[dict[str, int]] = {
        "operator": nkeys.PREFIX_BYTE_OPERATOR,
        "system": nkeys.PREFIX_BYTE_ACCOUNT,
    }

    def __init__(self, root: Path, seeds: dict[str, bytes]) -> None:
        self.root = root
        self._seeds = seeds
        self._listeners: list[Callable[[str], None]] = []

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> Authority:
        """The authority in ``root``, generating its seeds on first use (0700 / 0600)."""
        folder = Path(root)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, stat.S_IRWXU)
        seeds = {name: _seed(folder / f"{name}.nk", prefix) for name, prefix in cls.SEEDS.items()}
        legacy, default = folder / "account.nk", folder / "accounts" / "al.nk"
        if legacy.exists() and not default.exists():
            # one application account before tenants were accounts: it is tenant al's
            write_secret(default, legacy.read_text())
        return cls(folder, seeds)

    # -- tenants -------------------------------------------------------------------------
    def tenants(self) -> list[str]:
        """Every tenant this authority made an account for, by name."""
        folder = self.root / "accounts"
        return sorted(p.stem for p in folder.glob("*.nk")) if folder.is_dir() else []

    def account(self, tenant: str = "al") -> str:
        """The public key of ``tenant``'s account (made on first ask)."""
        return public_key(self._tenant_seed(tenant))

    def _tenant_seed(self, tenant: str) -> bytes:
        check_tenant(tenant)
        path = self.root / "accounts" / f"{tenant}.nk"
        if path.exists():
            return _seed(path, nkeys.PREFIX_BYTE_ACCOUNT)
        folded = tenant.replace("-", "")
        for other in self.tenants():
            if other.replace("-", "") == folded:
                raise TenantRefused(tenant, other)
        seed = _seed(path, nkeys.PREFIX_BYTE_ACCOUNT)
        for listener in list(self._listeners):
            listener(tenant)
        return seed

    def on_change(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(tenant)`` when a tenant's account is made or changed (a running
        embedded server pushes it); returns the function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def account_jwt(self, tenant: str) -> str:
        """``tenant``'s account JWT, signed by the operator, with its revocations."""
        seed = self._tenant_seed(tenant)
        limits: dict[str, Any] = {
            **_UNLIMITED,
            "imports": -1,
            "exports": -1,
            "wildcards": True,
            "conn": -1,
            "leaf": -1,
            "mem_storage": -1,
            "disk_storage": -1,
            "streams": -1,
            "consumer": -1,
        }
        body: dict[str, Any] = {"limits": limits, "type": "account", "version": 2}
        revoked = self.revocations().get(tenant)
        if revoked:
            body["revocations"] = revoked
        claims = {"sub": public_key(seed), "name": tenant, "nats": body}
        return encode_jwt(claims, self._seeds["operator"])

    def _system_jwt(self) -> str:
        claims = {
            "sub": public_key(self._seeds["system"]),
            "name": "SYS",
            "nats": {
                "limits": {
                    **_UNLIMITED,
                    "imports": -1,
                    "exports": -1,
                    "wildcards": True,
                    "conn": -1,
                    "leaf": -1,
                },
                "type": "account",
                "version": 2,
            },
        }
        return encode_jwt(claims, self._seeds["operator"])

    def operator_jwt(self) -> str:
        """The operator's JWT: made once and kept (a server refuses to reload another)."""
        path = self.root / "operator.jwt"
        if path.exists():
            return path.read_text().strip()
        operator = self._seeds["operator"]
        system = public_key(self._seeds["system"])
        body = {"system_account": system, "type": "operator", "version": 2}
        token = encode_jwt({"sub": public_key(operator), "name": "actline", "nats": body}, operator)
        write_secret(path, token + "\n")
        return token

    def server_config(
        self, jwt_dir: str | os.PathLike[str] = "./jwt", *, max_control_line: int = MAX_CONTROL_LINE
    ) -> str:
        """The trust block of a nats-server configuration: operator, system account, the
        ``full`` resolver keeping pushed account JWTs in ``jwt_dir``, every tenant's
        account preloaded, and ``max_control_line``."""
        system = public_key(self._seeds["system"])
        accounts = {system: self._system_jwt()}
        for tenant in self.tenants():
            accounts[self.account(tenant)] = self.account_jwt(tenant)
        preload = "\n".join(f"  {key}: {token}" for key, token in accounts.items())
        return (
            f"operator: {self.operator_jwt()}\n"
            f"system_account: {system}\n"
            f'resolver: {{\n  type: full\n  dir: "{jwt_dir}"\n  allow_delete: false\n'
            '  interval: "2m"\n}\n'
            f"resolver_preload: {{\n{preload}\n}}\n"
            f"max_control_line: {max_control_line}\n"
        )

    # -- users -----------------------------------------------------------------------------
    def issue(
        self,
        role: str,
        *,
        name: str = "",
        prefix: str = "al",
        approver: bool = False,
        approves: tuple[str, ...] = (),
        ttl_s: int | None = None,
        seed: bytes | None = None,
    ) -> str:
        """A ``.creds`` text for ``role`` (``agent`` needs ``name``) of tenant ``prefix``;
        ``approver`` (or ``approves``, tool patterns): may approve or deny pending tool
        calls; ``ttl_s``: its life (``DEFAULT_TTL_S`` of the role when None); ``seed``:
        the user key (a renewal), a new one when None."""
        if approver and not approves:
            approves = (">",)
        granted = permissions(role, name=name, prefix=prefix, approves=approves)
        life = DEFAULT_TTL_S[_ttl_role(role, approves)] if ttl_s is None else ttl_s
        if life <= 0:
            raise RoleUnknown(role, f"a credential's life must be positive (not {life} s)")
        seed = seed or new_seed(nkeys.PREFIX_BYTE_USER)
        user = public_key(seed)
        if user in self.revocations().get(prefix, {}):
            raise CredsInvalid(user, "this key was revoked: issue new credentials instead")
        account = self._tenant_seed(prefix)
        now = self._after_revocations(prefix)
        granted = granted.with_inbox(f"_INBOX.{user}")
        tags = [f"actline:role={role}", f"actline:prefix={prefix}"]
        if name:
            tags.append(f"actline:name={name}")
        if approves:
            tags.append(f"actline:approves={','.join(approves)}")
        claims = {
            "sub": user,
            "name": f"{role}-{name}@{prefix}" if name else f"{role}@{prefix}",
            "exp": now + life,
            "nats": {
                "pub": {"allow": list(granted.publish)},
                "sub": {"allow": list(granted.subscribe)},
                "tags": tags,
                **_UNLIMITED,
                "type": "user",
                "version": 2,
            },
        }
        token = encode_jwt(claims, account, issued_at=now)
        self._record(Issued(user, role, name, prefix, approves, now, now + life))
        return creds_text(token, seed)

    def _after_revocations(self, tenant: str) -> int:
        """Now, past every revocation of ``tenant`` (a JWT issued in the second of a
        revocation would count as revoked): waits out that second when needed."""
        newest = max(self.revocations().get(tenant, {}).values(), default=0)
        while (now := int(time.time())) <= newest:
            time.sleep(newest + 1 - time.time())
        return now

    def renew(self, text: str, *, ttl_s: int | None = None) -> str:
        """``text`` (a ``.creds``) issued again for the same user key and identity, with a
        new expiry; ``CredsInvalid`` when its key or tenant was revoked since."""
        token, seed = parse_creds(text, "<renew>")
        claims = jwt_claims(token)
        tags = dict(t.split("=", 1) for t in claims.get("nats", {}).get("tags", []) if "=" in t)
        tenant = tags.get("actline:prefix", "")
        if tenant not in self.tenants():
            raise CredsInvalid("<renew>", f"tenant {tenant!r} is not one of this authority's")
        if claims.get("iss") != self.account(tenant):
            raise CredsInvalid("<renew>", "they were not issued by this authority")
        revoked = self.revocations().get(tenant, {})
        user, issued = str(claims.get("sub", "")), int(claims.get("iat", 0))
        if user in revoked or issued <= revoked.get(ALL, -1):
            raise CredsInvalid("<renew>", "they were revoked: issue new credentials instead")
        approves = tuple(p for p in tags.get("actline:approves", "").split(",") if p)
        return self.issue(
            tags.get("actline:role", ""),
            name=tags.get("actline:name", ""),
            prefix=tenant,
            approves=approves,
            ttl_s=ttl_s,
            seed=seed,
        )

    def creds_path(
        self, role: str, *, name: str = "", prefix: str = "al", approver: bool = False
    ) -> Path:
        """Where the authority keeps the credentials of ``role``: made on first ask; past
        ``RENEW_FRACTION`` of their life, renewed for the same key (a connection that
        reconnects with the file keeps its reply inbox); expired or revoked, made anew."""
        if role not in ROLES or approver:
            # raises the error that names it
            permissions(role, name=name, prefix=prefix, approves=(">",) if approver else ())
        stem = f"{role}-{name}" if name else role
        stem += "-approver" if approver else ""
        path = self.root / "creds" / f"{stem}@{prefix}.creds"
        state = self._state(path, prefix) if path.exists() else "dead"
        if state == "aging":
            write_secret(path, self.renew(path.read_text()))
        elif state == "dead":
            write_secret(path, self.issue(role, name=name, prefix=prefix, approver=approver))
        return path

    def _state(self, path: Path, tenant: str) -> str:
        """``fresh``, ``aging`` (past ``RENEW_FRACTION`` of its life) or ``dead`` (expired,
        revoked, unreadable, or without an expiry)."""
        try:
            token, _ = parse_creds(path.read_text(), str(path))
        except CredsInvalid:
            return "dead"
        claims = jwt_claims(token)
        issued, expires = int(claims.get("iat", 0)), claims.get("exp")
        if not isinstance(expires, int) or expires <= time.time():
            return "dead"
        revoked = self.revocations().get(tenant, {})
        if claims.get("sub") in revoked or issued <= revoked.get(ALL, -1):
            return "dead"
        if time.time() > issued + (expires - issued) * RENEW_FRACTION:
            return "aging"
        return "fresh"

    def system_creds(self) -> Path:
        """Credentials of a system-account user: what pushes account updates to a server."""
        path = self.root / "creds" / "system.creds"
        if path.exists() and self._state(path, "") == "fresh":
            return path
        seed = new_seed(nkeys.PREFIX_BYTE_USER)
        now = int(time.time())
        claims = {
            "sub": public_key(seed),
            "name": "actline-system",
            "exp": now + DEFAULT_TTL_S["system"],
            "nats": {**_UNLIMITED, "type": "user", "version": 2},
        }
        token = encode_jwt(claims, self._seeds["system"], issued_at=now)
        return write_secret(path, creds_text(token, seed))

    # -- the ledger and revocations ----------------------------------------------------------
    def _record(self, issued: Issued) -> None:
        path = self.root / "issued.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as out:
            out.write(json.dumps(asdict(issued)) + "\n")

    def issued(self) -> list[Issued]:
        """Every credential issued here, oldest first."""
        path = self.root / "issued.jsonl"
        if not path.exists():
            return []
        rows = []
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                row["approves"] = tuple(row.get("approves", ()))
                rows.append(Issued(**row))
        return rows

    def revocations(self) -> dict[str, dict[str, int]]:
        """Tenant -> revoked user key (or ``ALL``) -> when (seconds since the epoch)."""
        path = self.root / "revocations.json"
        if not path.exists():
            return {}
        loaded = json.loads(path.read_text())
        return {str(t): {str(k): int(v) for k, v in users.items()} for t, users in loaded.items()}

    def revoke_user(self, user: str) -> str:
        """Revoke the user key ``user`` (``U…``, as ``actline creds list`` shows it);
        returns its tenant. ``CredsInvalid`` when this authority never issued it."""
        tenants = {row.tenant for row in self.issued() if row.user == user}
        if not tenants:
            raise CredsInvalid(user, "no credential with this user key was issued here")
        (tenant,) = tenants
        self._revoke(tenant, user)
        return tenant

    def revoke_tenant(self, tenant: str) -> None:
        """Revoke every credential of ``tenant`` issued until now (new ones work)."""
        if tenant not in self.tenants():
            raise TenantRefused(tenant, "", "no such tenant here")
        self._revoke(tenant, ALL)

    def _revoke(self, tenant: str, key: str) -> None:
        revoked = self.revocations()
        revoked.setdefault(tenant, {})[key] = int(time.time())
        write_secret(self.root / "revocations.json", json.dumps(revoked, indent=1) + "\n")
        for listener in list(self._listeners):
            listener(tenant)


def _seed(path: Path, prefix: int) -> bytes:
    """The seed in ``path``, made there first when there is none. Made with ``O_EXCL``:
    of two processes making one tenant at once, both end with the seed that won."""
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(new_seed(prefix).decode() + "\n")
    seed = path.read_bytes().strip()
    try:
        public_key(seed)
    except Exception as exc:  # nkeys raises its own error types
        raise CredsInvalid(str(path), f"not an nkey seed ({exc})") from None
    return seed
