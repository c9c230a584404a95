"""The node's pools, served from a NATS queue group on any node: the StreamerActor runs
model calls, parses their channels and fans deltas out to clients (``streamer``, queue
group ``streamers``); the ToolExecutorActor runs external tools (``tool_executor``, queue
group ``tools``). May import ``actline.actors.base``, ``actline.actors.errors``,
``actline.actors.tracing`` and the packages below ``actline.actors``."""
