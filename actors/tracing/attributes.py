"""The names of the span attributes and events that readers of a trace rely on: the cost
of model calls (``actline.cost.*``), the context policy's ``context.edit`` event, and the
OpenTelemetry GenAI semantic-convention attributes of a model call (``gen_ai_attributes``).
``actline.actors.turn.trace`` sets them; ``actline trace`` and the console read them.
"""

from __future__ import annotations

from typing import Any

from actline.messages import Usage

__all__ = [
    "CONTEXT_EDIT",
    "COST",
    "ESTIMATED",
    "GEN_AI_OPERATION",
    "OFFLINE_PROVIDER",
    "UNCACHED",
    "gen_ai_attributes",
    "provider",
]

COST = "actline.cost.usd"
"""The USD a span's model calls cost (``actline.llm.pricing``): on model spans and the root."""
UNCACHED = "actline.cost.uncached_usd"
"""On the root: what the turn's tokens would have cost with no prompt caching."""
ESTIMATED = "actline.cost.estimated"
"""On the root and a model span, when the model is not in the price table (the cost is an
estimate)."""
CONTEXT_EDIT = "context.edit"
"""The event of one decision of the context policy, on the render span."""
GEN_AI_OPERATION = "chat"
OFFLINE_PROVIDER = "actline"
"""The provider name of the models that are not Anthropic's (the offline ``extractive`` and
``replay``, scripted test models): a custom value, as the conventions allow."""


def provider(model: str) -> str:
    """``gen_ai.provider.name`` of ``model``: ``anthropic`` for the Messages API's claude
    models, ``actline`` for the others."""
    return "anthropic" if model.startswith("claude") else OFFLINE_PROVIDER


def gen_ai_attributes(requested: str, usage: Usage, conversation_id: str = "") -> dict[str, Any]:
    """The OpenTelemetry GenAI semantic-convention attributes of one model call.

    ``gen_ai.usage.input_tokens`` counts every prompt token, cached ones included: the
    conventions say it SHOULD include all input tokens, and for Anthropic (whose own
    ``input_tokens`` leaves the cache out) that it is ``input_tokens +
    cache_read_input_tokens + cache_creation_input_tokens``. The cache reads and writes are
    also given on their own (``gen_ai.usage.cache_read.input_tokens``,
    ``gen_ai.usage.cache_creation.input_tokens``: 5-minute and 1-hour writes together).
    The provider goes out as ``gen_ai.provider.name`` and, for backends that read the
    conventions of version 1.36 and before, as ``gen_ai.system`` too.
    ``gen_ai.response.model`` only when the reply named its model.
    """
    model = requested or usage.model
    name = provider(model)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": GEN_AI_OPERATION,
        "gen_ai.provider.name": name,
        "gen_ai.system": name,
        "gen_ai.request.model": model,
        "gen_ai.usage.input_tokens": usage.total_input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_tokens,
        "gen_ai.usage.cache_creation.input_tokens": (
            usage.cache_write_5m_tokens + usage.cache_write_1h_tokens
        ),
    }
    if usage.model:
        attrs["gen_ai.response.model"] = usage.model
    if conversation_id:
        attrs["gen_ai.conversation.id"] = conversation_id
    return attrs
