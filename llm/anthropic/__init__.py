"""The Messages API model: ``AnthropicModel`` over the official ``anthropic`` client.

``model`` owns the calls (streaming, prompt-caching marks, retries, error
classification, usage with every cache field); ``wire`` owns the request body, the
rendered context as Messages API content blocks with their ``cache_control`` marks, and
its inverse for the local server (``actline.llm.fake_anthropic``). The ``anthropic``
package is imported at the first call.
"""

from .model import NO_KEY, AnthropicModel, context_window_error, usage_from
from .wire import from_messages_params, system_text, to_messages_params

__all__ = [
    "NO_KEY",
    "AnthropicModel",
    "context_window_error",
    "from_messages_params",
    "system_text",
    "to_messages_params",
    "usage_from",
]
