"""Subject names: one module builds them, under a configurable prefix."""

from __future__ import annotations

import pytest

from actline.messages import SubjectError, Subjects, subjects


def test_prefix_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTLINE_SUBJECT_PREFIX", "prod-eu")
    assert subjects.current().turn_submit == "prod-eu.turn.submit"
    monkeypatch.delenv("ACTLINE_SUBJECT_PREFIX")
    assert subjects.current().turn_submit == "al.turn.submit"


@pytest.mark.parametrize(
    "prefix",
    ["", "a..b", "a.*", "a.>", "a b", ".al", "al.", "al.eu", "AL", "acme_eu", "a--b", "a-", "1a"],
)
def test_bad_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(SubjectError, match="prefix"):
        Subjects(prefix)


@pytest.mark.parametrize("name", ["acme-eu", "acme_eu", "acme.eu", "ACME_EU", "Acme--EU"])
def test_look_alike_tenant_names_have_one_canonical_form(name: str) -> None:
    assert subjects.canonical_tenant(name) == "acme-eu"
    if name != "acme-eu":
        with pytest.raises(SubjectError, match="use 'acme-eu'"):
            Subjects(name)
    assert Subjects("acme-eu").turn_stream == "ACME_EU_TURNS"


def test_tenant_names_map_to_distinct_jetstream_names() -> None:
    names = ["a", "a-b", "ab", "a-b-c", "ab-c", "a-bc", "abc"]
    streams = {Subjects(n).turn_stream for n in names}
    assert len(streams) == len(names)


@pytest.mark.parametrize("token", ["a.b", "*", ">", "a b", ""])
def test_ids_that_would_break_a_subject_are_refused(token: str) -> None:
    s = Subjects()
    with pytest.raises(SubjectError):
        s.stream(token)
    with pytest.raises(SubjectError):
        s.result(token)
    with pytest.raises(SubjectError):
        s.agent_inbox(token)


def test_internal_subjects() -> None:
    s = Subjects("x")
    assert s.conv("c1", "render") == "x.conv.c1.render"
    assert (s.tools_exec, s.llm_generate, s.deadletter, s.all) == (
        "x.tools.exec",
        "x.llm.generate",
        "x.deadletter",
        "x.>",
    )


def test_conversation_blocks_subjects() -> None:
    s = Subjects("x")
    assert s.blocks("c:1") == "x.blocks.c:1"
    assert s.blocks_all == "x.blocks.>"
    with pytest.raises(SubjectError):
        s.blocks("a.b")


@pytest.mark.parametrize(
    ("prefix", "turns"),
    [("al", "AL_TURNS"), ("prod-eu", "PROD_EU_TURNS"), ("t01abc-x-y", "T01ABC_X_Y_TURNS")],
)
def test_jetstream_names_follow_the_prefix(prefix: str, turns: str) -> None:
    s = Subjects(prefix)
    base = turns.removesuffix("TURNS")
    assert s.turn_stream == turns
    assert (s.leases_bucket, s.heads_bucket, s.blocks_stream) == (
        base + "LEASES",
        base + "HEADS",
        base + "BLOCKS",
    )
    assert s.turn_consumer == "nodes"


def test_kv_keys_of_conversations_have_no_colon() -> None:
    assert Subjects.kv_key("c:1:2") == "c=1=2"
    assert Subjects().kv_key("plain") == "plain"
    with pytest.raises(SubjectError):
        Subjects.kv_key("a.b")


def test_the_conversation_of_a_conversation_subject_is_parsed() -> None:
    s = Subjects("x-y")
    assert s.conversation_of(s.conv("c:1", "feedback"), "feedback") == "c:1"
    assert s.conversation_of("x-y.conv.c-2.followup", "followup") == "c-2"


@pytest.mark.parametrize(
    "subject",
    [
        "x-y.conv.c1.followup",  # another verb
        "x-y.conv..feedback",  # no id
        "x-y.conv.a.b.feedback",  # a dot in the id
        "z.conv.c1.feedback",  # another prefix
        "x-y.stream.c1",
        "x-y.conv.c1.feedback.more",
    ],
)
def test_other_subjects_are_not_a_conversations(subject: str) -> None:
    with pytest.raises(SubjectError):
        Subjects("x-y").conversation_of(subject, "feedback")
