"""What each role may publish and subscribe to: the permissions the NATS server enforces.

A tenant is a NATS account of its own (``actline.bus.authority``) and one subject prefix
(``Subjects.prefix``) inside it; every role is issued for one tenant and reaches nothing
of another, whatever its patterns say.

- ``node``: everything under its prefix; the JetStream API of its own streams and
  buckets only (named in ``Subjects``, each operation spelled out: no pattern where a
  wildcard could stand for a stream name); replies to reply inboxes. The only role
  that serves conversations (``conv.``) and publishes results and agent tasks; it serves
  model calls (``llm.``) and tool calls (``tools.``) too, as the pool roles do.
- ``client``: submits turns; sends followups, feedback, skip and cancel; reads its
  prefix's streams and results (and the results stream by direct get); asks for the
  agent list; asks the nodes to list, rename, delete, export or fork stored conversations
  (``conv.manage``). Nothing under ``agent.``, ``llm.``, ``tools.``; no JetStream management
  (it cannot create, delete or purge a stream).
- ``agent NAME``: says hello on its own subject, pulls its own tasks from its own
  durable consumer, publishes DONE on its own DONE subject. Nothing else.
- an approver: a ``client NAME`` or an ``agent NAME`` issued with ``approves`` (tool
  patterns) may approve or deny pending tool calls, on its own approval subject
  (``Subjects.approval``: ``<prefix>.approve.<role>.<name>.<turn>[.<tool>]``) and there
  only: the node takes who decided from the subject, which only that credential may
  publish to, and the tool from its last tokens, which the patterns bound.
- ``pool-models``: a model-call pool process (``actline pool models``): joins the queue
  group ``streamers`` on ``<prefix>.llm.generate`` (only in that group: a plain
  subscription that would read every call is refused), hears ``<prefix>.llm.cancel``,
  publishes deltas on ``<prefix>.stream.<cid>`` and replies to reply inboxes.
- ``pool-tools``: a tool pool process (``actline pool tools``): joins the queue group
  ``tools`` on ``<prefix>.tools.exec``, replies to reply inboxes, and asks a
  conversation's owner node for its workspace (``<prefix>.node.<node>.workspace``).
  Neither pool role has JetStream, turns, results, agents or conversations; both may
  publish ``<prefix>.deadletter``, where every ``Bus`` puts a payload it could not decode.
- ``admin``: everything in its tenant; for operators' maintenance (and tests), never
  for a program.

Every role may subscribe only to its own reply inbox (``_INBOX.<its public key>.>``),
so no one reads the replies meant for another.

A subscribe pattern may name a queue group after a space (``<subject> <group>``, the
nats-server's queue permission): the server then lets the holder subscribe to that subject
in that group only. ``Permissions.may_subscribe`` (the ``Bus``'s own check, which knows no
group) reads such a pattern as its subject.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from actline.messages import Subjects
from actline.messages.ids import is_valid_name

from .errors import RoleUnknown

ROLES = ("node", "client", "agent", "pool-models", "pool-tools", "admin")
POOL_ROLES = ("pool-models", "pool-tools")
"""The roles of the pool processes (``actline pool models|tools``)."""
WORKSPACE_READS = "{prefix}.node.*.workspace"
"""Where a tool pool asks a conversation's owner node for its workspace (one subject per node)."""
STREAMERS_QUEUE = "streamers"
"""The queue group of the model-call pools (``StreamerActor.QUEUE``)."""
TOOLS_QUEUE = "tools"
"""The queue group of the tool pools (``ToolExecutorActor.QUEUE``)."""
_TOOL_PATTERN = re.compile(r"^(>|([a-z][a-z0-9_]*|\*)(\.([a-z][a-z0-9_]*|\*))*(\.>)?)$")


@dataclass(frozen=True, slots=True)
class Permissions:
    """Subjects a user may publish to and subscribe to (NATS wildcards)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]

    def with_inbox(self, inbox_prefix: str) -> Permissions:
        """These permissions plus the user's own reply inbox."""
        return replace(self, subscribe=(*self.subscribe, f"{inbox_prefix}.>"))

    def may_publish(self, subject: str) -> bool:
        """True when some publish pattern matches ``subject``."""
        return _allowed(self.publish, subject)

    def may_subscribe(self, subject: str) -> bool:
        """True when some subscribe pattern covers ``subject`` (itself maybe a wildcard); a
        pattern limited to a queue group counts by its subject."""
        return _allowed(tuple(p.partition(" ")[0] for p in self.subscribe), subject)


def _allowed(patterns: tuple[str, ...], subject: str) -> bool:
    return any(_matches(p, subject) for p in patterns)


def _matches(pattern: str, subject: str) -> bool:
    """NATS matching of a subject (or a narrower wildcard subject) against a pattern."""
    want = pattern.split(".")
    have = subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have):
            return False
        if token == "*":
            if have[i] == ">":
                return False
            continue
        if token != have[i]:
            return False
    return len(have) == len(want)


def _streams(s: Subjects) -> tuple[str, ...]:
    return (s.turn_stream, s.done_stream, s.results_stream, s.blocks_stream, s.tasks_stream)


def _buckets(s: Subjects) -> tuple[str, ...]:
    return (s.leases_bucket, s.nodes_bucket, s.heads_bucket, s.agents_bucket)


