"""The local shortcut off (``local_shortcut=False``): every hop of a turn between its
conversation, its decision, the streamer and the tool executor travels over NATS as a typed
message, and a tap on the bus records a whole round, each message decodable by
``messages.decode`` (each mailbox body by the actors' codec, exactly). The same turn with the
shortcut on gives the same result. Real nats-server, a real node, a scripted model."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from actline.actors.client.client import Client
from actline.actors.errors import ActorStopped, ConversationLost
from actline.actors.node.post import CODEC, failure, rebuilt
from actline.actors.pools.tool_executor import ToolContext, ToolRegistry
from actline.bus import Bus, EmbeddedNats
from actline.messages import (
    ActorAnswer,
    ActorMail,
    DecodeError,
    GenerateRequest,
    GenerateResult,
    ReActResult,
    Subjects,
    ToolCall,
    ToolResult,
    decode,
    new_id,
)
from tests.actors.harness import Scripted, say, start_node
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)

CID = "posted"
SCRIPT = (
    say("look it up", calls=[("react.search_knowledge", {"query": "backups"})]),
    say("check outside", calls=[("probe.check", {"what": "backups"})]),
    say(answer="Backups run nightly.", followups=["How long are they kept?"]),
)


async def probe(params: dict[str, Any], ctx: ToolContext) -> str:
    return f"checked {params['what']}"


async def _turn(url: str, tmp: Path, *, shortcut: bool) -> tuple[ReActResult, list[Msg], Any]:
    """One three-round turn on a fresh prefix; what a tap saw on the prefix and on inboxes."""
    subjects = Subjects(f"po{new_id().lower()}")
    tools = ToolRegistry()
    tools.register("probe.check", probe, description="Check something outside")
    bus = await Bus.connect(url, subject_names=subjects)
    node = await start_node(
        bus, tmp, Scripted({CID: SCRIPT}), registry=tools, local_shortcut=shortcut
    )
    tap_bus = await Bus.connect(url, subject_names=subjects)
    seen: list[Msg] = []

    async def record(msg: Msg) -> None:
        seen.append(msg)

    tap = [
        await tap_bus._nc.subscribe(f"{subjects.prefix}.>", cb=record),
        await tap_bus._nc.subscribe("_INBOX.>", cb=record),
    ]
    await tap_bus.flush()
    client_bus = await Bus.connect(url, subject_names=subjects)
    client = Client(client_bus)
    try:
        handle = await client.submit("How do backups work?", conversation_id=CID)
        result = await handle.wait(60)
        await until(lambda: any(m.subject == subjects.result(result.turn_id) for m in seen), 10)
        post = node.post
        return result, seen, (post.sent, post.delivered) if post is not None else None
    finally:
        for sub in tap:
            await sub.unsubscribe()
        await client.close()
        for one in (client_bus, tap_bus):
            await one.close()
        await node.stop()
        await bus.close()


def _decoded(seen: list[Msg], prefix: str) -> list[tuple[str, Any]]:
    """Every message on the prefix (each must decode) and every inbox answer that does."""
    out: list[tuple[str, Any]] = []
    for msg in seen:
        try:
            out.append((msg.subject, decode(msg.data)))
        except DecodeError:
            assert not msg.subject.startswith(f"{prefix}."), msg.subject  # JetStream's own
    return out


async def test_with_the_shortcut_off_a_tap_records_every_hop_of_a_round(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    reference, _, _ = await _turn(nats_server.url, tmp_path / "on", shortcut=True)
    result, seen, counts = await _turn(nats_server.url, tmp_path / "off", shortcut=False)
    assert result.status == reference.status == "completed"
    assert (result.answer, result.followups) == (reference.answer, reference.followups)
    assert result.rounds == reference.rounds == 3
    prefix = Subjects(seen[0].subject.split(".", 1)[0]).prefix
    messages = _decoded(seen, prefix)
    kinds = Counter(type(m).__name__ for _, m in messages)
    mail = [m for _, m in messages if isinstance(m, ActorMail)]
    names = Counter((m.actor, m.name) for m in mail)
    # conversation <-> decision: every exchange of the three rounds, as typed mail
    assert names[("conversation", "Render")] == 3
    assert names[("turn", "Durable")] >= 3
    assert names[("conversation", "RunTools")] == 1, names  # the react.search_knowledge round
    assert names[("turn", "ReactRan")] == 1
    assert names[("conversation", "EndTurn")] == 1
    answers = [m for _, m in messages if isinstance(m, ActorAnswer)]
    assert Counter(a.name for a in answers)["Render"] == 3  # each Rendered came back
    # decision -> streamer and -> tool executor: over NATS too, with their answers
    assert kinds[GenerateRequest.__name__] == kinds[GenerateResult.__name__] == 3
    assert kinds[ToolCall.__name__] == kinds[ToolResult.__name__] == 1
    # each mailbox body decodes to a value that encodes to the same body
    for one in [*mail, *answers]:
        assert CODEC.body(CODEC.message(one.body)) == one.body
    assert counts is not None and counts[0] >= len(mail) and counts[1] >= len(mail)


def test_an_asked_actors_error_crosses_the_bus_as_itself() -> None:
    lost = rebuilt(failure(ConversationLost("c1", "another node wrote")))
    assert isinstance(lost, ConversationLost)
    assert (lost.conversation_id, lost.reason) == ("c1", "another node wrote")
    stopped = rebuilt(failure(ActorStopped("conversation c1")))
    assert isinstance(stopped, ActorStopped) and stopped.name == "conversation c1"
    other = rebuilt(failure(ValueError("bad value")))
    assert type(other).__name__ == "MailError" and "bad value" in str(other)


def test_a_body_naming_an_unknown_type_is_refused_with_its_name() -> None:
    with pytest.raises(DecodeError, match=r"os\.system"):
        CODEC.message({"~": "os.system", "command": "true"})
    with pytest.raises(DecodeError, match="has no field"):
        CODEC.message({"~": "mailbox.Durable", "round": 1, "extra": 2})
