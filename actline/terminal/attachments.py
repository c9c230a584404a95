"""Files attached to a turn from the command line (``actline ask --attach``, ``/attach``).

``read_attachments`` reads each file into an inline ``messages.Attachment`` (its name, its MIME
type guessed from the name, its bytes) and checks, before anything is sent, the limits the node
applies (``actline.actors.configuration.checks``, the node settings ``max_attachment_bytes``,
``max_attachments``,
``max_attachments_bytes``): a missing or unreadable file, a file over the limit or too many
files is a ``ConfigError`` naming the file and the limit with its variable.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Sequence
from pathlib import Path

from actline.actors.configuration.checks import SIZE_VARS, InputSizes
from actline.config import ConfigError
from actline.messages import Attachment
from actline.timeline import PathError
from actline.timeline.paths import fi_path

__all__ = ["check_attachments", "read_attachment", "read_attachments"]


def _limit(limits: InputSizes, name: str, unit: str) -> str:
    return f"{getattr(limits, name)} {unit} ({SIZE_VARS[name]})"


def read_attachment(path: str | Path, limits: InputSizes) -> Attachment:
    """One file as an inline attachment; ``ConfigError`` naming the file and the limit."""
    file = Path(path).expanduser()
    if not file.is_file():
        what = "is a folder" if file.is_dir() else "does not exist"
        raise ConfigError(f"attachment {str(path)!r} {what}: name a file")
    size = file.stat().st_size
    if size > limits.max_attachment_bytes:
        raise ConfigError(
            f"attachment {str(path)!r} is {size} bytes, over the limit of "
            f"{_limit(limits, 'max_attachment_bytes', 'bytes')} for one file"
        )
    try:
        fi_path("turn", "user.attachments", file.name)
    except PathError:
        raise ConfigError(
            f"attachment {str(path)!r}: its name {file.name!r} cannot be a file name in the "
            "workspace (no control characters, at most 255 characters); rename it"
        ) from None
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ConfigError(f"attachment {str(path)!r} cannot be read: {exc.strerror}") from None
    mime = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    return Attachment(name=file.name, mime=mime, data=data, size=len(data))


def check_attachments(attachments: Sequence[Attachment], limits: InputSizes) -> None:
    """``ConfigError`` when ``attachments`` together are too many or too large."""
    if len(attachments) > limits.max_attachments:
        raise ConfigError(
            f"{len(attachments)} attachments, over the limit of "
            f"{_limit(limits, 'max_attachments', 'files')} for one message"
        )
    total = sum(len(a.data or b"") for a in attachments)
    if total > limits.max_attachments_bytes:
        names = ", ".join(a.name for a in attachments)
        raise ConfigError(
            f"attachments {names} are {total} bytes together, over the limit of "
            f"{_limit(limits, 'max_attachments_bytes', 'bytes')} for one message"
        )
    every = [a.name for a in attachments]
    twice = sorted({n for n in every if every.count(n) > 1})
    if twice:
        raise ConfigError(f"two attachments are named {twice[0]!r}: rename one")


def read_attachments(paths: Sequence[str | Path], limits: InputSizes) -> list[Attachment]:
    """Every file of ``paths`` as an inline attachment, checked against ``limits``."""
    attachments = [read_attachment(path, limits) for path in paths]
    check_attachments(attachments, limits)
    return attachments
