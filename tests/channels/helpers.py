"""Shared fixtures of the channel tests: specs, sources, and a runner over chunkings."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from actline.channels import ChannelDelta, ChannelSpec, ChannelStream, StreamResult


class Decision(BaseModel):
    action: str
    calls: list[dict[str, Any]] = []


SOURCES = [
    {"sid": 1, "title": "One", "url": "https://e.com/1"},
    {"sid": 2, "title": "Two [beta] | x", "url": "https://e.com/2?a=1&b=2"},
    {"sid": 3, "title": "Three <b>&", "url": "https://e.com/3"},
    {"sid": 5, "title": "", "url": ""},
]


def specs() -> list[ChannelSpec]:
    return [
        ChannelSpec("thinking", replace_citations=False),
        ChannelSpec("answer", format="markdown"),
        ChannelSpec("notes", format="text"),
        ChannelSpec("page", format="html"),
        ChannelSpec("decision", format="json", model=Decision, replace_citations=False),
        ChannelSpec("canvas", format="json", composite={"title": "text", "body": "markdown"}),
        ChannelSpec("followup", format="json", replace_citations=False),
    ]


@dataclass
class Run:
    deltas: list[ChannelDelta]
    result: StreamResult

    def text(self) -> dict[tuple[str, str | None], str]:
        out: dict[tuple[str, str | None], list[str]] = defaultdict(list)
        for d in self.deltas:
            if not d.completed:
                out[(d.channel, d.key)].append(d.text)
        return {k: "".join(v) for k, v in out.items()}

    def comparable(self) -> dict[str, Any]:
        res = {
            name: (
                r.raw,
                r.emitted,
                repr(r.obj),
                r.used_sources,
                r.unresolved_sources,
                r.errors,
                r.declared,
                r.started_at is not None,
            )
            for name, r in self.result.channels.items()
        }
        return {"text": self.text(), "results": res, "notices": self.result.notices}


def run(chunks: list[str], channel_specs: list[ChannelSpec] | None = None) -> Run:
    stream = ChannelStream(channel_specs or specs(), sources=SOURCES, clock=lambda: 0.0)
    deltas: list[ChannelDelta] = []
    for chunk in chunks:
        deltas.extend(stream.feed(chunk))
    deltas.extend(stream.finish())
    return Run(deltas, stream.result)


def split_at(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c for c in cuts if 0 < c < len(text)})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]
