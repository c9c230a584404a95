"""The loop benchmark's instant model, its prefilled conversations and the node they run on.

``InstantModel`` answers every call at once, in one chunk: a line of thinking and a decision
calling ``react.search_knowledge`` (a new query each round) until the turn's last round,
which completes; a ``Plan`` with an ``agent`` first sends to that agent (``agent.send``).
``prefill`` writes whole turns of the runtime's block types; ``node_settings``,
``role`` and ``node_and_client`` set up a node and a client on the embedded nats-server.
"""

from __future__ import annotations

import json
import os
import platform
import random
import resource
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actline.actors import NodeSettings
from actline.bus import Bus
from actline.bus.embedded import running_authority
from actline.llm.protocol import Chunk
from actline.messages import (
    GenerateRequest,
    Subjects,
    Usage,
)
from actline.timeline import Block, Timeline
from actline.timeline.blocks import COMPLETION, REACT_NOTES, TOOL_CALL, TOOL_RESULT, USER_PROMPT
from actline.timeline.paths import ar_path, tc_path
from actline.timeline.tokens import DEFAULT_COUNTER
from bench.harness import corpus, summary
from bench.storage import sources

KB = Path(__file__).resolve().parents[2] / "examples" / "kb"
CONTEXT_TOKENS = 1_000_000
SEED = 5
AGE_S = 86_400.0
"""The prefilled conversations ended this long ago."""
TURN_TIMEOUT_S = 60.0
NOBODY = "nobody"
QUESTION = "Which plan fits a team of twelve, and how do I move to it?"
TOPICS = ("pricing tiers", "rate limits", "install on linux", "release notes", "sso setup")


class LoopCheckFailed(Exception):
    """A part of the benchmark did not behave as the runtime promises: its numbers mean nothing."""

    def __init__(self, part: str, what: str) -> None:
        super().__init__(part, what)
        self.part = part
        self.what = what

    def __str__(self) -> str:
        return f"{self.part}: {self.what}"


def tail_summary(samples: Sequence[float]) -> dict[str, Any]:
    """Count, p50, p90, p99, min, max and mean in milliseconds."""
    return summary(samples, points=(50, 90, 99), high=True)


def rss_bytes() -> tuple[int, str]:
    """This process's resident memory now (Linux), else its peak, and which it is."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE"), "/proc/self/statm"
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak * (1 if platform.system() == "Darwin" else 1024), "ru_maxrss (peak)"


def query(round_: int) -> str:
    """The search query of a round: a new one each round of a turn."""
    return f"{TOPICS[round_ % len(TOPICS)]} round {round_}"


@dataclass(frozen=True, slots=True)
class Plan:
    """What a turn's model calls decide: ``rounds`` rounds, or first ``agent.send`` to ``agent``."""

    rounds: int = 3
    agent: str | None = None


class InstantModel:
    """A ``actline.llm.protocol.Model`` that answers each call at once, in one chunk (see the
    docstring)."""

    name = "instant"

    def __init__(self, default: Plan | None = None) -> None:
        self.default = default or Plan()
        self.plans: dict[str, Plan] = {}

    def output(self, request: GenerateRequest) -> str:
        """The raw output of round ``request.round`` of the turn's plan."""
        plan = self.plans.get(request.turn_id, self.default)
        r = request.round
        out = f"<channel:thinking>Round {r}: checking the docs.</channel:thinking>"
        if plan.agent is not None and r == 1:
            params: dict[str, Any] = {"name": plan.agent, "text": "Review the rollout plan."}
            decision: dict[str, Any] = {"action": "call_tools"}
            decision["calls"] = [{"tool": "agent.send", "params": params}]
        elif r < plan.rounds:
            params = {"query": query(r), "top_k": 1}
            decision = {"action": "call_tools"}
            decision["calls"] = [{"tool": "react.search_knowledge", "params": params}]
        else:
            out += '<channel:decision>{"action": "complete"}</channel:decision>'
            out += "<channel:answer>The Team plan; upgrade from the billing page.</channel:answer>"
            return out + "<channel:followup>[]</channel:followup>"
        return out + f"<channel:decision>{json.dumps(decision)}</channel:decision>"

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        text = self.output(request)
        yield text
        yield Usage(model=self.name, output_tokens=DEFAULT_COUNTER.count(text))


def prefill(blocks: int, cid: str, *, end: float, seed: int = SEED) -> Timeline:
    """Whole turns until at least ``blocks`` blocks, all stamped before ``end`` (deterministic)."""
    rng = random.Random(seed)
    text = corpus(seed)

    def words(low: int, high: int) -> str:
        size = rng.randint(low, high)
        start = rng.randrange(0, len(text) - size)
        return text[start : start + size]

    tl = Timeline(cid)
    tl.sources.add_rows(sources())
    ts = end - 10.0 * blocks
    turn = 0
    while len(tl) < blocks:
        turn += 1
        tid = f"t{turn}"
        ts += 10.0
        tl.begin_turn(tid, ts)
        tl.append(
            Block.new(USER_PROMPT, tid, ts, path=ar_path(tid, "user.prompt"), text=words(60, 400))
        )
        for r in range(1, rng.randint(1, 6) + 1):
            call = f"c{r}-1"
            ts += 10.0
            path = ar_path(tid, f"react.notes.{r}")
            tl.append(Block.new(REACT_NOTES, tid, ts, path=path, text=words(40, 200)))
            params = {"query": words(20, 80), "top_k": 1}
            data = {"tool": "react.search_knowledge", "params": params}
            path = tc_path(tid, call, "call")
            tl.append(
                Block.new(
                    TOOL_CALL, tid, ts, path=path, call_id=call, mime="application/json", data=data
                )
            )
            hit = {"path": "ks:pricing/tiers.md", "title": "Tiers", "snippet": words(60, 400)}
            path = tc_path(tid, call, "result")
            tl.append(
                Block.new(
                    TOOL_RESULT,
                    tid,
                    ts,
                    path=path,
                    call_id=call,
                    mime="application/json",
                    data={"status": "ok", "hits": [hit]},
                    meta={"tool": "react.search_knowledge", "ok": True},
                )
            )
        path = ar_path(tid, "assistant.completion")
        tl.append(Block.new(COMPLETION, tid, ts, path=path, text=words(60, 400)))
    return tl


def node_settings(home: Path, node_id: str, sync: bool, **changes: Any) -> NodeSettings:
    """A node that answers at once (no followup grace) with a context the prefill fits in."""
    return NodeSettings(
        home=home,
        node_id=node_id,
        followup_grace_s=0.0,
        storage_sync=sync,
        max_context_tokens=CONTEXT_TOKENS,
    ).with_(**changes)


def role(url: str, name: str, subjects: Subjects | None = None) -> str | None:
    """Credentials of role ``name`` on the embedded server at ``url`` (None: it is open)."""
    authority = running_authority(url)
    if authority is None:
        return None
    prefix = (subjects or Subjects()).prefix
    return str(authority.creds_path(name, prefix=prefix))


async def node_and_client(url: str, label: str, subjects: Subjects) -> tuple[Bus, Bus]:
    """A node's and a client's connection under ``subjects``, each with its role's creds."""
    buses = [
        await Bus.connect(
            url,
            name=f"bench-loop-{who}-{label}",
            subject_names=subjects,
            creds=role(url, who, subjects),
        )
        for who in ("node", "client")
    ]
    return buses[0], buses[1]
