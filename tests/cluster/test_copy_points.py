"""Copy points of the durable copy (cluster mode): a turn's rounds are copied together at its
end and before it acts outside the node, not one append per round; every round the node
stored is in the copy before an external tool runs; ``ACTLINE_COPY_EVERY`` 0 copies each
round as it commits. A real nats-server, a cluster-mode node, a scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actline.actors.client.client import Client
from actline.actors.ownership.ownership import ClusterOwnership
from actline.actors.pools.tool_executor import ToolContext, ToolRegistry
from actline.bus import Bus, EmbeddedNats
from actline.messages import Subjects, new_id
from tests.actors.harness import Scripted, say, start_node

pytestmark = pytest.mark.timeout(120)

CID = "copied"
PROBE = "probe.check"
SCRIPT = (
    say("look it up", calls=[("react.search", {"query": "backups"})]),
    say("read it", calls=[("react.read", {"paths": ["ks:backup-restore.md"]})]),
    say("check outside", calls=[(PROBE, {"what": "backups"})]),
    say(answer="Backups run nightly."),
)


class Probe:
    """An external tool that reads, when it runs, how far the durable copy reaches."""

    def __init__(self) -> None:
        self.node: Any = None
        self.seen: list[tuple[int, int]] = []
        """(blocks stored in the node's LMDB, blocks the durable head covers) at each call."""

    async def __call__(self, params: dict[str, Any], ctx: ToolContext) -> str:
        ownership = self.node.ownership
        assert isinstance(ownership, ClusterOwnership)
        head = await ownership.durable.head(CID)
        covered = int(head[0].get("stored_seq", 0)) if head is not None else 0
        _, stored = self.node.store.cursor(CID)
        self.seen.append((stored, covered))
        return "checked"


@pytest.mark.parametrize(("every", "copies"), [(60.0, 2), (0.0, 5)])
async def test_a_turns_rounds_are_copied_before_it_acts_outside_and_at_its_end(
    nats_server: EmbeddedNats, tmp_path: Path, every: float, copies: int
) -> None:
    subjects = Subjects(f"cp{new_id().lower()}")
    bus = await Bus.connect(nats_server.url, subject_names=subjects)
    probe = Probe()
    tools = ToolRegistry()
    tools.register(PROBE, probe, description="Check something outside")
    node = await start_node(
        bus,
        tmp_path,
        Scripted({CID: SCRIPT}),
        registry=tools,
        cluster=True,
        copy_every_s=every,
    )
    probe.node = node
    client_bus = await Bus.connect(nats_server.url, subject_names=subjects)
    client = Client(client_bus)
    try:
        handle = await client.submit("How do backups work?", conversation_id=CID)
        result = await handle.wait(60)
        assert result.status == "completed" and result.answer == "Backups run nightly."
        # when the external tool ran, the copy held every block the node had stored
        [(stored, covered)] = probe.seen
        assert covered == stored > 0
        ownership = node.ownership
        assert isinstance(ownership, ClusterOwnership)
        # four rounds and the result: two appends with copy points, one per commit without
        assert ownership.copies == copies
        assert ownership.unpublished == 0
        head = await ownership.durable.head(CID)
        assert head is not None
        assert int(head[0]["stored_seq"]) == node.store.cursor(CID)[1]
    finally:
        await client.close()
        await client_bus.close()
        await node.stop()
        await bus.close()
