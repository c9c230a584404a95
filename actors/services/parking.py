"""Parked turns: a turn waiting on outside input holds no work slot.

A turn whose state machine is in the waiting phase (outside agents' DONEs, or approvals)
can only be moved by a DONE, a skip, its wait timeout, an approval or a cancel; a
followup only joins it. Such a turn is *parked*: its queue message leaves the node's
in-flight set (it stops counting against ``max_active_turns``) and stays with the node,
unacked, still marked in progress by the node's heartbeat (every ``ack_wait / 4``) like a
running turn's. The queue stays the record of unfinished turns, so the ordering rule
(``actline.actors.node.turn_queue``) and crash recovery keep working; while the node
lives the message is never redelivered (no other node sees it, nothing comes back to be
parked again); when the node dies the beats stop and the message is redelivered after
the ack wait, as its running turns' are, and the turn resumes (in cluster mode on the
node that gets the conversation's lease). When the turn becomes runnable again
(``unpark``), the same delivery holds a slot again at once, even past the limit (it was
admitted before; the pull loop takes no new turn until the count is back under it).

The beats are bounded. One beat per parked turn per heartbeat cost about 1 % of a core in
the node and 1.6 % in nats-server per 1,000 parked turns at the default ack wait of 2 s
(2,000 beats a second), so at most ``PARKED_BEATS_PER_S`` beats a second go to parked
turns: ``kept_max`` turns (1,000 at that ack wait). Past it, a parked message is handed
back with a delayed nak instead: it stays in the stream, unacked, comes back once per
delay and is parked again (recognised by its stream sequence: no decode), kept by the
beats if there is room by then. The delay grows with the number handed back, keeping that
churn at most ``REPARK_PER_S`` messages a second: ``min(PARK_MAX_S, max(park_s, handed
back / REPARK_PER_S))`` (``park_s`` is ``ACTLINE_PARK``, 10 s by default). Those turns
alone, after a crash, resume when their delay runs out (at most ``PARK_MAX_S``). Nothing
is lost meanwhile: the turn's open agent tasks are in its stored checkpoint and the
agents' durable inboxes, and a DONE sent meanwhile waits in the DONE stream; the
restarted node knows the turn is resuming (``TaskBook.recover``) and holds such a DONE up
to ``RESUMING_HOLD_S``, past the DONE horizon. A node that stops cleanly naks its parked
turns at once (they resume without waiting).

Observed with nats-server 2.15.1 (``tests/actors/node/test_parking.py`` checks the acks): after
``nak(delay=D)`` the message stays pending; ``in_progress`` on the same delivery restarts
its ack wait (no redelivery while it is repeated), ``ack`` on it removes the message,
before or after the delayed redelivery; the server keys all of these by the stream
sequence. The redelivery arrives after ``D`` with ``deliveries + 1``. nats-py marks
a message acked after a nak, and ``bus.QueueItem`` then refuses every action on it:
``QueueItem.rearmed`` gives the same delivery back usable. A redelivery of a kept message
(a beat came later than the ack wait) is kept again.

In cluster mode a redelivery that reaches another node is deferred by its lease, as any
turn of a conversation leased elsewhere.
"""

from __future__ import annotations

from actline.bus import QueueItem

PARKED_BEATS_PER_S = 2_000.0
"""In-progress beats a second this node spends on parked turns, at most."""
PARK_MAX_S = 300.0
"""The longest delay of a parked turn's nak (the most a crash can delay its resumption)."""
REPARK_PER_S = 50.0
"""Parked messages coming back (and parked again) per second, at most, past ``park_s``."""
RESUMING_HOLD_S = PARK_MAX_S + 30.0
"""How long a DONE for a turn resuming on this node may wait for it (its message comes back
within ``PARK_MAX_S``)."""


def park_delay(handed_back: int, least_s: float) -> float:
    """The nak delay of a parked message when ``handed_back`` turns are handed back."""
    return min(PARK_MAX_S, max(least_s, handed_back / REPARK_PER_S))


def kept_for(beat_s: float) -> int:
    """How many parked turns a heartbeat every ``beat_s`` seconds keeps in progress."""
    return int(PARKED_BEATS_PER_S * beat_s)


class ParkedTurns:
    """The queue messages of this node's parked turns: the latest delivery of each, kept in
    progress by the node's heartbeat (``kept``) or, past ``kept_max``, handed back."""

    def __init__(self, least_s: float, kept_max: int) -> None:
        self.least_s = least_s
        self.kept_max = kept_max
        self._items: dict[str, QueueItem] = {}
        self._kept: set[str] = set()
        self._by_seq: dict[int, str] = {}
        self._conversations: dict[str, int] = {}
        self._cid: dict[str, str] = {}
        self.parked = 0
        """Turns parked (counted each time)."""
        self.handed_back = 0
        """Parked messages handed back with a delayed nak (past ``kept_max``)."""
        self.reparked = 0
        """Redeliveries of parked messages parked again."""

    def __contains__(self, turn_id: object) -> bool:
        return turn_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def turns(self) -> list[str]:
        return list(self._items)

    def kept(self) -> list[QueueItem]:
        """The deliveries the heartbeat marks in progress."""
        return [self._items[tid] for tid in self._kept]

    def has_conversation(self, cid: str) -> bool:
        """Whether a turn of ``cid`` is parked here."""
        return cid in self._conversations

    def delay(self) -> float:
        return park_delay(len(self._items) - len(self._kept), self.least_s)

    async def park(self, turn_id: str, cid: str, item: QueueItem) -> None:
        """Keep ``item`` as the turn's delivery, in progress while there is room, else
        handed back for the delay (``BusError`` when the nak fails: the message then comes
        back after the ack wait)."""
        self._items[turn_id] = item
        self._by_seq[item.stream_seq] = turn_id
        if turn_id not in self._cid:
            self._cid[turn_id] = cid
            self._conversations[cid] = self._conversations.get(cid, 0) + 1
        self.parked += 1
        await self._keep_or_hand_back(turn_id, item, beat=False)

    async def repark(self, item: QueueItem) -> bool:
        """A redelivery of a message parked here is parked again (True); else False."""
        turn_id = self._by_seq.get(item.stream_seq)
        if turn_id is None or turn_id not in self._items:
            return False
        self._items[turn_id] = item
        self.reparked += 1
        await self._keep_or_hand_back(turn_id, item, beat=True)
        return True

    async def _keep_or_hand_back(self, turn_id: str, item: QueueItem, *, beat: bool) -> None:
        if turn_id in self._kept or len(self._kept) < self.kept_max:
            self._kept.add(turn_id)
            if beat:  # a new delivery: in progress from now on
                await item.in_progress()
            return
        self.handed_back += 1
        await item.nak(delay=self.delay())

    def pop(self, turn_id: str) -> QueueItem | None:
        """The turn's delivery, usable again, and the turn no longer parked (None: not)."""
        item = self._items.pop(turn_id, None)
        if item is None:
            return None
        self._kept.discard(turn_id)
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
