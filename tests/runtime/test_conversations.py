"""``Runtime.conversations``: list, search, get, rename, delete, export and fork on real
parts (embedded NATS with authentication, LMDB in a temp dir, a scripted model), through the
in-process node and over the bus from a client of the tenant, and nothing of it from a
client of another tenant."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from actline import (
    ConfigError,
    ConversationBusy,
    ConversationInfo,
    ConversationNotFound,
    DeletedConversation,
)
from actline.actors import NodeSettings
from actline.actors.node.holding import Holds
from actline.actors.node.manage import Management
from actline.bus import Bus, Envelope
from actline.config import Config
from actline.conversations import refusal_error
from actline.llm import ReplayModel
from actline.messages import ConversationManage, ConversationManaged, ErrorReply
from actline.runtime import Runtime
from actline.storage import Store
from actline.storage.forks import ForkRefused
from tests.actors.harness import say
from tests.storage.test_fork import CID as PARENT
from tests.storage.test_fork import rows_of, two_turns

from .test_runtime import config

Q1, Q2, Q3 = "What is alpha quartz?", "And beta zircon?", "What about gamma basalt?"


def answers(*texts: str) -> ReplayModel:
    return ReplayModel.of([say("thinking", answer=t) for t in texts])


def texts(request: Any) -> str:
    return "\n".join(str(b.get("text") or "") for b in request.blocks)


SHORTCUT = pytest.mark.parametrize(
    "shortcut", [pytest.param("1", id="in-process"), pytest.param("0", id="over-nats")]
)
"""With the local shortcut on, ``rt.conversations`` calls the in-process node's handler;
off, the same requests go over NATS to it."""


@SHORTCUT
async def test_a_turn_on_a_fork_sees_the_kept_turns_and_the_original_is_unchanged(
    tmp_path: Path, shortcut: str
) -> None:
    model = answers("Alpha is a silicate.", "Beta is zirconium.", "Gamma is volcanic.")
    async with Runtime(config(tmp_path, ACTLINE_LOCAL_SHORTCUT=shortcut), model=model) as rt:
        first = await rt.ask(Q1)
        cid = first.conversation_id
        await rt.ask(Q2, cid)
        assert rt.store is not None
        before = rows_of(rt.store, cid)
        fork = await rt.conversations.fork(cid, at=1, title="the basalt branch")
        assert fork.forked_from == (cid, first.turn_id) and fork.turns == 1
        third = await rt.ask(Q3, fork.conversation_id)
        assert third.status == "completed" and third.conversation_id == fork.conversation_id
        assert rows_of(rt.store, cid) == before
        listed = await rt.conversations.list()
        found = await rt.conversations.list(search="GAMMA volcanic")
        info = await rt.conversations.get(fork.conversation_id)
    seen = texts(model.requests[-1])
    assert Q1 in seen and Q3 in seen and Q2 not in seen
    assert "Alpha is a silicate." in seen and "Beta is zirconium." not in seen
    assert [i.conversation_id for i in listed] == [fork.conversation_id, cid]  # newest first
    assert [i.conversation_id for i in found] == [fork.conversation_id]
    assert info.turns == 2 and info.title == "the basalt branch"


async def test_rename_export_and_delete_with_their_refusals(tmp_path: Path) -> None:
    async with Runtime(config(tmp_path), model=answers("Alpha is a silicate.")) as rt:
        cid = (await rt.ask(Q1)).conversation_id
        renamed = await rt.conversations.rename(cid, "  Minerals,\n first  ")
        assert renamed.title == "Minerals, first"
        assert (await rt.conversations.list())[0].title == "Minerals, first"
        data = json.loads(await rt.conversations.export(cid))
        markdown = await rt.conversations.export(cid, "markdown")
        with pytest.raises(ConfigError, match="empty"):
            await rt.conversations.rename(cid, "   ")
        with pytest.raises(ConfigError, match="200 at most"):
            await rt.conversations.rename(cid, "x" * 201)
        with pytest.raises(ConfigError, match="out of range"):
            await rt.conversations.fork(cid, at=2)
        with pytest.raises(ConfigError, match="not a conversation id"):
            await rt.conversations.get("no such/id")
        with pytest.raises(ConfigError, match="json or markdown"):
            await rt.conversations.export(cid, "pdf")
        removed = await rt.conversations.delete(cid)
        with pytest.raises(ConversationNotFound, match="not found") as missing:
            await rt.conversations.get(cid)
        assert await rt.conversations.list() == []
    [turn] = data["turns"]
    assert turn["question"] == Q1 and turn["answer"] == "Alpha is a silicate."
    assert turn["status"] == "completed" and turn["usage"]["input_tokens"] > 0
    assert data["blocks"] and data["conversation"]["title"] == "Minerals, first"
    assert markdown.startswith("# Minerals, first\n") and Q1 in markdown
    assert removed == DeletedConversation(cid, removed.blocks, 1, 0, 0) and removed.blocks > 3
    assert missing.value.conversation_id == cid


@SHORTCUT
async def test_rename_and_delete_wait_for_a_running_turn_and_a_fork_does_not(
    tmp_path: Path, shortcut: str
) -> None:
    slow = ReplayModel.of([say("t", answer="One."), say("t", answer="Two.")], delay=0.05)
    async with Runtime(config(tmp_path, ACTLINE_LOCAL_SHORTCUT=shortcut), model=slow) as rt:
        cid = (await rt.ask(Q1)).conversation_id
        handle = await rt.submit(Q2, cid)
        await handle.wait_for("thinking", timeout=30)
        with pytest.raises(ConversationBusy, match=handle.turn_id) as busy:
            await rt.conversations.delete(cid)
        with pytest.raises(ConversationBusy):
            await rt.conversations.rename(cid, "later")
        fork = await rt.conversations.fork(cid, at=1)
        await handle.wait(30)
        assert (await rt.conversations.rename(cid, "later")).title == "later"
    assert busy.value.turn_id == handle.turn_id and fork.turns == 1


def client_config(home: Path, url: str, creds: Path) -> Config:
    env = {"ACTLINE_HOME": str(home), "NATS_URL": url, "ACTLINE_NATS_CREDS": str(creds)}
    return Config.load(env=env)


async def test_a_client_manages_a_node_elsewhere_and_another_tenant_reaches_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Runtime(config(tmp_path), model=answers("Alpha is a silicate.")) as node:
        first = await node.ask(Q1)
        cid = first.conversation_id
        assert node.server is not None
        server = node.server
        creds: Callable[..., Path] = server.creds_path
        mine = client_config(tmp_path / "client", server.url, creds("client"))
        async with Runtime(mine, node=False) as client:
            assert client.store is None and client.node is None
            [listed] = await client.conversations.list()
            renamed = await client.conversations.rename(cid, "from afar")
            fork = await client.conversations.fork(cid, at=listed.turns)
            markdown = await client.conversations.export(cid, "markdown")
        monkeypatch.setenv("ACTLINE_SUBJECT_PREFIX", "tenant-b")
        theirs = client_config(tmp_path / "b", server.url, creds("client", prefix="tenant-b"))
        async with Runtime(theirs, node=False) as stranger:
            with pytest.raises(ConfigError, match="no node answered"):
                await stranger.conversations.list()
        their_node = Config.load(
            env={
                "ACTLINE_HOME": str(tmp_path / "b-node"),
                "NATS_URL": server.url,
                "ACTLINE_NATS_CREDS": str(creds("node", prefix="tenant-b")),
            }
        )
        async with (
            Runtime(their_node, model=answers()),
            Runtime(theirs, node=False) as stranger,
        ):
            assert await stranger.conversations.list() == []
            with pytest.raises(ConversationNotFound):
                await stranger.conversations.delete(cid)
            with pytest.raises(ConversationNotFound):
                await stranger.conversations.rename(cid, "taken")
        monkeypatch.delenv("ACTLINE_SUBJECT_PREFIX")
        assert (await node.conversations.get(cid)).title == "from afar"
    assert isinstance(listed, ConversationInfo) and listed.conversation_id == cid
    assert renamed.title == "from afar" and fork.forked_from == (cid, first.turn_id)
    assert "# from afar" in markdown


def test_the_errors_keep_their_fields_through_pickling() -> None:
    busy = pickle.loads(pickle.dumps(ConversationBusy("c-1", "t-9")))
    missing = pickle.loads(pickle.dumps(ConversationNotFound("c-2")))
    refused = pickle.loads(pickle.dumps(ForkRefused("unknown_turn", "no turn 'x'")))
    assert (busy.conversation_id, busy.turn_id) == ("c-1", "t-9") and "t-9" in str(busy)
    assert missing.conversation_id == "c-2" and "actline conversations list" in str(missing)
    assert (refused.reason, str(refused)) == ("unknown_turn", "no turn 'x'")
    assert isinstance(busy, ConfigError) and isinstance(missing, ConfigError)


async def test_cluster_mode_refuses_management_rather_than_act_on_a_local_copy(
    tmp_path: Path,
) -> None:
    async def release(cid: str) -> None:
        return None

    with Store(tmp_path / "home", sync=False) as store:
        management = Management(
            cast(Bus, None),  # a refusal needs no bus
            store,
            NodeSettings(home=tmp_path / "home", cluster=True),
            actors={},
            loading={},
            holds=Holds(),
            release=release,
        )
        replies = [
            await management.handle(ConversationManage(op=op, conversation_id="c-1"))
            for op in ("list", "rename", "delete", "fork")
        ]
    for reply in replies:
        assert isinstance(reply, ErrorReply) and reply.code == "cluster_mode"
        assert reply.message.startswith("conversation management in cluster mode: ")
    with pytest.raises(ConfigError, match="in cluster mode"):
        raise refusal_error(replies[0])


async def test_an_answer_larger_than_nats_carries_is_refused_naming_the_way_around(
    tmp_path: Path,
) -> None:
    async def release(cid: str) -> None:
        return None

    small_bus = cast(Bus, SimpleNamespace(max_payload=8 * 1024))
    with Store(tmp_path / "home", sync=False) as store:
        two_turns(store)
        management = Management(
            small_bus,
            store,
            NodeSettings(home=tmp_path / "home"),
            actors={},
            loading={},
            holds=Holds(),
            release=release,
        )
        export = ConversationManage(op="export", conversation_id=PARENT, format="json")
        refused = await management._on_request(export, cast(Envelope, None))
        listed = await management._on_request(ConversationManage(op="list"), cast(Envelope, None))
    assert isinstance(refused, ErrorReply) and refused.code == "too_large"
    assert "--home DIR --out FILE" in refused.message
    assert isinstance(listed, ConversationManaged) and len(listed.conversations) == 1
