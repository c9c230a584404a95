"""The OpenAPI 3.1 description of the HTTP API (``GET /openapi.json``), written by hand.

One entry per route of ``actline.http.app``: its parameters, body, answers and whether it
needs the bearer token (every ``/v1`` route but ``/v1/health``). A test checks that every
route of the app is described and that the document is valid OpenAPI 3.1.
"""

from __future__ import annotations

from typing import Any

__all__ = ["describe"]

VERSION = "1"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


AUTH_ERRORS = {
    "401": _error("no token, or one that is invalid, expired or revoked (code says which)"),
}
TURN_ID = {
    "name": "turn_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9_:-]+$"},
}
CID = {**TURN_ID, "name": "cid", "description": "a conversation id"}


def _body(schema: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _op(summary: str, responses: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"summary": summary, "responses": {**responses, **AUTH_ERRORS}, **more}


SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["error", "code"],
        "properties": {
            "error": {"type": "string", "description": "what went wrong and what to do"},
            "code": {"type": "string", "description": "bad_input, token_revoked, no_node, ..."},
        },
    },
    "Attachment": {
        "type": "object",
        "required": ["name", "data_base64"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string"},
            "media_type": {"type": "string", "description": "guessed from the name if absent"},
            "data_base64": {"type": "string", "contentEncoding": "base64"},
        },
    },
    "TurnRequest": {
        "type": "object",
        "required": ["question"],
        "additionalProperties": False,
        "properties": {
            "question": {"type": "string", "minLength": 1},
            "conversation_id": {"type": "string", "description": "continue (or start) this one"},
            "attachments": {"type": "array", "items": _ref("Attachment")},
            "profile": {"type": "string", "description": "the node's profile for this turn"},
            "config": {"type": "object", "description": "turn settings (limits, model, ...)"},
        },
    },
    "TurnSubmitted": {
        "type": "object",
        "required": ["turn_id", "conversation_id", "events_url", "result_url"],
        "properties": {
            "turn_id": {"type": "string"},
            "conversation_id": {"type": "string"},
            "events_url": {"type": "string"},
            "result_url": {"type": "string"},
        },
    },
    "TurnRunning": {
        "type": "object",
        "required": ["status", "turn_id"],
        "properties": {
            "status": {"type": "string", "enum": ["running", "waiting"]},
            "turn_id": {"type": "string"},
            "conversation_id": {"type": "string"},
        },
    },
    "Result": {
        "type": "object",
        "description": "the turn's turn.result message (answer, status, sources, usage, ...)",
        "required": ["turn_id", "conversation_id", "status"],
        "properties": {
            "kind": {"const": "turn.result"},
            "turn_id": {"type": "string"},
            "conversation_id": {"type": "string"},
            "status": {"type": "string"},
            "answer": {"type": "string"},
        },
    },
    "Followup": {
        "type": "object",
        "required": ["text"],
        "additionalProperties": False,
        "properties": {
            "text": {"type": "string", "minLength": 1},
            "attachments": {"type": "array", "items": _ref("Attachment")},
        },
    },
    "Decision": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "approval_id": {"type": "string", "description": "absent: every pending call"},
            "reason": {"type": "string"},
        },
    },
    "Ok": {
        "type": "object",
        "required": ["ok"],
        "properties": {"ok": {"const": True}, "detail": {"type": "string"}},
    },
    "Conversation": {
        "type": "object",
        "description": "a stored conversation: id, title, turns, cost, times",
        "required": ["conversation_id"],
        "properties": {"conversation_id": {"type": "string"}, "title": {"type": "string"}},
    },
    "Deleted": {
        "type": "object",
        "description": "what a delete removed (blocks, turns, files, artifacts)",
        "required": ["conversation_id"],
        "properties": {"conversation_id": {"type": "string"}},
    },
    "Rename": {
        "type": "object",
        "required": ["title"],
        "additionalProperties": False,
        "properties": {"title": {"type": "string", "minLength": 1}},
    },
    "Fork": {
        "type": "object",
        "required": ["at"],
        "additionalProperties": False,
        "properties": {
            "at": {
                "oneOf": [{"type": "string"}, {"type": "integer", "minimum": 1}],
                "description": "the last turn kept: its id or its number (1 = the first)",
            },
            "title": {"type": "string"},
        },
    },
}


