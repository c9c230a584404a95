"""actline actors package (see DESIGN.md).

The DecisionActor's state machine is pure: ``transition(state, event) -> (state,
effects)`` in ``actors.state``, its events and effects in ``actors.events``.
"""

from .events import Effect, Event, Limits, event_from_message
from .state import DecisionState, TurnPhase, transition

__all__ = [
    "DecisionState",
    "Effect",
    "Event",
    "Limits",
    "TurnPhase",
    "event_from_message",
    "transition",
]
