"""The pieces every simulated front's OpenAPI document is built of (Prime, E2B, Daytona), written once.

Each front describes its own vendor's API in its own module; what they share is OpenAPI's plumbing: schema
references, JSON bodies, the self-describing `/openapi.json` path and the document's frame.
"""

from __future__ import annotations

from typing import Any

SCHEMA_REF = "#/components/schemas/"
STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}


def schema_ref(name: str) -> dict[str, str]:
    return {"$ref": SCHEMA_REF + name}


def json_content(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """A response (or part of one) whose body is JSON of `schema`."""
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def self_path() -> dict[str, Any]:
    """`/openapi.json`: the document describes where it is served, with no credentials needed."""
    return {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "security": [],
            "responses": {"200": json_content({"type": "object"}, "OpenAPI 3.1")},
        }
    }


def document(title: str, paths: dict[str, Any], schemas: dict[str, Any], security: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI 3.1 document of a simulated front."""
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": "1"},
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": security},
    }
