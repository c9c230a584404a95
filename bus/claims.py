"""Push a tenant's account to a running nats-server: new tenants and revocations, live.

The server's ``full`` account resolver (``Authority.server_config``) takes account JWTs
signed by the operator on ``$SYS.REQ.CLAIMS.UPDATE``, from a user of the system account
(``Authority.system_creds``). A pushed account is stored in the resolver's folder and
shared with the other servers of a cluster; one that carries new revocations makes the
server close the revoked users' connections at once. ``push_account`` is the coroutine;
``push_account_now`` runs it from synchronous code (its own event loop, in a thread, so
it also works while the caller's loop runs).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading

import nats
import nats.errors

from .authority import Authority
from .errors import PushFailed

UPDATE = "$SYS.REQ.CLAIMS.UPDATE"
TIMEOUT_S = 5.0


async def push_account(
    url: str, authority: Authority, tenant: str, *, tls: ssl.SSLContext | None = None
) -> None:
    """Send ``tenant``'s account JWT (with its revocations) to the server at ``url``;
    ``PushFailed`` says why it did not take it."""
    try:
        nc = await nats.connect(
            url,
            user_credentials=str(authority.system_creds()),
            tls=tls,
            connect_timeout=TIMEOUT_S,
            max_reconnect_attempts=0,
            allow_reconnect=False,
        )
    except (OSError, nats.errors.Error, TimeoutError) as exc:
        raise PushFailed(url, tenant, f"cannot connect as the system account: {exc}") from None
    try:
        reply = await nc.request(UPDATE, authority.account_jwt(tenant).encode(), TIMEOUT_S)
    except (nats.errors.Error, TimeoutError) as exc:
        raise PushFailed(url, tenant, f"no answer: {exc}") from None
    finally:
        await nc.close()
    answer = json.loads(reply.data or b"{}")
    if answer.get("error"):
        raise PushFailed(url, tenant, str(answer["error"].get("description", answer["error"])))


def push_account_now(
    url: str, authority: Authority, tenant: str, *, tls: ssl.SSLContext | None = None
) -> None:
    """``push_account`` from synchronous code: it runs on a loop of its own in a thread."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(push_account(url, authority, tenant, tls=tls))
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name=f"push-account-{tenant}")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
