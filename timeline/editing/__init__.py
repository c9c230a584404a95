"""The edits of the model's view of a timeline, each made where the prompt cache allows:
``react.hide`` in the editable tail (``hide``), TTL pruning once the provider's cache has
gone cold (``ttl``), tool-response retention (``retention``), and compaction, the hard
ceiling, with its summaries (``compaction``, ``summary``). Pure: no I/O, no clocks, no
asyncio. May import the modules of ``actline.timeline`` itself and ``actline.messages``,
never ``actline.timeline.rendering``."""
