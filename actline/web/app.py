"""The console's Starlette app: the page, its JSON API and its server-sent events.

``make_app(runtime, token)`` serves ``/`` (the page; ``?token=`` sets the HttpOnly
SameSite=Strict cookie ``actline_console``), ``/static/*``, the JSON API under ``/api``
and ``/events/{conversation_id}``. Every route needs the cookie or ``?token=``; without
it the answer is 401 "token required", with a token that is not this start's (a typo, or
the cookie of an earlier start: the token changes each start) a 401 that says so and what
to do. The runtime is started and closed by the caller (``actline.cli.console``); the
app's lifespan starts and stops its ``Hub``.

Conversations: ``GET /api/conversations?search=`` lists them (``Runtime.conversations``,
newest first, with dates, turns and cost; ``search``: words all found in a title, question
or answer), ``PATCH /api/conversations/{cid} {title}`` renames one, ``DELETE
/api/conversations/{cid}`` deletes it (the answer says what was removed) and ``POST
/api/conversations/{cid}/fork {at, title?}`` forks it after turn ``at`` (an id or a
1-based number). An unknown conversation is a 404, one whose turn runs a 409.

Approvals: ``POST /api/turns/{tid}/approve|deny {approval_id?, reason?}`` decide a turn's
pending tool calls (None: every pending one), as ``actline approve`` does: the approver is
the console's credential (the local user when it shares its node's connection).

Bad input is a 400 with ``{"error": ...}`` naming the field; what the node refuses is a
409 with its ``ErrorReply`` code and message.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import html
import logging
import mimetypes
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from actline.actors.configuration.checks import check_config
from actline.actors.errors import InputRefused
from actline.agents import list_agents
from actline.bus import BusError
from actline.messages import Ack, Attachment, ErrorReply
from actline.messages.ids import is_valid_id, is_valid_name
from actline.terminal.attachments import check_attachments

from ..config import ConfigError
from ..conversations import ConversationBusy, ConversationNotFound
from ..runtime import Runtime
from . import views
from .live import Hub
from .stores import StoreAccess

__all__ = ["COOKIE", "make_app"]

COOKIE = "actline_console"
log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"


MISSING = "401: token required (open the URL actline console printed)"
WRONG = (
    "401: the console token is wrong or expired. The token changes each time actline "
    "console starts: open the URL (http://HOST:PORT/?token=...) that its latest start "
    "printed, or start it again for a new one."
)
PAGE_401 = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>actline console: {title}</title></head>
<body style="font: 15px/1.5 system-ui, sans-serif; max-width: 40rem; margin: 2rem auto;
 padding: 0 1rem">
<h1 style="font-size: 1.3rem">{title}</h1><p data-testid="refusal">{text}</p></body></html>
"""


class TokenGuard:
    """ASGI middleware: an HTTP request without the token gets 401 "token required", one
    with another token (a typo, an earlier start's cookie) a 401 saying it is wrong or
    expired; a browser gets either as a page, with a stale cookie removed."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    def matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    def verdict(self, request: Request) -> str:
        """``ok`` (the query's token or the cookie is this start's), ``missing`` (neither is
        given) or ``wrong``."""
        given = [request.query_params.get("token"), request.cookies.get(COOKIE)]
        tokens = [t for t in given if t]
        if not tokens:
            return "missing"
        return "ok" if any(self.matches(t) for t in tokens) else "wrong"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        verdict = self.verdict(request)
        if verdict == "ok":
            await self.app(scope, receive, send)
            return
        text = MISSING if verdict == "missing" else WRONG
        response: Response
        if "text/html" in request.headers.get("accept", ""):
            title = "token required" if verdict == "missing" else "wrong or expired token"
            page = PAGE_401.format(title=title, text=html.escape(text))
            response = HTMLResponse(page, status_code=401)
        else:
            response = PlainTextResponse(text, status_code=401)
        if verdict == "wrong" and COOKIE in request.cookies:
            response.delete_cookie(COOKIE, httponly=True, samesite="strict")
        await response(scope, receive, send)


class BadInput(Exception):
    """A request the API cannot take; its message names the field."""


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _reply(reply: Ack | ErrorReply) -> JSONResponse:
    if isinstance(reply, ErrorReply):
        return _error(409, reply.message, code=reply.code)
    return JSONResponse({"ok": True, "detail": reply.detail, "ref": reply.ref})


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        raise BadInput("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise BadInput("the body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str, *, required: bool = True) -> str:
    value = body.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise BadInput(f"{key!r} must be a non-empty string (got {value!r})")
    return value


def _id(value: Any, key: str) -> str:
    if not isinstance(value, str) or not is_valid_id(value):
        raise BadInput(f"{key!r} {value!r} is not an id (letters, digits, _ : -)")
    return value


def _config(raw: Any) -> dict[str, Any] | None:
    """A turn's ``config`` (its settings: profile, limits, model), checked as the node checks
    it; a profile name the node does not know comes back as the turn's refusal."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadInput(f"'config' must be an object of turn settings (got {raw!r})")
    try:
        check_config(raw)
    except InputRefused as exc:
        raise BadInput(f"refused: {exc}") from None
    return raw


