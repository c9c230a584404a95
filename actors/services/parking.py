"""Parked turns: a turn waiting on outside input holds no work slot.

A turn whose state machine is in the waiting phase (outside agents' DONEs, or approvals)
can only be moved by a DONE, a skip, its wait timeout, an approval or a cancel; a
followup only joins it. Such a turn is *parked*: its queue message leaves the node's
in-flight set (it stops counting against ``max_active_turns`` and is no longer marked
in progress every ``ack_wait / 4``) and is handed back to the work queue with a delayed
nak. A delayed nak keeps the message in the stream, unacked: the queue stays the record
of unfinished turns, so the ordering rule (``actline.actors.node.turn_queue``) and crash recovery
keep working. When the turn becomes runnable again (``unpark``), the same delivery is marked
in progress again and the turn takes its slot at once, even past the limit (it was
admitted before; the pull loop takes no new turn until the count is back under it).

Observed with nats-server 2.15.1 (``tests/actors/node/test_parking.py`` checks the acks): after
``nak(delay=D)`` the message stays pending; ``in_progress`` on the same delivery restarts
its ack wait (no redelivery while it is repeated), ``ack`` on it removes the message,
before or after the delayed redelivery; the server keys all of these by the stream
sequence. The redelivery arrives after ``D`` with ``deliveries + 1``. nats-py marks
a message acked after a nak, and ``bus.QueueItem`` then refuses every action on it:
``QueueItem.rearmed`` gives the same delivery back usable.

The delay: every parked message comes back once per delay and is parked again (a
redelivery of a turn parked here is recognised by its stream sequence: no decode). So
the delay grows with the number of parked turns, keeping that churn at most
``REPARK_PER_S`` messages a second: ``min(PARK_MAX_S, max(park_s, parked / REPARK_PER_S))``
(``park_s`` is ``ACTLINE_PARK``, 10 s by default; 10,000 parked turns: 200 s).

Trade-off, after a crash: a killed node's running turns come back after ``ack_wait``,
its parked turns only when their delayed nak runs out (at most the delay above, so at most
``PARK_MAX_S``). Nothing is lost meanwhile: the turn's open agent tasks are in its stored
checkpoint and the agents' durable inboxes, and a DONE sent meanwhile waits in the DONE
stream; the restarted node knows the turn is resuming (``TaskBook.recover``) and holds
such a DONE up to ``RESUMING_HOLD_S``, past the DONE horizon. A node that stops cleanly
naks its parked turns at once (they resume without waiting).

In cluster mode a redelivery that reaches another node is deferred by its lease, as any
turn of a conversation leased elsewhere.
"""

from __future__ import annotations

from actline.bus import QueueItem

PARK_MAX_S = 300.0
"""The longest delay of a parked turn's nak (the most a crash can delay its resumption)."""
REPARK_PER_S = 50.0
"""Parked messages coming back (and parked again) per second, at most, past ``park_s``."""
RESUMING_HOLD_S = PARK_MAX_S + 30.0
"""How long a DONE for a turn resuming on this node may wait for it (its message comes back
within ``PARK_MAX_S``)."""


def park_delay(parked: int, least_s: float) -> float:
    """The nak delay of a parked message when ``parked`` turns are parked."""
    return min(PARK_MAX_S, max(least_s, parked / REPARK_PER_S))


class ParkedTurns:
    """The queue messages of this node's parked turns: the latest delivery of each."""

    def __init__(self, least_s: float) -> None:
        self.least_s = least_s
        self._items: dict[str, QueueItem] = {}
        self._by_seq: dict[int, str] = {}
        self._conversations: dict[str, int] = {}
        self._cid: dict[str, str] = {}
        self.parked = 0
        """Turns parked (counted each time)."""
        self.reparked = 0
        """Redeliveries of parked messages handed back again."""

    def __contains__(self, turn_id: object) -> bool:
        return turn_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def turns(self) -> list[str]:
        return list(self._items)

    def has_conversation(self, cid: str) -> bool:
        """Whether a turn of ``cid`` is parked here."""
        return cid in self._conversations

    def delay(self) -> float:
        return park_delay(len(self._items), self.least_s)

    async def park(self, turn_id: str, cid: str, item: QueueItem) -> None:
        """Keep ``item`` as the turn's delivery and hand it back for the delay (``BusError``
        when the nak fails: the message then comes back after the ack wait)."""
        self._items[turn_id] = item
        self._by_seq[item.stream_seq] = turn_id
        if turn_id not in self._cid:
            self._cid[turn_id] = cid
            self._conversations[cid] = self._conversations.get(cid, 0) + 1
        self.parked += 1
        await item.nak(delay=self.delay())

    async def repark(self, item: QueueItem) -> bool:
        """A redelivery of a message parked here is handed back again (True); else False."""
        turn_id = self._by_seq.get(item.stream_seq)
        if turn_id is None or turn_id not in self._items:
            return False
        self._items[turn_id] = item
        self.reparked += 1
        await item.nak(delay=self.delay())
        return True

    def pop(self, turn_id: str) -> QueueItem | None:
        """The turn's delivery, usable again, and the turn no longer parked (None: not)."""
        item = self._items.pop(turn_id, None)
        if item is None:
            return None
        self._by_seq.pop(item.stream_seq, None)
        cid = self._cid.pop(turn_id, "")
        left = self._conversations.get(cid, 0) - 1
        if left > 0:
            self._conversations[cid] = left
        else:
            self._conversations.pop(cid, None)
        return item.rearmed()

    def clear(self) -> list[QueueItem]:
        """Every parked delivery, usable again; nothing is parked after."""
        return [item for tid in list(self._items) if (item := self.pop(tid)) is not None]
