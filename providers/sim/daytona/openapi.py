"""The OpenAPI 3.1 description of the local Daytona's REST control plane (served at /openapi.json), by hand.

It describes what rest.py serves under /api, in Daytona's names (CreateSandbox, Sandbox, PaginatedSandboxes);
the toolbox and the Socket.IO events on the same port are left out. The create response links to the by-id
operations, so a fuzzer's stateful phase reaches them with a sandbox that exists.
"""

from __future__ import annotations

import copy
from typing import Any

from providers.sim.core.serving.openapi_parts import STRING_MAP as _STRINGS
from providers.sim.core.serving.openapi_parts import document, self_path
from providers.sim.core.serving.openapi_parts import json_content as _json
from providers.sim.core.serving.openapi_parts import schema_ref as _ref
from providers.sim.daytona.shapes import MAX_INT


def _int(minimum: int) -> dict[str, Any]:
    return {"anyOf": [{"type": "integer", "minimum": minimum, "maximum": MAX_INT}, {"type": "null"}]}


def _opt(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["statusCode", "message"],
        "properties": {
            "statusCode": {"type": "integer"},
            "message": {"type": "string"},
            "code": {"type": "string"},
            "source": {"type": "string"},
        },
    },
    "CreateSandbox": {
        "type": "object",
        "properties": {
            "name": _opt({"type": "string"}),
            "snapshot": _opt({"type": "string", "description": "blank: the default snapshot"}),
            "user": _opt({"type": "string"}),
            "target": _opt({"type": "string"}),
            "public": _opt({"type": "boolean"}),
            "networkBlockAll": _opt({"type": "boolean"}),
            "labels": _opt(_STRINGS),
            "env": _opt(_STRINGS),
            "autoStopInterval": _int(0),
            "autoArchiveInterval": _int(0),
            "autoDeleteInterval": _int(-MAX_INT - 1),
            "ttlMinutes": _int(0),
            "queueTimeout": _int(1),
            "cpu": _int(1),
            "memory": _int(1),
            "disk": _int(1),
            "buildInfo": _opt(
                {
                    "type": "object",
                    "required": ["dockerfileContent"],
                    "properties": {
                        "dockerfileContent": {
                            "type": "string",
                            "pattern": "^FROM [a-z0-9]+$",
                            "description": "a Dockerfile with a FROM line",
                        }
                    },
                }
            ),
            "volumes": {"anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}], "description": "not modelled"},
        },
    },
    "Sandbox": {
        "type": "object",
        "required": ["id", "state"],
        "properties": {"id": {"type": "string"}, "state": {"type": "string"}, "labels": _STRINGS},
    },
    "PaginatedSandboxes": {
        "type": "object",
        "required": ["items", "nextCursor"],
        "properties": {"items": {"type": "array", "items": _ref("Sandbox")}, "nextCursor": _opt({"type": "string"})},
    },
}


def _op(op_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    responses.setdefault("401", _json(_ref("Error"), "missing or invalid API key"))
    return {"operationId": op_id, "summary": summary, "security": [{"bearer": []}], "responses": responses, **extra}


def openapi_document() -> dict[str, Any]:
    """A fresh copy of the document."""
    p = "/api"
    by_id = {"id": "$response.body#/id"}
    links = {
        name: {"operationId": op_id, "parameters": by_id}
        for name, op_id in (
            ("GetSandbox", "getSandbox"),
            ("DeleteSandbox", "deleteSandbox"),
            ("StartSandbox", "startSandbox"),
            ("StopSandbox", "stopSandbox"),
            ("ToolboxProxyUrl", "toolboxProxyUrl"),
        )
    }
    one = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}, "description": "id or name"}]
    not_found = _json(_ref("Error"), "Sandbox not found")
    bad = _json(_ref("Error"), "invalid request, or not in a state for it")
    sandbox = _json(_ref("Sandbox"), "the sandbox")
    paths: dict[str, Any] = {
        f"{p}/sandbox": {
            "post": _op(
                "createSandbox",
                "Create a sandbox",
                {
                    "200": {**sandbox, "links": links},
                    "400": bad,
                    "403": _json(_ref("Error"), "above a per-sandbox or the organization's limit"),
                    "409": _json(_ref("Error"), "the name is in use"),
                    "429": _json(_ref("Error"), "the sandbox-create throttler"),
                    "500": _json(_ref("Error"), "an injected transient failure"),
                },
                requestBody={"required": True, "content": {"application/json": {"schema": _ref("CreateSandbox")}}},
            ),
            "get": _op(
                "listSandboxes",
                "Sandboxes, newest first, a cursor page at a time",
                {"200": _json(_ref("PaginatedSandboxes"), "one page"), "400": bad},
                parameters=[
                    {"name": "labels", "in": "query", "content": {"application/json": {"schema": _STRINGS}}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
                    {"name": "cursor", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                    {
                        "name": "states",
                        "in": "query",
                        "style": "form",
                        "explode": True,
                        "schema": {"type": "array", "items": {"type": "string"}},
                    },
                    {"name": "includeErroredDeleted", "in": "query", "schema": {"type": "boolean"}},
                ],
            ),
        },
        f"{p}/sandbox/{{id}}": {
            "get": _op("getSandbox", "One sandbox", {"200": sandbox, "404": not_found}, parameters=one),
            "delete": _op("deleteSandbox", "Delete a sandbox", {"200": sandbox, "404": not_found}, parameters=one),
        },
        f"{p}/sandbox/{{id}}/start": {
            "post": _op(
                "startSandbox",
                "Start (a no-op once started)",
                {"200": sandbox, "400": bad, "404": not_found},
                parameters=one,
            )
        },
        f"{p}/sandbox/{{id}}/stop": {
            "post": _op(
                "stopSandbox", "Stop a started sandbox", {"200": sandbox, "400": bad, "404": not_found}, parameters=one
            )
        },
        f"{p}/sandbox/{{id}}/toolbox-proxy-url": {
            "get": _op(
                "toolboxProxyUrl",
                "Where its toolbox answers",
                {"200": _json({"type": "object", "required": ["url"]}, "the URL"), "404": not_found},
                parameters=one,
            )
        },
        f"{p}/config": {"get": _op("config", "The API's configuration", {"200": _json({"type": "object"}, "it")})},
        f"{p}/shared-regions": {"get": _op("sharedRegions", "The regions", {"200": _json({"type": "array"}, "them")})},
        f"{p}/v1/_stampede/truth": {
            "get": _op("stampedeTruth", "Stub-only: the simulator's record", {"200": _json({"type": "object"}, "it")})
        },
        f"{p}/v1/_stampede/stats": {
            "get": _op("stampedeStats", "Stub-only: simulator counters", {"200": _json({"type": "object"}, "them")})
        },
        "/openapi.json": self_path(),
    }
    security = {"bearer": {"type": "http", "scheme": "bearer", "description": "the API key"}}
    return document("stampede local Daytona control plane", paths, copy.deepcopy(_SCHEMAS), security)
