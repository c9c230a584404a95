"""Outside agents seen from the node: their durable inboxes, presence and the agent list
(``inboxes``), the durable queue of DONE signals, none lost while no node runs
(``done_queue``), and where a DONE or an approval goes (``done_routing``). May import
``actline.actors.base``, ``actline.actors.errors``, ``configuration``, ``ownership``,
``client``, ``services``, ``turn`` and the packages below ``actline.actors``."""
