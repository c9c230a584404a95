"""Commands that sit on the bus itself rather than on the turn protocol: ``actline pool``
(a process that serves model calls or tool calls in their queue group) and ``actline tap``
(every message under the prefix, decoded, as it passes). Like the rest of ``actline.cli``
they may import the facade's configuration and everything beneath it; nothing imports
them but ``actline.cli.main``."""
