"""NATS JWTs and ``.creds`` files: the pieces the authority (``authority.py``) is made of.

Why JWT accounts rather than a static list of nkeys: a user's permissions travel inside
its credentials, signed by its tenant's account key, so a credential works the moment
it is issued, without editing the server's configuration. A user JWT carries its role,
name and tenant as tags (``actline:role=agent`` …), the permissions of
``roles.permissions`` and an expiry (``exp``). Credentials files use the standard
``.creds`` layout that every NATS client reads (nats-py: ``user_credentials=``, read
again on every reconnect, so a renewed file is picked up without a restart).

Nothing here verifies a signature: the server does. ``read_identity`` only reads the
claims of one's own credentials (to pick the inbox prefix the permissions allow, and to
say clearly that they expired rather than let the server answer "Authorization Violation").
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys

from .errors import CredsInvalid
from .roles import Permissions

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


def encode_jwt(claims: dict[str, Any], issuer_seed: bytes, *, issued_at: int | None = None) -> str:
    """A NATS JWT of ``claims`` signed by ``issuer_seed`` (``iss``, ``iat``, ``jti`` are set;
    ``iat`` is now unless ``issued_at`` is given)."""
    body = dict(claims)
    body["iss"] = public_key(issuer_seed)
    body["iat"] = int(time.time()) if issued_at is None else issued_at
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


def parse_creds(text: str, where: str) -> tuple[str, bytes]:
    """The user JWT and nkey seed of a ``.creds`` text; ``CredsInvalid`` names ``where``."""
    match = _CREDS_RE.search(text)
    if match is None:
        raise CredsInvalid(where, "it is not a NATS .creds file (user JWT and nkey seed)")
    return match.group("jwt"), match.group("seed").encode()


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
    expires: int | None = None
    """When the credential ends (seconds since the epoch); None: never (issued before
    credentials had an expiry)."""
    approves: tuple[str, ...] = ()
    """The tools this holder may approve (NATS wildcard patterns of tool names)."""

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
    token, _ = parse_creds(text, where)
    claims = jwt_claims(token)
    expires = claims.get("exp")
    if isinstance(expires, int) and expires <= time.time():
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
        raise CredsInvalid(
            where, f"they expired at {when}: renew them with `actline creds renew {where}`"
        )
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
    approves = tuple(p for p in tags.get("actline:approves", "").split(",") if p)
    name = tags.get("actline:name", "")
    return Identity(
        role, name, prefix, user, granted, expires if isinstance(expires, int) else None, approves
    )
