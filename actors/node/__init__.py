"""The node: one process (or one Ray actor) that connects to NATS, serves turns from the
durable queue and hosts everything else (``node``); the node's side of the durable turn
queue (``turn_queue``), how a conversation's claim is kept apart from its release
(``holding``) and the collector's tuning on the round path (``gc_tuning``). May import
every other actors sub-package but ``cluster``."""
