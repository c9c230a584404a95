"""JetStream for actline: a work queue, a KV bucket and an append-only event log.

Only this package, ``actline.bus.inbox`` and ``Bus.publish_stored`` talk to nats-py's
JetStream API; everything else uses these typed wrappers. Names of streams, buckets and
consumers come from ``messages.Subjects``. One module per concept:

- ``queue``: ``WorkQueue``, a WORK_QUEUE stream with one durable pull consumer, and the
  ``QueueItem`` a pull hands out (settled with ``ack``/``nak``/``term``);
- ``kv``: ``KvBucket``, one value per key with check-and-set writes;
- ``events``: ``EventLog``, a LIMITS stream, one subject per conversation;
- ``streams``: making streams on one server or a cluster (``replicas_for``,
  ``cluster_size``);
- ``healer``: making a bucket or stream again once it is gone;
- ``api``: the JetStream context of a bus, ``translate`` of nats-py errors, the account.

Errors: every method raises ``actline.bus.errors`` types only: ``JetStreamError``
subclasses, ``RequestTimeout`` (no answer within the timeout) or
``NotConnected`` (the connection is closed). Cancellation: each call is one
or a few requests; cancelling it propagates ``CancelledError``.
"""

from .api import JetStreamAccount, account, translate
from .events import EventLog
from .kv import KvBucket, KvEntry
from .queue import QueueItem, WorkQueue
from .streams import cluster_size, in_cluster, replicas_for

__all__ = [
    "EventLog",
    "JetStreamAccount",
    "KvBucket",
    "KvEntry",
    "QueueItem",
    "WorkQueue",
    "account",
    "cluster_size",
    "in_cluster",
    "replicas_for",
    "translate",
]
