"""What a turn leaves for the people who run it: trace sessions, a tree of timed spans per
turn (``spans``), where the spans go, a JSONL file or OpenTelemetry (``sinks``), the names
of the attributes readers rely on (cost, GenAI conventions: ``attributes``), and the
diagnostic log lines of model calls and tool calls (``diag``). May import
``actline.actors.errors``, ``actline.actors.configuration`` and the packages below
``actline.actors``."""