def _paths() -> dict[str, Any]:
    turn = "/v1/turns/{turn_id}"
    conv = "/v1/conversations/{cid}"
    not_found = {"404": _error("no such turn in the token's tenant")}
    refused = {"409": _error("the node refuses (its ErrorReply code)")}
    bad = {"400": _error("bad input: the message names the field")}
    ok = {"200": _json(_ref("Ok"), "the node applied it")}
    sent = {"202": _json(_ref("Ok"), "sent to the turn")}
    no_conv = {"404": _error("no such conversation in the token's tenant")}
    one = {"200": _json(_ref("Conversation"), "the conversation")}

    def control(summary: str) -> dict[str, Any]:
        return {"post": _op(summary, {**sent, **bad, **not_found, **refused}, parameters=[TURN_ID])}

    def decide(summary: str) -> dict[str, Any]:
        answers = {**ok, **bad, "403": _error("the token is not an approver"), **not_found}
        return {
            "post": _op(
                summary,
                {**answers, **refused},
                parameters=[TURN_ID],
                requestBody=_body(_ref("Decision"), required=False),
            )
        }

    return {
        "/openapi.json": {
            "get": {
                "summary": "this description",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "OpenAPI 3.1")},
            }
        },
        "/v1/health": {
            "get": {
                "summary": "whether the server runs (no token needed)",
                "security": [],
                "responses": {"200": _json({"type": "object"}, "the server runs")},
            }
        },
        "/v1/turns": {
            "post": _op(
                "submit a turn",
                {
                    "202": _json(_ref("TurnSubmitted"), "submitted; follow events_url"),
                    **bad,
                    **refused,
                    "413": _error("the body is too large"),
                },
                requestBody=_body(_ref("TurnRequest")),
            )
        },
        turn: {
            "get": _op(
                "a turn's result",
                {
                    "200": _json(_ref("Result"), "the result"),
                    "202": _json(_ref("TurnRunning"), "still running"),
                    **not_found,
                },
                parameters=[TURN_ID],
            )
        },
        f"{turn}/events": {
            "get": _op(
                "a turn's events as server-sent events, ending with its result",
                {
                    "200": {
                        "description": "event: delta|progress|accepted|result|..., data: the "
                        "message as JSON, id: its index (resume with Last-Event-ID)",
                        "content": {"text/event-stream": {"schema": {"type": "string"}}},
                    },
                    **bad,
                    **not_found,
                },
                parameters=[
                    TURN_ID,
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "pattern": "^-?[0-9]+$"},
                    },
                ],
            )
        },
        f"{turn}/followup": {
            "post": _op(
                "add a message to the running turn",
                {**ok, **bad, **not_found, **refused},
                parameters=[TURN_ID],
                requestBody=_body(_ref("Followup")),
            )
        },
        f"{turn}/skip": control("stop waiting for outside agents"),
        f"{turn}/cancel": control("cancel the turn"),
        f"{turn}/approve": decide("approve pending tool calls (approver tokens)"),
        f"{turn}/deny": decide("deny pending tool calls (approver tokens)"),
        "/v1/conversations": {
            "get": _op(
                "the stored conversations, newest first",
                {
                    "200": _json(
                        {
                            "type": "object",
                            "properties": {
                                "conversations": {"type": "array", "items": _ref("Conversation")}
                            },
                        },
                        "the conversations",
                    ),
                    **bad,
                },
                parameters=[
                    {"name": "search", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1}},
                ],
            )
        },
        conv: {
            "get": _op("one conversation", {**one, **bad, **no_conv}, parameters=[CID]),
            "patch": _op(
                "rename a conversation",
                {**one, **bad, **no_conv, "409": _error("a turn of it runs")},
                parameters=[CID],
                requestBody=_body(_ref("Rename")),
            ),
            "delete": _op(
                "delete a conversation",
                {
                    "200": _json(_ref("Deleted"), "what was removed"),
                    **bad,
                    **no_conv,
                    "409": _error("a turn of it runs"),
                },
                parameters=[CID],
            ),
        },
        f"{conv}/export": {
            "get": _op(
                "a conversation as JSON or Markdown",
                {
                    "200": {
                        "description": "the export",
                        "content": {
                            "application/json": {"schema": {"type": "object"}},
                            "text/markdown": {"schema": {"type": "string"}},
                        },
                    },
                    **bad,
                    **no_conv,
                },
                parameters=[
                    CID,
                    {
                        "name": "format",
                        "in": "query",
                        "schema": {"type": "string", "enum": ["json", "markdown"]},
                    },
                ],
            )
        },
        f"{conv}/fork": {
            "post": _op(
                "a new conversation whose timeline is this one up to a turn",
                {"201": _json(_ref("Conversation"), "the new conversation"), **bad, **no_conv},
                parameters=[CID],
                requestBody=_body(_ref("Fork")),
            )
        },
    }


def describe() -> dict[str, Any]:
    """The API's OpenAPI 3.1 document."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "actline HTTP API",
            "version": VERSION,
            "description": "Turns, their events and results, and stored conversations, for "
            "apps that do not speak NATS. Tokens: actline creds http NAME.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": _paths(),
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token from actline creds http NAME",
                }
            },
        },
    }
