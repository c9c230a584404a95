"""The turn queue as nats-server sees it, watched on an admin connection of the bus's tenant:
the messages naked (the server announces each nak) and the messages redelivered and not
settled."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from nats.aio.msg import Msg

from actline.bus import Bus, EmbeddedNats

NAKED = "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED"
"""Where nats-server announces a nak of a consumer's message (then stream and consumer)."""


@asynccontextmanager
async def naks(nats: EmbeddedNats, bus: Bus) -> AsyncIterator[list[int]]:
    """The stream sequences of the turn queue's messages naked meanwhile (any node)."""
    admin = await _admin(nats, bus)
    naked: list[int] = []

    async def on_nak(msg: Msg) -> None:
        naked.append(int(json.loads(msg.data)["stream_seq"]))

    subject = ".".join((NAKED, bus.subjects.turn_stream, bus.subjects.turn_consumer))
    await admin.nc.subscribe(subject, cb=on_nak)
    await admin.nc.flush()
    try:
        yield naked
    finally:
        await admin.close()


async def redelivered(nats: EmbeddedNats, bus: Bus) -> int:
    """Messages of the turn queue delivered more than once and not settled yet."""
    admin = await _admin(nats, bus)
    try:
        js = admin.nc.jetstream()
        info = await js.consumer_info(bus.subjects.turn_stream, bus.subjects.turn_consumer)
    finally:
        await admin.close()
    return int(info.num_redelivered)


async def _admin(nats: EmbeddedNats, bus: Bus) -> Bus:
    creds = nats.creds_path("admin", prefix=bus.subjects.prefix)
    return await Bus.connect(nats.url, subject_names=bus.subjects, creds=creds)
