"""The render pipeline: a timeline turned into the ordered content parts a model sees, round
after round, with at most three cache marks (``render``), and ANNOUNCE, the uncached signal
board at its very end (``announce``). Pure: no I/O, no clocks, no asyncio. May import the
modules of ``actline.timeline``, ``actline.timeline.editing`` (the pipeline applies its
edits) and ``actline.messages``."""
