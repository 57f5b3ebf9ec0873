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
        f"{p}/sandbox/{{id}}/archive": {
            "post": _op(
                "archiveSandbox",
                "Archive a stopped sandbox",
                {"200": sandbox, "400": bad, "404": not_found},
                parameters=one,
            )
        },
        **_changes(p, one, sandbox, bad, not_found),
        **_snapshots(p, bad),
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


def _changes(p: str, one: list[Any], sandbox: Any, bad: Any, not_found: Any) -> dict[str, Any]:
    """The setters, fork and snapshot-of-a-sandbox (changes.py)."""

    def minutes(minimum: int) -> list[Any]:
        schema = {"type": "integer", "minimum": minimum, "maximum": MAX_INT}
        return [*one, {"name": "minutes", "in": "path", "required": True, "schema": schema}]

    def setter(op_id: str, summary: str, minimum: int) -> dict[str, Any]:
        answers = {"200": sandbox, "400": bad, "404": not_found}
        return {"post": _op(op_id, summary, answers, parameters=minutes(minimum))}

    named = {"type": "object", "properties": {"name": _opt({"type": "string"})}}
    snapshot_name = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string", "pattern": "\\S"}},
    }
    created = {
        "200": sandbox,
        "400": bad,
        "403": _json(_ref("Error"), "above the organization's limit"),
        "404": not_found,
        "409": _json(_ref("Error"), "the name is in use"),
        "429": _json(_ref("Error"), "the sandbox-create throttler"),
        "500": _json(_ref("Error"), "an injected transient failure"),
    }
    labels = {"type": "object", "required": ["labels"], "properties": {"labels": _STRINGS}}
    public = [*one, {"name": "public", "in": "path", "required": True, "schema": {"type": "boolean"}}]
    return {
        f"{p}/sandbox/{{id}}/labels": {
            "put": _op(
                "replaceLabels",
                "Replace its labels",
                {"200": _json(labels, "the labels"), "400": bad, "404": not_found},
                parameters=one,
                requestBody={"required": True, "content": {"application/json": {"schema": labels}}},
            )
        },
        f"{p}/sandbox/{{id}}/autostop/{{minutes}}": setter("setAutostopInterval", "Auto-stop after idle minutes", 0),
        f"{p}/sandbox/{{id}}/autoarchive/{{minutes}}": setter("setAutoArchiveInterval", "Auto-archive (0: max)", 0),
        f"{p}/sandbox/{{id}}/autodelete/{{minutes}}": setter(
            "setAutoDeleteInterval", "Auto-delete after stopped minutes (-1: never)", -MAX_INT - 1
        ),
        f"{p}/sandbox/{{id}}/ttl/{{minutes}}": setter("setTtl", "Destroy this many minutes from now (0: never)", 0),
        f"{p}/sandbox/{{id}}/public/{{public}}": {
            "post": _op(
                "updatePublicStatus",
                "Public previews",
                {"200": sandbox, "400": bad, "404": not_found},
                parameters=public,
            )
        },
        f"{p}/sandbox/{{id}}/last-activity": {
            "post": _op(
                "updateLastActivity",
                "Note activity",
                {"201": {"description": "noted"}, "404": not_found},
                parameters=one,
            )
        },
        f"{p}/sandbox/{{id}}/fork": {
            "post": _op(
                "forkSandbox",
                "A new sandbox with a copy of its files",
                created,
                parameters=one,
                requestBody={"content": {"application/json": {"schema": named}}},
            )
        },
        f"{p}/sandbox/{{id}}/snapshot": {
            "post": _op(
                "createSandboxSnapshot",
                "Snapshot its files under a name",
                {"200": sandbox, "400": bad, "404": not_found, "409": created["409"]},
                parameters=one,
                requestBody={
                    "required": True,
                    "content": {"application/json": {"schema": snapshot_name}},
                },
            )
        },
    }


def _snapshots(p: str, bad: Any) -> dict[str, Any]:
    """The snapshot registry (snapshots.py)."""
    snap = {"type": "object", "required": ["id", "name", "state"]}
    page = {"type": "object", "required": ["items", "total", "page", "totalPages"]}
    one = [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}, "description": "id or name"}]
    missing = _json(_ref("Error"), "no such snapshot")
    not_built = _json(_ref("Error"), "building snapshots from images is not modelled")
    query = [
        {"name": "page", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": MAX_INT}},
        {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 200}},
        {"name": "name", "in": "query", "schema": {"type": "string"}},
        {"name": "sourceSandboxId", "in": "query", "schema": {"type": "string"}},
    ]
    body = {"content": {"application/json": {"schema": {"type": "object"}}}}
    return {
        f"{p}/snapshots": {
            "get": _op(
                "getAllSnapshots",
                "Snapshots, newest first",
                {"200": _json(page, "a page"), "400": bad},
                parameters=query,
            ),
            "post": _op("createSnapshot", "Build a snapshot from an image", {"501": not_built}, requestBody=body),
        },
        f"{p}/snapshots/{{id}}": {
            "get": _op("getSnapshot", "One snapshot", {"200": _json(snap, "it"), "404": missing}, parameters=one),
            "delete": _op(
                "removeSnapshot",
                "Delete a snapshot taken here",
                {"200": {"description": "deleted"}, "403": _json(_ref("Error"), "a general one"), "404": missing},
                parameters=one,
            ),
        },
        f"{p}/snapshots/{{id}}/activate": {
            "post": _op("activateSnapshot", "Activate", {"501": not_built}, parameters=one)
        },
        f"{p}/snapshots/{{id}}/deactivate": {
            "post": _op("deactivateSnapshot", "Deactivate", {"501": not_built}, parameters=one)
        },
    }
