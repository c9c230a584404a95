"""One turn: the DecisionActor (``decision``) runs the pure state machine (``state``,
``transition(state, event) -> (state, effects)``, a package: its record, checkpoint form
and transitions by phase; its vocabulary in ``events``) and executes its effects. Beside it,
pure: the decision channel's contract (``protocol``), the classification of a model
reply (``reply``), what the sender of a DONE is told (``verdict``), approvals
(``approvals``), the context watchdog (``watchdog``) and the blocks a turn writes
(``blocks``); and the parts that talk to others: a round's tool calls
(``tool_round``), displayed files (``displays``), model and tool calls over NATS
(``remote``), the turn's trace (``trace``) and the named messages of the two mailboxes
(``mailbox``). May import ``actline.actors.base``, ``actline.actors.errors``,
``configuration``, ``tracing``, ``pools``, ``services`` and the packages below
``actline.actors``; never ``conversation``, ``agents`` or ``node``."""
