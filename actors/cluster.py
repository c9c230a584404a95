"""Cluster mode's parts, re-exported: leases (``actors.leases``), the durable copy
(``actors.durable``) and their errors. ``actors.ownership.ClusterOwnership`` joins them."""

from .durable import JetStreamCopy, Rebuilt, adopt, merge_rounds
from .errors import ClusterError, ConversationLost, CopyBroken, HeadConflict
from .leases import KvLeases

__all__ = [
    "ClusterError",
    "ConversationLost",
    "CopyBroken",
    "HeadConflict",
    "JetStreamCopy",
    "KvLeases",
    "Rebuilt",
    "adopt",
    "merge_rounds",
]
