"""Subscribers, per-channel results, and declaration errors."""

from __future__ import annotations

import pickle

import pytest

from actline.channels import (
    ChannelDelta,
    ChannelSpec,
    ChannelSpecError,
    ChannelStream,
    ChannelSubscribers,
)


def test_subscribers_receive_the_same_deltas_and_a_failing_one_is_isolated() -> None:
    seen: list[ChannelDelta] = []
    everything: list[ChannelDelta] = []

    def broken(delta: ChannelDelta) -> None:
        raise RuntimeError("sink is down")

    subs = (
        ChannelSubscribers()
        .subscribe("answer", broken)
        .subscribe("answer", seen.append)
        .subscribe("*", everything.append)
    )
    stream = ChannelStream(
        [ChannelSpec("answer"), ChannelSpec("thinking", replace_citations=False)], subscribers=subs
    )
    emitted = []
    for chunk in [
        "<channel:thinking>hm</channel:thinking>",
        "<channel:answer>a",
        "b</channel:answer>",
    ]:
        emitted += stream.feed(chunk)
    emitted += stream.finish()
    assert seen == [d for d in emitted if d.channel == "answer"]
    assert everything == emitted
    errors = stream.result["answer"].errors
    assert errors and "sink is down" in errors[0]
    assert stream.result["thinking"].errors == []


def test_results_have_times_counts_and_sources() -> None:
    ticks = iter(range(100))
    stream = ChannelStream(
        [ChannelSpec("answer"), ChannelSpec("never")],
        sources=[{"sid": 1, "title": "One", "url": "u"}],
        clock=lambda: float(next(ticks)),
    )
    stream.feed("<channel:answer>a [[S:1]] [[S:4]]")
    stream.feed("</channel:answer>")
    done = stream.finish()
    answer = stream.result["answer"]
    assert answer.started_at is not None and answer.finished_at is not None
    assert answer.started_at < answer.finished_at
    assert answer.used_sources == [1] and answer.unresolved_sources == [4]
    assert answer.emitted == "a [One](u) [?4]" and answer.raw == "a [[S:1]] [[S:4]]"
    never = stream.result["never"]
    assert never.started_at is None and never.raw == "" and never.errors == []
    assert [(d.channel, d.completed, d.index) for d in done] == [
        ("answer", True, answer.deltas),
        ("never", True, 0),
    ]


def test_feeding_after_finish_is_a_notice_not_an_exception() -> None:
    stream = ChannelStream([ChannelSpec("answer")])
    stream.finish()
    assert stream.feed("<channel:answer>late") == []
    assert [n.code for n in stream.result.notices] == ["fed_after_finish"]
    assert stream.finish() == []


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"name": "bad name"}, "names are"),
        ({"name": "_outside"}, "names are"),
        ({"name": "x", "format": "yaml"}, "format must be"),
        ({"name": "x", "composite": {"a": "text"}}, "needs format='json'"),
        ({"name": "x", "format": "json", "composite": {"a": "pdf"}}, "not known"),
    ],
)
def test_bad_declarations_raise_channel_spec_error(kwargs: dict[str, object], reason: str) -> None:
    with pytest.raises(ChannelSpecError, match=reason):
        ChannelSpec(**kwargs)  # type: ignore[arg-type]


def test_duplicate_channel_names_are_refused() -> None:
    with pytest.raises(ChannelSpecError, match="declared twice"):
        ChannelStream([ChannelSpec("answer"), ChannelSpec("Answer")])


def test_channel_spec_error_pickles() -> None:
    err = ChannelSpecError("x", "bad")
    back = pickle.loads(pickle.dumps(err))
    assert (back.name, back.reason, str(back)) == ("x", "bad", str(err))
