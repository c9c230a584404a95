"""What the sender of a DONE is told, from what the state machine did with it.

Pure: the verdict is read off the effects of the transition the DONE caused.
"""

from __future__ import annotations

from actline import messages
from actline.messages import Ack, ErrorReply

from . import events as ev


def verdict(signal: messages.DoneSignal, effects: tuple[ev.Effect, ...]) -> messages.Message:
    """What the sender of a DONE is told, from what the state machine did with it."""
    ref = signal.task_id or signal.turn_id or ""
    for effect in effects:
        match effect:
            case ev.RecordNotice(code=code, text=text, signal_id=sid) if sid == signal.signal_id:
                return ErrorReply(code=code, message=text)
            case ev.RecordSignal(task_id=task_id):
                return Ack(ref=task_id, detail="applied")
            case ev.RecordLateSignal():
                return Ack(ref=ref, detail="late: recorded, announced next turn")
            case ev.Ignored(reason=reason) if "duplicate" in reason:
                return Ack(ref=ref, detail="duplicate: already applied")
    return Ack(ref=ref, detail="queued: applied when the turn next waits")
