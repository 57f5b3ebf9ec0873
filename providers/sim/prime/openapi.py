"""The OpenAPI 3.1 description of the Prime-like stub (served at /openapi.json), written by hand.

The REST API and its schemas are here; the ConnectRPC gateway's procedures are `openapi_connect.py`.

Hand-written because the server is plain aiohttp; a test checks that every route the app serves is
described here, so the two cannot drift apart silently. Over 600 lines on purpose: it is one OpenAPI document (the
routes and the schemas they refer to), read and fuzzed whole; the gateway's and the files' paths already live apart.
"""

from __future__ import annotations

import copy
from typing import Any

from providers.sim.core.serving.openapi_parts import json_content as _json
from providers.sim.core.serving.openapi_parts import schema_ref as _ref
from providers.sim.prime.gateway import MAX_EXEC_TIMEOUT_S
from providers.sim.prime.openapi_connect import connect_paths
from providers.sim.prime.openapi_files import file_paths
from providers.sim.prime.shapes import LIMITS

_ERR = _json(_ref("Error"), "error")
_VALIDATION = _json(_ref("ValidationError"), "invalid request (FastAPI style)")
_UNAUTH = _json(_ref("Error"), "missing or invalid API token")
_NOT_FOUND = _json(_ref("Error"), "Sandbox not found")
_ID = {"name": "sandbox_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _op(
    summary: str,
    responses: dict[str, Any],
    *,
    body: str | None = None,
    params: list[Any] | None = None,
    auth: str = "bearer",
    tag: str = "sandbox",
    op_id: str | None = None,
    links: dict[str, Any] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "tags": [tag], "responses": responses}
    if op_id:
        op["operationId"] = op_id
    if links:
        first_2xx = next(code for code in responses if code.startswith("2"))
        responses[first_2xx] = {**responses[first_2xx], "links": links}
    if auth == "bearer":
        op["security"] = [{"bearer": []}]
        responses.setdefault("401", _UNAUTH)
    elif auth == "gateway":
        op["security"] = [{"gatewayToken": []}]
    else:
        op["security"] = []
    if body:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    if params:
        op["parameters"] = params
    return op


def _nullable(kind: str | dict[str, Any]) -> dict[str, Any]:
    base = {"type": kind} if isinstance(kind, str) else kind
    return {"anyOf": [base, {"type": "null"}]}


_TS = _nullable({"type": "string", "format": "date-time"})


def _size(name: str, default: float) -> dict[str, Any]:
    return {"type": "number", "exclusiveMinimum": 0, "maximum": LIMITS[name], "default": default}


_STATUS = {
    "type": "string",
    "enum": ["PENDING", "PROVISIONING", "RUNNING", "PAUSED", "ERROR", "TERMINATED", "TIMEOUT"],
}

_SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "required": ["detail"],
        "properties": {
            "detail": {"type": "string"},
            "errorCode": {
                "type": "string",
                "enum": ["RATE_LIMITED", "SANDBOX_LIMIT_REACHED", "INSUFFICIENT_CAPACITY"],
            },
            "retryAfter": {
                "type": "number",
                "description": "real seconds until the next create token (429 RATE_LIMITED)",
            },
        },
    },
    "ValidationError": {
        "type": "object",
        "required": ["detail"],
        "properties": {
            "detail": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["type", "loc", "msg"],
                    "properties": {
                        "type": {"type": "string"},
                        "loc": {"type": "array"},
                        "msg": {"type": "string"},
                        "input": {},
                    },
                },
            }
        },
    },
    "StartCommand": {
        "type": "object",
        "required": ["executable"],
        "properties": {
            "executable": {"type": "string", "minLength": 1},
            "args": {"type": "array", "items": {"type": "string"}},
        },
    },
    "CreateSandboxRequest": {
        "type": "object",
        "required": ["name", "docker_image"],
        "properties": {
            "name": {"type": "string"},
            "docker_image": {"type": "string", "pattern": "\\S", "description": "not blank"},
            "start_command": {"anyOf": [_ref("StartCommand"), {"type": "string"}, {"type": "null"}]},
            "cpu_cores": _size("cpu_cores", 1.0),
            "memory_gb": _size("memory_gb", 1.0),
            "disk_size_gb": _nullable(_size("disk_size_gb", 5.0)),
            "gpu_count": {"type": "integer", "const": 0, "default": 0},
            "timeout_minutes": {
                "type": "integer",
                "anyOf": [{"const": -1}, {"minimum": 1, "maximum": LIMITS["timeout_minutes"]}],
                "default": 60,
                "description": "-1: no lifetime limit",
            },
            "idle_timeout_minutes": _nullable({"type": "integer", "maximum": LIMITS["timeout_minutes"]}),
            "checkpoint_id": {
                "type": "null",
                "description": "a checkpoint to start from (checkpoints.py; then docker_image may be left out); "
                "documented as null only, so a fuzzer does not draw ids of checkpoints that do not exist",
            },
            "environment_vars": _nullable({"type": "object", "additionalProperties": {"type": "string"}}),
            "secrets": _nullable({"type": "object", "additionalProperties": {"type": "string"}}),
            "labels": {"type": "array", "items": {"type": "string"}},
            "team_id": _nullable("string"),
            "region": _nullable("string"),
            "idempotency_key": _nullable("string"),
            "vm": {"type": "boolean", "default": True},
            "network_allowlist": _nullable({"type": "array", "items": {"type": "string"}}),
            "network_denylist": _nullable({"type": "array", "items": {"type": "string"}}),
            "advanced_configs": _nullable("object"),
        },
    },
    "GatewayAuth": {
        "type": "object",
        "required": ["token", "gateway_url", "user_ns", "job_id", "expires_at"],
        "properties": {
            "token": {"type": "string"},
            "gateway_url": {"type": "string", "description": "this server + /gateway"},
            "user_ns": {"type": "string"},
            "job_id": {"type": "string"},
            "expires_at": {"type": "string", "format": "date-time"},
        },
    },
    "Sandbox": {
        "type": "object",
        "required": [
            "id",
            "name",
            "dockerImage",
            "cpuCores",
            "memoryGB",
            "diskSizeGB",
            "diskMountPath",
            "gpuCount",
            "status",
            "timeoutMinutes",
            "createdAt",
            "updatedAt",
        ],
        "properties": {
            "id": {"type": "string"},
            "name": {"type": "string"},
            "dockerImage": {"type": "string"},
            "startCommand": {"anyOf": [_ref("StartCommand"), {"type": "null"}]},
            "cpuCores": {"type": "number"},
            "memoryGB": {"type": "number"},
            "diskSizeGB": {"type": "number"},
            "diskMountPath": {"type": "string"},
            "gpuCount": {"type": "integer"},
            "gpuType": _nullable("string"),
            "vm": {"type": "boolean"},
            "networkAllowlist": _nullable({"type": "array", "items": {"type": "string"}}),
            "networkDenylist": _nullable({"type": "array", "items": {"type": "string"}}),
            "status": _STATUS,
            "timeoutMinutes": {"type": "integer"},
            "idleTimeoutMinutes": _nullable("integer"),
            "terminationReason": _nullable("string"),
            "environmentVars": _nullable("object"),
            "secrets": _nullable("object"),
            "advancedConfigs": _nullable("object"),
            "labels": {"type": "array", "items": {"type": "string"}},
            "createdAt": {"type": "string", "format": "date-time"},
            "updatedAt": {"type": "string", "format": "date-time"},
            "startedAt": {**_TS, "description": "when the sandbox became RUNNING"},
            "terminatedAt": _TS,
            "exitCode": _nullable("integer"),
            "errorType": _nullable(
                {
                    "type": "string",
                    "enum": [
                        "PROVISIONING_TIMEOUT",
                        "BOOT_FAILED",
                        "IMAGE_PULL_FAILED",
                        "OOM_KILLED",
                        "TIMEOUT",
                        "SANDBOX_CRASHED",
                    ],
                }
            ),
            "errorMessage": _nullable("string"),
            "userId": _nullable("string"),
            "teamId": _nullable("string"),
            "region": _nullable("string"),
            "pendingImageBuildId": _nullable("string"),
            "gatewayAuth": {**_ref("GatewayAuth"), "description": "create response only"},
        },
    },
    "SandboxList": {
        "type": "object",
        "required": ["sandboxes", "total", "page", "perPage", "hasNext"],
        "properties": {
            "sandboxes": {"type": "array", "items": _ref("Sandbox")},
            "total": {"type": "integer"},
            "page": {"type": "integer"},
            "perPage": {"type": "integer"},
            "hasNext": {"type": "boolean"},
        },
    },
    "BatchStatusRequest": {
        "type": "object",
        "required": ["sandbox_ids"],
        "properties": {
            "sandbox_ids": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": 100,
                "uniqueItems": True,
            }
        },
    },
    "BatchStatusResponse": {
        "type": "object",
        "required": ["statuses", "errors"],
        "properties": {
            "statuses": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "sandbox_id": {"type": "string"},
                        "status": _STATUS,
                        "error_type": _nullable("string"),
                        "error_message": _nullable("string"),
                        "pending_image_build_id": _nullable("string"),
                    },
                },
            },
            "errors": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "sandbox_id": {"type": "string"},
                        "code": {"type": "string", "enum": ["NOT_FOUND"]},
                        "message": {"type": "string"},
                    },
                },
            },
        },
    },
    "BulkDeleteRequest": {
        "type": "object",
        "description": "sandbox_ids or labels, at least one of them non-empty",
        "anyOf": [
            {"required": ["sandbox_ids"], "properties": {"sandbox_ids": {"type": "array", "minItems": 1}}},
            {"required": ["labels"], "properties": {"labels": {"type": "array", "minItems": 1}}},
        ],
        "properties": {
            "sandbox_ids": _nullable({"type": "array", "items": {"type": "string"}}),
            "labels": _nullable({"type": "array", "items": {"type": "string"}}),
            "team_id": _nullable("string"),
            "user_id": _nullable("string"),
            "all_users": {"type": "boolean", "default": False},
        },
    },
    "BulkDeleteResponse": {
        "type": "object",
        "required": ["succeeded", "failed", "message"],
        "properties": {
            "succeeded": {"type": "array", "items": {"type": "string"}},
            "failed": {
                "type": "array",
                "items": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "message": {"type": "string"},
        },
    },
    "ErrorContext": {
        "type": "object",
        "properties": {
            "status": _STATUS,
            "error_type": _nullable("string"),
            "error_message": _nullable("string"),
        },
    },
    "ExecRequest": {
        "type": "object",
        "required": ["command"],
        "properties": {
            "command": {"type": "string", "description": "run as `sh -c command` by the simulator's shell"},
            "timeout": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_EXEC_TIMEOUT_S,
                "default": 300,
                "description": "vendor seconds",
            },
            "working_dir": _nullable("string"),
            "env": _nullable({"type": "object", "additionalProperties": {"type": "string"}}),
            "sandbox_id": {
                "type": "null",
                "description": "older SDKs repeat the path's job_id here; any other value is a 422",
            },
        },
    },
    "ExecResponse": {
        "type": "object",
        "required": ["stdout", "stderr", "exit_code"],
        "properties": {
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "exit_code": {"type": "integer"},
        },
    },
}


