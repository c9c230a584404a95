"""A model or tool pool member as a Ray actor: the Ray job's placement of pools.

``python -m actline.actors.cluster.ray_job --model-pools N --tool-pools M`` starts N
``PoolActor("models")`` and M ``PoolActor("tools")`` beside its node actors, and the node
actors then run without streamers (tool workers) of their own: every model (tool) call of
a turn goes over NATS to the pool's queue group, placed wherever Ray puts the pool actors
(each declares its ``num_cpus``). A pool actor runs ``actline.actors.pools.standalone.Pool``
with the job's node settings and model table, on the job's node credentials.
"""

from __future__ import annotations

import os
from typing import Any

from actline.actors.configuration.settings import NodeSettings
from actline.bus import Bus
from actline.llm import LLMSettings, register_models
from actline.messages import diag

from ..pools.standalone import KINDS, Pool, PoolKind


class PoolActor:
    """One pool member inside a Ray actor (wrapped by ``pool_actor_class``)."""

    def __init__(
        self,
        kind: PoolKind,
        nats_url: str,
        settings: dict[str, Any],
        *,
        creds: str | None = None,
        llm: dict[str, Any] | None = None,
        api_key_variable: str = "",
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"a pool serves {' or '.join(KINDS)}, not {kind!r}")
        diag.configure_from_env()
        self.kind: PoolKind = kind
        self.nats_url = nats_url
        self.settings = NodeSettings(**settings)
        self.creds = creds
        self.llm = llm
        self.api_key_variable = api_key_variable
        self.bus: Bus | None = None
        self.pool: Pool | None = None

    def _llm(self) -> LLMSettings:
        if self.llm is None:
            return LLMSettings.from_env(model=self.settings.model)
        key = os.environ.get(self.api_key_variable) if self.api_key_variable else None
        settings = LLMSettings(**{**self.llm, "model": self.settings.model, "api_key": key})
        register_models(settings.models)
        return settings

    async def start(self) -> str:
        """Connect and join the pool's queue group; returns what it serves."""
        if self.pool is not None:
            return self.pool.serves
        path = None
        if self.creds is not None:
            from actline.bus.auth import write_secret

            path = write_secret(self.settings.home / f"pool-{self.kind}.creds", self.creds)
        self.bus = await Bus.connect(
            self.nats_url, name=f"actline-pool-{self.kind}-{self.settings.node_id}", creds=path
        )
        self.pool = Pool(self.kind, self.bus, self.settings, llm=self._llm())
        await self.pool.start()
        return f"pool {self.kind} {self.settings.node_id}: {self.pool.serves}"

    async def stop(self) -> None:
        if self.pool is not None:
            await self.pool.stop()
            self.pool = None
        if self.bus is not None:
            await self.bus.close()
            self.bus = None


def pool_actor_class(num_cpus: float = 0.5, memory_mb: int = 512) -> Any:
    """``PoolActor`` as a Ray actor class declaring its resources."""
    import ray

    return ray.remote(num_cpus=num_cpus, memory=memory_mb * 1024 * 1024)(PoolActor)
