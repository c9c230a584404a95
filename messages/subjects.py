"""The only place that builds NATS subjects and JetStream names.

Every subject starts with a prefix (``ACTLINE_SUBJECT_PREFIX``, default ``al``): the
tenant's name. With authentication on, each tenant is a NATS account of its own
(``actline.bus.authority``), so two tenants' subjects, streams and buckets never meet;
the prefix keeps names readable and tells deployments apart on an open server.

A tenant name has one canonical form: lowercase letters and digits, words joined by
single ``-``, starting with a letter (``acme-eu``), at most ``TENANT_MAX`` characters.
So a name is one subject token (no tenant nests inside another: ``al`` never holds
``al.eu``) and no two names share their JetStream names: those are the name
upper-cased with ``-`` made ``_`` (``al`` -> ``AL_TURNS``, ``acme-eu`` ->
``ACME_EU_TURNS``), and ``_`` is not allowed in a name. ``canonical_tenant`` says
what a refused name should be.

Tokens placed into subjects are validated: an id with a dot, a wildcard or whitespace
is refused.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

from .errors import SubjectError
from .ids import is_valid_id, is_valid_name

DEFAULT_PREFIX = "al"
_INBOX_RE = re.compile(r"^_INBOX(\.[A-Za-z0-9_\-]+)+\Z")
TENANT_MAX = 40
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
_TOOL_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$")
TENANT_RULE = "lowercase letters and digits, words joined by single '-', starting with a letter"


def canonical_tenant(name: str) -> str:
    """The canonical form of a tenant name: lowercase, every run of other characters than
    a letter or digit made one ``-`` (``ACME_EU`` and ``acme.eu`` -> ``acme-eu``)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def check_tenant(name: str) -> str:
    """``name`` when it is a canonical tenant name, else ``SubjectError`` saying the rule
    and the canonical form to use instead."""
    if len(name) <= TENANT_MAX and _PREFIX_RE.match(name):
        return name
    suggestion = canonical_tenant(name)[:TENANT_MAX]
    hint = f"a tenant name is {TENANT_RULE}, at most {TENANT_MAX} characters"
    if suggestion and _PREFIX_RE.match(suggestion):
        hint += f" (use {suggestion!r})"
    raise SubjectError("tenant (subject prefix)", name, hint)


def _token(value: str, what: str) -> str:
    if not _valid_id(value):
        raise SubjectError(what, value)
    return value


@functools.lru_cache(maxsize=4096)
def _valid_id(value: str) -> bool:
    """``is_valid_id``, remembered: a node builds the same conversation's subjects every
    round."""
    return is_valid_id(value)