_BY_ID = {"sandbox_id": "$response.body#/id"}
_GATEWAY_JOB = {"user_ns": "$response.body#/gatewayAuth/user_ns", "job_id": "$response.body#/gatewayAuth/job_id"}
_CREATE_LINKS: dict[str, Any] = {
    **{
        name: {"operationId": op_id, "parameters": _BY_ID}
        for name, op_id in (
            ("GetSandbox", "getSandbox"),
            ("DeleteSandbox", "deleteSandbox"),
            ("GetErrorContext", "getErrorContext"),
            ("GetSandboxLogs", "getSandboxLogs"),
            ("AuthSandbox", "authSandbox"),
        )
    },
    **{
        name: {"operationId": op_id, "parameters": _GATEWAY_JOB}
        for name, op_id in (
            ("GatewayExec", "gatewayExec"),
            ("ConnectStart", "connectStart"),
            ("ConnectList", "connectList"),
            ("ConnectSendSignal", "connectSendSignal"),
        )
    },
}
"""From a created sandbox to everything addressed by its id, so a fuzzer's stateful phase reaches them."""


def _with_maxima(schemas: dict[str, Any], maxima: dict[str, int | float]) -> dict[str, Any]:
    fields = schemas["CreateSandboxRequest"]["properties"]
    fields["cpu_cores"]["maximum"] = maxima["cpu_cores"]
    fields["memory_gb"]["maximum"] = maxima["memory_gb"]
    fields["timeout_minutes"]["anyOf"][1]["maximum"] = maxima["timeout_minutes"]
    if maxima.get("lifetime_limited"):
        fields["timeout_minutes"]["anyOf"] = fields["timeout_minutes"]["anyOf"][1:]
        fields["timeout_minutes"]["description"] = "minutes; this profile has a lifetime limit"
    return schemas


