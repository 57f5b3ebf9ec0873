"""The Kubernetes side of the local agent-sandbox on the wire: the agents groups and kinds, the names startup makes,
an object's timestamps, the apiserver's `Status` failures, label and field selectors, and a watch's queue."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

NAMESPACE = "default"
WARM_POOL = "stampede-pool"
TEMPLATE = "stampede-template"
IMAGE = "python-runtime-sandbox"
CLAIM_GROUP = "extensions.agents.x-k8s.io"
SANDBOX_GROUP = "agents.x-k8s.io"
VERSION = "v1beta1"
GROUPS = frozenset({CLAIM_GROUP, SANDBOX_GROUP})
KINDS = {
    "sandboxclaims": "SandboxClaim",
    "sandboxes": "Sandbox",
    "sandboxtemplates": "SandboxTemplate",
    "sandboxwarmpools": "SandboxWarmPool",
}
POD_IP = "127.0.0.1"  # what status.podIPs names: the SDK only forwards it to the router (X-Sandbox-Pod-IP)


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """The apiserver's `Status` object for a failure."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_REASONS = {401: "Unauthorized", 404: "NotFound", 405: "MethodNotAllowed", 409: "AlreadyExists", 500: "InternalError"}


def error(request: web.Request, code: int, message: str) -> web.Response:
    return web.json_response(status_body(code, _REASONS.get(code, "BadRequest"), message), status=code)


@dataclass
class Watcher:
    plural: str
    namespace: str
    name: str | None
    selector: Callable[[dict[str, Any]], bool]
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)


def label_selector(text: str | None) -> Callable[[dict[str, Any]], bool]:
    """A Kubernetes equality-based label selector (`a=b,c!=d,e,!f`) as a predicate on an object."""
    terms = [term.strip() for term in (text or "").split(",") if term.strip()]

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for term in terms:
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key.strip()) == value.strip():
                    return False
            elif "=" in term:
                key, value = term.replace("==", "=").split("=", 1)
                if labels.get(key.strip()) != value.strip():
                    return False
            elif term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif term not in labels:
                return False
        return True

    return matches


def field_name(text: str | None) -> str | None:
    """The name a `metadata.name=X` field selector asks for (the only field selector the SDK sends)."""
    for term in (text or "").split(","):
        key, _, value = term.partition("=")
        if key.strip() == "metadata.name" and value:
            return value.strip()
    return None
