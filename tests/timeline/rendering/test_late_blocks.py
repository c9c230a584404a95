"""A block that arrives after a render lands after everything rendered.

A followup stamped a little in the past (the sender's clock, or a message that
waited in a queue) used to be placed by its timestamp, inside the prefix the model
had already been sent; now it lands after the last rendered block and keeps its
timestamp as metadata.
"""

from __future__ import annotations

from actline.timeline import Renderer, Timeline, TimelineConfig
from actline.timeline.blocks import USER_FOLLOWUP, Block
from actline.timeline.paths import ar_path
from tests.timeline.builders import Build, words


def conversation() -> tuple[Build, Renderer]:
    b = Build()
    b.turn("t1", words(50, "question"))
    b.rounds(4, size=120)
    return b, Renderer(b.tl, TimelineConfig())


def late_followup(b: Build, ts: float, name: str = "m1", turn: str = "t1") -> Block:
    path = ar_path(turn, f"user.followup.{name}")
    return b.tl.append(Block.new(USER_FOLLOWUP, turn, ts, path=path, text="also this"))


def test_before_any_render_a_block_is_placed_by_its_time() -> None:
    b, _ = conversation()
    early = b.tl.blocks[3].ts - 0.5
    block = late_followup(b, early)
    assert b.tl.index_of(block) == 3
    assert "placed" not in block.meta


def test_a_followup_stamped_in_the_past_lands_after_everything_rendered() -> None:
    b, renderer = conversation()
    first = renderer.render(now=b.at())
    before = [block.id for block in b.tl.blocks]
    stamped = b.tl.blocks[3].ts - 0.5  # older than most of what the model has seen
    block = late_followup(b, stamped)
    assert [x.id for x in b.tl.blocks] == [*before, block.id]
    assert block.ts == stamped  # the sender's time stays as metadata
    assert block.meta["placed"] == ["t1", b.tl.blocks[-2].start]
    second = renderer.render(now=b.at())
    n = len(first.stable)
    assert list(second.stable[:n]) == list(first.stable)  # the rendered prefix is unchanged
    assert second.stable[n]["text"].endswith("also this")
    assert renderer.sync() == 0


def test_later_blocks_still_sort_by_time_among_themselves() -> None:
    """Between renders the usual order holds: a streamed completion that began before a
    followup sorts before it; only the rendered prefix is fixed."""
    b, renderer = conversation()
    renderer.render(now=b.at())
    rendered = len(b.tl)
    stream_start = b.at()
    followup = late_followup(b, b.at())
    completion = b.tl.append(
        Block.new("assistant.completion", "t1", b.at(), ts_first=stream_start, text="done")
    )
    assert b.tl.blocks[rendered:] == [completion, followup]
    assert "placed" not in completion.meta and "placed" not in followup.meta


def test_two_late_blocks_keep_their_arrival_order() -> None:
    b, renderer = conversation()
    renderer.render(now=b.at())
    old = b.tl.blocks[2].ts
    first = late_followup(b, old, "m1")
    second = late_followup(b, old - 1.0, "m2")
    assert b.tl.blocks[-2:] == [first, second]


def test_a_late_block_of_an_earlier_turn_also_lands_after_the_rendered_prefix() -> None:
    b, renderer = conversation()
    b.completion("answer one")
    b.turn("t2", "next question")
    b.rounds(2, size=60, prefix="d")
    renderer.render(now=b.at())
    block = late_followup(b, b.tl.blocks[2].ts, turn="t1")
    assert b.tl.blocks[-1] is block
    assert block.meta["placed"][0] == "t2"


def test_restore_puts_a_late_block_back_where_it_landed_and_keeps_the_floor() -> None:
    b, renderer = conversation()
    renderer.render(now=b.at())
    late = late_followup(b, b.tl.blocks[2].ts)
    renderer.render(now=b.at())
    stored = [x.to_dict() for x in reversed(b.tl.blocks)]
    restored = Timeline.restore(b.tl.snapshot(), stored)
    assert [x.id for x in restored.blocks] == [x.id for x in b.tl.blocks]
    assert restored.rendered_block is not None and restored.rendered_block.id == late.id
    again = Build(restored, t0=b.clock)
    after_restart = late_followup(again, restored.blocks[2].ts, "m2")
    assert restored.blocks[-1] is after_restart


def test_a_snapshot_without_a_render_has_no_floor() -> None:
    b, _ = conversation()
    snapshot = b.tl.snapshot()
    assert snapshot["rendered_block"] is None
    restored = Timeline.restore(snapshot, [x.to_dict() for x in b.tl.blocks])
    assert restored.rendered_block is None