_CHECKPOINT: dict[str, Any] = {
    "type": "object",
    "required": ["id", "sandbox_id", "state", "created_at"],
    "properties": {
        "id": {"type": "string"},
        "sandbox_id": {"type": "string"},
        "parent_id": {"type": ["string", "null"]},
        "state": {"enum": ["PENDING", "DURABLE"]},
        "depth": {"type": "integer"},
        "docker_image": {"type": ["string", "null"]},
        "disk_size_bytes": {"type": "integer"},
        "stored_bytes": {"type": "integer"},
        "occupied_bytes": {"type": "integer"},
        "error": {"type": ["string", "null"]},
        "created_at": {"type": "string"},
        "updated_at": {"type": "string"},
    },
}
"""A filesystem checkpoint as `checkpoints.checkpoint_body` answers it (prime-sandboxes' SandboxCheckpoint)."""


def openapi_document(maxima: dict[str, int | float] | None = None) -> dict[str, Any]:
    """A fresh copy of the document (callers may mutate it); `maxima` (shapes.create_maxima) narrows the
    create request's maxima to what the served profile accepts."""
    p = "/api/v1"
    rate_limited = {
        **_json(_ref("Error"), "RATE_LIMITED (with Retry-After header, real seconds) or SANDBOX_LIMIT_REACHED"),
        "headers": {"Retry-After": {"schema": {"type": "integer"}}},
    }
    paths: dict[str, Any] = {
        f"{p}/sandbox": {
            "post": _op(
                "Create a sandbox (idempotency_key honoured)",
                {
                    "201": _json(_ref("Sandbox"), "accepted (PENDING), with gatewayAuth"),
                    "404": _json(_ref("Error"), "checkpoint_id names no checkpoint"),
                    "422": _VALIDATION,
                    "429": rate_limited,
                    "500": _ERR,
                    "502": _ERR,
                    "503": _json(_ref("Error"), "INSUFFICIENT_CAPACITY or a transient error"),
                },
                body="CreateSandboxRequest",
                op_id="createSandbox",
                links=_CREATE_LINKS,
            ),
            "get": _op(
                "List sandboxes, newest first",
                {"200": _json(_ref("SandboxList"), "one page"), "422": _VALIDATION},
                params=[
                    {
                        "name": "page",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 10**9, "default": 1},
                    },
                    {
                        "name": "per_page",
                        "in": "query",
                        "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50},
                    },
                    {"name": "status", "in": "query", "schema": _STATUS},
                    {
                        "name": "labels",
                        "in": "query",
                        "style": "form",
                        "explode": True,
                        "schema": {"type": "array", "items": {"type": "string"}},
                        "description": "repeat; a sandbox must carry all",
                    },
                    {
                        "name": "is_active",
                        "in": "query",
                        "schema": {"type": "boolean"},
                        "description": "true: only sandboxes not yet ended; false or absent: all",
                    },
                    {
                        "name": "team_id",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "ignored",
                    },
                    {
                        "name": "user_id",
                        "in": "query",
                        "schema": {"type": "string"},
                        "description": "ignored",
                    },
                ],
                op_id="listSandboxes",
            ),
            "delete": _op(
                "Bulk delete by sandbox_ids or labels",
                {"200": _json(_ref("BulkDeleteResponse"), "result"), "422": _VALIDATION},
                body="BulkDeleteRequest",
                op_id="bulkDeleteSandboxes",
            ),
        },
        f"{p}/sandbox/status:batchGet": {
            "post": _op(
                "Statuses of up to 100 unique sandboxes",
                {
                    "200": _json(_ref("BatchStatusResponse"), "in request order; unknown ids in errors"),
                    "422": _VALIDATION,
                },
                body="BatchStatusRequest",
                op_id="batchGetStatus",
            )
        },
        f"{p}/sandbox/{{sandbox_id}}": {
            "get": _op(
                "Get one sandbox",
                {"200": _json(_ref("Sandbox"), "the sandbox"), "404": _NOT_FOUND},
                params=[_ID],
                op_id="getSandbox",
            ),
            "delete": _op(
                "Terminate a sandbox (idempotent; it stays readable as TERMINATED)",
                {"200": _json({"type": "object"}, "{id, status, message}"), "404": _NOT_FOUND},
                params=[_ID],
                op_id="deleteSandbox",
            ),
        },
        f"{p}/sandbox/{{sandbox_id}}/checkpoints": {
            "post": _op(
                "Checkpoint the sandbox's files (PENDING until the profile's snapshot time has passed, then DURABLE)",
                {
                    "201": _json(_CHECKPOINT, "the checkpoint"),
                    "404": _NOT_FOUND,
                    "409": _json(_ref("Error"), "the sandbox is not running"),
                },
                params=[_ID],
                op_id="createCheckpoint",
            )
        },
        f"{p}/sandbox/checkpoints/{{checkpoint_id}}": {
            "get": _op(
                "One checkpoint's state",
                {"200": _json(_CHECKPOINT, "the checkpoint"), "404": _NOT_FOUND},
                params=[{"name": "checkpoint_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                op_id="getCheckpoint",
            )
        },
        f"{p}/sandbox/{{sandbox_id}}/error-context": {
            "get": _op(
                "Why a sandbox is not running",
                {"200": _json(_ref("ErrorContext"), "context"), "404": _NOT_FOUND},
                params=[_ID],
                op_id="getErrorContext",
            )
        },
        f"{p}/sandbox/{{sandbox_id}}/logs": {
            "get": _op(
                "Lifecycle log lines",
                {
                    "200": _json({"type": "object", "properties": {"logs": {"type": "string"}}}, "logs"),
                    "404": _NOT_FOUND,
                },
                params=[_ID],
                op_id="getSandboxLogs",
            )
        },
        f"{p}/sandbox/{{sandbox_id}}/auth": {
            "post": _op(
                "A gateway token for this sandbox",
                {"200": _json(_ref("GatewayAuth"), "token"), "404": _NOT_FOUND},
                params=[_ID],
                op_id="authSandbox",
            )
        },
        f"{p}/_stampede/truth": {
            "get": _op(
                "Stub-only: the simulator's record of every sandbox (vendor seconds and epoch seconds)",
                {"200": _json({"type": "object"}, "{profile, seed, time_scale, sandboxes: [...]}")},
                tag="stampede",
            )
        },
        f"{p}/_stampede/stats": {
            "get": _op(
                "Stub-only: simulator counters",
                {"200": _json({"type": "object"}, "{profile, seed, time_scale, stats}")},
                tag="stampede",
            )
        },
        "/gateway/{user_ns}/{job_id}/exec": {
            "post": _op(
                "Run a command (Prime's REST gateway shape)",
                {
                    "200": _json(_ref("ExecResponse"), "the command ran (any exit code)"),
                    "401": _json(_ref("Error"), "bad gateway token"),
                    "408": _json(_ref("Error"), "command timed out"),
                    "409": _json(_ref("Error"), "Sandbox is not running (yet)"),
                    "422": _VALIDATION,
                    "502": _json(
                        {
                            "type": "object",
                            "properties": {
                                "error": {"const": "sandbox_not_found"},
                                "detail": {"type": "string"},
                            },
                        },
                        "the sandbox is gone or died during the command",
                    ),
                    "503": _json(_ref("Error"), "injected transient gateway error"),
                },
                body="ExecRequest",
                params=[
                    {"name": "user_ns", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                auth="gateway",
                tag="gateway",
                op_id="gatewayExec",
            )
        },
        **connect_paths(),
        **file_paths(),
        "/openapi.json": {
            "get": _op("This document", {"200": _json({"type": "object"}, "OpenAPI 3.1")}, auth="none", tag="meta")
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "stampede Prime-like sandbox stub",
            "version": "1",
            "description": "Prime's sandbox REST API shape over the stampede vendor simulator. Durations the vendor "
            "enforces are vendor seconds (they play at the stub's time scale); Retry-After and timestamps are real.",
        },
        "paths": paths,
        "components": {
            "schemas": _with_maxima(copy.deepcopy(_SCHEMAS), maxima or dict(LIMITS)),
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "the stub's API token"},
                "gatewayToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "token from POST /sandbox/{id}/auth",
                },
            },
        },
    }
