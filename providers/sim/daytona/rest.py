"""Daytona's REST control plane over the simulator: the calls daytona 0.226.1 makes for a sandbox's life.

`POST /api/sandbox` (create), `GET /api/sandbox` (cursor pages, `labels` as a JSON object), `GET|DELETE
/api/sandbox/{idOrName}`, `POST .../start|stop`, `GET /api/sandbox/{id}/toolbox-proxy-url`, `GET /api/config`,
`GET /api/shared-regions`; and the simulator's own `GET /api/v1/_stampede/truth|stats`; `GET /openapi.json`
describes them (openapi.py). A destroyed sandbox is gone, as on the real API: `get`, `start`, `stop` answer 404
(`delete` waits for exactly that). `stop` keeps the disk (the simulator's pause) and `start` resumes it; `archive`
marks a stopped one archived. A create naming a snapshot taken here (`changes.py`) starts with its files.

A create the simulator refuses is answered as the API would, so the SDK raises its own class:
- the create rate (the API's `sandbox-create` throttler): 429, `RATE_LIMIT_EXCEEDED`, "ThrottlerException: Too
  Many Requests", header `Retry-After-sandbox-create` (seconds) -> `DaytonaRateLimitError`;
- the organization's resource pool: 403, `FORBIDDEN`, "Total CPU limit exceeded. Maximum allowed: N." (memory,
  disk likewise, GiB) -> `DaytonaForbiddenError`; a count quota (`quota.max_active`) is worded the same way;
- one sandbox above the per-sandbox limits: 403 "CPU request N exceeds maximum allowed per sandbox (M).";
- no room on any runner: 400, `BAD_REQUEST`, "No available runners" -> `DaytonaBadRequestError`;
- an injected transient failure: 500, "An unexpected error occurred." -> `DaytonaInternalServerError`;
- a name in use: 409 -> `DaytonaConflictError`; a malformed body: 400 with the validation messages.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from aiohttp import web

from providers.sim.core.serving.listening import stampede_stats, stampede_truth
from providers.sim.core.simulator import NotFound, Rejected, RejectReason, SandboxStatus, SimSandbox
from providers.sim.daytona.front import Front, error, front_of
from providers.sim.daytona.openapi import openapi_document
from providers.sim.daytona.shapes import (
    DEFAULT_SNAPSHOT,
    PER_SANDBOX_LIMIT,
    REGION,
    UPGRADE_TIER,
    label_strings,
    parse_create,
    requested,
    state_of,
)

DEFAULT_PAGE = 100
MAX_PAGE = 200
THROTTLER = "sandbox-create"
_UNITS = {"cpu": ("CPU", ""), "memory": ("memory", "GiB"), "disk": ("disk", "GiB")}


def rejection(request: web.Request, front: Front, exc: Rejected) -> web.Response:
    """A simulator rejection in the API's words (the module doc lists them)."""
    if exc.reason is RejectReason.RATE_LIMITED:
        wait = max(1, math.ceil((exc.retry_after or 0.0) * front.time_scale))
        return error(
            request, 429, "ThrottlerException: Too Many Requests", headers={f"Retry-After-{THROTTLER}": str(wait)}
        )
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        what, unit = _UNITS.get(exc.resource or "cpu", _UNITS["cpu"])
        limit = exc.limit if exc.limit is not None else front.sim.profile.quota.max_active
        return error(request, 403, f"Total {what} limit exceeded. Maximum allowed: {limit:g}{unit}.\n{UPGRADE_TIER}")
    if exc.reason is RejectReason.CAPACITY:
        return error(request, 400, "No available runners")
    if exc.reason is RejectReason.INVALID:
        return error(request, 400, exc.message)
    return error(request, 500, "An unexpected error occurred.")


def _per_sandbox_problem(front: Front, cpu: float, memory_mb: int) -> str | None:
    limits = front.sim.profile.limits
    if cpu > limits.max_cpu:
        return f"CPU request {cpu:g} exceeds maximum allowed per sandbox ({limits.max_cpu:g}).\n{PER_SANDBOX_LIMIT}"
    if memory_mb > limits.max_memory_mb:
        return (
            f"Memory request {memory_mb // 1024}GB exceeds maximum allowed per sandbox "
            f"({limits.max_memory_mb / 1024:g}GB).\n{PER_SANDBOX_LIMIT}"
        )
    return None


