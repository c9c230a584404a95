"""One conversation: the ConversationActor (``actor``) owns its timeline, runs its turns
one after another and the react.* tools on it; what user input puts on the timeline
(``intake``), its commits through the node's group commit (``commits``), its files and
workspace (``files``), that workspace served to tool executors on other nodes
(``workspace_server``), the model-written compaction summaries and memory facts
(``compactor``) and the gate step that titles a new conversation (``title``). May import
``actline.actors.base``, ``actline.actors.errors``, ``configuration``, ``client``,
``tracing``, ``services``, ``turn`` and the packages below ``actline.actors``."""
