"""What model calls cost in USD: a ``Usage`` priced by the model table of
``actline.llm.config`` into a ``Cost`` (``price``), and USD as people read it
(``format_usd``). Pure: no I/O."""

from .cost import (
    CACHE_READ,
    CACHE_WRITE_1H,
    CACHE_WRITE_5M,
    format_usd,
    price,
    priced_entry,
    result_cost,
)

__all__ = [
    "CACHE_READ",
    "CACHE_WRITE_1H",
    "CACHE_WRITE_5M",
    "format_usd",
    "price",
    "priced_entry",
    "result_cost",
]
