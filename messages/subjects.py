"""The only place that builds NATS subjects.

Every subject starts with a prefix (``ACTLINE_SUBJECT_PREFIX``, default ``al``)
so that two deployments can share one NATS. Tokens placed into subjects are
validated: an id with a dot, a wildcard or whitespace is refused.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .errors import SubjectError
from .ids import is_valid_id, is_valid_name

DEFAULT_PREFIX = "al"
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*$")


def _token(value: str, what: str) -> str:
    if not is_valid_id(value):
        raise SubjectError(what, value)
    return value


@dataclass(frozen=True, slots=True)
class Subjects:
    """Subject names under one prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not _PREFIX_RE.match(self.prefix):
            raise SubjectError("subject prefix", self.prefix)

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

    def agent_inbox(self, agent: str) -> str:
        """Where an outside agent receives its ``agent.task``."""
        if not is_valid_name(agent):
            raise SubjectError("agent name", agent)
        return f"{self.prefix}.agent.{agent}.inbox"

    @property
    def agent_done(self) -> str:
        """Where outside agents publish ``agent.done``."""
        return f"{self.prefix}.agent.done"

    def turn_control(self, turn_id: str) -> str:
        """Skip-waiting and cancel for one running turn."""
        return f"{self.prefix}.turn.{_token(turn_id, 'turn id')}.control"

    def turn_all(self, turn_id: str) -> str:
        """Every subject of one turn's DecisionActor (wildcard)."""
        return f"{self.prefix}.turn.{_token(turn_id, 'turn id')}.>"

    def conv(self, conversation_id: str, verb: str) -> str:
        """One verb of a ConversationActor, e.g. ``render``."""
        cid = _token(conversation_id, "conversation id")
        return f"{self.prefix}.conv.{cid}.{_token(verb, 'verb')}"

    def conv_all(self, conversation_id: str) -> str:
        """Every subject of a ConversationActor (wildcard)."""
        return f"{self.prefix}.conv.{_token(conversation_id, 'conversation id')}.>"

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

    def llm_generate_local(self, node: str) -> str:
        """One node's own streamers (a context rendered on that node travels by reference)."""
        return f"{self.prefix}.llm.generate.{_token(node, 'node id')}"

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


def current() -> Subjects:
    """Subjects under the prefix in ``ACTLINE_SUBJECT_PREFIX`` (read on each call)."""
    return Subjects(os.environ.get("ACTLINE_SUBJECT_PREFIX", DEFAULT_PREFIX) or DEFAULT_PREFIX)
