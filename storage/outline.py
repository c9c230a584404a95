"""What a list of conversations and the console show of one, read without loading it.

``outline`` (title, turns, last turn) and ``turn_briefs`` (each turn's prompt and answer)
read a bounded part of a conversation in one transaction: their cost never grows with its
tool results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lmdb

from actline.timeline.blocks import COMPLETION, STAGE_GATE, USER_PROMPT

from .environment import Environment
from .layout import block_key, check_id, path_key, unpack


@dataclass(frozen=True, slots=True)
class Outline:
    """What a list of conversations shows of one, read without loading it (``Store.outline``)."""

    title: str
    """Its own title when it was renamed (``actline.storage.manage``), else the title its
    first turn's gate wrote (the latest ``stage.gate`` block at that path:
    a model's title follows the first one), else the first line of the first user block
    with text, among the first ``OUTLINE_HEAD``."""
    turns: int
    """Its turns that have a decision-loop record (every turn that ran a round)."""
    last_turn: str
    """The turn of its last block."""
    last_status: str
    """That turn's record status (``running``, ``completed``, …); "" without a record."""
    last_ts: float
    """Its last block's time."""


@dataclass(frozen=True, slots=True)
class TurnBrief:
    """What the console shows of one stored turn (``Store.turn_briefs``)."""

    turn_id: str
    prompt: str
    """The text of its first ``user.prompt`` block with text ("" without one)."""
    answer: str
    """The text of its last ``assistant.completion`` block with text ("" without one)."""


OUTLINE_HEAD = 20
"""Blocks from a conversation's start that ``Store.outline`` looks through for its title."""


class ConversationLister(Environment):
    """Outlines and turn briefs of stored conversations."""

    def outline(self, cid: str) -> Outline:
        """A conversation's title, turns and last turn in one read, whatever its length: the
        first ``OUTLINE_HEAD`` blocks at most, its last block, and its turn records' keys."""
        check_id(cid)
        prefix = f"{cid}/".encode()

        def fn(txn: lmdb.Transaction) -> Outline:
            blocks = txn.cursor(db=self.db["blocks"])
            title = first_line = ""
            if blocks.set_range(prefix):
                for n, (key, raw) in enumerate(blocks):
                    if n >= OUTLINE_HEAD or not bytes(key).startswith(prefix):
                        break
                    block = unpack(raw)
                    if block.get("type") == STAGE_GATE and block.get("path"):
                        title = _gate_title(txn, self.db, cid, str(block["path"]))
                        if title:
                            break
                    text = str(block.get("text") or "").strip()
                    if not first_line and str(block.get("type", "")).startswith("user") and text:
                        first_line = text.split("\n", 1)[0]
            title = _own_title(txn, self.db, cid) or title or first_line
            last: dict[str, Any] = {}
            # '0' follows '/': the first key past every "<cid>/<seq>" is at or after "<cid>0"
            at_end = blocks.prev() if blocks.set_range(f"{cid}0".encode()) else blocks.last()
            if at_end and bytes(blocks.key()).startswith(prefix):
                last = dict(unpack(blocks.value()))
            turns = 0
            records = txn.cursor(db=self.db["turns"])
            if records.set_range(prefix):
                for key in records.iternext(values=False):
                    if not bytes(key).startswith(prefix):
                        break
                    turns += 1
            last_turn = str(last.get("turn_id") or "")
            found = txn.get(prefix + last_turn.encode(), db=self.db["turns"]) if last_turn else None
            record = unpack(found) if found is not None else {}
            status = str(record.get("status") or "") if isinstance(record, dict) else ""
            return Outline(title, turns, last_turn, status, float(last.get("ts") or 0.0))

        return self.read(fn)

    def turn_briefs(self, cid: str) -> list[TurnBrief]:
        """Each stored turn's prompt and answer, in the order the turns first appear, in one
        read: the turn log, then the blocks at each turn's prompt and completion paths (its
        cost grows with the turns, never with the other blocks: tool results stay unread)."""
        prefix = f"{check_id(cid)}/".encode()

        def texts(txn: lmdb.Transaction, paths: lmdb.Cursor, turn_id: str, kind: str) -> list[str]:
            """The texts of the turn's ``kind`` blocks at their path ``ar:<turn>.<kind>``
            (``ar_path``'s text, built here: the turn ids are the store's own)."""
            at = path_key(cid, f"ar:{turn_id}.{kind}")
            out: list[str] = []
            if paths.set_range(at):
                for key in paths.iternext(values=False):
                    if not bytes(key).startswith(at):
                        break
                    raw = txn.get(block_key(cid, int(key[len(at) :])), db=self.db["blocks"])
                    block = unpack(raw) if raw is not None else {}
                    same = block.get("type") == kind and block.get("turn_id") == turn_id
                    if same and block.get("text"):
                        out.append(str(block["text"]))
            return out

        def fn(txn: lmdb.Transaction) -> list[TurnBrief]:
            first: list[tuple[int, str]] = []
            log = txn.cursor(db=self.db["turnlog"])
            if log.set_range(prefix):
                for key, raw in log:
                    if not bytes(key).startswith(prefix):
                        break
                    entry = unpack(raw)
                    if entry.get("seqs"):
                        first.append((min(entry["seqs"]), str(entry["turn_id"])))
            briefs = []
            paths = txn.cursor(db=self.db["paths"])
            for _, tid in sorted(first):
                prompts = texts(txn, paths, tid, USER_PROMPT)
                answers = texts(txn, paths, tid, COMPLETION)
                prompt, answer = prompts[0] if prompts else "", answers[-1] if answers else ""
                briefs.append(TurnBrief(tid, prompt, answer))
            return briefs

        return self.read(fn)


def _own_title(txn: lmdb.Transaction, db: dict[str, Any], cid: str) -> str:
    """The title a rename (or a fork) stored in the management row ("" without one)."""
    raw = txn.get(cid.encode(), db=db["convmeta"])
    row = unpack(raw) if raw is not None else None
    return str(row.get("title") or "") if isinstance(row, dict) else ""


def _gate_title(txn: lmdb.Transaction, db: dict[str, Any], cid: str, path: str) -> str:
    """The title of the latest ``stage.gate`` block stored at ``path`` ("" without one)."""
    prefix = path_key(cid, path)
    cursor = txn.cursor(db=db["paths"])
    title = ""
    if cursor.set_range(prefix):
        for key in cursor.iternext(values=False):
            if not bytes(key).startswith(prefix):
                break
            raw = txn.get(block_key(cid, int(key[len(prefix) :])), db=db["blocks"])
            data = unpack(raw).get("data") if raw is not None else None
            if isinstance(data, dict) and data.get("title"):
                title = " ".join(str(data["title"]).split())
    return title