def _attachments(raw: Any) -> list[Attachment]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise BadInput("'attachments' must be a list of {name, content_b64}")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise BadInput(f"attachments[{i}] needs a 'name' string and 'content_b64'")
        try:
            data = base64.b64decode(str(item.get("content_b64", "")), validate=True)
        except (binascii.Error, ValueError):
            raise BadInput(f"attachments[{i}].content_b64 is not base64") from None
        name = item["name"]
        mime = mimetypes.guess_type(name)[0] or "application/octet-stream"
        out.append(Attachment(name=name, mime=mime, data=data, size=len(data)))
    return out


def make_app(runtime: Runtime, token: str, *, home: Path | None = None) -> Starlette:
    """The console app over a started ``runtime`` (``home``: where the store and traces
    are, default the runtime's ``config.node.home``)."""
    where = home or runtime.config.node.home
    stores = StoreAccess(runtime, where)

    def sources(cid: str, sids: list[int]) -> list[dict[str, Any]]:
        store = stores.maybe()
        return [] if store is None else views.sources(store, cid, sids)

    hub = Hub(
        is_connected=lambda: runtime.bus.is_connected,
        sources=sources,
        client=runtime.client,
    )

    async def page(request: Request) -> Response:
        response = FileResponse(STATIC / "index.html", media_type="text/html")
        if request.query_params.get("token"):
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
        return response

    async def list_conversations(request: Request) -> Response:
        search = request.query_params.get("search", "").strip() or None
        store = stores.maybe()
        try:
            infos = await runtime.conversations.list(search=search, limit=views.LIST_LIMIT)
        except (ConversationNotFound, ConversationBusy):
            raise
        except ConfigError as exc:
            # no node serves conversation management (none runs, or cluster mode): the list
            # is read from the store here, and said so; rename, delete and fork need a node
            if store is None:
                raise
            log.warning("conversation list read from the store at %s: %s", where, exc)
            rows = await asyncio.to_thread(
                views.conversations, store, hub.status, hub.running, search=search
            )
            note = f"read from the store here; rename, delete and fork need a node: {exc}"
            return JSONResponse([{**row, "note": note} for row in rows])
        found = [info.to_json() for info in infos]
        if store is not None:
            found = await asyncio.to_thread(
                views.with_status, store, found, hub.status, hub.running
            )
        return JSONResponse(found)

    async def rename(request: Request) -> Response:
        cid = _id(request.path_params["cid"], "conversation_id")
        title = _text(await _body(request), "title")
        info = await runtime.conversations.rename(cid, title)
        return JSONResponse(info.to_json())

    async def delete(request: Request) -> Response:
        cid = _id(request.path_params["cid"], "conversation_id")
        deleted = await runtime.conversations.delete(cid)
        return JSONResponse(deleted.to_json())

    async def fork(request: Request) -> Response:
        cid = _id(request.path_params["cid"], "conversation_id")
        body = await _body(request)
        at = body.get("at")
        if isinstance(at, bool) or not isinstance(at, str | int) or at in ("", 0):
            raise BadInput(f"'at' must be a turn id or its number, 1 for the first (got {at!r})")
        title = body.get("title") or None
        if title is not None and not isinstance(title, str):
            raise BadInput(f"'title' must be a string (got {title!r})")
        info = await runtime.conversations.fork(cid, at=at, title=title)
        return JSONResponse(info.to_json())

    async def submit(request: Request) -> Response:
        body = await _body(request)
        text = _text(body, "text")
        cid = body.get("conversation_id") or None
        if cid is not None:
            _id(cid, "conversation_id")
        attachments = _attachments(body.get("attachments"))
        config = _config(body.get("config"))
        try:
            check_attachments(attachments, runtime.config.node)
            handle = await runtime.submit(text, cid, attachments=attachments, config=config)
        except ConfigError as exc:
            raise BadInput(str(exc)) from None
        hub.add(handle)
        return JSONResponse({"conversation_id": handle.conversation_id, "turn_id": handle.turn_id})

    async def followup(request: Request) -> Response:
        tid = _id(request.path_params["turn_id"], "turn_id")
        body = await _body(request)
        cid = _id(body.get("conversation_id"), "conversation_id")
        attachments = _attachments(body.get("attachments"))
        try:
            check_attachments(attachments, runtime.config.node)
        except ConfigError as exc:
            raise BadInput(str(exc)) from None
        text = _text(body, "text")
        return _reply(await runtime.client.followup(cid, tid, text, attachments=attachments))

    async def skip(request: Request) -> Response:
        tid = _id(request.path_params["turn_id"], "turn_id")
        await runtime.skip_waiting(tid)
        return JSONResponse({"ok": True})

    async def cancel(request: Request) -> Response:
        tid = _id(request.path_params["turn_id"], "turn_id")
        await runtime.cancel(tid)
        return JSONResponse({"ok": True})

    def decider(approved: bool) -> Callable[[Request], Awaitable[Response]]:
        async def decide(request: Request) -> Response:
            tid = _id(request.path_params["turn_id"], "turn_id")
            body = await _body(request)
            approval = body.get("approval_id") or None
            approval = None if approval is None else _id(approval, "approval_id")
            reason = _text(body, "reason", required=False)
            verdict = runtime.approve if approved else runtime.deny
            return _reply(await verdict(tid, approval_id=approval, reason=reason))

        return decide

    async def get_timeline(request: Request) -> Response:
        cid = _id(request.path_params["cid"], "conversation_id")
        store = stores.get()
        if store.header(cid) is None:
            return _error(404, f"conversation {cid!r} is not stored in {where}")
        limit = runtime.config.node.max_context_tokens
        return JSONResponse(await asyncio.to_thread(views.timeline, store, cid, limit))

    async def get_turns(request: Request) -> Response:
        cid = _id(request.path_params["cid"], "conversation_id")
        store = stores.get()
        if store.header(cid) is None:  # a new conversation: no turn stored yet
            return JSONResponse([])
        return JSONResponse(await asyncio.to_thread(views.turns, store, cid))

    async def read(request: Request) -> Response:
        cid = _id(request.path_params["cid"], "conversation_id")
        path = request.query_params.get("path", "")
        if not path:
            raise BadInput("'path' is required: ?path=ar:... (a block's logical path)")
        store = stores.get()
        if store.header(cid) is None:
            return _error(404, f"conversation {cid!r} is not stored in {where}")
        return JSONResponse(await asyncio.to_thread(views.read_path, store, cid, path))

    async def calls(request: Request) -> Response:
        tid = _id(request.path_params["turn_id"], "turn_id")
        cid = _id(request.query_params.get("conversation_id"), "conversation_id")
        round_ = request.path_params["round"]
        rows = await asyncio.to_thread(views.round_calls, stores.get(), cid, tid, round_)
        return JSONResponse(rows)

    async def agents(request: Request) -> Response:
        listed = await list_agents(runtime.bus)
        rows = [
            {
                "name": a.agent,
                "present": a.present,
                "last_seen": a.last_seen.isoformat() if a.last_seen else None,
                "open_tasks": [
                    {
                        "task_id": t.task_id,
                        "turn_id": t.turn_id,
                        "conversation_id": t.conversation_id,
                        "text": hub_task_text(t.turn_id, t.task_id),
                    }
                    for t in a.open_tasks
                ],
            }
            for a in listed.agents
        ]
        return JSONResponse(rows)

    def hub_task_text(turn_id: str, task_id: str) -> str:
        """The waiting card's words for the task, when this console followed its turn."""
        handle = hub.handles.get(turn_id)
        if handle is None:
            return ""
        for card in reversed(handle.cards):
            if card.phase == "waiting" and task_id in card.detail:
                return card.detail
        return ""

    async def done(request: Request) -> Response:
        name = request.path_params["name"]
        if not is_valid_name(name):
            raise BadInput(f"agent name {name!r} is not valid (letters, digits, _ and -)")
        body = await _body(request)
        task = body.get("task_id") or None
        turn = body.get("turn_id") or None
        task = None if task is None else _id(task, "task_id")
        turn = None if turn is None else _id(turn, "turn_id")
        summary = _text(body, "summary")
        return _reply(await runtime.send_done(name, summary, task_id=task, turn_id=turn))

    async def get_trace(request: Request) -> Response:
        tid = _id(request.path_params["turn_id"], "turn_id")
        try:
            found = await asyncio.to_thread(views.trace, where, tid)
        except ConfigError as exc:
            return _error(404, str(exc))
        return JSONResponse(found)

    async def events(request: Request) -> Response:
        cid = _id(request.path_params["cid"], "conversation_id")
        last = request.headers.get("last-event-id", "")
        after = int(last) if last.isdigit() else -1
        await hub.watch(cid)  # the turns other clients submit in it, from now on

        async def feed() -> AsyncIterator[dict[str, Any]]:
            async for index, data in hub.stream(cid, after):
                yield {"data": data} if index < 0 else {"id": str(index), "data": data}

        return EventSourceResponse(feed(), ping=15)

    routes = [
        Route("/", page),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/api/conversations", list_conversations),
        Route("/api/conversations/{cid}", rename, methods=["PATCH"]),
        Route("/api/conversations/{cid}", delete, methods=["DELETE"]),
        Route("/api/conversations/{cid}/fork", fork, methods=["POST"]),
        Route("/api/turns", submit, methods=["POST"]),
        Route("/api/turns/{turn_id}/followup", followup, methods=["POST"]),
        Route("/api/turns/{turn_id}/skip", skip, methods=["POST"]),
        Route("/api/turns/{turn_id}/cancel", cancel, methods=["POST"]),
        Route("/api/turns/{turn_id}/approve", decider(True), methods=["POST"]),
        Route("/api/turns/{turn_id}/deny", decider(False), methods=["POST"]),
        Route("/api/turns/{turn_id}/trace", get_trace),
        Route("/api/turns/{turn_id}/rounds/{round:int}/calls", calls),
        Route("/api/conversations/{cid}/timeline", get_timeline),
        Route("/api/conversations/{cid}/read", read),
        Route("/api/conversations/{cid}/turns", get_turns),
        Route("/api/agents", agents),
        Route("/api/agents/{name}/done", done, methods=["POST"]),
        Route("/events/{cid}", events),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hub.start()
        unhooks = [
            runtime.bus.on_disconnect(hub.disconnected),
            runtime.bus.on_reconnect(hub.reconnected),
        ]
        try:
            yield
        finally:
            for unhook in unhooks:
                unhook()
            await hub.close()
            stores.close()

    handlers: dict[Any, Any] = {
        BadInput: lambda request, exc: _error(400, str(exc)),
        ConversationNotFound: lambda request, exc: _error(404, str(exc)),
        ConversationBusy: lambda request, exc: _error(409, str(exc), code="conversation_busy"),
        ConfigError: lambda request, exc: _error(409, str(exc)),
        BusError: lambda request, exc: _error(503, f"NATS: {exc}"),
    }
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)
    app.add_middleware(TokenGuard, token=token)
    app.state.hub = hub
    return app