async def create_sandbox(request: web.Request) -> web.Response:
    front = front_of(request)
    try:
        body = await request.json()
    except ValueError:
        return error(request, 400, "body must be JSON")
    req, problems = parse_create(body, front.sim.profile.limits.max_lifetime_s)
    if req is None:
        return error(request, 400, ", ".join(problems))
    problem = _per_sandbox_problem(front, req.cpu, req.memory_mb)
    if problem is not None:
        return error(request, 403, problem)
    if req.name and req.name in front.names:
        return error(request, 409, f"Sandbox with name {req.name} already exists")
    taken = front.snapshot_named(req.image)  # a snapshot taken here: the sandbox starts with its files
    if taken is not None:
        req = dataclasses.replace(req, image=taken.image, from_snapshot=taken.id)
    try:
        sb = front.sim.create(req)
    except Rejected as exc:
        return rejection(request, front, exc)
    if req.name:
        front.names[req.name] = sb.id
    for callback in front.on_create:
        callback(sb)
    return web.json_response(front.body(sb))


def _live(request: web.Request) -> tuple[Front, SimSandbox] | web.Response:
    """The front and the sandbox the path's `id` names (id or name), or the API's 404 for one destroyed or unknown."""
    front = front_of(request)
    try:
        return front, front.find_live(request.match_info["id"])
    except NotFound:
        return error(request, 404, "Sandbox not found", code="SANDBOX_NOT_FOUND")


async def get_sandbox(request: web.Request) -> web.Response:
    found = _live(request)
    if isinstance(found, web.Response):
        return found
    front, sb = found
    return web.json_response(front.body(sb))


def _listed(front: Front, labels: dict[str, str], states: set[str], everything: bool) -> list[Any]:
    wanted = label_strings(labels)
    if everything:
        found = front.sim.list(labels=wanted)
    else:  # what has not been destroyed: active ones, and errored ones nobody deleted yet
        found = [sb for sb in front.sim.list(labels=wanted) if state_of(sb, front.life.get(sb.id)) != "destroyed"]
    if states:
        found = [sb for sb in found if state_of(sb, front.life.get(sb.id)) in states]
    found.reverse()  # newest first
    return found


async def list_sandboxes(request: web.Request) -> web.Response:
    front = front_of(request)
    query = request.query
    labels: dict[str, str] = {}
    if "labels" in query:
        try:
            labels = json.loads(query["labels"])
        except ValueError:
            labels = None  # type: ignore[assignment]
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            return error(request, 400, "labels must be a JSON object of strings")
    try:
        limit = int(query.get("limit", DEFAULT_PAGE))
        start = int(query.get("cursor") or 0)
    except ValueError:
        return error(request, 400, "limit and cursor must be integers")
    if not 1 <= limit <= MAX_PAGE or start < 0:
        return error(request, 400, f"limit must be between 1 and {MAX_PAGE}")
    states = set(query.getall("states", []))
    everything = query.get("includeErroredDeleted", "false").lower()
    if everything not in ("true", "false"):
        return error(request, 400, "includeErroredDeleted must be a boolean value")
    found = _listed(front, labels, states, everything == "true")
    page = found[start : start + limit]
    more = start + limit < len(found)
    return web.json_response(
        {"items": [front.body(sb, full=False) for sb in page], "nextCursor": str(start + limit) if more else None}
    )


async def delete_sandbox(request: web.Request) -> web.Response:
    front = front_of(request)
    try:
        sb = front.find(request.match_info["id"])
    except NotFound:
        return error(request, 404, "Sandbox not found", code="SANDBOX_NOT_FOUND")
    life = front.lifecycle(sb)
    if life.deleted:
        return error(request, 404, "Sandbox not found", code="SANDBOX_NOT_FOUND")
    life.deleted = True
    if sb.active:
        front.sim.terminate(sb.id)  # the simulator's listener announces the change
    else:
        front.changed(sb)
    return web.json_response(front.body(sb))


