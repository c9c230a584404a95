"""Bearer tokens of the HTTP API: issued by ``actline creds http``, checked per request.

A token reads ``alh_<id>_<secret>``. The store (``http-tokens.json`` beside the NATS keys
under ``ACTLINE_HOME/auth``, mode 0600) keeps, per token, its id, name, tenant (subject
prefix), whether it may approve, when it was issued, until when it lasts, when it was
revoked, and the SHA-256 of the whole token: never the token itself, which is shown once
when issued. A token authorises what the NATS credential of the same role would: the
``client`` role of its tenant, and approving or denying pending tool calls with
``approver`` (``client+approver``).

The serving process reads the file again whenever its modification time or size changes
(``TokenStore.check`` looks at each request; a write replaces the file, so its inode
changes too), so a token issued or revoked by another
process counts at once, without a restart. Writers (``issue``, ``revoke``) hold an
exclusive ``flock`` on a lock file beside it and replace the file atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from actline.bus.auth import write_secret
from actline.bus.authority import DEFAULT_TTL_S
from actline.messages.ids import is_valid_name
from actline.messages.subjects import check_tenant

from .errors import BadInput, TokenRefused

__all__ = ["FILE", "PREFIX", "HttpToken", "TokenStore", "digest"]

FILE = "http-tokens.json"
PREFIX = "alh_"


def digest(token: str) -> str:
    """The SHA-256 (hex) of a token: all the store keeps of it."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class HttpToken:
    """One issued token, as the store keeps it (no secret)."""

    id: str
    name: str
    tenant: str
    approver: bool
    issued: int
    expires: int
    sha256: str
    revoked: int | None = None

    @property
    def role(self) -> str:
        return "client+approver" if self.approver else "client"

    def state(self, now: float | None = None) -> str:
        """``revoked``, ``expired`` or ``valid``."""
        if self.revoked is not None:
            return "revoked"
        return "expired" if self.expires <= (time.time() if now is None else now) else "valid"


class TokenStore:
    """The tokens of one home's ``auth`` folder (module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / FILE
        self._seen: tuple[int, int, int] | None = None
        self._tokens: dict[str, HttpToken] = {}

    # -- reading -----------------------------------------------------------------------------
    def tokens(self) -> list[HttpToken]:
        """Every token issued here, oldest first (read again when the file changed)."""
        self._refresh()
        return sorted(self._tokens.values(), key=lambda t: (t.issued, t.id))

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._tokens = None, {}
            return
        seen = (st.st_ino, st.st_mtime_ns, st.st_size)
        if seen != self._seen:
            self._tokens = {t.id: t for t in _load(self.path)}
            self._seen = seen

    def check(self, token: str, now: float | None = None) -> HttpToken:
        """The token's record; ``TokenRefused`` saying whether it is missing, not one of
        this server's, expired or revoked."""
        if not token:
            raise TokenRefused(
                "token_missing",
                "send 'Authorization: Bearer <token>' (issue one with actline creds http NAME)",
            )
        parts = token.split("_", 2)
        if len(parts) != 3 or f"{parts[0]}_" != PREFIX:
            raise TokenRefused("token_invalid", "this is not an actline HTTP token (alh_...)")
        self._refresh()
        found = self._tokens.get(parts[1])
        if found is None or not hmac.compare_digest(found.sha256, digest(token)):
            raise TokenRefused("token_invalid", "this token was not issued by this server")
        state = found.state(now)
        if state == "revoked":
            raise TokenRefused("token_revoked", f"token {found.id} ({found.name}) was revoked")
        if state == "expired":
            raise TokenRefused(
                "token_expired",
                f"token {found.id} ({found.name}) expired: issue a new one "
                f"(actline creds http {found.name})",
            )
        return found

    # -- writing -----------------------------------------------------------------------------
    def issue(
        self, name: str, *, tenant: str, approver: bool = False, ttl_s: int | None = None
    ) -> tuple[str, HttpToken]:
        """A new token for ``name`` of ``tenant``: ``(the token, its record)``. The token is
        returned here only; the store keeps its hash."""
        if not is_valid_name(name):
            raise BadInput("bad_input", f"token name {name!r}: use letters, digits, _ and -")
        check_tenant(tenant)
        life = DEFAULT_TTL_S["approver" if approver else "client"] if ttl_s is None else ttl_s
        if life <= 0:
            raise BadInput("bad_input", f"a token's life must be positive (not {life} s)")
        tid = secrets.token_hex(6)
        token = f"{PREFIX}{tid}_{secrets.token_urlsafe(32)}"
        now = int(time.time())
        record = HttpToken(tid, name, tenant, approver, now, now + life, digest(token))
        with self._locked() as tokens:
            tokens.append(record)
        return token, record

    def revoke(self, which: str) -> list[HttpToken]:
        """Revoke the token of id ``which``, or every valid token named ``which``; returns
        those revoked (``BadInput`` when none matches)."""
        now = int(time.time())
        done: list[HttpToken] = []
        with self._locked() as tokens:
            for i, token in enumerate(tokens):
                hit = token.id == which or (token.name == which and token.state(now) == "valid")
                if hit and token.revoked is None:
                    tokens[i] = replace(token, revoked=now)
                    done.append(tokens[i])
        if not done:
            raise BadInput("bad_input", f"no valid HTTP token has the id or name {which!r}")
        return done

    def revoke_tenant(self, tenant: str) -> list[HttpToken]:
        """Revoke every valid token of ``tenant``; returns them."""
        now = int(time.time())
        done: list[HttpToken] = []
        with self._locked() as tokens:
            for i, token in enumerate(tokens):
                if token.tenant == tenant and token.state(now) == "valid":
                    tokens[i] = replace(token, revoked=now)
                    done.append(tokens[i])
        return done

    @contextlib.contextmanager
    def _locked(self) -> Iterator[list[HttpToken]]:
        """The tokens to change, written back on exit under an exclusive lock."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.root / f".{FILE}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            tokens = _load(self.path)
            yield tokens
            text = json.dumps({"tokens": [asdict(t) for t in tokens]}, indent=1)
            write_secret(self.path, text + "\n")
        finally:
            os.close(fd)
        self._seen = None


def _load(path: Path) -> list[HttpToken]:
    if not path.exists():
        return []
    rows = json.loads(path.read_text()).get("tokens", [])
    return [HttpToken(**row) for row in rows]
