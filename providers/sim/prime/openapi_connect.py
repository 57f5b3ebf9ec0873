"""The OpenAPI 3.1 paths of the Prime-like stub's ConnectRPC gateway (`command_session.CommandSession`).

Part of the document `openapi.py` serves at /openapi.json: one path per procedure the gateway answers (Start's
server stream, the unary List and SendSignal) and the catch-all that answers every other method `unimplemented`.
Connect is not REST: the descriptions say how its envelopes and errors travel, so a fuzzer reads them right.
"""

from __future__ import annotations

import copy
from typing import Any

from providers.sim.core.serving.openapi_parts import json_content as _json
from providers.sim.core.serving.openapi_parts import schema_ref as _ref

_CONNECT_BASE = "/gateway/{user_ns}/{job_id}/command_session.CommandSession"
_GATEWAY_PARAMS = [
    {"name": "user_ns", "in": "path", "required": True, "schema": {"type": "string"}},
    {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}},
]
_CONNECT_HEADERS = [
    {
        "name": "connect-timeout-ms",
        "in": "header",
        "schema": {"type": "integer", "minimum": 0, "maximum": 9999999999},
        "description": "the call's real-time deadline (0: already expired)",
    },
    {"name": "connect-protocol-version", "in": "header", "schema": {"type": "string", "const": "1"}},
]
_CONNECT_ERROR = {
    "type": "object",
    "required": ["code"],
    "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
}
_BINARY = {"schema": {"type": "string", "format": "binary"}}
_UNARY_ERRORS = {
    "400": _json(_CONNECT_ERROR, "invalid_argument: the message does not decode, or a bad header"),
    "401": _json(_CONNECT_ERROR, "unauthenticated: missing, bad or expired gateway token"),
    "404": _json(_CONNECT_ERROR, "not_found: no such session"),
    "415": {"description": "not application/json or application/proto (see the Accept-Post header)"},
    "500": _json(_CONNECT_ERROR, "internal"),
    "503": _json(_CONNECT_ERROR, "unavailable (an injected gateway error)"),
    "504": _json(_CONNECT_ERROR, "deadline_exceeded: connect-timeout-ms ran out"),
}


def _connect_unary(op_id: str, summary: str, request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    return {
        "post": {
            "operationId": op_id,
            "summary": summary,
            "description": "A unary Connect call: one bare message in, one out. The document describes the JSON "
            "codec (protobuf's JSON mapping); `application/proto` (binary protobuf) is served too. Errors are "
            'HTTP statuses with `{"code", "message"}`.',
            "tags": ["gateway"],
            "security": [{"gatewayToken": []}],
            "parameters": [*_GATEWAY_PARAMS, *_CONNECT_HEADERS],
            "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
            "responses": {"200": _json(reply, "the reply message"), **copy.deepcopy(_UNARY_ERRORS)},
        }
    }


def connect_paths() -> dict[str, Any]:
    """Prime's ConnectRPC gateway (prime-sandboxes 0.5.x), one path per procedure."""
    start = {
        "post": {
            "operationId": "connectStart",
            "summary": "Run a command as a session: a server stream of events",
            "description": "Connect streaming, not JSON/REST: one enveloped command_session.StartRequest in "
            "(`application/connect+proto` or `+json`: a flags byte, a big-endian uint32 length, the message), "
            "enveloped StartResponse events out (start, keepalive, data, end), then an end-of-stream envelope "
            "carrying any error (unauthenticated, invalid_argument, not_found, unavailable, deadline_exceeded) "
            "with HTTP 200, as the protocol has every streamed error travel: a missing token or a malformed "
            "message is refused there, not by the HTTP status. A request that is not a Connect stream gets the "
            "unary answers (401 without a valid token, then 415).",
            "tags": ["gateway"],
            "security": [{"gatewayToken": []}],
            "parameters": [*_GATEWAY_PARAMS, *_CONNECT_HEADERS],
            "requestBody": {
                "required": True,
                "content": {media: _BINARY for media in ("application/connect+proto", "application/connect+json")},
            },
            "responses": {
                "200": {
                    "description": "a stream of envelopes ending with the end-of-stream one (binary framing, "
                    "so no schema: `+json` names the codec of the messages inside, not the body)",
                    "content": {media: {} for media in ("application/connect+proto", "application/connect+json")},
                },
                "401": _json(_CONNECT_ERROR, "unauthenticated (a request that is not a Connect stream)"),
                "415": {"description": "not a Connect stream content type (see the Accept-Post header)"},
            },
        }
    }
    selector = {
        "type": "object",
        "additionalProperties": False,
        "maxProperties": 1,
        "properties": {
            "pid": {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
            "sessionUuid": {"type": "string"},
        },
    }
    signal = {
        "type": "object",
        "additionalProperties": False,
        "required": ["signal"],
        "properties": {
            "session": selector,
            "signal": {"enum": ["SIGNAL_SIGTERM", "SIGNAL_SIGKILL", 15, 9]},
            "signalUuid": {"type": "string"},
        },
    }
    sessions = {"type": "object", "properties": {"sessions": {"type": "array", "items": {"type": "object"}}}}
    served = ["Start", "List", "SendSignal"]
    return {
        f"{_CONNECT_BASE}/Start": start,
        f"{_CONNECT_BASE}/List": _connect_unary(
            "connectList", "The sessions running in this sandbox", {"type": "object", "maxProperties": 0}, sessions
        ),
        f"{_CONNECT_BASE}/SendSignal": _connect_unary(
            "connectSendSignal", "SIGTERM or SIGKILL to a running session", signal, {"type": "object"}
        ),
        f"{_CONNECT_BASE}/{{method}}": {
            "post": {
                "operationId": "connectUnimplemented",
                "summary": "Any other CommandSession method (SendInput, Connect, Update, StreamInput, ...)",
                "description": "Answered `unimplemented` before any token is looked at.",
                "tags": ["gateway"],
                "security": [],
                "parameters": [
                    *_GATEWAY_PARAMS,
                    {
                        "name": "method",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "not": {"enum": served}},
                    },
                ],
                "responses": {
                    "404": _json({"anyOf": [_CONNECT_ERROR, _ref("Error")]}, "unimplemented (or no such path at all)"),
                    "401": _json(_CONNECT_ERROR, "a served procedure's name: its own path above answers"),
                    "501": _json(_CONNECT_ERROR, "the stub runs without prime-sandboxes' messages"),
                },
            }
        },
    }
