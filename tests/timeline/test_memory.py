"""Working memory: plan acknowledgement lines, the plan book, and internal note tags."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.timeline.errors import PlanError
from actline.timeline.memory import (
    MARKS,
    MAX_LABEL,
    MAX_STEPS,
    NOTE_TAGS,
    AckUpdate,
    NoteLine,
    Plan,
    PlanBook,
    PlanStep,
    StepStatus,
    ack_text,
    format_note,
    note_tags,
    parse_ack_lines,
    parse_note,
)

STEPS = ["Gather sources", "Draft report", "Review"]


def book_with(*plans: list[str]) -> PlanBook:
    book = PlanBook()
    for steps in plans:
        book.apply("new", turn_id="turn_1", steps=steps)
    return book


def stored(book: PlanBook, plan_id: str) -> Plan:
    found = book.get(plan_id)
    assert found is not None
    return found


def raises_code(code: str) -> Any:
    return pytest.raises(PlanError, match=f"^{code}")


# --- acknowledgement lines -------------------------------------------------------------

MARKERS: list[tuple[str, StepStatus]] = [
    ("✓", "done"),
    ("✔", "done"),
    ("✔️", "done"),
    ("[x]", "done"),
    ("[X]", "done"),
    ("✗", "failed"),
    ("✘", "failed"),
    ("…", "in_progress"),
    ("...", "in_progress"),
    ("□", "pending"),
    ("[ ]", "pending"),
]
NUMBER_FORMS = ["[2]", "[ 2 ]", "2", "2.", "2:", "2)"]


@pytest.mark.parametrize(("marker", "status"), MARKERS)
@pytest.mark.parametrize("number", NUMBER_FORMS)
def test_every_marker_and_number_form_updates_the_step(
    marker: str, status: StepStatus, number: str
) -> None:
    line = f"{marker} {number} Draft report"
    assert parse_ack_lines(line) == [AckUpdate(2, status, line)]


@pytest.mark.parametrize(
    "line",
    ["  ✓ 2. Draft", "- ✓ 2. Draft", "* ✓ 2 Draft", "\t- [x] [2] Draft", "✓2.", "✓ 2", "…2:"],
)
def test_indentation_bullets_and_missing_spaces_are_accepted(line: str) -> None:
    assert [u.n for u in parse_ack_lines(line)] == [2]


def test_the_update_keeps_the_stripped_source_line() -> None:
    assert parse_ack_lines("   ✓ 1. Gather sources  ")[0].line == "✓ 1. Gather sources"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Step 1 done ✓",
        "1. ✓ Gather",
        "✓ Gathered the sources",
        "✓ step 2",
        "✓ 12abc",
        "✓ -1",
        "✓ 1234567",
        "x ✓ 1.",
        "-- ✓ 1.",
        "[y] 1.",
        "plan plan_1: ✓ 1. Gather sources",
        "> ✓ 1. quoted",
    ],
)
def test_lines_that_do_not_match_the_grammar_are_ignored(line: str) -> None:
    assert parse_ack_lines(line) == []


def test_acks_are_picked_out_of_prose_and_the_last_line_for_a_step_wins() -> None:
    notes = "Sources look good.\n✓ 1. Gather sources\n… 2. Draft\nthen review\n✗ 1 retry\n□ [3]"
    updates = parse_ack_lines(notes)
    assert [(u.n, u.status) for u in updates] == [(1, "failed"), (2, "in_progress"), (3, "pending")]
    assert updates[0].line == "✗ 1 retry"


def test_step_zero_is_parsed_so_that_ack_can_report_it() -> None:
    assert parse_ack_lines("✓ 0.") == [AckUpdate(0, "done", "✓ 0.")]


@given(st.text())
def test_parsing_any_text_never_fails_and_yields_distinct_steps(text: str) -> None:
    numbers = [u.n for u in parse_ack_lines(text)]
    assert len(numbers) == len(set(numbers))


@given(st.lists(st.sampled_from(list(MARKS)), min_size=1, max_size=8))
def test_announce_lines_of_a_plan_read_back_as_its_statuses(statuses: list[StepStatus]) -> None:
    steps = tuple(PlanStep(n, f"step {n}", s) for n, s in enumerate(statuses, start=1))
    plan = Plan("plan_1", "turn_1", steps)
    updates = parse_ack_lines("\n".join(plan.lines()))
    assert [(u.n, u.status) for u in updates] == [(s.n, s.status) for s in steps]


# --- plans -----------------------------------------------------------------------------


def test_a_new_plan_is_current_with_pending_steps_and_revision_one() -> None:
    plan = PlanBook().apply("new", turn_id="turn_1", steps=STEPS)
    assert plan.plan_id == "plan_1"
    assert plan.origin_turn_id == "turn_1"
    assert plan.state == "current"
    assert plan.revision == 1
    assert plan.lines() == ["□ 1. Gather sources", "□ 2. Draft report", "□ 3. Review"]
    assert not plan.complete


def test_a_second_new_plan_becomes_current_and_the_first_becomes_open() -> None:
    book = book_with(STEPS, ["Other"])
    first, second = book.plans()
    assert (first.plan_id, first.state, first.revision) == ("plan_1", "open", 1)
    assert book.current == second
    assert second.plan_id == "plan_2"


def test_new_uses_the_given_plan_id_or_the_id_factory() -> None:
    book = PlanBook()
    assert book.apply("new", turn_id="t", plan_id="plan_abc", steps=["a"]).plan_id == "plan_abc"
    assert book.apply("new", turn_id="t", plan_id="conv:7-a", steps=["a"]).plan_id == "conv:7-a"
    assert book.apply("new", turn_id="t", steps=["a"], new_id=lambda: "p-9").plan_id == "p-9"
    assert book.apply("new", turn_id="t", steps=["a"], new_id=lambda: "p-9").plan_id == "plan_4"


def test_default_ids_skip_ids_already_taken() -> None:
    book = PlanBook()
    book.apply("new", turn_id="t", plan_id="plan_2", steps=["a"])
    assert book.apply("new", turn_id="t", steps=["a"]).plan_id == "plan_3"


def test_mode_is_read_without_case_or_surrounding_spaces() -> None:
    assert PlanBook().apply(" NEW ", turn_id="t", steps=["a"]).state == "current"


def test_step_labels_have_their_whitespace_collapsed() -> None:
    plan = PlanBook().apply("new", turn_id="t", steps=["  Gather\n  sources "])
    assert plan.steps[0].label == "Gather sources"


def test_limits_on_step_count_and_label_length_are_inclusive() -> None:
    plan = PlanBook().apply("new", turn_id="t", steps=["x" * MAX_LABEL] * MAX_STEPS)
    assert len(plan.steps) == MAX_STEPS


@pytest.mark.parametrize("mode", ["delete", "", "update"])
def test_an_unknown_mode_is_a_plan_mode_error(mode: str) -> None:
    with raises_code("plan_mode"):
        PlanBook().apply(mode, turn_id="t", steps=["a"])


def test_new_with_an_existing_plan_id_is_a_plan_mode_error() -> None:
    book = book_with(STEPS)
    with raises_code("plan_mode"):
        book.apply("new", turn_id="t", plan_id="plan_1", steps=["a"])


@pytest.mark.parametrize(
    "steps",
    [
        None,
        [],
        "Gather sources",
        [""],
        ["  \n"],
        [1],
        ["a", None],
        ["x"] * (MAX_STEPS + 1),
        ["x" * (MAX_LABEL + 1)],
    ],
)
@pytest.mark.parametrize("mode", ["new", "replace"])
def test_missing_or_invalid_steps_are_a_plan_steps_error(steps: Any, mode: str) -> None:
    book = book_with(STEPS)
    with raises_code("plan_steps"):
        book.apply(mode, turn_id="t", plan_id="plan_1", steps=steps)


@pytest.mark.parametrize("mode", ["activate", "replace", "close"])
@pytest.mark.parametrize("plan_id", [None, ""])
def test_modes_on_an_existing_plan_need_a_plan_id(mode: str, plan_id: str | None) -> None:
    with raises_code("plan_target_required"):
        book_with(STEPS).apply(mode, turn_id="t", plan_id=plan_id, steps=["a"])


@pytest.mark.parametrize("plan_id", ["has space", "a.b", "x" * 129])
def test_new_with_an_unusable_plan_id_is_a_plan_target_required_error(plan_id: str) -> None:
    with raises_code("plan_target_required"):
        PlanBook().apply("new", turn_id="t", plan_id=plan_id, steps=["a"])


@pytest.mark.parametrize("mode", ["activate", "replace", "close"])
def test_modes_on_an_unknown_plan_are_a_plan_target_missing_error(mode: str) -> None:
    with raises_code("plan_target_missing"):
        book_with(STEPS).apply(mode, turn_id="t", plan_id="plan_9", steps=["a"])


def test_activating_a_closed_plan_is_a_plan_target_missing_error() -> None:
    book = book_with(STEPS)
    book.apply("close", turn_id="t", plan_id="plan_1")
    with raises_code("plan_target_missing"):
        book.apply("activate", turn_id="t", plan_id="plan_1")


def test_activate_makes_an_open_plan_current_and_demotes_the_current_one() -> None:
    book = book_with(STEPS, ["Other"])
    plan = book.apply("activate", turn_id="t", plan_id="plan_1")
    assert (plan.state, plan.revision) == ("current", 2)
    assert book.current == plan
    assert stored(book, "plan_2").state == "open"


def test_activating_the_current_plan_changes_nothing() -> None:
    book = book_with(STEPS)
    before = book.current
    assert book.apply("activate", turn_id="t", plan_id="plan_1") is before


def test_closing_the_current_plan_leaves_no_plan_current() -> None:
    book = book_with(["Other"], STEPS)
    closed = book.apply("close", turn_id="t", plan_id="plan_2")
    assert (closed.state, closed.revision) == ("closed", 2)
    assert book.current is None
    assert book.get("plan_1") == Plan("plan_1", "turn_1", (PlanStep(1, "Other"),), "open")


def test_closing_an_open_plan_keeps_the_current_plan() -> None:
    book = book_with(["Other"], STEPS)
    book.apply("close", turn_id="t", plan_id="plan_1")
    assert book.current is not None and book.current.plan_id == "plan_2"


def test_closing_a_closed_plan_changes_nothing() -> None:
    book = book_with(STEPS)
    closed = book.apply("close", turn_id="t", plan_id="plan_1")
    assert book.apply("close", turn_id="t", plan_id="plan_1") is closed


def test_replace_keeps_statuses_of_unchanged_steps_at_the_same_position() -> None:
    book = book_with(STEPS)
    book.ack(parse_ack_lines("✓ 1.\n✗ 2.\n… 3."))
    plan = book.apply(
        "replace", turn_id="turn_2", plan_id="plan_1", steps=["Gather sources", "Review", "Draft"]
    )
    assert [(s.label, s.status) for s in plan.steps] == [
        ("Gather sources", "done"),
        ("Review", "pending"),
        ("Draft", "pending"),
    ]
    assert (plan.origin_turn_id, plan.revision, plan.state) == ("turn_1", 3, "current")


def test_replace_makes_an_open_or_closed_plan_current() -> None:
    book = book_with(STEPS, ["Other"])
    book.apply("close", turn_id="t", plan_id="plan_1")
    plan = book.apply("replace", turn_id="t", plan_id="plan_1", steps=STEPS)
    assert book.current == plan
    assert stored(book, "plan_2").state == "open"


# --- acknowledgements on the plan book ------------------------------------------------


def test_acks_update_the_current_plan_and_bump_its_revision() -> None:
    book = book_with(STEPS)
    plan, ignored = book.ack(parse_ack_lines("✓ 1. Gather\n… 2. Draft"))
    assert ignored == []
    assert plan is not None and plan == book.current
    assert plan.lines() == ["✓ 1. Gather sources", "… 2. Draft report", "□ 3. Review"]
    assert plan.revision == 2


def test_acks_apply_only_to_the_current_plan() -> None:
    book = book_with(STEPS, ["Other", "More"])
    plan, _ = book.ack([AckUpdate(1, "done", "✓ 1.")])
    assert plan is not None and plan.plan_id == "plan_2"
    assert stored(book, "plan_1").steps[0].status == "pending"


def test_acks_without_a_current_plan_are_reported_and_ignored() -> None:
    book = book_with(STEPS)
    book.apply("close", turn_id="t", plan_id="plan_1")
    assert book.ack([AckUpdate(1, "done", "✓ 1.")]) == (None, ["no current plan"])


def test_out_of_range_steps_are_reported_and_the_rest_applied() -> None:
    book = book_with(STEPS)
    plan, ignored = book.ack(parse_ack_lines("✓ 0.\n✓ 7.\n✓ 2."))
    assert ignored == [
        "step 0 out of range (plan has 3 steps)",
        "step 7 out of range (plan has 3 steps)",
    ]
    assert plan is not None and [s.status for s in plan.steps] == ["pending", "done", "pending"]


def test_acks_that_change_nothing_return_no_snapshot() -> None:
    book = book_with(STEPS)
    book.ack([AckUpdate(1, "done", "✓ 1.")])
    assert book.ack([AckUpdate(1, "done", "✓ 1."), AckUpdate(2, "pending", "□ 2.")]) == (None, [])
    assert book.ack([]) == (None, [])
    assert book.current is not None and book.current.revision == 2


@pytest.mark.parametrize(
    "update", [("1", "done"), (1, "finished"), (True, "done")], ids=["str", "status", "bool"]
)
def test_malformed_updates_are_a_plan_ack_updates_error(update: tuple[Any, Any]) -> None:
    with raises_code("plan_ack_updates"):
        book_with(STEPS).ack([AckUpdate(update[0], update[1], "line")])


def test_a_plan_is_complete_when_every_step_is_done_or_failed() -> None:
    book = book_with(STEPS)
    plan, _ = book.ack(parse_ack_lines("✓ 1.\n✗ 2.\n✓ 3."))
    assert plan is not None and plan.complete and plan.state == "current"


def test_ack_text_lists_the_updated_steps_with_their_labels() -> None:
    plan = book_with(STEPS).current
    assert plan is not None
    updates = parse_ack_lines("✓ 1.\n… 2 started\n✓ 9.")
    assert ack_text(plan, updates) == "plan plan_1: ✓ 1. Gather sources · … 2. Draft report"
    assert ack_text(plan, []) == "plan plan_1: no step updates"


# --- snapshots and replay ---------------------------------------------------------------


def test_a_plan_snapshot_is_json_safe_and_round_trips() -> None:
    book = book_with(STEPS)
    plan, _ = book.ack(parse_ack_lines("✓ 1."))
    assert plan is not None
    data = json.loads(json.dumps(plan.to_dict()))
    assert data == {
        "plan_id": "plan_1",
        "origin_turn_id": "turn_1",
        "state": "current",
        "revision": 2,
        "steps": [
            {"n": 1, "label": "Gather sources", "status": "done"},
            {"n": 2, "label": "Draft report", "status": "pending"},
            {"n": 3, "label": "Review", "status": "pending"},
        ],
    }
    assert Plan.from_dict(data) == plan


def test_a_snapshot_without_state_or_revision_reads_as_a_new_current_plan() -> None:
    data = {
        "plan_id": "plan_abc123",
        "origin_turn_id": "turn_001",
        "steps": [{"n": 1, "label": "Gather sources", "status": "done"}, {"n": 2, "label": "x"}],
    }
    plan = Plan.from_dict(data)
    assert (plan.state, plan.revision, plan.steps[1].status) == ("current", 1, "pending")


GOOD: dict[str, Any] = {"plan_id": "p", "origin_turn_id": "t", "steps": [{"n": 1, "label": "a"}]}


@pytest.mark.parametrize(
    "patch",
    [
        {"plan_id": None},
        {"plan_id": "a b"},
        {"origin_turn_id": 5},
        {"steps": None},
        {"steps": []},
        {"steps": ["a"]},
        {"steps": [{"n": 2, "label": "a"}]},
        {"steps": [{"n": 1, "label": ""}]},
        {"steps": [{"n": "1", "label": "a"}]},
        {"steps": [{"n": 1, "label": "a", "status": "skipped"}]},
        {"state": "active"},
        {"revision": 0},
        {"revision": True},
    ],
)
def test_bad_snapshot_data_is_a_plan_steps_error(patch: dict[str, Any]) -> None:
    with raises_code("plan_steps"):
        Plan.from_dict({**GOOD, **patch})


def test_a_snapshot_that_is_not_an_object_is_a_plan_steps_error() -> None:
    with raises_code("plan_steps"):
        Plan.from_dict([])  # type: ignore[arg-type]


def test_a_plan_book_round_trips_through_its_dict() -> None:
    book = book_with(STEPS, ["Other"], ["Third"])
    book.apply("close", turn_id="t", plan_id="plan_2")
    book.ack(parse_ack_lines("✓ 1."))
    data = json.loads(json.dumps(book.to_dict()))
    again = PlanBook.from_dict(data)
    assert again.plans() == book.plans()
    assert again.current == book.current
    assert data["current"] == "plan_3"


def test_a_plan_book_dict_whose_current_disagrees_with_the_states_is_rejected() -> None:
    data = book_with(STEPS).to_dict()
    with raises_code("plan_steps"):
        PlanBook.from_dict({**data, "current": None})
    with raises_code("plan_steps"):
        PlanBook.from_dict({"plans": "nope"})


def test_loading_a_current_snapshot_demotes_the_previous_current_plan() -> None:
    book = book_with(STEPS)
    book.load(Plan("plan_x", "turn_2", (PlanStep(1, "a"),)))
    assert book.current is not None and book.current.plan_id == "plan_x"
    assert stored(book, "plan_1").state == "open"
    book.load(Plan("plan_x", "turn_2", (PlanStep(1, "a"),), "open", 2))
    assert book.current is None


def test_plan_errors_keep_their_code_through_pickling() -> None:
    error = pickle.loads(pickle.dumps(PlanError("plan_steps", "steps must not be empty")))
    assert (error.code, error.detail) == ("plan_steps", "steps must not be empty")


labels = st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4)
targets = st.sampled_from([None, "plan_1", "plan_2", "plan_3", "plan_9"])
operations = st.one_of(
    st.tuples(st.just("new"), st.none(), labels),
    st.tuples(st.sampled_from(["activate", "close", "replace", "bogus"]), targets, labels),
    st.tuples(
        st.just("ack"),
        st.none(),
        st.lists(st.tuples(st.integers(-1, 5), st.sampled_from(list(MARKS))), max_size=4),
    ),
)


@given(st.lists(operations, max_size=25))
def test_replaying_every_returned_snapshot_rebuilds_the_same_book(
    ops: list[tuple[str, str | None, Any]],
) -> None:
    live = PlanBook()
    snapshots: list[Plan] = []
    for mode, plan_id, arg in ops:
        if mode == "ack":
            plan, _ = live.ack([AckUpdate(n, status, "") for n, status in arg])
            snapshots.extend([plan] if plan is not None else [])
            continue
        try:
            snapshots.append(live.apply(mode, turn_id="t", plan_id=plan_id, steps=arg))
        except PlanError as error:
            assert error.code.startswith("plan_")
    replayed = PlanBook()
    for snapshot in snapshots:
        replayed.load(Plan.from_dict(snapshot.to_dict()))
    assert replayed.current == live.current
    assert replayed.plans() == live.plans()
    assert [p.state for p in live.plans()].count("current") == (live.current is not None)


# --- internal note tags ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "tag", "text"),
    [
        ("[P] Prefers short answers", "P", "Prefers short answers"),
        ("- [D] Use PostgreSQL", "D", "Use PostgreSQL"),
        ("  * [S] API is REST", "S", "API is REST"),
        ("[A]Report shipped", "A", "Report shipped"),
        ("[K] fi:turn_1.files/report.md", "K", "fi:turn_1.files/report.md"),
        ("[K]", "K", ""),
        ("[X] not a tag", None, "[X] not a tag"),
        ("[p] lower case is not a tag", None, "[p] lower case is not a tag"),
        ("see [D] later", None, "see [D] later"),
        ("- plain bullet", None, "- plain bullet"),
    ],
)
def test_note_lines_are_read_with_their_tags(line: str, tag: str | None, text: str) -> None:
    assert parse_note(line) == [NoteLine(tag, text)]


def test_empty_lines_are_skipped_and_tags_are_listed_once_in_order() -> None:
    note = "[D] Use A\n\n   \n[P] Terse\nplain\n[D] Also B\n[K] out.md"
    assert [line.tag for line in parse_note(note)] == ["D", "P", None, "D", "K"]
    assert note_tags(note) == ["D", "P", "K"]
    assert set(note_tags(note)) <= set(NOTE_TAGS)


def test_format_note_writes_tags_back_in_brackets() -> None:
    lines = [NoteLine("D", "Use A"), NoteLine(None, "plain"), NoteLine("K", "")]
    assert format_note(lines) == "[D] Use A\nplain\n[K]"
    assert parse_note(format_note(lines)) == lines


@given(st.text())
def test_format_note_is_the_inverse_of_parse_note(text: str) -> None:
    lines = parse_note(text)
    assert parse_note(format_note(lines)) == lines
