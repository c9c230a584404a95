"""Model settings and the one table of per-model constants.

The constants (minimum cacheable prefix, prices, context window) follow the
provider's prompt-caching rules and published tables; they change between model
versions, so they live here and nowhere else. ``model_spec`` resolves dated
names (``claude-sonnet-4-5-20250929``) by their longest known prefix.

Models configured by name (``[models.NAME]`` of ``actline.toml``: a local llama.cpp or
vLLM server, any OpenAI-compatible endpoint) are registered with ``register_models``;
``model_spec`` returns them first. A model is reached through one of ``APIS``: the
Anthropic Messages API (``messages``) or OpenAI Chat Completions (``openai``).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from .errors import ModelConfigError

CacheTtl = Literal["5m", "1h"]
Api = Literal["messages", "openai"]
APIS: tuple[Api, ...] = ("messages", "openai")
"""The wire protocols a model is reached through: Anthropic Messages, OpenAI Chat Completions."""
CacheMode = Literal["anthropic", "automatic", "none"]
CACHE_MODES: tuple[CacheMode, ...] = ("anthropic", "automatic", "none")
"""How a model server caches prompts: ``anthropic`` (``cache_control`` marks in the request),
``automatic`` (the server caches prefixes itself, as llama.cpp and vLLM do: no marks sent),
``none`` (no caching: no marks sent)."""
OFFLINE_MODELS = frozenset({"extractive", "replay"})
"""Models that need no network and no key."""


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Constants of one model family. Prices are USD per million input/output tokens."""

    name: str
    context_window: int
    min_cache_tokens: int
    input_price: float
    output_price: float
    max_output_tokens: int = 8192
    known: bool = True
    cache: CacheMode = "anthropic"
    api: Api | None = None
    """The API a configured model is served through (None: the node's)."""
    base_url: str | None = None
    """Where a configured model is served (None: the node's base URL)."""
    stop_sequences: tuple[str, ...] = ()
    """Where the server stops a reply (the text of the sequence is not sent)."""

    def cost(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cache_read: int = 0,
        cache_write_5m: int = 0,
        cache_write_1h: int = 0,
    ) -> float:
        """USD for one call: reads at 0.1x, 5-minute writes at 1.25x, 1-hour writes at 2x."""
        weighted = input_tokens + 1.25 * cache_write_5m + 2 * cache_write_1h + 0.1 * cache_read
        return (weighted * self.input_price + output_tokens * self.output_price) / 1e6


MODELS: Mapping[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        # Minimum cacheable prefix, as the model server accounts (``actline.llm.cache_sim``:
        # 1,024 for Sonnet 4.5/4.6 and Opus 4.1-4.8 class models), and per Anthropic's
        # prompt-caching docs for the others: 1,024 for Sonnet 4 and the Claude 3
        # Sonnets and Opus; 2,048 for the Haiku 3 family; 4,096 for Haiku 4.5.
        ModelSpec("claude-opus-4-8", 200_000, 1024, 5.0, 25.0, 32_000),
        ModelSpec("claude-opus-4-7", 200_000, 1024, 5.0, 25.0, 32_000),
        ModelSpec("claude-opus-4-6", 200_000, 1024, 5.0, 25.0, 32_000),
        ModelSpec("claude-opus-4-5", 200_000, 1024, 5.0, 25.0, 32_000),
        ModelSpec("claude-opus-4-1", 200_000, 1024, 15.0, 75.0, 32_000),
        ModelSpec("claude-opus-4", 200_000, 1024, 15.0, 75.0, 32_000),
        ModelSpec("claude-sonnet-4-6", 200_000, 1024, 3.0, 15.0, 64_000),
        ModelSpec("claude-sonnet-4-5", 200_000, 1024, 3.0, 15.0, 64_000),
        ModelSpec("claude-sonnet-4", 200_000, 1024, 3.0, 15.0, 64_000),
        ModelSpec("claude-haiku-4-5", 200_000, 4096, 1.0, 5.0, 64_000),
        # legacy (Claude 3 family)
        ModelSpec("claude-3-7-sonnet", 200_000, 1024, 3.0, 15.0, 64_000),
        ModelSpec("claude-3-5-sonnet", 200_000, 1024, 3.0, 15.0, 8192),
        ModelSpec("claude-3-5-haiku", 200_000, 2048, 0.8, 4.0, 8192),
        ModelSpec("claude-3-opus", 200_000, 1024, 15.0, 75.0, 4096),
        ModelSpec("claude-3-sonnet", 200_000, 1024, 3.0, 15.0, 4096),
        ModelSpec("claude-3-haiku", 200_000, 2048, 0.25, 1.25, 4096),
        # The offline models are priced and cached like the default claude model so
        # that benchmarks and the demo's summary report what a real run would cost.
        ModelSpec("extractive", 200_000, 1024, 3.0, 15.0, 8192),
        ModelSpec("replay", 200_000, 1024, 3.0, 15.0, 8192),
    )
}
DEFAULT_CLAUDE = "claude-sonnet-4-6"
ALIASES: Mapping[str, str] = {
    "claude-opus-4-0": "claude-opus-4",
    "claude-sonnet-4-0": "claude-sonnet-4",
}
"""Published aliases whose spelling is not the family name plus a date."""
UNKNOWN_MIN_CACHE_TOKENS = max(spec.min_cache_tokens for spec in MODELS.values())
"""An unknown model's minimum cacheable prefix: the largest in the table, so a
breakpoint is never assumed to cache a prefix the real model would not cache."""
_VERSION_SUFFIX = re.compile(r"(?:[-@]\d{8}|-latest)?(?:-v\d+(?::\d+)?)?")
"""What may follow a family name: a date (``-20250929``, Vertex ``@20251101``) or
``-latest``, then a Bedrock-style ``-v1:0``. Anything else is another model."""


