"""Multi-channel streaming: one model stream -> per-channel deltas, citations, canvas JSON.

Pure code: no I/O, no asyncio. See ``actline.channels.parser`` for the rules.
"""

from .citations import (
    CitationReplacer,
    CitationSource,
    citation_map,
    expand_ids,
    replace_citations,
    sids_in_text,
)
from .composite import CompositeJsonStreamer
from .errors import ChannelError, ChannelSpecError
from .parser import ChannelStream, parse, strip_fence
from .spec import (
    OUTSIDE,
    ChannelDelta,
    ChannelNotice,
    ChannelResult,
    ChannelSpec,
    Format,
    StreamResult,
)
from .subscribers import ChannelSubscribers

__all__ = [
    "OUTSIDE",
    "ChannelDelta",
    "ChannelError",
    "ChannelNotice",
    "ChannelResult",
    "ChannelSpec",
    "ChannelSpecError",
    "ChannelStream",
    "ChannelSubscribers",
    "CitationReplacer",
    "CitationSource",
    "CompositeJsonStreamer",
    "Format",
    "StreamResult",
    "citation_map",
    "expand_ids",
    "parse",
    "replace_citations",
    "sids_in_text",
    "strip_fence",
]
