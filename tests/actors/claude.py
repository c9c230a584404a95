"""A claude model served by the local Messages API server, for real turns: the ``Policy``
answers turn calls with the replies queued for it and summary calls (tool-free, strict JSON)
with a fixed structured summary."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator

from actline.llm import ReplayModel
from actline.llm.protocol import Chunk
from actline.messages import GenerateRequest

MODEL = "claude-sonnet-4-6"
SUMMARY_JSON = {
    "stable_facts": [
        {"key": "deploy region", "value": "eu-west-1", "confidence": 0.9},
        {"key": "owner", "value": "ann"},
    ],
    "active_goals": ["plan the v2 deploy"],
    "open_questions": ["which database?"],
    "discarded_obsolete": [],
    "rawSummary": "The user planned the v2 deploy.",
}


class Policy:
    """Turn replies in order; summary calls (tool-free, strict JSON) answered apart."""

    def __init__(self) -> None:
        self.turns: deque[str] = deque()
        self.summaries: list[GenerateRequest] = []
        self.seen: list[GenerateRequest] = []

    def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        if "strict JSON" in request.system:
            self.summaries.append(request)
            return ReplayModel.of([json.dumps(SUMMARY_JSON)]).stream(request)
        self.seen.append(request)
        return ReplayModel.of([self.turns.popleft()]).stream(request)
