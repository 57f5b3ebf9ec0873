"""The local Vercel Sandbox's wire: Vercel's fixed facts (team, project, region, sizes, the sandbox user), the JSON
bodies it answers (sandbox, session, command), its error bodies and refusals, and how a request body is read."""

from __future__ import annotations

import math
import time
from typing import Any

from aiohttp import web

from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.serving.json_body import read_json_object
from providers.sim.core.simulator import (
    NotFound,
    Rejected,
    RejectReason,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
)
from providers.sim.core.vcpu_rate import RESOURCE as VCPU_RATE
from providers.sim.vercel.state import Command, Named

PREFIX = "/api"
TEAM_ID = "team_stampede"
PROJECT_ID = "prj_stampede"
DEFAULT_IMAGE = "vercel/sandbox/universal:latest"  # the SDK's documented default
DEFAULT_VCPUS = 2  # Vercel's default sandbox size: 2 vCPUs, 2048 MB a vCPU
MB_PER_VCPU = 2048
DEFAULT_TIMEOUT_MS = 300_000  # 5 minutes, Vercel's default sandbox timeout
REGION = "iad1"
USER = SandboxUser(name="vercel-sandbox", uid=1000, home="/vercel/sandbox")


LIST_LIMIT = 100
SNAPSHOT_PREFIX = "snap_"  # Vercel's snapshot ids (`snap_…`); the simulator's own id follows it


def now_ms() -> int:
    return int(time.time() * 1000)


def error(status: int, code: str, message: str, **headers: str) -> web.Response:
    body = {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers or None)


def session_status(sim: VendorSimulator, session_id: str) -> tuple[str, SimSandbox | None]:
    """Vercel's status word for a session: pending, running, stopped, failed, aborted."""
    try:
        sb = sim.get(session_id)
    except NotFound:
        return "stopped", None
    if sb.status is SandboxStatus.RUNNING:
        return "running", sb
    if sb.status in (SandboxStatus.PENDING, SandboxStatus.PROVISIONING):
        return "pending", sb
    if sb.status is SandboxStatus.ERROR:
        return "failed", sb
    if sb.running_at is None:
        return "aborted", sb  # stopped before it ran
    return "stopped", sb


def session_body(sim: VendorSimulator, named: Named, session_id: str) -> dict[str, Any]:
    status, sb = session_status(sim, session_id)
    started = None if sb is None or sb.running_at is None else named.created_ms
    return {
        "id": session_id,
        "sourceSandboxName": named.name,
        "projectId": named.project_id,
        "status": status,
        "cwd": USER.home,
        "region": REGION,
        "memory": named.vcpus * MB_PER_VCPU,
        "vcpus": named.vcpus,
        "timeout": named.timeout_ms,
        "requestedAt": named.created_ms,
        "startedAt": started,
        "stoppedAt": None if status in ("running", "pending") else now_ms(),
    }


def sandbox_body(sim: VendorSimulator, named: Named) -> dict[str, Any]:
    status, _ = session_status(sim, named.session_id)
    return {
        "name": named.name,
        "currentSessionId": named.session_id,
        "image": named.image,
        "status": status,
        "persistent": named.persistent,
        "currentSnapshotId": named.snapshot_id,
        "projectId": named.project_id,
        "cwd": USER.home,
        "region": REGION,
        "memory": named.vcpus * MB_PER_VCPU,
        "vcpus": named.vcpus,
        "timeout": named.timeout_ms,
        "createdAt": named.created_ms,
        "updatedAt": now_ms(),
        "statusUpdatedAt": now_ms(),
        "tags": named.tags,
    }


def full_body(sim: VendorSimulator, named: Named) -> dict[str, Any]:
    return {
        "sandbox": sandbox_body(sim, named),
        "session": session_body(sim, named, named.session_id),
        "routes": [],
    }


def command_body(cmd: Command) -> dict[str, Any]:
    return {
        "id": cmd.id,
        "name": cmd.name,
        "args": cmd.args,
        "cwd": cmd.cwd,
        "sessionId": cmd.session_id,
        "exitCode": cmd.exit_code,
        "startedAt": cmd.started_ms,
    }


def rejection(exc: Rejected, sim: VendorSimulator) -> web.Response:
    """A refused create in the local plane's words (the module doc lists them)."""
    if exc.reason is RejectReason.RATE_LIMITED:
        retry = str(max(1, math.ceil((exc.retry_after or 0.0) * sim.clock.time_scale)))
        if exc.resource == VCPU_RATE:
            return error(429, "vcpu_allocation_limit_exceeded", exc.message, **{"Retry-After": retry})
        return error(429, "rate_limited", exc.message, **{"Retry-After": retry})
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        limit = sim.profile.quota.max_active
        message = f"You have reached the limit of {limit:g} concurrent sandboxes for your plan"
        return error(429, "concurrent_sandboxes_limit_exceeded", message)
    if exc.reason is RejectReason.CAPACITY:
        return error(503, "capacity_unavailable", "No capacity available to create the sandbox, retry shortly")
    if exc.reason is RejectReason.INVALID:
        return error(400, "bad_request", exc.message)
    return error(500, "internal_server_error", "An unexpected error occurred while creating the sandbox")


class BadBody(Exception):
    """A request body that is not a JSON object: 400 `bad_request` (`bad_bodies`), as Vercel answers it."""


async def read_json(request: web.Request) -> dict[str, Any]:
    return await read_json_object(
        request,
        BadBody,
        not_json="the request body is not valid JSON",
        not_object="the request body must be a JSON object",
    )


@web.middleware
async def bad_bodies(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
    except BadBody as exc:
        return error(400, "bad_request", str(exc))
    return response


def bad_request(message: str) -> web.Response:
    return error(400, "bad_request", message)


def not_found(what: str) -> web.Response:
    return error(404, "not_found", f"{what} was not found")
