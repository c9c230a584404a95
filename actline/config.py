"""One settings object for the CLI and the Python API.

``Config.load()`` reads, lowest precedence first: the defaults, a TOML file, the environment
(``ACTLINE_*``, ``NATS_URL``, ``ANTHROPIC_API_KEY``, ``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL``)
and explicit overrides (command-line flags; ``api`` and ``base_url`` among them).
Credentials: ``ACTLINE_NATS_CREDS`` (or ``--creds``, TOML ``nats_creds``) names a ``.creds``
file; ``ACTLINE_INSECURE=1`` (``--insecure``, TOML ``insecure = true``) runs without
authentication. The TOML file is ``--config PATH``, else ``$ACTLINE_CONFIG``, else
``./actline.toml`` when it exists. Its keys are the node settings by name (``home``,
``model``, ``docs``, ``workspace``, ``max_iterations``, ``profile``, ...), ``nats_url``, an
``[llm]`` table (``api``, ``base_url``, ``max_retries``, ``timeout``, ...), ``[models.NAME]``
tables (a model by name and endpoint) and ``[profiles.NAME]`` tables (custom runtime
profiles: ``extends`` a built-in or custom one and any keys of
``actline.actors.configuration.profiles.KEYS``). API keys are never read from the file: they
belong in the environment.

Every problem is a ``ConfigError`` whose message names the setting and the fix.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from actline.actors.configuration.settings import NodeSettings
from actline.actors.configuration.settings_file import load_settings
from actline.actors.errors import SettingsFileError
from actline.bus import AuthError, Authority, CredsInvalid, read_identity
from actline.llm import LLMSettings, ModelConfigError, check_servable
from actline.llm.reachable import check_reachable
from actline.messages import SubjectError, subjects

from .errors import ConfigError

__all__ = ["NATS_SCHEMES", "Config", "ConfigError", "check_nats_url", "local_user"]

NATS_SCHEMES = ("nats://", "tls://", "ws://", "wss://")


def local_user() -> str:
    """The local user's name as an approver's name (letters, digits, ``-`` and ``_``)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = ""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", user).strip("-") or "local"


def check_nats_url(url: str) -> str:
    """``url`` when it is a NATS URL (``nats://host:4222``), else ``ConfigError``."""
    text = url.strip()
    if not text.startswith(NATS_SCHEMES) or len(text.split("://", 1)[1]) == 0:
        raise ConfigError(
            f"NATS_URL {url!r} is not a NATS URL: write nats://host:4222 "
            "(or tls://, ws://, wss://), or unset NATS_URL to use an embedded nats-server"
        )
    return text