@dataclass(frozen=True, slots=True)
class Subjects:
    """Subject names under one prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        check_tenant(self.prefix)

    @property
    def turn_submit(self) -> str:
        """Where clients submit ``turn.request``."""
        return f"{self.prefix}.turn.submit"

    def stream(self, conversation_id: str) -> str:
        """``stream.delta`` and ``react.progress`` of a conversation."""
        return f"{self.prefix}.stream.{_token(conversation_id, 'conversation id')}"

    def result(self, turn_id: str) -> str:
        """The ``turn.result`` of one turn."""
        return f"{self.prefix}.result.{_token(turn_id, 'turn id')}"

    @property
    def results_all(self) -> str:
        """Every turn's ``turn.result``: the subjects of the results stream (wildcard)."""
        return f"{self.prefix}.result.>"

    def agent_inbox(self, agent: str) -> str:
        """Where an outside agent receives its ``agent.task``."""
        if not is_valid_name(agent):
            raise SubjectError("agent name", agent)
        return f"{self.prefix}.agent.{agent}.inbox"

    @property
    def agent_done(self) -> str:
        """The shared DONE subject: accepted only with authentication off."""
        return f"{self.prefix}.agent.done"

    def agent_done_of(self, agent: str) -> str:
        """One agent's own DONE subject (``agent.task.done_subject``): with authentication on,
        only that agent may publish there, so a DONE taken from it is that agent's."""
        return f"{self._agent(agent)}.done"

    @property
    def agent_done_any(self) -> str:
        """Every agent's own DONE subject (wildcard): captured by the DONE stream."""
        return f"{self.prefix}.agent.*.done"

    def agent_hello(self, agent: str) -> str:
        """Where an agent says it is there (``agent.hello``, a request): presence and its inbox."""
        return f"{self._agent(agent)}.hello"

    @property
    def agent_hello_any(self) -> str:
        """Every agent's hello (wildcard): served by the nodes' queue group."""
        return f"{self.prefix}.agent.*.hello"

    @property
    def agent_inbox_any(self) -> str:
        """Every agent's inbox (wildcard): the subjects of the task stream."""
        return f"{self.prefix}.agent.*.inbox"

    @property
    def agents_list(self) -> str:
        """Known agents with presence and open tasks (``agents.list``, a request to nodes)."""
        return f"{self.prefix}.agents.list"

    def _agent(self, agent: str) -> str:
        if not is_valid_name(agent):
            raise SubjectError("agent name", agent)
        return f"{self.prefix}.agent.{agent}"

    def agent_of(self, subject: str, verb: str) -> str:
        """The agent name of ``<prefix>.agent.<name>.<verb>``; ``SubjectError`` otherwise."""
        head = f"{self.prefix}.agent."
        tail = f".{_token(verb, 'verb')}"
        if subject.startswith(head) and subject.endswith(tail):
            name = subject[len(head) : len(subject) - len(tail)]
            if is_valid_name(name):
                return name
        raise SubjectError(f"{verb} subject of an agent", subject)

    def turn_control(self, turn_id: str) -> str:
        """Skip-waiting and cancel for one running turn."""
        return f"{self.prefix}.turn.{_token(turn_id, 'turn id')}.control"

    @property
    def turn_control_any(self) -> str:
        """Skip-waiting and cancel of every turn (wildcard): a node routes them to its turns."""
        return f"{self.prefix}.turn.*.control"

    def approval(self, role: str, name: str, turn_id: str, tool: str = "") -> str:
        """Where approver ``role name`` approves or denies a running turn's pending calls
        (``turn.approval``, a request): of tool ``tool`` only, or every pending one when
        ``tool`` is empty. With authentication on, only that approver may publish here."""
        subject = f"{self.approval_any(role, name)}.{_token(turn_id, 'turn id')}"
        if tool:
            if not _TOOL_RE.match(tool):
                raise SubjectError("tool name", tool, "use a tool's name, e.g. 'shell.run'")
            subject += f".{tool}"
        return subject

    def approval_any(self, role: str, name: str) -> str:
        """Every approval subject of one approver (without the turn and tool tokens)."""
        if role not in ("client", "agent") or not is_valid_name(name):
            raise SubjectError("approver", f"{role} {name}", "a client or agent with a name")
        return f"{self.prefix}.approve.{role}.{name}"

    @property
    def approvals_all(self) -> str:
        """Every approval of every approver (wildcard): the node running the turn answers."""
        return f"{self.prefix}.approve.>"

    def approval_of(self, subject: str) -> tuple[str, str, str, str]:
        """``(role, name, turn id, tool)`` of an approval subject (tool ``""``: every
        pending call); ``SubjectError`` otherwise."""
        head = f"{self.prefix}.approve."
        tokens = subject[len(head) :].split(".") if subject.startswith(head) else []
        if len(tokens) >= 3:
            role, name, tid, tool = tokens[0], tokens[1], tokens[2], ".".join(tokens[3:])
            if (
                role in ("client", "agent")
                and is_valid_name(name)
                and is_valid_id(tid)
                and (not tool or _TOOL_RE.match(tool))
            ):
                return role, name, tid, tool
        raise SubjectError("approval subject", subject, "<prefix>.approve.<role>.<name>.<turn>")

    def turn_of(self, subject: str, verb: str) -> str:
        """The turn id of ``<prefix>.turn.<tid>.<verb>``; ``SubjectError`` otherwise."""
        head = f"{self.prefix}.turn."
        tail = f".{_token(verb, 'verb')}"
        if subject.startswith(head) and subject.endswith(tail):
            tid = subject[len(head) : len(subject) - len(tail)]
            if is_valid_id(tid):
                return tid
        raise SubjectError(f"{verb} subject of a turn", subject)

    def conv(self, conversation_id: str, verb: str) -> str:
        """One verb of a ConversationActor, e.g. ``render``."""
        cid = _token(conversation_id, "conversation id")
        return f"{self.prefix}.conv.{cid}.{_token(verb, 'verb')}"

    @property
    def conv_manage(self) -> str:
        """Managing stored conversations (``conv.manage`` requests: list, get, rename, delete,
        export, fork), served by the nodes' queue group ``manage``."""
        return f"{self.prefix}.conv.manage"

    @property
    def tools_exec(self) -> str:
        """The ToolExecutorActor pool (queue group ``tools``)."""
        return f"{self.prefix}.tools.exec"

    @property
    def llm_generate(self) -> str:
        """The StreamerActor pool (queue group ``streamers``)."""
        return f"{self.prefix}.llm.generate"

    def tools_exec_local(self, node: str) -> str:
        """One node's own tool executor: tools that need the conversation's workspace files."""
        return f"{self.prefix}.tools.exec.{_token(node, 'node id')}"

    def node_turns(self, node: str) -> str:
        """Turn requests passed to one node by the others (``turn.handoff`` requests): the
        node holding a conversation takes its turns without a trip through the queue."""
        return f"{self.prefix}.node.{_token(node, 'node id')}.turns"

    def node_workspace(self, node: str) -> str:
        """The workspaces of the conversations one node holds (``workspace.fetch`` and
        ``workspace.apply`` requests): tool executors on other nodes read and write the
        running turn's files through it."""
        return f"{self.prefix}.node.{_token(node, 'node id')}.workspace"

    def actor_mail(self, node: str, actor: str, target: str) -> str:
        """The mailbox of one actor on one node (``actor.mail``, with the local shortcut
        off): ``actor`` is ``conversation`` or ``turn``, ``target`` its conversation or turn
        id."""
        return (
            f"{self.prefix}.actor.{_token(node, 'node id')}.{_token(actor, 'actor')}"
            f".{_token(target, 'actor id')}"
        )

    def actor_mail_all(self, node: str) -> str:
        """Every actor mailbox of one node (wildcard): the node's post office."""
        return f"{self.prefix}.actor.{_token(node, 'node id')}.>"

    @property
    def llm_cancel(self) -> str:
        """Stop the model call of a turn (``react.cancel``), wherever it runs."""
        return f"{self.prefix}.llm.cancel"

    def conv_any(self, verb: str) -> str:
        """One verb of every conversation (wildcard), e.g. feedback served by any node."""
        return f"{self.prefix}.conv.*.{_token(verb, 'verb')}"

    @property
    def deadletter(self) -> str:
        """Where undecodable payloads are republished."""
        return f"{self.prefix}.deadletter"

    @property
    def all(self) -> str:
        """Every subject of this deployment (wildcard)."""
        return f"{self.prefix}.>"

    def blocks(self, conversation_id: str) -> str:
        """One conversation's persisted rounds in the blocks stream."""
        return f"{self.prefix}.blocks.{_token(conversation_id, 'conversation id')}"

    @property
    def blocks_all(self) -> str:
        """Every conversation's rounds: the subjects of the blocks stream (wildcard)."""
        return f"{self.prefix}.blocks.>"

    # -- parsing -------------------------------------------------------------------------
    def conversation_of(self, subject: str, verb: str) -> str:
        """The conversation id of ``<prefix>.conv.<cid>.<verb>``; ``SubjectError`` otherwise."""
        head = f"{self.prefix}.conv."
        tail = f".{_token(verb, 'verb')}"
        if subject.startswith(head) and subject.endswith(tail):
            cid = subject[len(head) : len(subject) - len(tail)]
            if is_valid_id(cid):
                return cid
        raise SubjectError(f"{verb} subject of a conversation", subject)

    # -- JetStream names -----------------------------------------------------------------
    def _resource(self, suffix: str) -> str:
        return self.prefix.replace("-", "_").upper() + "_" + suffix

    @property
    def turn_stream(self) -> str:
        """The work-queue stream that stores ``turn_submit`` (``AL_TURNS``)."""
        return self._resource("TURNS")

    @property
    def turn_consumer(self) -> str:
        """The durable pull consumer all nodes share on the turn stream."""
        return "nodes"

    @property
    def leases_bucket(self) -> str:
        """The KV bucket of conversation leases (``AL_LEASES``)."""
        return self._resource("LEASES")

    @property
    def nodes_bucket(self) -> str:
        """The KV bucket of live nodes: one key per node, kept alive by its beat (``AL_NODES``)."""
        return self._resource("NODES")

    @property
    def heads_bucket(self) -> str:
        """The KV bucket of the durable copy's heads (``AL_HEADS``)."""
        return self._resource("HEADS")

    @property
    def blocks_stream(self) -> str:
        """The stream of persisted rounds on ``blocks_all`` (``AL_BLOCKS``)."""
        return self._resource("BLOCKS")

    @property
    def done_stream(self) -> str:
        """The work-queue stream that stores ``agent_done`` signals (``AL_DONES``)."""
        return self._resource("DONES")

    @property
    def done_consumer(self) -> str:
        """The durable pull consumer all nodes share on the DONE stream."""
        return "nodes"

    @property
    def tasks_stream(self) -> str:
        """The stream of open ``agent.task`` messages on ``agent_inbox_any`` (``AL_TASKS``): a
        task is deleted from it when its DONE is applied or its turn ends."""
        return self._resource("TASKS")

    @staticmethod
    def agent_consumer(agent: str) -> str:
        """The durable consumer one agent pulls its tasks from (``agent_<name>``)."""
        if not is_valid_name(agent):
            raise SubjectError("agent name", agent)
        return f"agent_{agent}"

    @property
    def agents_bucket(self) -> str:
        """The KV bucket of agent presence: a key per agent, kept alive by its hello
        (``AL_AGENTS``)."""
        return self._resource("AGENTS")

    @property
    def results_stream(self) -> str:
        """The stream that keeps every ``turn.result`` on ``results_all`` (``AL_RESULTS``)."""
        return self._resource("RESULTS")

    @staticmethod
    def kv_key(conversation_id: str) -> str:
        """The KV key of a conversation: ids may hold ``:``, KV keys may not, ``=`` is free."""
        return _token(conversation_id, "conversation id").replace(":", "=")


def reply_inbox(subject: str) -> str:
    """``subject`` when it is a reply inbox (``_INBOX.<token>…``, no wildcard), else
    ``SubjectError``.

    A request's reply subject and a reply header are written by the sender. Whatever a
    node publishes on a sender's behalf goes to such an inbox only: every role may
    subscribe to its own ``_INBOX.<public key>.>`` and nothing else under ``_INBOX``, and
    no stream or bucket captures an inbox, so a reply aimed anywhere else (a KV key, a
    result, a conversation's stream, another role's subject) is refused, never sent.
    """
    if not _INBOX_RE.match(subject):
        raise SubjectError(
            "reply inbox", subject, "replies go to the sender's own _INBOX.<id>.… only"
        )
    return subject


def current() -> Subjects:
    """Subjects under the prefix in ``ACTLINE_SUBJECT_PREFIX`` (read on each call)."""
    return Subjects(os.environ.get("ACTLINE_SUBJECT_PREFIX", DEFAULT_PREFIX) or DEFAULT_PREFIX)
