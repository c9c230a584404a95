"""The errors of ``actors`` and ``actline``: fields, pickling, the drawn hierarchy; and the
two ways an ask fails (``AskTimeout``, ``ActorStopped``) on a real actor."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from actline import errors as actline_errors
from actline.actors import errors as actor_errors
from actline.actors.base import Actor, Request
from actline.actors.errors import (
    ActorError,
    ActorStopped,
    AgentNotWelcome,
    AskTimeout,
    ClusterError,
    ConversationHeld,
    ConversationLost,
    CopyBroken,
    DoneNotStored,
    HeadConflict,
    InputRefused,
    McpConfigError,
    NodeNotStarted,
    NoTurnQueue,
    RequestsFileError,
    SettingsError,
    SettingsFileError,
    UnexpectedMessage,
)
from actline.errors import ActlineError, CaseFileError, ConfigError, RuntimeNotStarted

MODULES = (actor_errors, actline_errors)

# (class, positional args, the fields they become)
CASES: list[tuple[type[Exception], tuple[Any, ...], dict[str, Any]]] = [
    (ActorError, ("base",), {}),
    (ActorStopped, ("conv:c1",), {"name": "conv:c1"}),
    (
        AskTimeout,
        ("conv:c1", "Render", 2.5),
        {"actor": "conv:c1", "message": "Render", "timeout_s": 2.5},
    ),
    (NodeNotStarted, ("the node's conversations",), {"what": "the node's conversations"}),
    (
        McpConfigError,
        ("/etc/mcp.json", "no servers"),
        {"path": "/etc/mcp.json", "reason": "no servers"},
    ),
    (
        SettingsError,
        ("ACTLINE_STREAMERS", "-1", "must be >= 0"),
        {"name": "ACTLINE_STREAMERS", "value": "-1", "reason": "must be >= 0"},
    ),
    (
        InputRefused,
        ("config.wait_timeout_s", "inf", "a finite number of seconds"),
        {"field": "config.wait_timeout_s", "value": "inf", "limit": "a finite number of seconds"},
    ),
    (
        DoneNotStored,
        ("reviewer", 30.0, "no stream"),
        {"agent": "reviewer", "within_s": 30.0, "reason": "no stream"},
    ),
    (
        AgentNotWelcome,
        ("reviewer", "no responders"),
        {"agent": "reviewer", "reason": "no responders"},
    ),
    (
        SettingsFileError,
        ("config file actline.toml: model must be a string",),
        {"message": "config file actline.toml: model must be a string"},
    ),
    (
        RequestsFileError,
        ("requests.jsonl", 7, "not JSON"),
        {"path": "requests.jsonl", "line": 7, "reason": "not JSON"},
    ),
    (UnexpectedMessage, ("turn:t1", "Render"), {"actor": "turn:t1", "kind": "Render"}),
    (NoTurnQueue, ("al.turn.submit",), {"subject": "al.turn.submit"}),
    (ConversationHeld, ("c1",), {"conversation_id": "c1"}),
    (ClusterError, ("cluster",), {}),
    (ConversationLost, ("c1", "lease lapsed"), {"conversation_id": "c1", "reason": "lease lapsed"}),
    (
        HeadConflict,
        ("c1", 3, 5, "n2"),
        {"conversation_id": "c1", "expected": 3, "actual": 5, "owner": "n2"},
    ),
    (
        HeadConflict,
        ("c1", 3, 0),
        {"conversation_id": "c1", "expected": 3, "actual": 0, "owner": None},
    ),
    (
        CopyBroken,
        ("c1", 42, "stream message gone"),
        {"conversation_id": "c1", "stream_seq": 42, "reason": "stream message gone"},
    ),
    (ActlineError, ("facade",), {}),
    (ConfigError, ("set ACTLINE_HOME",), {"message": "set ACTLINE_HOME"}),
    (
        CaseFileError,
        ("cases.jsonl", 3, "turns[1].config", "must be an object"),
        {
            "path": "cases.jsonl",
            "line": 3,
            "field": "turns[1].config",
            "problem": "must be an object",
        },
    ),
    (RuntimeNotStarted, ("rt.client",), {"what": "rt.client"}),
]

BUILTIN_BASES: dict[type[Exception], type[Exception]] = {
    McpConfigError: ValueError,
    SettingsError: ValueError,
    RequestsFileError: ValueError,
    SettingsFileError: ValueError,
    UnexpectedMessage: TypeError,
    NoTurnQueue: RuntimeError,
    ConversationHeld: RuntimeError,
    ConfigError: ValueError,
}
"""Builtin bases the docstrings do not draw, so that ``except ValueError`` still works."""


def defined_errors(module: ModuleType) -> set[type[Exception]]:
    return {
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__ == module.__name__
    }


def drawn_parents(module: ModuleType) -> dict[str, str | None]:
    """Class name -> parent name, read from the tree in the module's docstring."""
    names = {cls.__name__ for cls in defined_errors(module)}
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in (module.__doc__ or "").splitlines():
        match = re.match(r"^[\s│]*(?:[├└]── )?([A-Z]\w+)", line)
        if match is None or match.group(1) not in names:
            continue
        column = match.start(1)
        while stack and stack[-1][0] >= column:
            stack.pop()
        parents[match.group(1)] = stack[-1][1] if stack else None
        stack.append((column, match.group(1)))
    return parents


def test_every_error_class_of_both_modules_is_covered_here() -> None:
    covered = {cls for cls, _, _ in CASES}
    for module in MODULES:
        missing = defined_errors(module) - covered
        assert not missing, f"add a case for {sorted(c.__name__ for c in missing)}"


