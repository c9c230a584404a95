"""What a turn makes of a reply that broke the decision protocol: the notice names the
cause (an empty reply, the output limit, a loop the runtime stopped), and the answer of
a turn that ends ``protocol_failed`` is the prose the model did write."""

from __future__ import annotations

from actline.actors.turn.events import ModelDecided, ProtocolViolation
from actline.actors.turn.protocol import CallLedger
from actline.actors.turn.reply import classify_reply
from actline.actors.turn.salvage import MAX_CHARS, answer_from_replies, clean, salvage
from actline.channels import OUTSIDE


def classify(channels: dict[str, str], stop_reason: str = "") -> ProtocolViolation | ModelDecided:
    out = classify_reply(
        1,
        channels,
        ledger=CallLedger(),
        external=[],
        max_calls=5,
        tokens=10,
        stop_reason=stop_reason,
    )
    assert isinstance(out.event, ProtocolViolation | ModelDecided)
    return out.event


def test_an_empty_reply_is_named_empty() -> None:
    event = classify({"thinking": "", "decision": ""})
    assert isinstance(event, ProtocolViolation) and event.code == "empty_reply"
    assert classify({}).code == "empty_reply"


def test_a_reply_cut_at_the_output_limit_says_so_and_what_it_broke() -> None:
    event = classify({"thinking": "I will", "decision": '{"action": "call_'}, "max_tokens")
    assert isinstance(event, ProtocolViolation) and event.code == "truncated"
    assert "output limit (max_tokens)" in event.detail and "schema_error" in event.detail


def test_a_reply_stopped_in_a_loop_says_so() -> None:
    event = classify({OUTSIDE: "I am thinking. " * 40}, "repetition")
    assert isinstance(event, ProtocolViolation) and event.code == "repetition"
    assert "missing_decision" in event.detail


def test_a_usable_decision_at_the_output_limit_is_used() -> None:
    decision = '{"action": "call_tools", "calls": [{"tool": "react.search_knowledge", '
    decision += '"params": {"query": "tiers"}}]}'
    event = classify({"decision": decision}, "max_tokens")
    assert isinstance(event, ModelDecided) and event.calls[0].tool == "react.search_knowledge"


def test_a_broken_reply_for_another_reason_keeps_its_own_code() -> None:
    event = classify({"decision": "not json"}, "end_turn")
    assert isinstance(event, ProtocolViolation) and event.code == "schema_error"


def test_salvage_prefers_the_answer_then_the_text_outside_then_the_thinking() -> None:
    assert salvage({"answer": "A.", OUTSIDE: "B.", "thinking": "C."}) == "A."
    assert salvage({"answer": " ", OUTSIDE: "B.", "thinking": "C."}) == "B."
    assert salvage({"thinking": "The tiers are Free and Pro.", "decision": "{"}) == (
        "The tiers are Free and Pro."
    )
    assert salvage({"decision": '{"action": "complete"}'}) == ""


def test_salvage_drops_half_written_tags_and_repeated_sentences() -> None:
    text = "<channel:thinking>Pro costs $20. Pro costs $20. Pro  costs $20.\nFree is free.</chan"
    assert clean(text) == "Pro costs $20.\nFree is free."


def test_lines_that_echo_the_rendered_context_are_dropped() -> None:
    text = "\n".join(
        [
            "══════ TURN t-01ABC (started 2026-11-29T07:00:00Z) ══════",
            "[USER MESSAGE] ar:t-01ABC.user.prompt (started 07:00)",
            "What does Pro cost?",
            "react. notice. 2. 2 · protocol_violation.missing_decision",
            "I would call react.search_knowledge with the query.",
            "The Pro tier costs $20 a month, see ks:pricing/tiers.md.",
            "The decision channel holds exactly one JSON object:",
            "The Pro tier costs $20 a month.",
        ]
    )
    assert clean(text) == "What does Pro cost?\nThe Pro tier costs $20 a month."


def test_a_decision_without_its_tags_is_not_prose() -> None:
    assert clean('{"action": "call_tools", "calls": []}') == ""
    assert clean("[1, 2]") == ""
    assert clean("{not json at all}") == "{not json at all}"


def test_a_long_salvage_is_cut_at_a_sentence_end() -> None:
    text = " ".join(f"Sentence number {i} says something new." for i in range(400))
    out = clean(text)
    assert len(out) <= MAX_CHARS + 2 and out.endswith(". …")


def test_with_nothing_salvaged_the_answer_says_why() -> None:
    assert answer_from_replies("", "3 broken replies") == (
        "The model gave no usable answer: 3 broken replies."
    )
    assert answer_from_replies("Pro costs $20.", "x") == "Pro costs $20."
