"""The HTTP API's NATS connections: one client connection per tenant, opened on first use.

A token's tenant is its subject prefix, a NATS account of its own. The serving process
holds the deployment's keys (``Authority``), so for each tenant a request names it issues
itself the ``client`` credentials of that tenant (``Authority.creds_path``), makes sure the
server knows the tenant's account (``push_account``: a tenant made by ``actline creds http
--prefix`` in another process), and connects with them: a token reaches what that
credential reaches, and another tenant's turns, results and conversations are not there
(an id of one tenant is unknown in another). An approver token (``--approver``) decides
on a connection of its own with ``client NAME --approver`` credentials, so the node sees
who approved. On a server without authentication (``--insecure``) the tenants are only
subject prefixes and the approver is named by ``by``.

Credentials are renewed past half their life (checked every ``RENEW_CHECK_S``).
Cancellation: ``close`` stops the renewal, the turns followed and every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from actline.actors.client.client import Client
from actline.bus import AuthError, Authority, Bus, BusError, PushFailed
from actline.bus.claims import push_account
from actline.messages.subjects import Subjects

from ..conversations import Conversations
from .events import TurnLogs

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = ["Gateway", "TenantLink"]

log = logging.getLogger(__name__)
RENEW_CHECK_S = 3600.0


@dataclass
class _Reach:
    """What ``Conversations`` reads of a runtime: a tenant's connection, no local node."""

    bus: Bus
    nats_url: str
    node: None = None


@dataclass
class TenantLink:
    """One tenant's client connection, the turns the API follows in it, its approvers."""

    tenant: str
    bus: Bus
    client: Client
    conversations: Conversations
    turns: TurnLogs = field(default_factory=TurnLogs)
    approvers: dict[str, tuple[Bus, Client]] = field(default_factory=dict)


class Gateway:
    """The tenants' connections to the NATS at ``url`` (module docstring)."""

    def __init__(self, url: str, authority: Authority | None) -> None:
        self.url = url
        self.authority = authority
        """The keys to issue tenant credentials with; None on a server without
        authentication."""
        self.links: dict[str, TenantLink] = {}
        self.closing = asyncio.Event()
        self._opening: dict[str, asyncio.Lock] = {}
        self._renewing: asyncio.Task[None] | None = None

    async def link(self, tenant: str) -> TenantLink:
        """The tenant's connection, opened on first use (``BusError`` when it cannot be)."""
        found = self.links.get(tenant)
        if found is not None:
            return found
        async with self._opening.setdefault(tenant, asyncio.Lock()):
            if tenant not in self.links:
                bus, client = await self._connect(tenant)
                reach = cast("Runtime", _Reach(bus, self.url))
                self.links[tenant] = TenantLink(tenant, bus, client, Conversations(reach))
                if self._renewing is None and self.authority is not None:
                    self._renewing = asyncio.create_task(self._renew(), name="http:creds")
        return self.links[tenant]

    async def approver(self, link: TenantLink, name: str) -> Client:
        """The client that decides approvals as ``name`` of the link's tenant."""
        if self.authority is None:
            return link.client  # no authentication: ``by`` names the approver
        if name not in link.approvers:
            async with self._opening.setdefault(f"{link.tenant}/{name}", asyncio.Lock()):
                if name not in link.approvers:
                    link.approvers[name] = await self._connect(link.tenant, approver=name)
        return link.approvers[name][1]

    async def _connect(self, tenant: str, *, approver: str = "") -> tuple[Bus, Client]:
        creds: Path | None = None
        if self.authority is not None:
            authority = self.authority
            creds = await asyncio.to_thread(
                authority.creds_path,
                "client",
                name=approver,
                prefix=tenant,
                approver=bool(approver),
            )
            try:  # a tenant made by another process since the server started
                await push_account(self.url, authority, tenant)
            except PushFailed as exc:
                log.warning("the server did not take tenant %s's account: %s", tenant, exc)
        label = f"actline-http-{tenant}" + (f"-{approver}" if approver else "")
        bus = await Bus.connect(
            self.url, name=label, subject_names=Subjects(tenant), creds=creds, connect_attempts=2
        )
        log.info("HTTP API connected tenant %s%s", tenant, f" as {approver}" if approver else "")
        return bus, Client(bus)

    async def _renew(self) -> None:
        """Renew the credentials in use past half their life and reconnect with them."""
        while True:
            await asyncio.sleep(RENEW_CHECK_S)
            assert self.authority is not None
            for link in list(self.links.values()):
                named = [("", link.bus), *((n, b) for n, (b, _) in link.approvers.items())]
                for name, bus in named:
                    try:
                        await asyncio.to_thread(
                            self.authority.creds_path,
                            "client",
                            name=name,
                            prefix=link.tenant,
                            approver=bool(name),
                        )
                        await bus.take_renewed_creds()
                    except (AuthError, BusError) as exc:
                        log.warning("could not renew tenant %s's credentials: %s", link.tenant, exc)

    async def close(self) -> None:
        self.closing.set()
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
        for link in list(self.links.values()):
            await link.turns.close()
            clients = [(link.bus, link.client), *link.approvers.values()]
            for bus, client in clients:
                with contextlib.suppress(Exception):
                    await client.close()
                with contextlib.suppress(Exception):
                    await bus.close()
        self.links.clear()
