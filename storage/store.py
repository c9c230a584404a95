"""The per-node LMDB store: ``Store``, the one object that opens and uses it.

``Store`` is put together from the parts of the store, one module each:

- ``actline.storage.layout``: the named databases, their keys, the msgpack codec;
- ``actline.storage.environment``: opening the environment, transactions, map growth,
  locking;
- ``actline.storage.rounds``: persisting rounds (blocks, turn log, header, turn records);
- ``actline.storage.reads``: loading a conversation and reading its parts back;
- ``actline.storage.outline``: outlines and turn briefs for lists and the console;
- ``actline.storage.shared``: the embedding cache and users' memory facts.

Artifacts, the workspace and quotas work on a ``Store`` from their own modules.
"""

from __future__ import annotations

from .outline import ConversationLister
from .reads import ConversationReader
from .rounds import TurnWriter
from .shared import NodeRows

__all__ = ["Store"]


class Store(TurnWriter, ConversationReader, ConversationLister, NodeRows):
    """One LMDB environment; thread-safe; open once per process.

    ``Store(path, map_size=..., max_map_size=..., sync=True)`` opens (or creates) it; see
    ``actline.storage.environment``.
    """
