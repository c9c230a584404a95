"""Credentials for an authenticated NATS: decentralised JWT accounts, made and kept by actline.

Why JWT accounts rather than a static list of nkeys: a user's permissions travel inside
its credentials, signed by the account key. ``actline creds agent reviewer`` therefore
issues a working credential at once, on any machine holding the account key, without
editing or reloading the server's configuration; the server only trusts the operator
and the account (``resolver: MEMORY``).

An ``Authority`` is a folder (``$ACTLINE_HOME/auth`` by default, mode 0700) with three
seeds, each 0600: the operator, the system account and the application account. On
first use the seeds are generated; from them the authority writes the server's
trust block (``server_config``) and signs user credentials (``issue``). A user JWT
carries its role, name and subject prefix as tags (``actline:role=agent`` …) and
the permissions of ``roles.permissions``. Credentials files use the standard
``.creds`` layout that every NATS client reads (nats-py: ``user_credentials=``).

Nothing here verifies a signature: the server does. ``read_identity`` only reads the
claims of one's own credentials (to pick the inbox prefix the permissions allow).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import nkeys

from .errors import CredsInvalid
from .roles import ROLES, Permissions, permissions

_JWT_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
_CREDS_RE = re.compile(
    r"-----BEGIN NATS USER JWT-----\s*(?P<jwt>[A-Za-z0-9_\-\.=]+)\s*------END NATS USER JWT------"
    r".*?-----BEGIN USER NKEY SEED-----\s*(?P<seed>S[A-Z0-9]+)\s*------END USER NKEY SEED------",
    re.S,
)
_UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_seed(prefix: int) -> bytes:
    """A new nkey seed of the given role (``nkeys.PREFIX_BYTE_*``)."""
    return bytes(nkeys.encode_seed(secrets.token_bytes(32), prefix))


def public_key(seed: bytes) -> str:
    """The public key of an nkey seed (``O…``, ``A…`` or ``U…``)."""
    return bytes(nkeys.from_seed(seed).public_key).decode()


def encode_jwt(claims: dict[str, Any], issuer_seed: bytes) -> str:
    """A NATS JWT of ``claims`` signed by ``issuer_seed`` (``iss``, ``iat``, ``jti`` are set)."""
    body = dict(claims)
    body["iss"] = public_key(issuer_seed)
    body["iat"] = int(time.time())
    body.pop("jti", None)
    digest = hashlib.sha512(json.dumps(body, sort_keys=True).encode()).digest()[:32]
    body["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signing = _b64(json.dumps(_JWT_HEADER).encode()) + "." + _b64(json.dumps(body).encode())
    signature = nkeys.from_seed(issuer_seed).sign(signing.encode())
    return signing + "." + _b64(bytes(signature))


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified; ``CredsInvalid`` when it is not one."""
    parts = token.split(".")
    try:
        claims = json.loads(_unb64(parts[1]))
    except (IndexError, ValueError) as exc:
        raise CredsInvalid("<jwt>", f"not a JWT: {exc}") from None
    if not isinstance(claims, dict):
        raise CredsInvalid("<jwt>", "the JWT's claims are not an object")
    return claims


def creds_text(user_jwt: str, seed: bytes) -> str:
    """The standard ``.creds`` file of a user."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed.decode()}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


def write_secret(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` with mode 0600 from the first byte (never world-readable)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)
    return path


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a credentials file says its holder is."""

    role: str
    name: str
    prefix: str
    public_key: str
    permissions: Permissions

    @property
    def inbox_prefix(self) -> str:
        """The reply-inbox prefix the role may subscribe to (``_INBOX.<public key>``)."""
        return f"_INBOX.{self.public_key}"

    @property
    def label(self) -> str:
        """``role`` or ``agent reviewer``, with the prefix: for messages."""
        who = f"{self.role} {self.name}" if self.role == "agent" else self.role
        return f"{who} (prefix {self.prefix})"


def read_identity(path: str | os.PathLike[str]) -> Identity:
    """The identity in a ``.creds`` file; ``CredsInvalid`` names what is wrong with it."""
    where = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CredsInvalid(where, f"cannot read it: {exc.strerror or exc}") from None
    match = _CREDS_RE.search(text)
    if match is None:
        raise CredsInvalid(where, "it is not a NATS .creds file (user JWT and nkey seed)")
    claims = jwt_claims(match.group("jwt"))
    nats_claims = claims.get("nats") or {}
    tags = {t.split("=", 1)[0]: t.split("=", 1)[1] for t in nats_claims.get("tags", []) if "=" in t}
    user = str(claims.get("sub", ""))
    if not user.startswith("U"):
        raise CredsInvalid(where, "the JWT is not a user's")
    role = tags.get("actline:role", "")
    prefix = tags.get("actline:prefix", "")
    granted = Permissions(
        publish=tuple(nats_claims.get("pub", {}).get("allow", ())),
        subscribe=tuple(nats_claims.get("sub", {}).get("allow", ())),
    )
    return Identity(role, tags.get("actline:name", ""), prefix, user, granted)


