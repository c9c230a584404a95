"""What a node shares with the conversation-scoped actors it hosts, handed down as services
and never as callbacks into the node: the ``Services`` bundle (``shared``), the task book
of the outside-agent tasks its turns sent and the turns running here (``task_book``),
the turns parked while they wait on outside input (``parking``) and the background
embedding of memsearch rows (``memory``). May import ``actline.actors.base``,
``actline.actors.errors``, ``configuration``, ``ownership``, ``tracing``, ``pools`` and the
packages below ``actline.actors``."""