def _jetstream_of(stream: str) -> tuple[str, ...]:
    """The JetStream API (management, consumers, reads, acks) of one stream."""
    api = "$JS.API"
    return (
        f"{api}.STREAM.*.{stream}",
        f"{api}.STREAM.MSG.*.{stream}",
        f"{api}.CONSUMER.CREATE.{stream}",
        f"{api}.CONSUMER.CREATE.{stream}.>",
        f"{api}.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"{api}.CONSUMER.INFO.{stream}.>",
        f"{api}.CONSUMER.DELETE.{stream}.>",
        f"{api}.CONSUMER.MSG.NEXT.{stream}.>",
        f"{api}.CONSUMER.NAMES.{stream}",
        f"{api}.CONSUMER.LIST.{stream}",
        f"{api}.DIRECT.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}.>",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    )


def _node(s: Subjects) -> Permissions:
    # Not $JS.API.STREAM.NAMES / LIST: they would show every tenant's streams.
    publish = [s.all, "_INBOX.>", "$JS.API.INFO"]
    for stream in _streams(s):
        publish.extend(_jetstream_of(stream))
    for bucket in _buckets(s):
        publish.extend(_jetstream_of(f"KV_{bucket}"))
        publish.append(f"$KV.{bucket}.>")
    return Permissions(publish=tuple(publish), subscribe=(s.all,))


def _approvals(s: Subjects, role: str, name: str, approves: tuple[str, ...]) -> tuple[str, ...]:
    """The approval subjects of one approver: each tool pattern after any turn id, and
    the turn id alone (every pending call) for an approver of every tool (``>``)."""
    if not approves:
        return ()
    if not is_valid_name(name):
        raise RoleUnknown(
            role, f"an approver needs a name of letters, digits, - and _ (not {name!r})"
        )
    mine = s.approval_any(role, name)
    subjects = [f"{mine}.*.{pattern}" for pattern in approves]
    if ">" in approves:
        subjects.append(f"{mine}.*")
    for pattern in approves:
        if not _TOOL_PATTERN.match(pattern):
            raise RoleUnknown(
                role,
                f"tool pattern {pattern!r}: use tool names with NATS wildcards "
                "('shell.run', 'workspace.*', 'mcp.>' or '>' for every tool)",
            )
    return tuple(subjects)


def _client(s: Subjects, name: str, approves: tuple[str, ...]) -> Permissions:
    results = s.results_stream
    return Permissions(
        publish=(
            s.turn_submit,
            s.turn_control_any,
            *_approvals(s, "client", name, approves),
            s.conv_any("followup"),
            s.conv_any("feedback"),
            s.agents_list,
            s.conv_manage,
            "$JS.API.INFO",
            # the turn stream's replicas: whether JetStream has quorum (bus.conditions)
            f"$JS.API.STREAM.INFO.{s.turn_stream}",
            f"$JS.API.DIRECT.GET.{results}",
            f"$JS.API.DIRECT.GET.{results}.>",
        ),
        subscribe=(f"{s.prefix}.stream.>", s.results_all),
    )


def _agent(s: Subjects, name: str, approves: tuple[str, ...]) -> Permissions:
    if not is_valid_name(name):
        raise RoleUnknown(
            "agent", f"an agent needs a name of letters, digits, - and _ (not {name!r})"
        )
    tasks, consumer = s.tasks_stream, s.agent_consumer(name)
    return Permissions(
        publish=(
            s.agent_hello(name),
            s.agent_done_of(name),
            f"$JS.API.CONSUMER.MSG.NEXT.{tasks}.{consumer}",
            f"$JS.API.CONSUMER.INFO.{tasks}.{consumer}",
            f"$JS.ACK.{tasks}.{consumer}.>",
            *_approvals(s, "agent", name, approves),
        ),
        subscribe=(),
    )


def _pool_models(s: Subjects) -> Permissions:
    return Permissions(
        publish=(f"{s.prefix}.stream.*", "_INBOX.>", s.deadletter),
        subscribe=(f"{s.llm_generate} {STREAMERS_QUEUE}", s.llm_cancel),
    )


def _pool_tools(s: Subjects) -> Permissions:
    return Permissions(
        publish=("_INBOX.>", WORKSPACE_READS.format(prefix=s.prefix), s.deadletter),
        subscribe=(f"{s.tools_exec} {TOOLS_QUEUE}",),
    )


def permissions(
    role: str, *, name: str = "", prefix: str = "al", approves: tuple[str, ...] = ()
) -> Permissions:
    """The permissions of ``role`` under ``prefix`` (without the user's inbox);
    ``approves`` (tool patterns; clients and agents, both named) adds the right to approve
    or deny pending calls of those tools."""
    s = Subjects(prefix)
    if approves and role not in ("agent", "client"):
        raise RoleUnknown(role, "only a client's or an agent's credentials take --approver")
    if role != "agent" and name and not approves:
        raise RoleUnknown(role, "only an agent or an approver has a name")
    if role == "node":
        return _node(s)
    if role == "client":
        return _client(s, name, approves)
    if role == "agent":
        return _agent(s, name, approves)
    if role == "pool-models":
        return _pool_models(s)
    if role == "pool-tools":
        return _pool_tools(s)
    if role == "admin":
        return Permissions(publish=(">",), subscribe=(">",))
    raise RoleUnknown(role, f"choose one of {', '.join(ROLES)}")
