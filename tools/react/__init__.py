"""The in-loop ``react.*`` tools a conversation runs on its own timeline.

``core.ReactTools`` routes each call to its tool's module: ``reading`` (react.read,
react.hide), ``memory`` (react.plan and the memory anchors of react.write), ``write``
(react.write's file channels), ``memsearch`` (react.memsearch and the index rows it searches),
``knowledge`` (react.search_knowledge and sources-pool text) and ``files`` (pull, patch,
checkout, search_files); ``base`` holds the call context, outcomes, notices and parameter
checks they share. The package may import ``actline.storage``, ``actline.timeline``,
``actline.messages`` and the other ``actline.tools`` packages, never ``actline.actors``.
"""
