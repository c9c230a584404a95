"""The guard that stops a reply which loops: exact loops are caught within a window of
characters, text whose parts differ is never stopped."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from actline.llm.repetition import RepetitionGuard


def feed(text: str, chunk: int = 7) -> RepetitionGuard | None:
    """The guard that stopped ``text`` fed in chunks, or None when it never did."""
    guard = RepetitionGuard()
    for i in range(0, len(text), chunk):
        if guard.feed(text[i : i + chunk]):
            return guard
    return None


def test_a_sentence_repeated_until_the_limit_is_stopped_with_its_period() -> None:
    unit = "I will now search the knowledge base for the answer. "
    guard = feed("Let me think. " + unit * 40)
    assert guard is not None and guard.period == len(unit)
    assert guard.size < len(unit) * 20  # stopped early, not at the end


def test_a_one_character_run_is_a_loop() -> None:
    assert feed("Answer: " + "!" * 2000) is not None


def test_numbered_lines_and_a_long_varied_answer_are_not_stopped() -> None:
    numbered = "".join(f"{i}. Step {i} of the plan.\n" for i in range(300))
    assert feed(numbered) is None
    prose = " ".join(f"word{i * 7919 % 1000}" for i in range(3000))
    assert feed(prose) is None


def test_a_unit_repeated_only_three_times_is_not_a_loop() -> None:
    unit = "x" * 150 + "y" * 100 + "\n"
    assert feed("start " + unit * 3) is None


@settings(max_examples=60, deadline=None)
@given(
    st.text(min_size=1, max_size=60),
    st.text(min_size=0, max_size=200),
    st.integers(min_value=1, max_value=50),
)
def test_any_short_unit_repeated_enough_is_stopped(unit: str, prefix: str, chunk: int) -> None:
    copies = 1200 // len(unit) + 2
    assert feed(prefix + unit * copies, chunk) is not None
