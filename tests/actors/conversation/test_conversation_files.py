"""ANNOUNCE's workspace lines of a conversation (``actline.actors.conversation.files``): made once
per turn, and not read at all for a turn that begins while the workspace is known empty."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from actline.actors import NodeSettings
from actline.actors.conversation.files import ConversationFiles
from actline.messages import Attachment
from actline.storage import Store
from actline.tools.workspace.workspace import CustomWorkspace, WorkspaceBackend


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "home")
    yield s
    s.close()


class CountedReads:
    """Counts the workspace's tree reads (the read the lines cost), then reads for real."""

    def __init__(self, workspace: WorkspaceBackend) -> None:
        self.calls = 0
        self._trees = workspace.trees

        def trees(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return self._trees(*args, **kwargs)

        workspace.trees = trees  # type: ignore[method-assign]


def files_of(
    store: Store, tmp_path: Path, mode: str = "custom"
) -> tuple[ConversationFiles, CountedReads]:
    settings = NodeSettings(home=tmp_path / "home", node_id="n-files", workspace_mode=mode)
    files = ConversationFiles("c1", settings, store)
    return files, CountedReads(files.workspace)


async def test_an_empty_workspace_is_read_once_and_stays_known_empty_across_turns(
    store: Store, tmp_path: Path
) -> None:
    files, reads = files_of(store, tmp_path)
    assert isinstance(files.workspace, CustomWorkspace)
    await files.begin("t1")
    assert files.lines("t1") == [] and files.lines("t1") == []
    assert reads.calls == 1
    for turn in ("t2", "t3"):
        await files.begin(turn)
        assert files.lines(turn) == []
    assert reads.calls == 1  # nothing was written: no turn since needed a read


async def test_a_write_makes_the_lines_again_and_later_turns_see_the_file(
    store: Store, tmp_path: Path
) -> None:
    files, reads = files_of(store, tmp_path)
    await files.begin("t1")
    assert files.lines("t1") == []
    files.workspace.write("t1", "files", "app/main.py", b"print(1)\n")
    files.changed()  # what the conversation does after a file tool ran
    lines = files.lines("t1")
    assert reads.calls == 2
    assert any("active files: 1" in line for line in lines)
    await files.begin("t2")
    later = files.lines("t2")
    assert reads.calls == 3
    assert any("files/app/main.py" in line and "from t1" in line for line in later)


async def test_attachments_and_discards_forget_that_the_workspace_was_empty(
    store: Store, tmp_path: Path
) -> None:
    files, reads = files_of(store, tmp_path)
    await files.begin("t1")
    assert files.lines("t1") == []
    stored = await files.attachments("t1", [Attachment(name="a.txt", data=b"hello")])
    assert stored
    await files.begin("t2")
    files.lines("t2")
    assert reads.calls == 2  # read again: something was stored since
    await files.discard("t1", stored)
    await files.begin("t3")
    files.lines("t3")
    assert reads.calls == 3


async def test_git_mode_reads_each_turn_anew(store: Store, tmp_path: Path) -> None:
    """A git workspace's turn commits what its work tree held: nothing carries over."""
    files, reads = files_of(store, tmp_path, "git")
    assert files.workspace.slow
    for n, turn in enumerate(("t1", "t2", "t3"), start=1):
        await files.begin(turn)
        assert files.lines(turn) == []
        assert reads.calls == n
        await files.close(turn)