class Authority:
    """The keys that make a NATS deployment's trust: see the module docstring."""

    SEEDS: ClassVar[dict[str, int]] = {
        "operator": nkeys.PREFIX_BYTE_OPERATOR,
        "system": nkeys.PREFIX_BYTE_ACCOUNT,
        "account": nkeys.PREFIX_BYTE_ACCOUNT,
    }

    def __init__(self, root: Path, seeds: dict[str, bytes]) -> None:
        self.root = root
        self._seeds = seeds

    @classmethod
    def open(cls, root: str | os.PathLike[str]) -> Authority:
        """The authority in ``root``, generating its seeds on first use (0700 / 0600)."""
        folder = Path(root)
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, stat.S_IRWXU)
        seeds: dict[str, bytes] = {}
        for name, prefix in cls.SEEDS.items():
            path = folder / f"{name}.nk"
            if not path.exists():
                write_secret(path, new_seed(prefix).decode() + "\n")
            seed = path.read_bytes().strip()
            try:
                public_key(seed)
            except Exception as exc:  # nkeys raises its own error types
                raise CredsInvalid(str(path), f"not an nkey seed ({exc})") from None
            seeds[name] = seed
        return cls(folder, seeds)

    @property
    def account(self) -> str:
        """The application account's public key."""
        return public_key(self._seeds["account"])

    def server_config(self) -> str:
        """The trust block of a nats-server configuration (operator, accounts preloaded)."""
        operator = self._seeds["operator"]
        system = public_key(self._seeds["system"])
        op_jwt = encode_jwt(
            {
                "sub": public_key(operator),
                "name": "actline",
                "nats": {"system_account": system, "type": "operator", "version": 2},
            },
            operator,
        )
        accounts = {
            system: self._account_jwt("SYS", self._seeds["system"], jetstream=False),
            self.account: self._account_jwt("ACTLINE", self._seeds["account"], jetstream=True),
        }
        preload = "\n".join(f"  {key}: {token}" for key, token in accounts.items())
        return (
            f"operator: {op_jwt}\n"
            f"system_account: {system}\n"
            "resolver: MEMORY\n"
            f"resolver_preload: {{\n{preload}\n}}\n"
        )

    def _account_jwt(self, name: str, seed: bytes, *, jetstream: bool) -> str:
        limits: dict[str, Any] = {
            **_UNLIMITED,
            "imports": -1,
            "exports": -1,
            "wildcards": True,
            "conn": -1,
            "leaf": -1,
        }
        if jetstream:
            limits.update(mem_storage=-1, disk_storage=-1, streams=-1, consumer=-1)
        claims = {
            "sub": public_key(seed),
            "name": name,
            "nats": {"limits": limits, "type": "account", "version": 2},
        }
        return encode_jwt(claims, self._seeds["operator"])

    def issue(
        self, role: str, *, name: str = "", prefix: str = "al", approver: bool = False
    ) -> str:
        """A ``.creds`` text for ``role`` (``agent`` needs ``name``) under ``prefix``;
        ``approver``: an agent that may approve or deny pending tool calls."""
        granted = permissions(role, name=name, prefix=prefix, approver=approver)
        seed = new_seed(nkeys.PREFIX_BYTE_USER)
        user = public_key(seed)
        granted = granted.with_inbox(f"_INBOX.{user}")
        tags = [f"actline:role={role}", f"actline:prefix={prefix}"]
        if name:
            tags.append(f"actline:name={name}")
        if approver:
            tags.append("actline:approver=yes")
        claims = {
            "sub": user,
            "name": f"{role}-{name}@{prefix}" if name else f"{role}@{prefix}",
            "nats": {
                "pub": {"allow": list(granted.publish)},
                "sub": {"allow": list(granted.subscribe)},
                "tags": tags,
                **_UNLIMITED,
                "type": "user",
                "version": 2,
            },
        }
        return creds_text(encode_jwt(claims, self._seeds["account"]), seed)

    def creds_path(
        self, role: str, *, name: str = "", prefix: str = "al", approver: bool = False
    ) -> Path:
        """Where the authority keeps the credentials of ``role`` (made on first ask)."""
        if role not in ROLES or approver:
            # raises the error that names it
            permissions(role, name=name, prefix=prefix, approver=approver)
        stem = f"{role}-{name}" if name else role
        stem += "-approver" if approver else ""
        path = self.root / "creds" / f"{stem}@{prefix}.creds"
        if not path.exists():
            write_secret(path, self.issue(role, name=name, prefix=prefix, approver=approver))
        return path
