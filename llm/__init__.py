"""Model clients behind one protocol: Anthropic (prompt caching), extractive and replay.

``Model.stream(GenerateRequest)`` yields text chunks then one ``Usage``. The
``anthropic`` package is imported only when an ``AnthropicModel`` makes its
first call (the import alone takes over a second).
"""

from .anthropic import AnthropicModel
from .config import MODELS, OFFLINE_MODELS, LLMSettings, ModelSpec, check_servable, model_spec
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
from .summarizer import Compacted, ModelSummarizer, SummaryOutcome, compact
from .wire import from_messages_params, to_messages_params


def make_model(settings: LLMSettings) -> Model:
    """The model ``settings.model`` names: extractive (default), or a claude model."""
    if settings.model == "extractive":
        return ExtractiveModel()
    if settings.model == "replay":
        raise ModelConfigError("model", "a replay model needs a script: use ReplayModel.from_file")
    return AnthropicModel(settings)


def writes_summaries(model: Model) -> bool:
    """True for a real model: compaction summaries are then written by it (structured).

    The offline models (``extractive``, ``replay``) and scripted test models keep the
    offline digest: a real model is an ``AnthropicModel`` or one named after a known
    claude model.
    """
    name = getattr(model, "name", "")
    if isinstance(model, AnthropicModel):
        return True
    return name not in OFFLINE_MODELS and model_spec(name).known


__all__ = [
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
    "Recorded",
    "ReplayModel",
    "ScriptExhausted",
    "SummaryOutcome",
    "check_servable",
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
    "writes_summaries",
]
