"""The offline summarizer: deterministic text that keeps notes and paths within its budget."""

from __future__ import annotations

import pytest

from actline.timeline import EstimateCounter, OfflineSummarizer, SummaryRequest
from actline.timeline.blocks import Block
from actline.timeline.paths import fi_path
from tests.timeline.editing.compacting import history


def summary_of(blocks: list[Block], budget: int = 800, previous: str = "") -> str:
    return OfflineSummarizer(EstimateCounter()).summarize(
        SummaryRequest(tuple(blocks), previous, budget)
    )


def test_the_offline_summarizer_is_deterministic() -> None:
    one = history(4)
    two = history(4)
    assert summary_of(one.tl.blocks) == summary_of(one.tl.blocks)
    # Same content, different block ids and objects: same text.
    assert summary_of(one.tl.blocks) == summary_of(two.tl.blocks)


def test_the_offline_summarizer_keeps_notes_and_paths() -> None:
    b = history(3)
    b.add("react.file", turn="t2", path=fi_path("t2", "outputs", "data.csv"), text="a,b")
    b.note("decision:   use   the 2023 figures\nnot the 2022 ones")
    text = summary_of(b.tl.blocks)
    for n in (1, 2, 3):
        assert f"- note {n}: keep this" in text
    assert "- decision: use the 2023 figures not the 2022 ones" in text
    assert "- fi:t2.outputs/data.csv" in text
    assert "- tc:t1.c1x0.result" in text
    assert "Paths to reopen with react.read:" in text
    assert text.startswith("Summary of")


def test_the_offline_summarizer_notes_hidden_paths() -> None:
    b = history(2)
    b.tl.set_hidden(b.tl.blocks_at("tc:t1.c1x0.result"), "[hidden]")
    assert "- tc:t1.c1x0.result (hidden)" in summary_of(b.tl.blocks)


def test_the_offline_summarizer_folds_in_the_previous_summary() -> None:
    b = history(2)
    text = summary_of(b.tl.blocks, previous="Earlier the user asked about tides.")
    assert "Earlier:\nEarlier the user asked about tides." in text


def test_a_turn_prefix_request_is_titled_as_such() -> None:
    b = history(1)
    request = SummaryRequest(tuple(b.tl.blocks), "", 400, "turn_prefix")
    assert OfflineSummarizer().summarize(request).startswith("Turn prefix of")


@pytest.mark.parametrize("budget", [200, 400, 800])
def test_the_offline_summarizer_respects_its_budget(budget: int) -> None:
    b = history(10)
    text = summary_of(b.tl.blocks, budget)
    assert EstimateCounter().count(text) <= budget


def test_the_offline_summarizer_mentions_dropped_lines() -> None:
    b = history(10)
    full = summary_of(b.tl.blocks, 100_000)
    short = summary_of(b.tl.blocks, 200)
    assert "more lines" not in full
    last = short.splitlines()[-1]
    dropped = int(last.split()[1])
    assert last == f"… {dropped} more lines; reopen older content with react.memsearch."
    kept = len(short.splitlines()) - 1
    assert kept + dropped == len(full.splitlines())


def test_the_offline_summarizer_keeps_notes_first_when_the_budget_is_tight() -> None:
    b = history(10)
    text = summary_of(b.tl.blocks, 200)
    assert "- note 10: keep this" in text
    assert "Messages:" not in text or text.index("Notes and plans:") < text.index("Messages:")


# --- regressions --------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [60, 100])
def test_the_offline_summarizer_respects_a_small_budget(budget: int) -> None:
    """The head line and the dropped-lines trailer used to go over small budgets."""
    b = history(10)
    assert EstimateCounter().count(summary_of(b.tl.blocks, budget)) <= budget
