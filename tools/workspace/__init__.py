"""The versioned workspace of a conversation as the tools use it, in its two modes.

``workspace`` chooses the mode (``open_workspace``: ``custom`` keeps versions in the LMDB
store, ``actline.storage.workspace``; ``git`` keeps a git history) and owns the files on disk
(``LocalTree``: the open turn's root, pulled refs). The git mode is ``git`` (turns, commits,
reads), ``gitturn`` (the open turn's work tree and journal) and ``gitcmd`` (running git);
``patching`` applies unified diffs for react.patch. The path checks and the write path both
modes share are ``actline.storage.workspace.WorkspaceBase``. The package may import
``actline.storage``, ``actline.timeline``, ``actline.messages`` and ``actline.tools.errors``.
"""
