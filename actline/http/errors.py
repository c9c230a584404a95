"""The errors of the HTTP API; each is one JSON answer ``{"error": ..., "code": ...}``.

::

    ApiError                 status, code, message: what the client sees
    ├── BadInput             400: a body, field or parameter the API cannot take
    ├── TokenRefused         401: no token, or one that is unknown, expired or revoked
    ├── Forbidden            403: the token's role may not do this (deny without approver)
    ├── NotFound             404: an unknown turn or conversation (also another tenant's)
    └── Refused              409: what the node refuses (its ``ErrorReply`` code)

Every error keeps its fields and pickles.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["ApiError", "BadInput", "Forbidden", "NotFound", "Refused", "TokenRefused"]


class ApiError(Exception):
    """An answer other than success: ``status`` and ``code`` with a message saying why."""

    status: ClassVar[int] = 500

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.message))

    def to_json(self) -> dict[str, str]:
        return {"error": self.message, "code": self.code}


class BadInput(ApiError):
    """A request the API cannot take; the message names the field and the fix."""

    status = 400


class TokenRefused(ApiError):
    """No usable bearer token; ``code`` says which: ``token_missing``, ``token_invalid``,
    ``token_expired`` or ``token_revoked``."""

    status = 401


class Forbidden(ApiError):
    """The token is valid but its role may not do this."""

    status = 403


class NotFound(ApiError):
    """Nothing of that id in the token's tenant."""

    status = 404


class Refused(ApiError):
    """The node (or the gateway on its behalf) refuses: ``code`` is its ``ErrorReply``'s."""

    status = 409
