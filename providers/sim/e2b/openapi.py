"""The OpenAPI 3.1 description of the local E2B's REST control plane (served at /openapi.json), written by hand.

It describes what this front serves (control_plane.py), in E2B's own names (NewSandbox, Sandbox, ListedSandbox,
SandboxDetail, Error); envd's Connect process service on the same port is not REST and is left out. The create
response links to the by-id operations so a fuzzer's stateful phase reaches them with a sandbox that exists.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from providers.sim.core.profile import Limits
from providers.sim.core.serving.openapi_parts import STRING_MAP as _STRINGS
from providers.sim.core.serving.openapi_parts import document, self_path
from providers.sim.core.serving.openapi_parts import json_content as _json
from providers.sim.core.serving.openapi_parts import schema_ref as _ref
from providers.sim.e2b.shapes import MAX_TIMEOUT_S

_ERROR = _json(_ref("Error"), "error")
_ID = {"name": "sandbox_id", "in": "path", "required": True, "schema": {"type": "string"}}
_EMPTY = {
    "anyOf": [{"type": "null"}, {"type": "array", "maxItems": 0}, {"type": "object", "maxProperties": 0}],
    "description": "not modelled: absent, null or empty",
}


def _schemas(max_timeout: int) -> dict[str, Any]:
    timeout = {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S, "description": "seconds (vendor)"}
    # a create is held to the profile's lifetime limit; a later timeout or connect is not (as the front serves it)
    create_timeout = {**timeout, "maximum": max_timeout}
    listed: dict[str, Any] = {
        "type": "object",
        "required": ["templateID", "sandboxID", "clientID", "startedAt", "endAt", "state"],
        "properties": {
            "templateID": {"type": "string"},
            "sandboxID": {"type": "string"},
            "clientID": {"type": "string"},
            "startedAt": {"type": "string", "format": "date-time"},
            "endAt": {"type": "string", "format": "date-time"},
            "cpuCount": {"type": "integer"},
            "memoryMB": {"type": "integer"},
            "diskSizeMB": {"type": "integer"},
            "state": {"enum": ["running", "paused"]},
            "envdVersion": {"type": "string"},
            "metadata": _STRINGS,
        },
    }
    return {
        "Error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "integer"},
                "message": {"type": "string"},
                "error_code": {"type": "string"},
            },
        },
        "NewSandbox": {
            "type": "object",
            "required": ["templateID"],
            "properties": {
                "templateID": {"type": "string", "pattern": "\\S"},
                "timeout": {**create_timeout, "default": 300},
                "autoPause": _nullable({"type": "boolean", "description": "at its timeout it pauses, not ends"}),
                "autoPauseMemory": _nullable({"type": "boolean", "description": "either way processes end at a pause"}),
                "autoResume": _nullable(
                    {"type": "object", "required": ["enabled"], "properties": {"enabled": {"const": False}}}
                ),
                "metadata": _nullable(_STRINGS),
                "envVars": _nullable(_STRINGS),
                "mcp": _nullable({"type": "object", "description": "the SDK then starts mcp-gateway in the sandbox"}),
                **{name: _EMPTY for name in ("network", "iam", "volumeMounts")},
            },
        },
        "Timeout": {"type": "object", "required": ["timeout"], "properties": {"timeout": {**timeout, "minimum": 0}}},
        "ConnectSandbox": {"type": "object", "properties": {"timeout": _nullable(timeout)}},
        "Sandbox": {
            "type": "object",
            "required": ["templateID", "sandboxID", "clientID", "envdVersion"],
            "properties": {
                "templateID": {"type": "string"},
                "sandboxID": {"type": "string"},
                "clientID": {"type": "string"},
                "envdVersion": {"type": "string"},
                "envdAccessToken": _nullable({"type": "string"}),
                "trafficAccessToken": _nullable({"type": "string"}),
                "domain": _nullable({"type": "string"}),
            },
        },
        "ListedSandbox": listed,
        "SnapshotRequest": {
            "type": "object",
            "properties": {
                "name": _nullable({"type": "string", "pattern": "\\S"}),
                "memory": _nullable({"type": "boolean"}),
            },
        },
        "SnapshotInfo": {
            "type": "object",
            "required": ["snapshotID", "names"],
            "properties": {"snapshotID": {"type": "string"}, "names": {"type": "array", "items": {"type": "string"}}},
        },
        "ForkRequest": {
            "type": "object",
            "properties": {
                "timeout": _nullable(timeout),
                "count": _nullable({"type": "integer", "minimum": 1, "maximum": 100}),
            },
        },
        "ForkResult": {"type": "object", "properties": {"sandbox": _ref("Sandbox"), "error": _ref("Error")}},
        "ResumeRequest": {"type": "object", "properties": {"timeout": _nullable(timeout)}},
        "SandboxMetric": {
            "type": "object",
            "required": ["timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal"],
            "properties": {
                "timestamp": {"type": "string", "format": "date-time"},
                "timestampUnix": {"type": "integer"},
                **{
                    name: {"type": "integer"}
                    for name in ("cpuCount", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal")
                },
                "cpuUsedPct": {"type": "number"},
            },
        },
        "SandboxDetail": {
            **listed,
            "properties": {
                **listed["properties"],
                "envdAccessToken": _nullable({"type": "string"}),
                "domain": _nullable({"type": "string"}),
            },
        },
    }


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _op(op_id: str, summary: str, responses: dict[str, Any], **extra: Any) -> dict[str, Any]:
    responses.setdefault("401", _json(_ref("Error"), "missing or invalid X-API-KEY"))
    return {"operationId": op_id, "summary": summary, "security": [{"apiKey": []}], "responses": responses, **extra}


def _body(name: str, *, required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": _ref(name)}}}


def _saved_state_paths(not_found: dict[str, Any], bad: dict[str, Any]) -> dict[str, Any]:
    """Pause, resume, snapshots, fork and metrics (saved_state.py)."""
    conflict = _json(_ref("Error"), "already in that state")
    started = {
        "429": _json(_ref("Error"), "no quota"),
        "500": _json(_ref("Error"), "failed to start"),
        "503": _json(_ref("Error"), "no capacity"),
        "504": _json(_ref("Error"), "did not start in time"),
    }
    return {
        "/sandboxes/{sandbox_id}/pause": {
            "post": _op(
                "pauseSandbox",
                "Pause a running sandbox (files kept, no quota held)",
                {"204": {"description": "paused"}, "400": bad, "404": not_found, "409": conflict},
                parameters=[_ID],
                requestBody={"required": False, "content": {"application/json": {"schema": {"type": "object"}}}},
            )
        },
        "/sandboxes/{sandbox_id}/resume": {
            "post": _op(
                "resumeSandbox",
                "Resume a paused sandbox",
                {"201": _json(_ref("Sandbox"), "it runs again"), "400": bad, "404": not_found, "409": conflict}
                | started,
                parameters=[_ID],
                requestBody=_body("ResumeRequest", required=False),
            )
        },
        "/sandboxes/{sandbox_id}/snapshots": {
            "post": _op(
                "createSnapshot",
                "Snapshot a sandbox's files",
                {"201": _json(_ref("SnapshotInfo"), "taken"), "400": bad, "404": not_found},
                parameters=[_ID],
                requestBody=_body("SnapshotRequest", required=False),
            )
        },
        "/snapshots": {
            "get": _op(
                "listSnapshots",
                "Snapshots, newest first",
                {
                    "200": {
                        **_json({"type": "array", "items": _ref("SnapshotInfo")}, "one page"),
                        "headers": {"X-Next-Token": {"schema": {"type": "string"}}},
                    },
                    "400": bad,
                },
                parameters=[
                    {"name": "sandboxID", "in": "query", "schema": {"type": "string"}},
                    {"name": "name", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "nextToken", "in": "query", "schema": {"type": "string", "pattern": "^[0-9]*$"}},
                ],
            )
        },
        "/templates/{template_id}": {
            "delete": _op(
                "deleteSnapshot",
                "Delete a snapshot (templates are not built here)",
                {"204": {"description": "deleted"}, "404": _json(_ref("Error"), "no such snapshot")},
                parameters=[{"name": "template_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            )
        },
        "/sandboxes/{sandbox_id}/fork": {
            "post": _op(
                "forkSandbox",
                "Copies of a sandbox's files, each a new running sandbox",
                {
                    "201": _json({"type": "array", "items": _ref("ForkResult")}, "one result per fork"),
                    "400": bad,
                    "404": not_found,
                },
                parameters=[_ID],
                requestBody=_body("ForkRequest", required=False),
            )
        },
        "/sandboxes/{sandbox_id}/metrics": {
            "get": _op(
                "sandboxMetrics",
                "Simulated metrics, one per 5 s since the sandbox started",
                {"200": _json({"type": "array", "items": _ref("SandboxMetric")}, "them"), "400": bad, "404": not_found},
                parameters=[
                    _ID,
                    {"name": "start", "in": "query", "schema": {"type": "integer"}},
                    {"name": "end", "in": "query", "schema": {"type": "integer"}},
                ],
            )
        },
    }


def max_timeout_s(limits: Limits) -> int:
    """The longest timeout the served profile accepts (its lifetime limit, whole seconds)."""
    if math.isfinite(limits.max_lifetime_s):
        return max(1, min(MAX_TIMEOUT_S, math.floor(limits.max_lifetime_s)))
    return MAX_TIMEOUT_S


def openapi_document(max_timeout: int = MAX_TIMEOUT_S) -> dict[str, Any]:
    """A fresh copy of the document; `max_timeout` is the served profile's (max_timeout_s)."""
    by_id = {"sandbox_id": "$response.body#/sandboxID"}
    links = {
        name: {"operationId": op_id, "parameters": by_id}
        for name, op_id in (
            ("GetSandbox", "getSandbox"),
            ("KillSandbox", "killSandbox"),
            ("SetTimeout", "setSandboxTimeout"),
            ("ConnectSandbox", "connectSandbox"),
        )
    }
    created = {**_json(_ref("Sandbox"), "the sandbox runs"), "links": links}
    not_found = _json(_ref("Error"), "no such sandbox, or it ended")
    bad = _json(_ref("Error"), "invalid request")
    paths: dict[str, Any] = {
        "/v2/sandboxes": {
            "post": _op(
                "createSandbox",
                "Create a sandbox; answers once it runs",
                {
                    "201": created,
                    "400": bad,
                    "429": {
                        **_json(_ref("Error"), "create-rate limit (with Retry-After) or the concurrent-sandbox cap"),
                        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                    },
                    "500": _json(_ref("Error"), "internal_server_error or sandbox_create_failed"),
                    "503": _json(_ref("Error"), "sandbox_capacity_unavailable"),
                    "504": _json(_ref("Error"), "sandbox_placement_timeout"),
                },
                requestBody=_body("NewSandbox"),
            ),
            "get": _op(
                "listSandboxes",
                "Running sandboxes, filtered by metadata",
                {
                    "200": {
                        **_json({"type": "array", "items": _ref("ListedSandbox")}, "one page"),
                        "headers": {"X-Next-Token": {"schema": {"type": "string"}}},
                    },
                    "400": bad,
                },
                parameters=[
                    {"name": "metadata", "in": "query", "schema": {"type": "string"}},
                    {
                        "name": "state",
                        "in": "query",
                        "schema": {"type": "string", "pattern": "^(running|paused|)(,(running|paused|))*$"},
                    },
                    {"name": "order", "in": "query", "schema": {"enum": ["asc", "desc"], "default": "desc"}},
                    {"name": "template", "in": "query", "schema": {"type": "string"}},
                    {"name": "startedAfter", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                    {"name": "startedBefore", "in": "query", "schema": {"type": "string", "format": "date-time"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                    {"name": "nextToken", "in": "query", "schema": {"type": "string", "pattern": "^[0-9]*$"}},
                ],
            ),
        },
        "/sandboxes/{sandbox_id}": {
            "get": _op(
                "getSandbox",
                "One running sandbox",
                {"200": _json(_ref("SandboxDetail"), "it"), "404": not_found},
                parameters=[_ID],
            ),
            "delete": _op(
                "killSandbox", "Kill a sandbox", {"204": {"description": "killed"}, "404": not_found}, parameters=[_ID]
            ),
        },
        "/sandboxes/{sandbox_id}/timeout": {
            "post": _op(
                "setSandboxTimeout",
                "Its timeout restarts from now",
                {"204": {"description": "set"}, "400": bad, "404": not_found},
                parameters=[_ID],
                requestBody=_body("Timeout"),
            )
        },
        "/v2/sandboxes/{sandbox_id}/connect": {
            "post": _op(
                "connectSandbox",
                "Connect to a running sandbox (a timeout only lengthens its life), or resume a paused one",
                {
                    "200": _json(_ref("Sandbox"), "it runs"),
                    "201": _json(_ref("Sandbox"), "it was paused and runs again"),
                    "400": bad,
                    "404": not_found,
                    "429": _json(_ref("Error"), "no quota to resume it"),
                    "500": _json(_ref("Error"), "it failed to start again"),
                    "503": _json(_ref("Error"), "no capacity to resume it"),
                    "504": _json(_ref("Error"), "it did not start again in time"),
                },
                parameters=[_ID],
                requestBody=_body("ConnectSandbox", required=False),
            )
        },
        **_saved_state_paths(not_found, bad),
        "/api/v1/_stampede/truth": {
            "get": {
                "operationId": "stampedeTruth",
                "summary": "Stub-only: the simulator's record of every sandbox",
                "security": [{"bearer": []}],
                "responses": {"200": _json({"type": "object"}, "truth"), "401": _ERROR},
            }
        },
        "/api/v1/_stampede/stats": {
            "get": {
                "operationId": "stampedeStats",
                "summary": "Stub-only: simulator counters",
                "security": [{"bearer": []}],
                "responses": {"200": _json({"type": "object"}, "stats"), "401": _ERROR},
            }
        },
        "/openapi.json": self_path(),
    }
    security = {
        "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-KEY"},
        "bearer": {"type": "http", "scheme": "bearer", "description": "the API key, for /api/v1/_stampede"},
    }
    return document("stampede local E2B control plane", paths, copy.deepcopy(_schemas(max_timeout)), security)