def _flag(value: str | None, name: str) -> bool | None:
    if value is None or value == "":
        return None
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r}: write 1 or 0")


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the runtime needs to start; ``load()`` builds it."""

    node: NodeSettings
    llm: LLMSettings
    nats_url: str | None = None
    """None: start an embedded nats-server."""
    source: Path | None = None
    """The TOML file that was read, if any."""
    nats_creds: Path | None = None
    """A ``.creds`` file to connect with (None: the embedded server's, made under home)."""
    insecure: bool = False
    """Run without authentication (an explicit choice; a warning says so)."""
    nats_port: int | None = None
    """The embedded nats-server's port (None: one the server picks)."""

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        env: Mapping[str, str] | None = None,
        nats_url: str | None = None,
        **overrides: Any,
    ) -> Config:
        """Defaults < TOML file < environment < ``overrides`` (node setting names)."""
        source_env = dict(os.environ if env is None else env)
        creds = overrides.pop("nats_creds", None) or source_env.get("ACTLINE_NATS_CREDS")
        insecure = overrides.pop("insecure", None)
        try:
            loaded = load_settings(path, env=source_env, overrides=overrides)
        except SettingsFileError as exc:
            raise ConfigError(exc.message) from None
        node, llm, file = loaded.node, loaded.llm, loaded.source
        url = loaded.connection.get("nats_url")
        creds_file = loaded.connection.get("nats_creds")
        if insecure is None:
            insecure = _flag(source_env.get("ACTLINE_INSECURE"), "ACTLINE_INSECURE")
            insecure = insecure if insecure is not None else loaded.connection.get("insecure")
        chosen = nats_url or source_env.get("NATS_URL") or url
        if chosen is not None and not isinstance(chosen, str):
            raise ConfigError(f"config file {file}: nats_url must be a string")
        creds = creds or creds_file
        if creds is not None and not isinstance(creds, str | Path):
            raise ConfigError(f"config file {file}: nats_creds must be a path (a string)")
        if creds and insecure:
            raise ConfigError(
                "both credentials (ACTLINE_NATS_CREDS / --creds) and --insecure are set: choose one"
            )
        return cls(
            node,
            llm,
            check_nats_url(chosen) if chosen else None,
            file,
            Path(creds).expanduser() if creds else None,
            bool(insecure),
        )

    def creds_for(self, role: str, name: str = "") -> Path | None:
        """The credentials to connect with as ``role``; None when running insecure.

        ``nats_creds`` when set (checked readable); else the ones made for ``role`` from
        the keys under ``home/auth`` (made there for the embedded server; with ``NATS_URL``
        when that folder holds keys already: a server this home started); else
        ``ConfigError`` naming the fix.
        """
        if self.insecure:
            return None
        if self.nats_creds is not None:
            try:
                read_identity(self.nats_creds)
            except CredsInvalid as exc:
                raise ConfigError(f"ACTLINE_NATS_CREDS / --creds: {exc}") from None
            return self.nats_creds
        if self.nats_url is None or (self.node.home / "auth" / "operator.nk").is_file():
            prefix = subjects.current().prefix
            try:
                authority = self.authority()
                if role == "client" and not name:
                    # the keys' holder at this machine: a client that may approve, as itself
                    return authority.creds_path(
                        role, name=local_user(), prefix=prefix, approver=True
                    )
                return authority.creds_path(role, name=name, prefix=prefix)
            except (AuthError, SubjectError) as exc:
                raise ConfigError(str(exc)) from None
        raise ConfigError(
            f"NATS at {self.nats_url} needs credentials: pass --creds FILE or set "
            "ACTLINE_NATS_CREDS (make them with `actline creds client` where the deployment's "
            "keys are), or --insecure for a server without authentication"
        )

    def authority(self) -> Authority:
        """The keys of the embedded server, under ``home/auth`` (made on first use)."""
        try:
            return Authority.open(self.node.home / "auth")
        except OSError as exc:
            raise ConfigError(
                f"cannot keep credentials under {self.node.home / 'auth'}: {exc}; fix ACTLINE_HOME"
            ) from None

    def joining(self, url: str, *, creds: Path | None, insecure: bool) -> Config:
        """This config connecting to a running server at ``url`` (``actline serve``'s, found
        in the home) with ``creds`` unless credentials were given, or without
        authentication when that server runs so."""
        if insecure:
            return replace(self, nats_url=check_nats_url(url), nats_creds=None, insecure=True)
        return replace(self, nats_url=check_nats_url(url), nats_creds=self.nats_creds or creds)

    def with_node(self, **changes: Any) -> Config:
        node = self.node.with_(**changes)
        return replace(self, node=node, llm=replace(self.llm, model=node.model))

    def check_model(self) -> None:
        """``ConfigError`` when the model cannot run here (a claude model without a key)."""
        try:
            check_servable(self.llm)
        except ModelConfigError as exc:
            raise ConfigError(str(exc)) from None

    async def check_model_server(self) -> None:
        """``ConfigError`` naming the base URL when the node's model is served there and the
        server does not answer (``actline.llm.reachable``)."""
        if self.llm.offline:
            return
        try:
            await check_reachable(self.llm.for_model(self.llm.model))
        except ModelConfigError as exc:
            raise ConfigError(str(exc)) from None
