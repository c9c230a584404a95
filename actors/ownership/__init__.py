"""Where a conversation lives: the one seam between local mode and cluster mode
(``ownership``), the leases that say which node works on which conversation (``leases``,
a JetStream KV bucket) and the durable copy of every conversation's timeline in JetStream
(``durable``). May import ``actline.actors.errors``, ``actline.bus``, ``actline.storage``,
``actline.timeline`` and ``actline.messages``, no other actors sub-package."""
