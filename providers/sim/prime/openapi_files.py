"""The OpenAPI 3.1 paths of the Prime-like gateway's file routes (`files.py`): upload, download, read-file.

Part of the document `openapi.py` serves at /openapi.json, so a fuzzer (and a reader) finds them with the rest.
"""

from __future__ import annotations

from typing import Any

from providers.sim.core.serving.openapi_parts import json_content as _json

_BASE = "/gateway/{user_ns}/{job_id}"
_DETAIL = {"type": "object", "properties": {"detail": {}}}
_PARAMS: list[dict[str, Any]] = [
    {"name": "user_ns", "in": "path", "required": True, "schema": {"type": "string"}},
    {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}},
    {
        "name": "path",
        "in": "query",
        "required": True,
        "schema": {"type": "string", "minLength": 1},
        "description": "the sandbox's path (relative: from /root)",
    },
    {"name": "sandbox_id", "in": "query", "schema": {"type": "string"}, "description": "sent by the SDK; ignored"},
]
_ERRORS = {
    "400": _json(_DETAIL, "a folder, or not a regular file, or a path the file system refuses"),
    "401": _json(_DETAIL, "bad gateway token"),
    "403": _json(_DETAIL, "a write under the host's read-only system folders"),
    "404": _json(_DETAIL, "no such file"),
    "409": _json(_DETAIL, "Sandbox is not running (yet)"),
    "410": _json(
        {"type": "object", "properties": {"error": {"const": "sandbox_terminated"}, "detail": {"type": "string"}}},
        "the sandbox ended",
    ),
    "422": _json(_DETAIL, "a missing or malformed parameter, or no `file` part"),
}


def _op(op_id: str, summary: str, ok: dict[str, Any], params: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "operationId": op_id,
        "summary": summary,
        "tags": ["gateway"],
        "security": [{"gatewayToken": []}],
        "parameters": params,
        "responses": {"200": ok, **_ERRORS},
        **extra,
    }


def file_paths() -> dict[str, Any]:
    """Upload (multipart `file`), download (the bytes) and read-file (a byte window as text)."""
    uploaded = {
        "type": "object",
        "required": ["success", "path", "size", "timestamp"],
        "properties": {
            "success": {"type": "boolean"},
            "path": {"type": "string"},
            "size": {"type": "integer", "minimum": 0},
            "timestamp": {"type": "string", "format": "date-time"},
        },
    }
    window = {
        "type": "object",
        "required": ["content", "size"],
        "properties": {
            "content": {"type": "string"},
            "size": {"type": "integer", "minimum": 0},
            "total_size": {"type": "integer", "minimum": 0},
            "offset": {"type": "integer", "minimum": 0},
            "truncated": {"type": "boolean"},
        },
    }
    window_params = [
        *_PARAMS,
        {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 2**62}},
        {"name": "length", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 2**62}},
    ]
    form = {
        "type": "object",
        "required": ["file"],
        "properties": {"file": {"type": "string", "format": "binary"}},
        "additionalProperties": False,
    }
    return {
        f"{_BASE}/upload": {
            "post": _op(
                "gatewayUpload",
                "Write a file (parents made, an existing file replaced)",
                _json(uploaded, "written"),
                _PARAMS,
                requestBody={"required": True, "content": {"multipart/form-data": {"schema": form}}},
            )
        },
        f"{_BASE}/download": {
            "get": _op(
                "gatewayDownload",
                "Read a file whole",
                {
                    "description": "the file's bytes",
                    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                },
                _PARAMS,
            )
        },
        f"{_BASE}/read-file": {
            "get": _op("gatewayReadFile", "Read a byte window of a file as text", _json(window, "read"), window_params)
        },
    }
