"""actline as a Ray job: N node actors that share one NATS, with an optional batch of turns
(``ray_job``, ``python -m actline.actors.cluster.ray_job``), and the local two-node demo
(``demo``, ``make cluster-demo``). The top of ``actline.actors``: may import every other
sub-package."""
