"""Model clients behind one protocol: Anthropic (prompt caching), extractive and replay.

``Model.stream(GenerateRequest)`` yields text chunks then one ``Usage``. The
``anthropic`` package is imported only when an ``AnthropicModel`` makes its
first call (the import alone takes over a second).
"""

from .anthropic import AnthropicModel
from .config import MODELS, LLMSettings, ModelSpec, model_spec
from .errors import (
    ContextWindowExceeded,
    ModelConfigError,
    ModelError,
    ModelRequestError,
    ModelStreamError,
    ModelUnavailable,
    ScriptExhausted,
)
from .extractive import ExtractiveModel
from .prompt import DECISION_PROTOCOL, system_prompt
from .protocol import Chunk, Completion, Model, close_stream, complete, opened
from .replay import Recorded, ReplayModel
from .retry import stream_with_compaction
from .summarizer import ModelSummarizer, compact
from .wire import from_messages_params, to_messages_params


def make_model(settings: LLMSettings) -> Model:
    """The model ``settings.model`` names: extractive (default), or a claude model."""
    if settings.model == "extractive":
        return ExtractiveModel()
    if settings.model == "replay":
        raise ModelConfigError("model", "a replay model needs a script: use ReplayModel.from_file")
    return AnthropicModel(settings)


__all__ = [
    "DECISION_PROTOCOL",
    "MODELS",
    "AnthropicModel",
    "Chunk",
    "Completion",
    "ContextWindowExceeded",
    "ExtractiveModel",
    "LLMSettings",
    "Model",
    "ModelConfigError",
    "ModelError",
    "ModelRequestError",
    "ModelSpec",
    "ModelStreamError",
    "ModelSummarizer",
    "ModelUnavailable",
    "Recorded",
    "ReplayModel",
    "ScriptExhausted",
    "close_stream",
    "compact",
    "complete",
    "from_messages_params",
    "make_model",
    "model_spec",
    "opened",
    "stream_with_compaction",
    "system_prompt",
    "to_messages_params",
]
