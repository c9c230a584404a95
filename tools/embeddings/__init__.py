"""The dense text embedders of memsearch, as numpy forward passes without torch.

``embedders`` picks the model (``ACTLINE_EMBED_MODEL``) and keeps the process-wide instances;
``minilm`` is all-MiniLM-L6-v2 (the default), ``mpnet`` all-mpnet-base-v2, ``model_parts``
the reader of a model split into part packages. The package may import ``actline.storage``,
``actline.timeline``, ``actline.messages`` and ``actline.tools.errors``; it imports numpy and
the tokenizer only when a model loads.
"""
