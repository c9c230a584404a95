"""The models one node serves, by the name a turn's ``config.model`` gives.

A node has one default model (``ACTLINE_MODEL`` / ``--model`` / the settings file, or the
model object it was given). A turn may name another: ``NodeModels`` serves

- the default under its configured name (``NodeSettings.model``), its own name or ``""``;
- a model the node was given by name (``Node(models={...})``);
- ``extractive`` (offline, always);
- a configured model (``[models.NAME]`` of ``actline.toml``, ``actline.llm.configured_models``)
  through its own API and base URL (``LLMSettings.for_model``), when it can be served there
  (``check_servable``: a base URL, or a claude model with the key);
- a ``claude-*`` model when the node has an Anthropic API key: an ``AnthropicModel`` built
  for that name with the node's ``LLMSettings`` (base URL, retries, cache TTL).

Each is built once (``make_model``).

Anything else raises ``llm.ModelConfigError`` naming the model, what this node serves and
what to do; the streamer turns it into a ``model_config`` failure and the turn ends
``failed`` with that reason. Nothing falls back to the default silently.
"""

from __future__ import annotations

from collections.abc import Mapping

from actline.llm import (
    ExtractiveModel,
    LLMSettings,
    ModelConfigError,
    check_servable,
    configured_models,
    make_model,
)
from actline.llm.protocol import Model

__all__ = ["NodeModels"]


class NodeModels:
    """A ``ModelResolver``: ``models(name)`` is the model of that name, or
    ``ModelConfigError`` when this node cannot serve it."""

    def __init__(
        self,
        default: Model,
        *,
        default_name: str = "",
        named: Mapping[str, Model] | None = None,
        llm: LLMSettings | None = None,
    ) -> None:
        self.default = default
        self.default_name = default_name or getattr(default, "name", "") or "extractive"
        self.llm = llm
        """The node's model settings; a claude model is served only with its ``api_key``."""
        self._models: dict[str, Model] = dict(named or {})
        for name in {self.default_name, getattr(default, "name", ""), ""}:
            self._models[name] = default

    @classmethod
    def of_node(
        cls,
        name: str,
        given: Model | None,
        named: Mapping[str, Model] | None = None,
        llm: LLMSettings | None = None,
    ) -> NodeModels:
        """A node's models: its default ``given``, else built from ``llm`` (settings of the
        environment when None) for the model ``name`` of its settings (``ModelConfigError``
        when that cannot run here)."""
        llm = llm or LLMSettings.from_env(model=name)
        if given is None:
            check_servable(llm)
            given = make_model(llm)
        return cls(given, default_name=name, named=named, llm=llm)

    @property
    def claude(self) -> bool:
        """True when this node can serve ``claude-*`` models (an Anthropic API key)."""
        return self.llm is not None and self.llm.api == "messages" and bool(self.llm.api_key)

    def configured(self) -> list[str]:
        """The configured models this node can serve (``[models.NAME]``)."""
        if self.llm is None:
            return []
        names = []
        for name in configured_models():
            try:
                check_servable(self.llm.for_model(name))
            except ModelConfigError:
                continue
            names.append(name)
        return names

    def served(self) -> str:
        """What this node serves, for messages."""
        given = (self.default_name, *self._models, "extractive", *self.configured())
        names = dict.fromkeys(n for n in given if n)
        if self.claude:
            names["claude-* (it has an Anthropic API key)"] = None
        return ", ".join(names)

    def __call__(self, name: str) -> Model:
        model = self._models.get(name)
        if model is not None:
            return model
        if name == "extractive":
            model = ExtractiveModel()
        elif self.llm is not None and name in configured_models():
            settings = self.llm.for_model(name)
            try:
                check_servable(settings)
            except ModelConfigError as exc:
                raise ModelConfigError(
                    f"model {name!r}", f"{exc.detail}; this node serves {self.served()}"
                ) from None
            model = make_model(settings)
        elif name.startswith("claude") and self.claude and self.llm is not None:
            model = make_model(self.llm.for_model(name))
        else:
            raise ModelConfigError(f"model {name!r}", self._refusal(name))
        self._models[name] = model
        return model

    def _refusal(self, name: str) -> str:
        served = self.served()
        only = " only" if "," not in served else ""
        if name.startswith("claude"):
            return (
                f"this node serves {served}{only}; start it with ACTLINE_MODEL={name} "
                "(or --model) and ANTHROPIC_API_KEY, or ask for one it serves"
            )
        if name == "replay":
            return (
                f"a replay model needs a script and this node serves {served}{only}; "
                "ask for one it serves"
            )
        return f"unknown model; this node serves {served}{only}: ask for one it serves"
