"""The node's pools, served from a NATS queue group on any node or by a pool process of
their own (``actline pool models|tools``): the StreamerActor runs model calls, parses their
channels and fans deltas out to clients (``streamer``, queue group ``streamers``); the
ToolExecutorActor runs external tools (``tool_executor``, queue group ``tools``); how many
calls a member runs and lets wait before it answers busy (``admission``); the tools a node
serves, built from its settings (``toolbox``); the workspace of a call whose conversation
another node holds (``remote_files``). May import ``actline.actors.base``,
``actline.actors.errors``, ``actline.actors.configuration`` (the node's settings),
``actline.actors.tracing`` and the packages below ``actline.actors``."""