@pytest.mark.parametrize(
    ("cls", "args", "fields"), CASES, ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(CASES)]
)
def test_an_error_keeps_its_fields_and_survives_pickling(
    cls: type[Exception], args: tuple[Any, ...], fields: dict[str, Any]
) -> None:
    error = cls(*args)
    for name, value in fields.items():
        assert getattr(error, name) == value
    assert str(error)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls
    assert str(again) == str(error)
    assert again.args == error.args
    for name, value in fields.items():
        assert getattr(again, name) == value


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_base_classes_are_those_the_docstring_draws(module: ModuleType) -> None:
    parents = drawn_parents(module)
    errors = defined_errors(module)
    assert {cls.__name__ for cls in errors} == set(parents), "every error is drawn, once"
    for cls in errors:
        parent = parents[cls.__name__]
        if parent is None:
            assert cls.__bases__ == (Exception,), cls
            continue
        assert getattr(module, parent) in cls.__bases__, (cls, parent)
        extra = set(cls.__bases__) - {getattr(module, parent)}
        assert extra <= {BUILTIN_BASES.get(cls)}, (cls, extra)


@pytest.mark.parametrize(("cls", "builtin"), sorted(BUILTIN_BASES.items(), key=str))
def test_errors_of_a_bad_value_are_also_builtin_errors(
    cls: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(cls, builtin)
    root = ActlineError if cls.__module__ == actline_errors.__name__ else ActorError
    assert issubclass(cls, root)


def test_the_cluster_errors_are_actor_errors() -> None:
    for cls in (ConversationLost, HeadConflict, CopyBroken):
        assert issubclass(cls, ClusterError) and issubclass(cls, ActorError)


# --- asks on a real actor ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hold(Request[str]):
    """Asked: answered only once the actor's gate opens."""

    n: int = 0


class Gated(Actor):
    """Answers every ``Hold`` once ``release`` is set; counts what it handled."""

    def __init__(self) -> None:
        super().__init__("gated")
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.handled: list[int] = []

    async def receive(self, message: object) -> object:
        assert isinstance(message, Hold)
        self.entered.set()
        await self.release.wait()
        self.handled.append(message.n)
        return f"answer {message.n}"


async def test_an_ask_that_is_not_answered_in_time_raises_ask_timeout_with_its_fields() -> None:
    actor = Gated()
    actor.start()
    try:
        with pytest.raises(AskTimeout) as caught:
            await actor.ref().ask(Hold(1), timeout=0.05)
        assert (caught.value.actor, caught.value.message, caught.value.timeout_s) == (
            "gated",
            "Hold",
            0.05,
        )
        assert actor.entered.is_set()  # the handler had it; it just did not answer
        actor.release.set()
        # asks are not transactions: the late handler finishes, the actor serves on
        assert await actor.ask(Hold(2), timeout=10) == "answer 2"
        assert actor.handled == [1, 2]
    finally:
        actor.release.set()
        await actor.stop()


async def test_an_ask_or_a_tell_to_a_stopped_actor_raises_actor_stopped() -> None:
    actor = Gated()
    actor.release.set()
    actor.start()
    assert await actor.ask(Hold(1), timeout=10) == "answer 1"
    await actor.stop()
    assert not actor.running
    with pytest.raises(ActorStopped) as caught:
        await actor.ref().ask(Hold(2), timeout=10)
    assert caught.value.name == "gated"
    with pytest.raises(ActorStopped):
        actor.ref().tell(Hold(3))
    assert actor.handled == [1]


async def test_stop_answers_the_asks_queued_before_it() -> None:
    actor = Gated()
    actor.start()
    first = asyncio.create_task(actor.ask(Hold(1), timeout=30))
    await actor.entered.wait()
    second = asyncio.create_task(actor.ask(Hold(2), timeout=30))
    stopping = asyncio.create_task(actor.stop())
    actor.release.set()
    await stopping
    assert await first == "answer 1" and await second == "answer 2"


async def test_an_ask_queued_behind_a_handler_fails_with_actor_stopped_on_kill() -> None:
    actor = Gated()
    actor.start()
    busy = asyncio.create_task(actor.ask(Hold(1), timeout=30))
    await actor.entered.wait()
    queued = asyncio.create_task(actor.ask(Hold(2), timeout=30))
    await asyncio.sleep(0)  # one loop step: the task puts its ask in the mailbox
    assert actor._mailbox.qsize() == 1
    await actor.kill()
    with pytest.raises(ActorStopped) as caught:
        await queued
    assert caught.value.name == "gated"
    assert actor.handled == []
    await asyncio.gather(busy, return_exceptions=True)


async def test_the_ask_being_handled_when_the_actor_is_killed_fails_with_actor_stopped() -> None:
    """Pending asks fail with a named error (``ActorStopped``), and the asker was never
    cancelled, so a ``CancelledError`` there would look like its own cancellation."""
    actor = Gated()
    actor.start()
    busy = asyncio.create_task(actor.ask(Hold(1), timeout=30))
    await actor.entered.wait()
    await actor.kill()
    outcome = (await asyncio.gather(busy, return_exceptions=True))[0]
    assert not busy.cancelled(), "the asker got a CancelledError it did not ask for"
    assert isinstance(outcome, ActorStopped), outcome


class Stubborn(Actor):
    """A handler that swallows its cancellation (as ``asyncio.wait_for`` in 3.11 may)."""

    def __init__(self) -> None:
        super().__init__("stubborn")
        self.entered = asyncio.Event()

    async def receive(self, message: object) -> object:
        self.entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return None
        return None


async def test_kill_ends_an_actor_whose_handler_swallowed_the_cancellation() -> None:
    actor = Stubborn()
    actor.start()
    actor.tell("work")
    await actor.entered.wait()
    await asyncio.wait_for(actor.kill(), 5)
    assert not actor.running
