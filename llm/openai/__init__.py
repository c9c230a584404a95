"""The Chat Completions model: ``OpenAIChatModel`` over the official ``openai`` client.

``model`` owns the calls (streaming, retries, error classification, usage with the
fields the server did not report named as unknown); ``wire`` owns the request body,
the rendered context as Chat Completions messages, and its inverse for the local
server (``actline.llm.fake_openai``). The ``openai`` package is imported at the first call.
"""

from .model import OpenAIChatModel, chat_context_error, usage_from
from .wire import from_chat_params, to_chat_params

__all__ = [
    "OpenAIChatModel",
    "chat_context_error",
    "from_chat_params",
    "to_chat_params",
    "usage_from",
]