async def stop_sandbox(request: web.Request) -> web.Response:
    """A stop keeps the sandbox's disk (the simulator's pause: its slot and quota freed, its files kept) until a
    `start`; an ephemeral sandbox (`autoDeleteInterval` 0) is deleted by its stop, as on the API."""
    found = _live(request)
    if isinstance(found, web.Response):
        return found
    front, sb = found
    if sb.status is not SandboxStatus.RUNNING:
        return error(request, 400, f"Sandbox is not started (state: {state_of(sb, front.life.get(sb.id))})")
    life = front.lifecycle(sb)
    life.stopped = True
    if requested(sb).auto_delete == 0:
        front.sim.terminate(sb.id)
        return web.json_response(front.body(sb))
    seconds = front.sim.pause(sb.id)  # the simulator's listener announces "stopped"
    await front.sim.clock.sleep(seconds)
    return web.json_response(front.body(sb))


async def start_sandbox(request: web.Request) -> web.Response:
    """A stopped (or archived) sandbox is queued again and boots in the profile's resume time, files as it left
    them; the SDK waits for `started` as after a create."""
    found = _live(request)
    if isinstance(found, web.Response):
        return found
    front, sb = found
    state = state_of(sb, front.life.get(sb.id))
    if state in ("creating", "starting", "started"):
        return web.json_response(front.body(sb))
    if sb.status is not SandboxStatus.PAUSED:
        return error(request, 400, f"Sandbox is {state}: it cannot be started")
    try:
        front.sim.resume(sb.id)
    except Rejected as exc:
        return rejection(request, front, exc)
    life = front.lifecycle(sb)
    life.stopped = life.archived = False
    front.changed(sb)
    return web.json_response(front.body(sb))


async def archive_sandbox(request: web.Request) -> web.Response:
    """Archive a stopped sandbox (its disk moves to cheaper storage on the API; here a state, nothing more)."""
    found = _live(request)
    if isinstance(found, web.Response):
        return found
    front, sb = found
    state = state_of(sb, front.life.get(sb.id))
    if state == "archived":
        return web.json_response(front.body(sb))
    if state != "stopped":
        return error(request, 400, f"Sandbox must be stopped to archive (state: {state})")
    front.lifecycle(sb).archived = True
    front.changed(sb)
    return web.json_response(front.body(sb))


async def toolbox_proxy_url(request: web.Request) -> web.Response:
    found = _live(request)
    if isinstance(found, web.Response):
        return found
    return web.json_response({"url": found[0].toolbox_url})


async def config(request: web.Request) -> web.Response:
    front = front_of(request)
    return web.json_response(
        {
            "version": "stampede-sim",
            "oidc": {"issuer": "", "clientId": "", "audience": "", "provider": "none"},
            "linkedAccountsEnabled": False,
            "announcements": {},
            "proxyTemplateUrl": front.base_url + "/preview/{{PORT}}",
            "proxyToolboxUrl": front.toolbox_url,
            "defaultSnapshot": DEFAULT_SNAPSHOT,
            "dashboardUrl": front.base_url,
            "maxAutoArchiveInterval": 43200,
            "maintananceMode": False,
            "environment": "stampede-local",
        }
    )


async def shared_regions(request: web.Request) -> web.Response:
    created = "1970-01-01T00:00:00.000Z"
    return web.json_response(
        [
            {
                "id": REGION,
                "name": REGION,
                "regionType": "shared",
                "createdAt": created,
                "updatedAt": created,
                "proxyUrl": front_of(request).toolbox_url,
            }
        ]
    )


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def add_routes(app: web.Application, prefix: str) -> None:
    r = app.router
    r.add_post(f"{prefix}/sandbox", create_sandbox)
    r.add_get(f"{prefix}/sandbox", list_sandboxes)
    r.add_get(f"{prefix}/sandbox/{{id}}", get_sandbox)
    r.add_delete(f"{prefix}/sandbox/{{id}}", delete_sandbox)
    r.add_post(f"{prefix}/sandbox/{{id}}/start", start_sandbox)
    r.add_post(f"{prefix}/sandbox/{{id}}/stop", stop_sandbox)
    r.add_post(f"{prefix}/sandbox/{{id}}/archive", archive_sandbox)
    r.add_get(f"{prefix}/sandbox/{{id}}/toolbox-proxy-url", toolbox_proxy_url)
    r.add_get(f"{prefix}/config", config)
    r.add_get(f"{prefix}/shared-regions", shared_regions)
    r.add_get(f"{prefix}/v1/_stampede/truth", stampede_truth)
    r.add_get(f"{prefix}/v1/_stampede/stats", stampede_stats)
    r.add_get("/openapi.json", openapi)
