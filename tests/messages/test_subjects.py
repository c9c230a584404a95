"""Subject names: one module builds them, under a configurable prefix."""

from __future__ import annotations

import pytest

from messages import SubjectError, Subjects, subjects


def test_prefix_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTLINE_SUBJECT_PREFIX", "prod.eu")
    assert subjects.current().turn_submit == "prod.eu.turn.submit"
    monkeypatch.delenv("ACTLINE_SUBJECT_PREFIX")
    assert subjects.current().turn_submit == "al.turn.submit"


@pytest.mark.parametrize("prefix", ["", "a..b", "a.*", "a.>", "a b", ".al", "al."])
def test_bad_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(SubjectError, match="prefix"):
        Subjects(prefix)


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
    assert s.conv_all("c1") == "x.conv.c1.>"
    assert s.turn_all("t1") == "x.turn.t1.>"
    assert (s.tools_exec, s.llm_generate, s.deadletter, s.all) == (
        "x.tools.exec",
        "x.llm.generate",
        "x.deadletter",
        "x.>",
    )
