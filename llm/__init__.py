"""Model clients behind one protocol: Anthropic Messages (prompt caching), OpenAI Chat
Completions (``actline.llm.openai``; its ``openai`` package is imported at the first call),
extractive and replay.

``Model.stream(GenerateRequest)`` yields text chunks then one ``Usage``. The
``anthropic`` package is imported only when an ``AnthropicModel`` makes its
first call (the import alone takes over a second).
"""

from .anthropic import AnthropicModel
from .anthropic.wire import from_messages_params, to_messages_params
from .config import (
    APIS,
    CACHE_MODES,
    MODELS,
    OFFLINE_MODELS,
    LLMSettings,
    ModelSpec,
    check_servable,
    configured_models,
    model_spec,
    register_models,
)
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
from .openai import OpenAIChatModel
from .prompt import DECISION_PROTOCOL, system_prompt
from .protocol import Chunk, Completion, Model, close_stream, complete, opened
from .replay import Recorded, ReplayModel
from .retry import stream_with_compaction
from .summarizer import Compacted, ModelSummarizer, SummaryOutcome, compact


def make_model(settings: LLMSettings) -> Model:
    """The model ``settings.model`` names: extractive (offline), else a client of
    ``settings.api``: ``AnthropicModel`` (messages) or ``OpenAIChatModel`` (openai)."""
    if settings.model == "extractive":
        return ExtractiveModel()
    if settings.model == "replay":
        raise ModelConfigError("model", "a replay model needs a script: use ReplayModel.from_file")
    if settings.api == "openai":
        return OpenAIChatModel(settings)
    return AnthropicModel(settings)


def writes_summaries(model: Model) -> bool:
    """True for a real model: compaction summaries are then written by it (structured).

    The offline models (``extractive``, ``replay``) and scripted test models keep the
    offline digest: a real model is a client of a model server (``AnthropicModel``,
    ``OpenAIChatModel``) or one named after a known model.
    """
    name = getattr(model, "name", "")
    if isinstance(model, AnthropicModel | OpenAIChatModel):
        return True
    return name not in OFFLINE_MODELS and model_spec(name).known


__all__ = [
    "APIS",
    "CACHE_MODES",
    "DECISION_PROTOCOL",
    "MODELS",
    "AnthropicModel",
    "Chunk",
    "Compacted",
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
    "OpenAIChatModel",
    "Recorded",
    "ReplayModel",
    "ScriptExhausted",
    "SummaryOutcome",
    "check_servable",
    "close_stream",
    "compact",
    "complete",
    "configured_models",
    "from_messages_params",
    "make_model",
    "model_spec",
    "opened",
    "register_models",
    "stream_with_compaction",
    "system_prompt",
    "to_messages_params",
    "writes_summaries",
]
