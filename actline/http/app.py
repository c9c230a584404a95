"""The HTTP API's Starlette app: JSON routes under ``/v1`` and server-sent events.

``make_app(gateway, store, sizes)`` serves the routes of ``ROUTES`` (described in
``openapi.json``, which ``openapi.describe`` writes). Every ``/v1`` route but
``/v1/health`` needs ``Authorization: Bearer <token>`` (``actline creds http NAME``,
checked against ``TokenStore`` on each request, so a revocation counts at once). The
token's tenant picks the NATS connection (``Gateway.link``): a turn, result or
conversation of another tenant is not found there (404).

Errors are ``{"error": ..., "code": ...}``: 400 bad input naming the field, 401 no or a
refused token (``token_missing|invalid|expired|revoked``), 403 a role that may not
(approving without ``--approver``), 404 unknown, 409 what the node refuses (its
``ErrorReply`` code), 413 a body too large, 503 NATS unreachable.

Events: ``GET /v1/turns/{id}/events`` streams a turn this server follows (its log,
``actline.http.events``), each event's SSE id its index (``Last-Event-ID`` resumes after
it); a turn it does not follow but whose result is stored gets that result alone.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from actline.actors.configuration.checks import InputSizes
from actline.actors.errors import NoTurnQueue
from actline.bus import BusError, StreamMissing
from actline.messages import Ack, ErrorReply, ReActResult

from ..conversations import (
    EXPORT_FORMATS,
    ConversationBusy,
    ConversationNotFound,
    check_at,
    check_title,
)
from ..errors import ConfigError
from . import inputs
from .errors import ApiError, BadInput, Forbidden, NotFound, Refused
from .events import TurnLog
from .openapi import describe
from .tenants import Gateway, TenantLink
from .tokens import HttpToken, TokenStore

__all__ = ["make_app"]

Handler = Callable[[Request, HttpToken, TenantLink], Awaitable[Response]]
PING_S = 15
DECIDE_S = 5.0
"""How long an approval waits for the node running the turn (none answers: 404)."""


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _reply(reply: Ack | ErrorReply, *, unknown: str = "") -> JSONResponse:
    """The node's answer: 200 ``{ok, detail}``, or its refusal (``no_node``: 404 when
    ``unknown`` says what was not found)."""
    if isinstance(reply, ErrorReply):
        if reply.code == "no_node" and unknown:
            raise NotFound("not_found", f"{unknown}: {reply.message}")
        raise Refused(reply.code, reply.message)
    return JSONResponse({"ok": True, "detail": reply.detail})


def _result(result: ReActResult) -> JSONResponse:
    return JSONResponse(result.model_dump(mode="json"))


def make_app(gateway: Gateway, store: TokenStore, sizes: InputSizes) -> Starlette:
    """The API over ``gateway``'s connections, its tokens in ``store``, bodies within the
    node's ``sizes``."""
    limit = inputs.max_body(sizes)

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            token = store.check(_bearer(request))
            return await handler(request, token, await gateway.link(token.tenant))

        return endpoint

    async def stored(link: TenantLink, tid: str) -> ReActResult | None:
        try:
            return await link.client.fetch_result(tid)
        except StreamMissing:  # no results stream in this tenant: nothing of it finished
            return None

    async def known(link: TenantLink, tid: str) -> TurnLog:
        """A running turn this server follows; 409 when it finished, 404 when unknown."""
        turn = link.turns.get(tid)
        if turn is not None and not turn.finished:
            return turn
        if turn is not None or await stored(link, tid) is not None:
            raise Refused("turn_finished", f"turn {tid} has finished")
        raise NotFound("not_found", f"turn {tid} is not one this server follows")

    # -- turns ---------------------------------------------------------------------------
    async def submit(request: Request, token: HttpToken, link: TenantLink) -> Response:
        fields = ("question", "conversation_id", "attachments", "profile", "config")
        data = await inputs.body(request, limit, fields=fields)
        question = inputs.text(data, "question")
        cid = data.get("conversation_id")
        cid = None if cid is None else inputs.ident(cid, "conversation_id")
        files = inputs.attachments(data.get("attachments"), sizes)
        config = inputs.turn_config(data)
        try:
            handle = await link.client.submit(
                question, conversation_id=cid, attachments=files, config=config
            )
        except NoTurnQueue as exc:
            raise Refused("no_node", f"no node serves tenant {token.tenant}: {exc}") from None
        link.turns.add(handle)
        tid = handle.turn_id
        shown = {
            "turn_id": tid,
            "conversation_id": handle.conversation_id,
            "events_url": f"/v1/turns/{tid}/events",
            "result_url": f"/v1/turns/{tid}",
        }
        return JSONResponse(shown, status_code=202, headers={"Location": shown["result_url"]})

    async def get_turn(request: Request, token: HttpToken, link: TenantLink) -> Response:
        tid = inputs.ident(request.path_params["turn_id"], "turn_id")
        turn = link.turns.get(tid)
        if turn is not None and turn.result is not None:
            return _result(turn.result)
        if turn is not None and not turn.finished:
            running = {
                "status": turn.status,
                "turn_id": tid,
                "conversation_id": turn.conversation_id,
            }
            return JSONResponse(running, status_code=202)
        result = await stored(link, tid)
        if result is None:
            raise NotFound("not_found", f"turn {tid} is unknown (or its result expired)")
        return _result(result)

    async def events(request: Request, token: HttpToken, link: TenantLink) -> Response:
        tid = inputs.ident(request.path_params["turn_id"], "turn_id")
        last = request.headers.get("last-event-id", "").strip()
        if last and not last.lstrip("-").isdigit():
            raise BadInput("bad_input", f"Last-Event-ID {last!r} is not an event id (a number)")
        after = int(last) if last else -1
        turn = link.turns.get(tid)
        if turn is None:
            result = await stored(link, tid)
            if result is None:
                raise NotFound("not_found", f"turn {tid} is unknown (or its result expired)")
            payload = json.dumps(result.model_dump(mode="json"), ensure_ascii=False)

            async def once() -> AsyncIterator[dict[str, str]]:
                yield {"id": "0", "event": "result", "data": payload}

            return EventSourceResponse(once(), ping=PING_S)

        async def feed() -> AsyncIterator[dict[str, str]]:
            async for index, name, data in turn.after(after, gateway.closing):
                yield {
                    "id": str(index),
                    "event": name,
                    "data": json.dumps(data, ensure_ascii=False),
                }

        return EventSourceResponse(feed(), ping=PING_S)

    async def followup(request: Request, token: HttpToken, link: TenantLink) -> Response:
        tid = inputs.ident(request.path_params["turn_id"], "turn_id")
        data = await inputs.body(request, limit, fields=("text", "attachments"))
        text = inputs.text(data, "text")
        files = inputs.attachments(data.get("attachments"), sizes)
        turn = await known(link, tid)
        reply = await link.client.followup(turn.conversation_id, tid, text, attachments=files)
        return _reply(reply)

    def control(what: str) -> Handler:
        async def send(request: Request, token: HttpToken, link: TenantLink) -> Response:
            tid = inputs.ident(request.path_params["turn_id"], "turn_id")
            await inputs.body(request, limit, fields=())
            await known(link, tid)
            if what == "skip":
                await link.client.skip_waiting(tid, "the user skipped waiting")
            else:
                await link.client.cancel(tid, "the user cancelled the turn")
            return JSONResponse({"ok": True, "detail": f"{what} sent to turn {tid}"}, 202)

        return send

    def decider(approved: bool) -> Handler:
        async def decide(request: Request, token: HttpToken, link: TenantLink) -> Response:
            tid = inputs.ident(request.path_params["turn_id"], "turn_id")
            data = await inputs.body(request, limit, fields=("approval_id", "reason"))
            if not token.approver:
                raise Forbidden(
                    "forbidden",
                    f"token {token.name} may not approve or deny: issue one with "
                    f"actline creds http {token.name} --approver",
                )
            approval = data.get("approval_id")
            approval = None if approval is None else inputs.ident(approval, "approval_id")
            reason = inputs.optional_text(data, "reason") or ""
            turn = link.turns.get(tid)
            if (turn is not None and turn.finished) or await stored(link, tid) is not None:
                raise Refused("turn_finished", f"turn {tid} has ended: nothing of it waits")
            client = await gateway.approver(link, token.name)
            reply = await client.decide(
                tid, approved, approval_id=approval, by=token.name, reason=reason, timeout=DECIDE_S
            )
            return _reply(reply, unknown=f"turn {tid}")

        return decide

    # -- conversations -------------------------------------------------------------------
    def cid_of(request: Request) -> str:
        return inputs.ident(request.path_params["cid"], "conversation_id")

    async def list_conversations(request: Request, token: HttpToken, link: TenantLink) -> Response:
        search = request.query_params.get("search") or None
        raw = request.query_params.get("limit")
        if raw is not None and (not raw.isdigit() or int(raw) < 1):
            raise BadInput("bad_input", f"limit {raw!r}: give a whole number of at least 1")
        found = await link.conversations.list(search=search, limit=int(raw) if raw else None)
        return JSONResponse({"conversations": [c.to_json() for c in found]})

    async def get_conversation(request: Request, token: HttpToken, link: TenantLink) -> Response:
        return JSONResponse((await link.conversations.get(cid_of(request))).to_json())

    async def rename(request: Request, token: HttpToken, link: TenantLink) -> Response:
        cid = cid_of(request)
        data = await inputs.body(request, limit, fields=("title",))
        title = _checked(check_title, inputs.text(data, "title"), "title")
        return JSONResponse((await link.conversations.rename(cid, title)).to_json())

    async def delete(request: Request, token: HttpToken, link: TenantLink) -> Response:
        return JSONResponse((await link.conversations.delete(cid_of(request))).to_json())

    async def export(request: Request, token: HttpToken, link: TenantLink) -> Response:
        cid = cid_of(request)
        form = request.query_params.get("format", "json")
        if form not in EXPORT_FORMATS:
            raise BadInput("bad_input", f"format {form!r}: choose json or markdown")
        text = await link.conversations.export(cid, form)
        media = "application/json" if form == "json" else "text/markdown; charset=utf-8"
        return Response(text, media_type=media)

    async def fork(request: Request, token: HttpToken, link: TenantLink) -> Response:
        cid = cid_of(request)
        data = await inputs.body(request, limit, fields=("at", "title"))
        if "at" not in data:
            raise BadInput("bad_input", "'at' is required: the last turn kept (id or number)")
        at = _checked(check_at, data["at"], "at")
        title = inputs.optional_text(data, "title")
        title = None if title is None else _checked(check_title, title, "title")
        made = await link.conversations.fork(cid, at=at, title=title)
        return JSONResponse(made.to_json(), status_code=201)

    # -- open routes ---------------------------------------------------------------------
    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})  # nothing of the tenants: it needs no token

    async def openapi(request: Request) -> Response:
        return JSONResponse(describe())

    turn = "/v1/turns/{turn_id}"
    conv = "/v1/conversations/{cid}"
    routes = [
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
        Route("/v1/turns", guarded(submit), methods=["POST"]),
        Route(turn, guarded(get_turn), methods=["GET"]),
        Route(f"{turn}/events", guarded(events), methods=["GET"]),
        Route(f"{turn}/followup", guarded(followup), methods=["POST"]),
        Route(f"{turn}/skip", guarded(control("skip")), methods=["POST"]),
        Route(f"{turn}/cancel", guarded(control("cancel")), methods=["POST"]),
        Route(f"{turn}/approve", guarded(decider(True)), methods=["POST"]),
        Route(f"{turn}/deny", guarded(decider(False)), methods=["POST"]),
        Route("/v1/conversations", guarded(list_conversations), methods=["GET"]),
        Route(conv, guarded(get_conversation), methods=["GET"]),
        Route(conv, guarded(rename), methods=["PATCH"]),
        Route(conv, guarded(delete), methods=["DELETE"]),
        Route(f"{conv}/export", guarded(export), methods=["GET"]),
        Route(f"{conv}/fork", guarded(fork), methods=["POST"]),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await gateway.close()

    handlers: dict[Any, Any] = {
        ApiError: _api_error,
        ConversationNotFound: lambda request, exc: _json(404, "not_found", str(exc)),
        ConversationBusy: lambda request, exc: _json(409, "conversation_busy", str(exc)),
        ConfigError: lambda request, exc: _json(409, "refused", str(exc)),
        BusError: lambda request, exc: _json(503, "nats_unavailable", f"NATS: {exc}"),
    }
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers=handlers)


def _checked(check: Callable[[Any], str], value: Any, field: str) -> str:
    """``check(value)`` with its ``ConfigError`` as a ``BadInput`` naming ``field``."""
    try:
        return check(value)
    except ConfigError as exc:
        raise BadInput("bad_input", f"{field!r}: {exc}") from None


def _json(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "code": code}, status_code=status)


def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    response = JSONResponse(exc.to_json(), status_code=exc.status)
    if exc.status == 401:
        response.headers["WWW-Authenticate"] = f'Bearer error="{exc.code}"'
    return response
