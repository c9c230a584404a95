"""Dispatch of the react.* tools: unknown tools and bad params, the order of an outcome's
blocks, and the notice codes."""

from __future__ import annotations

import pytest

from actline.timeline.blocks import NOTICE, TOOL_RESULT
from actline.tools import KnowledgeSpace
from actline.tools.react.core import Notice

from .conversation import TOOLS, Conv, refused

# -- dispatch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["agent.send", "react.nope", "code.exec_python"])
def test_a_tool_that_is_not_react_is_unavailable_here(tool: str) -> None:
    conv = Conv()
    conv.begin("t1")
    out = conv.run(tool, {"paths": ["fi:t1.files/a/b.md"]})
    assert refused(out, "tool_unavailable")
    assert "is not a react.* tool" in out.notices[0].message


def test_params_that_are_not_an_object_are_refused() -> None:
    conv = Conv()
    conv.begin("t1")
    out = TOOLS.run("react.read", ["ks:a.md"], conv.ctx())  # type: ignore[arg-type]
    assert refused(out, "bad_params")


def test_the_outcome_blocks_are_result_then_content_then_notices(kb: KnowledgeSpace) -> None:
    conv = Conv(knowledge=kb)
    conv.begin("t1")
    ctx = conv.ctx()
    out = TOOLS.run("react.read", {"paths": ["ks:pricing/tiers.md", "ks:nope.md"]}, ctx)
    blocks = out.to_blocks(ctx)
    assert [(b.type, b.path) for b in blocks] == [
        (TOOL_RESULT, "tc:t1.c1.result"),
        (TOOL_RESULT, "ks:pricing/tiers.md"),
        (NOTICE, "tc:t1.c1.notice"),
    ]
    assert blocks[0].data == out.result and blocks[0].data["status"] == "partial"
    assert all(b.ts == ctx.now and b.call_id == "c1" for b in blocks)


def test_protocol_codes_are_prefixed_and_tool_codes_are_not() -> None:
    assert Notice("plan_mode", "m").full_code == "protocol_violation.plan_mode"
    assert Notice("read_paths_missing", "m").full_code == "read_paths_missing"
    assert TOOLS.names == {
        "react.read",
        "react.write",
        "react.plan",
        "react.hide",
        "react.memsearch",
        "react.search_knowledge",
        "react.pull",
        "react.patch",
        "react.checkout",
        "react.search_files",
    }