_CONFIGURED: dict[str, ModelSpec] = {}


def register_models(specs: Iterable[ModelSpec]) -> None:
    """Make ``specs`` the configured models (replacing those registered before)."""
    _CONFIGURED.clear()
    _CONFIGURED.update({spec.name: spec for spec in specs})
    model_spec.cache_clear()


def configured_models() -> Mapping[str, ModelSpec]:
    """The models registered by ``register_models``, by name."""
    return dict(_CONFIGURED)


@functools.lru_cache(maxsize=256)
def model_spec(name: str) -> ModelSpec:
    """The constants of ``name``: a configured model (``register_models``), else the
    built-in ones (``builtin_spec``)."""
    return _CONFIGURED.get(name) or builtin_spec(name)


@functools.lru_cache(maxsize=256)
def builtin_spec(name: str) -> ModelSpec:
    """The built-in constants of ``name``: exact; an alias; the family of a dated or
    ``-latest`` name; else conservative ones (``known=False``, the largest minimum cacheable
    prefix).

    ``claude-opus-4-5-20251101`` is Opus 4.5; ``claude-opus-4-9`` is not Opus 4 but an
    unknown model, so it never borrows a smaller minimum than the real one.
    """
    if name in MODELS:
        return MODELS[name]
    if name in ALIASES:
        return replace(MODELS[ALIASES[name]], name=name)
    matches = [
        key
        for key in MODELS
        if name.startswith(key) and _VERSION_SUFFIX.fullmatch(name, len(key)) is not None
    ]
    if matches:
        return replace(MODELS[max(matches, key=len)], name=name)
    cache: CacheMode = "anthropic" if name.startswith("claude") else "automatic"
    return ModelSpec(
        name, 200_000, UNKNOWN_MIN_CACHE_TOKENS, 3.0, 15.0, 8192, known=False, cache=cache
    )


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """How to reach and drive a model. ``from_env`` reads the documented variables."""

    model: str = "extractive"
    api_key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    api: Api = "messages"
    """``messages`` (Anthropic Messages API) or ``openai`` (Chat Completions)."""
    models: tuple[ModelSpec, ...] = ()
    """The configured models (``[models.NAME]``), carried to node processes."""
    max_retries: int = 4
    """Retries after the first attempt on 429/529/5xx and connection errors."""
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    timeout: float = 600.0
    max_output_tokens: int = 4096
    temperature: float | None = None
    cache_ttl: CacheTtl = "5m"
    system_cache_ttl: CacheTtl = "5m"
    cache_system: bool = True
    """Put a breakpoint on the system prompt (the timeline's marks come with each request)."""

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ModelConfigError("api", f"{self.api!r} is unknown: use one of {', '.join(APIS)}")
        if self.max_retries < 0:
            raise ModelConfigError("max_retries", f"must be >= 0, got {self.max_retries}")
        if self.backoff_base < 0 or self.backoff_max < self.backoff_base:
            raise ModelConfigError("backoff", "need 0 <= backoff_base <= backoff_max")
        if self.cache_ttl not in ("5m", "1h") or self.system_cache_ttl not in ("5m", "1h"):
            raise ModelConfigError("cache_ttl", "must be '5m' or '1h'")
        if self.max_output_tokens < 1:
            raise ModelConfigError("max_output_tokens", "must be >= 1")

    @property
    def spec(self) -> ModelSpec:
        return model_spec(self.model)

    @property
    def offline(self) -> bool:
        return self.model in OFFLINE_MODELS

    def for_model(self, name: str) -> LLMSettings:
        """These settings for serving ``name``: a configured model's own API and base URL
        win; the key (and the base URL) of these settings go with the same API only."""
        spec = model_spec(name)
        api = spec.api or self.api
        same = api == self.api
        return replace(
            self,
            model=name,
            api=api,
            base_url=spec.base_url or (self.base_url if same else None),
            api_key=self.api_key if same else None,
        )

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        defaults: Mapping[str, object] | None = None,
        **overrides: object,
    ) -> LLMSettings:
        """``defaults`` (the settings file's) < the environment < ``overrides`` (flags).

        Reads ``ACTLINE_MODEL``, ``ACTLINE_API``, ``ACTLINE_BASE_URL`` (else
        ``ANTHROPIC_BASE_URL`` for the messages API), the key of the API
        (``ANTHROPIC_API_KEY``, or ``OPENAI_API_KEY`` for ``openai``) and ``ACTLINE_LLM_*``.
        """
        env = os.environ if env is None else env
        values: dict[str, object] = dict(defaults or {})
        if env.get("ACTLINE_MODEL"):
            values["model"] = env["ACTLINE_MODEL"]
        if env.get("ACTLINE_API"):
            values["api"] = env["ACTLINE_API"]
        api = overrides.get("api") or values.get("api") or "messages"
        key_var = "OPENAI_API_KEY" if api == "openai" else "ANTHROPIC_API_KEY"
        if env.get(key_var):
            values["api_key"] = env[key_var]
        if env.get("ACTLINE_BASE_URL"):
            values["base_url"] = env["ACTLINE_BASE_URL"]
        elif api == "messages" and env.get("ANTHROPIC_BASE_URL"):
            values["base_url"] = env["ANTHROPIC_BASE_URL"]
        numbers = {
            "ACTLINE_LLM_MAX_RETRIES": ("max_retries", int),
            "ACTLINE_LLM_BACKOFF_BASE": ("backoff_base", float),
            "ACTLINE_LLM_BACKOFF_MAX": ("backoff_max", float),
            "ACTLINE_LLM_TIMEOUT": ("timeout", float),
            "ACTLINE_LLM_MAX_OUTPUT_TOKENS": ("max_output_tokens", int),
        }
        for var, (name, kind) in numbers.items():
            if env.get(var):
                try:
                    values[name] = kind(env[var])
                except ValueError:
                    raise ModelConfigError(var, f"not a number: {env[var]!r}") from None
        if env.get("ACTLINE_LLM_CACHE_TTL"):
            values["cache_ttl"] = env["ACTLINE_LLM_CACHE_TTL"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


BASE_URL_FIX = "--base-url URL, ACTLINE_BASE_URL or base_url in [models.NAME] of actline.toml"
"""Where a base URL is given, for messages."""


def check_servable(settings: LLMSettings) -> None:
    """``ModelConfigError`` when ``settings.model`` cannot be a node's model with these
    settings. ``extractive`` always can; ``replay`` never (it needs a script, which only
    code can give). A model with a base URL can (the server there decides about keys); without
    one, a ``claude-*`` model on the messages API needs an Anthropic API key, and any other
    model (or the openai API) needs a base URL."""
    model = settings.model
    if model == "extractive":
        return
    if model == "replay":
        raise ModelConfigError(
            f"model {model!r}", "needs a script, which only code can give: use ReplayModel"
        )
    if settings.base_url:
        return
    if settings.api == "openai":
        raise ModelConfigError(
            f"model {model!r}",
            f"the openai API needs a base URL (the endpoint): give it with {BASE_URL_FIX}",
        )
    if model.startswith("claude"):
        if not settings.api_key:
            raise ModelConfigError(
                f"model {model}",
                "needs an Anthropic API key: export ANTHROPIC_API_KEY=... "
                "or use the offline model (--model extractive)",
            )
        return
    raise ModelConfigError(
        f"model {model!r}",
        "is not a built-in model and has no base URL: serve it from a server with "
        f"{BASE_URL_FIX}, or use extractive (offline) or a claude-* model",
    )
