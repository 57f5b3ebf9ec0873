"""E2B's request and response bodies, as e2b 2.56.0's generated API client reads and writes them.

Requests are checked the way E2B's API would refuse them (HTTP 400, `{"code": 400, "message": ...}`);
responses carry the fields the SDK's models require (`Sandbox`, `SandboxDetail`, `ListedSandbox`, `Error`),
camelCase, timestamps ISO-8601 UTC. Features the simulator does not model (auto-pause at the timeout, volumes,
network rules, workload identity) are refused with a 400 that names the simulator, never silently dropped. An
`mcp` config is accepted: the SDK then starts `mcp-gateway` in the sandbox, which a simulated sandbox does not
have (as E2B's base template does not), so the SDK answers "Failed to start MCP gateway" and kills it.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers.sim.core.clock import SimClock
from providers.sim.core.simulator import SandboxStatus, SimSandbox, iso

ENVD_VERSION = "0.6.4"  # the newest envd feature gate e2b 2.56.0 knows (e2b/envd/versions.py)
CLIENT_ID = "6532622b"  # the id E2B reports for the node a sandbox runs on: one fixed id here
DEFAULT_TIMEOUT_S = 300  # the API's default sandbox timeout (NewSandboxV2)
TEMPLATE_CPU = 2  # E2B sizes a sandbox by its template; the simulator gives every template the base one's size
TEMPLATE_MEMORY_MB = 512
TEMPLATE_DISK_MB = 10240
META_METADATA = "e2b_metadata"  # SimSandbox.meta keys this front keeps
META_TEMPLATE = "e2b_template"
META_ENVD_TOKEN = "e2b_envd_token"
_NOT_MODELLED = {
    "network": "network rules",
    "iam": "workload identity",
    "volumeMounts": "volume mounts",
}


class BadRequest(Exception):
    """A request E2B's API would answer with 400."""


@dataclass(frozen=True, slots=True)
class NewSandbox:
    """A checked `POST /v2/sandboxes` body."""

    template: str
    timeout_s: int = DEFAULT_TIMEOUT_S
    metadata: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    auto_pause: bool = False  # at its timeout it pauses instead of ending (lifecycle on_timeout="pause")


def error_body(code: int, message: str, error_code: str | None = None) -> dict[str, Any]:
    """E2B's `Error`: the HTTP status again as `code`, a message, and for placement failures an `error_code`."""
    body: dict[str, Any] = {"code": code, "message": message}
    if error_code is not None:
        body["error_code"] = error_code
    return body


def parse_new_sandbox(body: Any) -> NewSandbox:
    """The create request, or BadRequest with the reason."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    template = body.get("templateID")
    if not isinstance(template, str) or not template.strip():
        raise BadRequest("templateID is required")
    timeout = _seconds(body.get("timeout", DEFAULT_TIMEOUT_S))
    for key in ("autoPause", "autoPauseMemory"):  # memory or filesystem-only: processes end at a pause either way
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise BadRequest(f"{key} must be a boolean, got {body[key]!r}")
    auto_resume = body.get("autoResume")
    if auto_resume is not None and not (isinstance(auto_resume, dict) and isinstance(auto_resume.get("enabled"), bool)):
        raise BadRequest(f"autoResume must be an object with a boolean enabled, got {auto_resume!r}")
    if auto_resume is not None and auto_resume["enabled"]:  # a paused sandbox is resumed by call only
        raise BadRequest("autoResume (waking a paused sandbox on traffic) is not modelled by the stampede simulator")
    if body.get("mcp") is not None and not isinstance(body["mcp"], dict):
        raise BadRequest(f"mcp must be an object of MCP server configs, got {body['mcp']!r}")
    for key, what in _NOT_MODELLED.items():
        if body.get(key) not in (None, [], {}):
            raise BadRequest(f"{what} ({key}) are not modelled by the stampede simulator")
    return NewSandbox(
        template=template,
        timeout_s=timeout,
        metadata=_strings(body.get("metadata"), "metadata"),
        env=_strings(body.get("envVars"), "envVars"),
        auto_pause=body.get("autoPause") is True,
    )


def parse_timeout(body: Any, *, required: bool, minimum: int = 1) -> int | None:
    """`{"timeout": <s>}` of the timeout and connect requests (the timeout call takes 0: the timeout is now)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    timeout = body.get("timeout")
    if timeout is None and not required:
        return None
    return _seconds(timeout, minimum)


MAX_TIMEOUT_S = 10**9  # above it a 400 (a huge integer would not even become a float)


def _seconds(value: Any, minimum: int = 1) -> int:
    """A sandbox timeout: whole seconds (60.0 counts, as JSON Schema's integer), `minimum` to MAX_TIMEOUT_S."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_TIMEOUT_S:
        raise BadRequest(f"timeout must be a whole number of seconds in {minimum}..{MAX_TIMEOUT_S}, got {value!r}")
    return value


def _strings(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise BadRequest(f"{name} must be an object of strings")
    return dict(value)


def parse_metadata_query(value: str | None) -> dict[str, str]:
    """The list call's `metadata` filter: the SDK percent-encodes each key and value, then form-encodes the pairs."""
    if not value:
        return {}
    pairs = urllib.parse.parse_qsl(value, keep_blank_values=True)
    return {urllib.parse.unquote(key): urllib.parse.unquote(val) for key, val in pairs}


def metadata_of(sb: SimSandbox) -> Mapping[str, str]:
    found = sb.meta.get(META_METADATA)
    return found if isinstance(found, Mapping) else {}


def end_at(sb: SimSandbox) -> float:
    """When the sandbox will be killed (vendor seconds): its timeout counts from creation, or from `set_timeout`."""
    return sb.created_at + sb.lifetime_s if math.isfinite(sb.lifetime_s) else sb.created_at + 86400.0 * 365


def created_body(sb: SimSandbox) -> dict[str, Any]:
    """`Sandbox`: what create and connect answer (the envd access token the SDK sends back as X-Access-Token)."""
    return {
        "templateID": sb.meta.get(META_TEMPLATE, sb.image),
        "sandboxID": sb.id,
        "clientID": CLIENT_ID,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sb.meta.get(META_ENVD_TOKEN),
        "trafficAccessToken": None,
        "domain": None,
    }


def state_of(sb: SimSandbox) -> str:
    """E2B's `SandboxState`: `paused`, or `running` for every other sandbox not ended (starting ones too)."""
    return "paused" if sb.status is SandboxStatus.PAUSED else "running"


def listed_body(sb: SimSandbox, clock: SimClock) -> dict[str, Any]:
    """`ListedSandbox`: one sandbox of the list."""
    return {
        "templateID": sb.meta.get(META_TEMPLATE, sb.image),
        "sandboxID": sb.id,
        "clientID": CLIENT_ID,
        "startedAt": iso(clock, sb.created_at),
        "endAt": iso(clock, end_at(sb)),
        "cpuCount": TEMPLATE_CPU,
        "memoryMB": TEMPLATE_MEMORY_MB,
        "diskSizeMB": TEMPLATE_DISK_MB,
        "state": state_of(sb),
        "envdVersion": ENVD_VERSION,
        "metadata": dict(metadata_of(sb)),
    }


def detail_body(sb: SimSandbox, clock: SimClock) -> dict[str, Any]:
    """`SandboxDetail`: `GET /sandboxes/{id}`."""
    return {**listed_body(sb, clock), "envdAccessToken": sb.meta.get(META_ENVD_TOKEN), "domain": None}
