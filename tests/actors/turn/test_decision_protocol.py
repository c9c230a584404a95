"""The decision channel contract: every bad decision becomes a notice, never a crash."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from actline.actors.turn.events import ToolSpec
from actline.actors.turn.protocol import CallLedger, canonical, check_decision


def decision(action: str = "call_tools", calls: list[dict[str, object]] | None = None) -> str:
    body: dict[str, object] = {"action": action}
    if calls is not None:
        body["calls"] = calls
    return json.dumps(body)


def read(*paths: str) -> dict[str, object]:
    return {"tool": "react.read", "params": {"paths": list(paths)}}


def test_a_valid_decision_gives_its_calls_and_no_notice() -> None:
    checked = check_decision(decision(calls=[read("ks:a.md"), read("ks:b.md")]))
    assert checked.valid and checked.action == "call_tools"
    assert [c.params["paths"] for c in checked.calls] == [["ks:a.md"], ["ks:b.md"]]
    assert checked.notices == ()


def test_a_fenced_decision_is_accepted() -> None:
    fenced = "```json\n" + decision("complete") + "\n```"
    assert check_decision(fenced).action == "complete"


def test_malformed_json_is_a_schema_notice() -> None:
    checked = check_decision('{"action": "call_tools", "calls": [')
    assert not checked.valid
    assert [n.full_code for n in checked.notices] == ["protocol_violation.schema_error"]


def test_an_unknown_action_names_the_allowed_ones() -> None:
    (notice,) = check_decision(decision("dance")).notices
    assert (
        notice.code == "invalid_action:dance" and "call_tools | complete | exit" in notice.message
    )


def test_six_calls_run_the_first_five_and_refuse_the_sixth() -> None:
    checked = check_decision(decision(calls=[read(f"ks:{i}.md") for i in range(6)]))
    assert len(checked.calls) == 5
    assert [n.code for n in checked.notices] == ["too_many_calls"]


def test_an_unknown_tool_is_refused_alone() -> None:
    checked = check_decision(
        decision(calls=[{"tool": "web.nuke", "params": {}}, read("ks:a.md")]),
        external=["web.fetch"],
    )
    assert [c.tool for c in checked.calls] == ["react.read"]
    assert [n.code for n in checked.notices] == ["unknown_tool_id"]
    assert check_decision(
        decision(calls=[{"tool": "web.fetch", "params": {"url": "x"}}]), external=["web.fetch"]
    ).calls


def test_bad_params_are_named() -> None:
    checked = check_decision(decision(calls=[{"tool": "react.read", "params": {"path": "ks:a"}}]))
    assert checked.notices[0].code == "bad_params" and "paths" in checked.notices[0].message
    empty = check_decision(decision(calls=[read()]))
    assert empty.notices[0].code == "bad_params" and not empty.valid


def test_react_write_parameter_order_is_enforced() -> None:
    ok = {"path": "files/a.md", "channel": "internal", "content": "[K] x", "kind": "file"}
    assert check_decision(decision(calls=[{"tool": "react.write", "params": ok}])).calls
    swapped = {"channel": "internal", "path": "files/a.md", "content": "[K] x", "kind": "file"}
    checked = check_decision(decision(calls=[{"tool": "react.write", "params": swapped}]))
    assert checked.notices[0].code == "path_not_first" and not checked.calls


def test_complete_with_calls_drops_them_and_an_answer_with_calls_completes() -> None:
    dropped = check_decision(decision("complete", calls=[read("ks:a.md")]))
    assert dropped.action == "complete" and dropped.calls == ()
    assert dropped.notices[0].code == "final_answer_with_tool_call"
    coerced = check_decision(decision(calls=[read("ks:a.md")]), answer="The answer.")
    assert coerced.action == "complete" and coerced.calls == ()


def test_the_fourth_identical_call_in_a_turn_is_refused() -> None:
    ledger = CallLedger()
    call = ToolSpec("c1-1", "react.read", {"paths": ["ks:a.md"]})
    same = ToolSpec("c1-1", "react.read", {"paths": ["ks:a.md"]})
    assert [ledger.admit(c) for c in (call, same, call)] == [None, None, None]
    refused = ledger.admit(same)
    assert refused is not None and refused.code == "repeated_call"
    assert ledger.admit(ToolSpec("c1-1", "react.read", {"paths": ["ks:b.md"]})) is None


def test_a_ledger_rebuilt_from_its_counts_refuses_the_same_fourth_call() -> None:
    call = ToolSpec("c1-1", "react.read", {"paths": ["ks:a.md"]})
    ledger = CallLedger()
    for _ in range(3):
        ledger.admit(call)
    again = CallLedger.of(ledger.counts())  # a resumed turn's, from its checkpoint
    assert again.counts() == ledger.counts() and len(again.counts()) == 1
    refused = again.admit(call)
    assert refused is not None and refused.code == "repeated_call"
    assert CallLedger.of(None).admit(call) is None


def test_canonical_arguments_ignore_key_order() -> None:
    assert canonical("t", {"a": 1, "b": 2}) == canonical("t", {"b": 2, "a": 1})


@given(st.text(max_size=300))
def test_any_text_gives_a_result_or_a_notice_never_an_exception(text: str) -> None:
    checked = check_decision(text)
    assert checked.valid or checked.notices
