"""actline as a Ray job: N node actors that share one NATS, with an optional batch of turns
(``ray_job``, ``python -m actline.actors.cluster.ray_job``; its command line and the check of
its knowledge folder in ``options``, the closing summary of a batch in ``summary``, the check
of the Python that runs it in ``environment``), pools as Ray actors (``pool_actor``) and the
local two-node demo (``demo``, ``make cluster-demo``). The top of ``actline.actors``: may
import every other sub-package."""
