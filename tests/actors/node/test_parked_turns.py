"""The parked turns of a node (``actline.actors.services.parking``), on queue items whose
acks are recorded: a parked message is kept in progress by the heartbeat, never handed
back, while the beats allow; past them it is handed back with the delay, and comes back
into the beats when there is room."""

from __future__ import annotations

from dataclasses import dataclass, field

from actline.actors.services.parking import (
    PARK_MAX_S,
    PARKED_BEATS_PER_S,
    ParkedTurns,
    kept_for,
    park_delay,
)
from actline.bus import QueueItem


@dataclass
class Acks:
    """What was sent for the deliveries of one test, in order: ``(action, seq, delay)``."""

    sent: list[tuple[str, int, float | None]] = field(default_factory=list)


class Delivery:
    """A pulled message's ack side as nats-py has it (a nak marks it acked)."""

    def __init__(self, acks: Acks, seq: int) -> None:
        self.acks = acks
        self.seq = seq
        self._ackd = False

    async def nak(self, delay: float | None = None) -> None:
        self._ackd = True
        self.acks.sent.append(("nak", self.seq, delay))

    async def in_progress(self) -> None:
        self.acks.sent.append(("in_progress", self.seq, None))

    def __copy__(self) -> Delivery:
        twin = Delivery(self.acks, self.seq)
        twin._ackd = self._ackd
        return twin


def item(acks: Acks, seq: int, deliveries: int = 1) -> QueueItem:
    return QueueItem(b"", "t.turn.submit", deliveries, seq, Delivery(acks, seq))  # type: ignore[arg-type]


async def test_parked_messages_are_kept_in_progress_while_the_beats_allow() -> None:
    acks = Acks()
    parked = ParkedTurns(10.0, kept_max=2)
    for n in (1, 2):
        await parked.park(f"t{n}", f"c{n}", item(acks, n))
    assert acks.sent == []  # nothing handed back: the heartbeat goes on marking them
    assert sorted(i.stream_seq for i in parked.kept()) == [1, 2]

    await parked.park("t3", "c3", item(acks, 3))  # past the beats: handed back, delayed
    assert acks.sent == [("nak", 3, 10.0)] and parked.handed_back == 1
    assert sorted(i.stream_seq for i in parked.kept()) == [1, 2]

    late = item(acks, 1, deliveries=2)  # a beat came later than the ack wait
    assert await parked.repark(late)
    assert acks.sent[-1] == ("in_progress", 1, None)
    assert parked.kept().count(late) == 1 and len(parked.kept()) == 2

    back = parked.pop("t2")  # moved by its DONE: a slot again, room in the beats
    assert back is not None and back.stream_seq == 2
    assert await parked.repark(item(acks, 3, deliveries=2))  # its delay ran out: kept now
    assert acks.sent[-1] == ("in_progress", 3, None)
    assert sorted(i.stream_seq for i in parked.kept()) == [1, 3]
    assert not await parked.repark(item(acks, 9))  # not parked here
    assert len(parked) == 2 and parked.reparked == 2


async def test_a_handed_back_delivery_is_usable_again_once_the_turn_runs() -> None:
    acks = Acks()
    parked = ParkedTurns(10.0, kept_max=0)
    await parked.park("t1", "c1", item(acks, 1))
    back = parked.pop("t1")
    assert back is not None
    await back.in_progress()  # rearmed: nats-py's nak mark is gone on this copy
    assert acks.sent == [("nak", 1, 10.0), ("in_progress", 1, None)]


def test_the_beats_keep_a_thousand_parked_turns_at_the_default_ack_wait() -> None:
    assert kept_for(2.0 / 4) == 1000 == int(PARKED_BEATS_PER_S / 2)
    assert park_delay(0, 10.0) == 10.0 and park_delay(10**6, 10.0) == PARK_MAX_S
