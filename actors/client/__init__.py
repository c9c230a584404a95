"""The turn protocol seen from outside the node: ``Client`` submits turns, follows their
stream and reads their results (``client``); an outside agent's side of its durable inbox,
hello, pull, beat and DONE (``agent``); and the durable stream of turn results both sides
read (``results``). Importing it does not pull in the node. May import
``actline.actors.errors``, ``actline.actors.configuration``, ``actline.bus`` and
``actline.messages``."""
