"""``actline feedback CID "text" [--turn ID] [--rating -1|0|1]``: feedback on a turn.

Without ``NATS_URL`` it starts the embedded nats-server and a node on the store under
``--home`` (as ``actline ask`` does); with ``NATS_URL`` the node serving the conversation
answers. Without ``--turn`` the feedback is on the conversation's latest turn, which only a
node here knows: with ``NATS_URL`` name the turn. The node's verdict is printed: exit 0 when
it recorded the feedback (the model sees it announced next turn), 1 when it refused it.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.text import Text

from actline.config import ConfigError
from actline.messages import ErrorReply
from actline.messages.ids import is_valid_id
from actline.ratings import parse_rating
from actline.runtime import Runtime

from .turns import check_conversation_id, load_config

__all__ = ["run_feedback"]


async def run_feedback(args: argparse.Namespace, console: Console) -> int:
    """Send the feedback and print the node's verdict; 0 when it was recorded."""
    cid = check_conversation_id(args.conversation)
    assert cid is not None
    if args.turn is not None and not is_valid_id(args.turn):
        raise ConfigError(f"--turn {args.turn!r} is not a turn id (letters, digits, _ : -)")
    rating = parse_rating(args.rating)
    if not args.text.strip() and rating == 0:
        raise ConfigError('feedback needs a text or a --rating: actline feedback CID "text"')
    config = load_config(args)
    async with Runtime(config, node=config.nats_url is None) as rt:
        if rt.store is not None:
            rt.check_conversation(cid)
        verdict = await rt.feedback(cid, args.text, turn_id=args.turn, rating=rating)
    if isinstance(verdict, ErrorReply):
        console.print(Text(f"refused: {verdict.code}: {verdict.message}", "bold red"))
        return 1
    console.print(Text(f"feedback on turn {verdict.ref}: {verdict.detail}", "green"))
    return 0
