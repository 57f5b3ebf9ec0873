"""E2B's REST control plane over the simulator: the calls e2b 2.56.0's `Sandbox`/`AsyncSandbox` make.

Routes (API key in `X-API-KEY`, checked by the server's middleware):
- `POST /v2/sandboxes` creates and, as E2B's API does, answers only once the sandbox runs: 201 `Sandbox`
  (with the `envdAccessToken` the SDK then sends to envd). The simulator's refusals in E2B's words:
  create-rate limit 429 "Sandbox creation rate limit exceeded ..." with `Retry-After` (real seconds; the SDK
  retries a 429 only when it carries one); the account's concurrent-sandbox cap 429 "you have reached the
  maximum number of concurrent E2B sandboxes (N) ..." without one (the text users' code matches on); no room
  503 `sandbox_capacity_unavailable`; injected transient failure 500 `internal_server_error`; a sandbox that
  does not start within the profile's deadline 504 `sandbox_placement_timeout`; one that fails to start (boot
  crash, image) or is killed while starting 500 `sandbox_create_failed`; bad input 400. Placement failures
  begin "Failed to place sandbox", as E2B's do.
- `GET /v2/sandboxes` lists by `metadata` (percent-encoded pairs, form-encoded), `state` (running, paused),
  `template`, `startedAfter` / `startedBefore`, newest first unless `order=asc` (the API's default), `limit`,
  `nextToken`; the next page's token comes back in `X-Next-Token`.
- `GET /sandboxes/{id}` (`SandboxDetail`), `DELETE /sandboxes/{id}` (204), `POST /sandboxes/{id}/timeout`
  (204: the timeout restarts from now, shorter or longer), `POST /v2/sandboxes/{id}/connect` (200 `Sandbox`;
  a timeout only ever lengthens the sandbox's life; a paused sandbox resumes: 201 once it runs again); a sandbox
  that ended or never existed is 404. A create whose template is a snapshot's id or name starts from a copy of
  its files. Pause, resume, snapshots, fork and metrics: saved_state.py.
- `GET /api/v1/_stampede/truth`, `/api/v1/_stampede/stats` (Bearer API key): the simulator's own record.
- `GET /openapi.json` (no key): these routes described (openapi.py), with the served profile's timeout limit.

Time: timeouts are vendor seconds (they play at the front's time scale); Retry-After and timestamps are real.
"""

from __future__ import annotations

import asyncio
import math
import secrets
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.serving.json_body import read_json_object
from providers.sim.core.serving.listening import stampede_stats, stampede_truth
from providers.sim.core.simulator import (
    CreateRequest,
    ErrorType,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
    iso,
)
from providers.sim.e2b.app_state import SIM, simulator
from providers.sim.e2b.openapi import max_timeout_s, openapi_document
from providers.sim.e2b.shapes import (
    DEFAULT_TIMEOUT_S,
    META_ENVD_TOKEN,
    META_METADATA,
    META_TEMPLATE,
    TEMPLATE_CPU,
    TEMPLATE_MEMORY_MB,
    BadRequest,
    created_body,
    detail_body,
    end_at,
    error_body,
    listed_body,
    metadata_of,
    parse_metadata_query,
    parse_new_sandbox,
    parse_timeout,
    state_of,
)

PLACEMENT = "Failed to place sandbox"
BILLING_URL = "https://e2b.dev/docs/billing"
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_STATES = frozenset({"running", "paused"})


class StartWaits:
    """Creates waiting for their sandbox to run or end: E2B's create answers only then."""

    def __init__(self, sim: VendorSimulator) -> None:
        self._waiting: dict[str, list[asyncio.Future[SimSandbox]]] = {}
        sim.add_listener(self._changed)

    def _changed(self, sb: SimSandbox) -> None:
        if sb.status is SandboxStatus.RUNNING or not sb.active:
            for future in self._waiting.pop(sb.id, ()):
                if not future.done():
                    future.set_result(sb)

    async def wait(self, sb: SimSandbox) -> SimSandbox:
        if sb.status is SandboxStatus.RUNNING or not sb.active:
            return sb
        future: asyncio.Future[SimSandbox] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(sb.id, [])
        waiting.append(future)
        try:
            return await future
        finally:
            if future in waiting:
                waiting.remove(future)
                if not waiting:
                    self._waiting.pop(sb.id, None)


STARTS = web.AppKey("e2b_start_waits", StartWaits)


def error(status: int, message: str, error_code: str | None = None, **headers: str) -> web.Response:
    return web.json_response(error_body(status, message, error_code), status=status, headers=headers or None)


def not_found(sandbox_id: str) -> web.Response:
    return error(404, f"sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it")


def rejection_response(exc: Rejected, sim: VendorSimulator) -> web.Response:
    """A refused create in E2B's words (the module doc lists them)."""
    if exc.reason is RejectReason.RATE_LIMITED:
        real = max(0.0, (exc.retry_after or 0.0) * sim.clock.time_scale)
        rate = sim.profile.create_rate.per_s
        message = f"Sandbox creation rate limit exceeded ({rate:g}/s), please slow down"
        return error(429, message, **{"Retry-After": str(max(1, math.ceil(real)))})
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        limit = sim.profile.quota.max_active
        message = (
            f"you have reached the maximum number of concurrent E2B sandboxes ({limit:g}). "
            f"If you need more, please visit '{BILLING_URL}'"
        )
        return error(429, message)
    if exc.reason is RejectReason.CAPACITY:
        message = f"{PLACEMENT}: not enough capacity for the requested resources right now, please retry shortly"
        return error(503, message, "sandbox_capacity_unavailable")
    if exc.reason is RejectReason.INVALID:
        return error(400, f"invalid sandbox request: {exc.message}")
    return error(500, PLACEMENT, "internal_server_error")


def start_failure(sb: SimSandbox) -> web.Response:
    """A sandbox that ended before it ran: what the create waiting on it answers."""
    if sb.error_type == ErrorType.PROVISIONING_TIMEOUT:
        return error(504, f"{PLACEMENT}: {sb.error_message}, please retry", "sandbox_placement_timeout")
    if sb.status is SandboxStatus.ERROR:
        return error(500, f"{PLACEMENT}: {sb.error_message}", "sandbox_create_failed")
    return error(500, f"{PLACEMENT}: the sandbox was killed while it was starting", "sandbox_create_failed")


async def read_body(request: web.Request) -> dict[str, Any]:
    """A request's JSON object body (`{}` when there is none), or BadRequest in E2B's words."""
    return await read_json_object(
        request, BadRequest, not_json="request body is not valid JSON", not_object="request body must be a JSON object"
    )


def _active(sim: VendorSimulator, sandbox_id: str) -> SimSandbox | None:
    try:
        sb = sim.get(sandbox_id)
    except NotFound:
        return None
    return sb if sb.active else None


# --- handlers ------------------------------------------------------------------------------------


async def create_sandbox(request: web.Request) -> web.Response:
    try:
        new = parse_new_sandbox(await read_body(request))
    except BadRequest as exc:
        return error(400, str(exc))
    sim = simulator(request)
    try:  # a snapshot's id or name is a template to E2B: the sandbox starts from a copy of its files
        from_snapshot: str | None = sim.get_snapshot(new.template).id
    except NotFound:
        from_snapshot = None
    req = CreateRequest(
        image=new.template,
        labels=tuple(f"{key}={value}" for key, value in sorted(new.metadata.items())),
        cpu=TEMPLATE_CPU,
        memory_mb=TEMPLATE_MEMORY_MB,
        lifetime_s=float(new.timeout_s),
        env=new.env,
        meta={META_METADATA: new.metadata, META_TEMPLATE: new.template, META_ENVD_TOKEN: secrets.token_urlsafe(18)},
        user=SandboxUser(),  # E2B's commands and files act as `user` in /home/user
        from_snapshot=from_snapshot,
        pause_at_timeout=new.auto_pause,
    )
    try:
        sb = sim.create(req)
    except Rejected as exc:
        return rejection_response(exc, sim)
    sb = await request.app[STARTS].wait(sb)
    if sb.status is SandboxStatus.RUNNING:
        return web.json_response(created_body(sb), status=201)
    return start_failure(sb)


def _started_bound(query: Any, key: str) -> float | None:
    """`startedAfter` / `startedBefore` (RFC 3339, as the SDK's `datetime.isoformat()` writes it) as epoch seconds."""
    if key not in query:
        return None
    text = query[key]
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadRequest(f"{key} must be an RFC 3339 timestamp, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def list_sandboxes(request: web.Request) -> web.Response:
    """Newest first unless `order=asc` (E2B's default); `state`, `metadata`, `template`, `startedAfter` and
    `startedBefore` filter (a sandbox's start is its creation's wall time, as `startedAt` shows it)."""
    query = request.query
    try:
        wanted = parse_metadata_query(query.get("metadata"))
    except ValueError:
        return error(400, "metadata must be form-encoded key=value pairs")
    states = {s for s in (query.get("state") or "running,paused").split(",") if s}
    if not states <= _STATES:
        return error(400, f"state must be running and/or paused, got {query.get('state')!r}")
    order = query.get("order") or "desc"
    if order not in ("asc", "desc"):
        return error(400, f"order must be asc or desc, got {order!r}")
    try:
        after, before = _started_bound(query, "startedAfter"), _started_bound(query, "startedBefore")
    except BadRequest as exc:
        return error(400, str(exc))
    limit_text, token = query.get("limit", str(DEFAULT_LIMIT)), query.get("nextToken") or "0"
    if not (limit_text.isdigit() and 1 <= int(limit_text) <= MAX_LIMIT):
        return error(400, f"limit must be a whole number in 1..{MAX_LIMIT}, got {limit_text!r}")
    if not token.isdigit():
        return error(400, "invalid nextToken")
    limit, offset = int(limit_text), int(token)
    sim = simulator(request)
    template = query.get("template")
    found: list[SimSandbox] = []
    for sb in sim.list(active_only=True):  # acceptance order: oldest first
        started = _started_at(sim, sb)
        if (
            state_of(sb) in states
            and wanted.items() <= metadata_of(sb).items()
            and (not template or template in (sb.meta.get(META_TEMPLATE), sb.image))
            and (after is None or started >= after)
            and (before is None or started <= before)
        ):
            found.append(sb)
    if order == "desc":
        found.reverse()
    page = found[offset : offset + limit]
    headers = {"X-Next-Token": str(offset + limit)} if offset + limit < len(found) else None
    return web.json_response([listed_body(sb, sim.clock) for sb in page], headers=headers)


def _started_at(sim: VendorSimulator, sb: SimSandbox) -> float:
    """The start the list shows (`startedAt`, microseconds), so a filter by a listed time includes that sandbox."""
    stamp = iso(sim.clock, sb.created_at)
    assert stamp is not None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def get_sandbox(request: web.Request) -> web.Response:
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    sb = _active(sim, sandbox_id)
    return not_found(sandbox_id) if sb is None else web.json_response(detail_body(sb, sim.clock))


async def kill_sandbox(request: web.Request) -> web.Response:
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    if _active(sim, sandbox_id) is None:
        return not_found(sandbox_id)
    sim.terminate(sandbox_id)
    return web.Response(status=204)


async def set_timeout(request: web.Request) -> web.Response:
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    try:
        timeout = parse_timeout(await read_body(request), required=True, minimum=0)
    except BadRequest as exc:
        return error(400, str(exc))
    if _active(sim, sandbox_id) is None:
        return not_found(sandbox_id)
    assert timeout is not None
    sim.set_lifetime(sandbox_id, float(timeout))
    return web.Response(status=204)


async def connect_sandbox(request: web.Request) -> web.Response:
    """A running sandbox: 200 (its timeout only ever lengthens); a paused one resumes: 201 once it runs again."""
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    try:
        timeout = parse_timeout(await read_body(request), required=False)
    except BadRequest as exc:
        return error(400, str(exc))
    sb = _active(sim, sandbox_id)
    if sb is None:
        return not_found(sandbox_id)
    if sb.status is SandboxStatus.PAUSED:
        try:
            sb = sim.resume(sandbox_id, float(timeout if timeout is not None else DEFAULT_TIMEOUT_S))
        except Rejected as exc:
            return rejection_response(exc, sim)
        except NotRunning:
            return not_found(sandbox_id)
        sb = await request.app[STARTS].wait(sb)
        return (
            web.json_response(created_body(sb), status=201)
            if sb.status is SandboxStatus.RUNNING
            else (start_failure(sb))
        )
    sb = await request.app[STARTS].wait(sb)
    if sb.status is not SandboxStatus.RUNNING:
        return not_found(sandbox_id)
    if timeout is not None and sim.clock.now() + timeout > end_at(sb):
        sim.set_lifetime(sandbox_id, float(timeout))
    return web.json_response(created_body(sb))


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(max_timeout_s(simulator(request).profile.limits)))


def add_routes(app: web.Application) -> None:
    """The control plane's routes, and its create waits once the simulator exists (after the server's startup)."""

    async def on_startup(app: web.Application) -> None:
        app[STARTS] = StartWaits(app[SIM])

    app.on_startup.append(on_startup)
    r = app.router
    r.add_post("/v2/sandboxes", create_sandbox)
    r.add_get("/v2/sandboxes", list_sandboxes)
    r.add_get("/sandboxes/{sandbox_id}", get_sandbox)
    r.add_delete("/sandboxes/{sandbox_id}", kill_sandbox)
    r.add_post("/sandboxes/{sandbox_id}/timeout", set_timeout)
    r.add_post("/v2/sandboxes/{sandbox_id}/connect", connect_sandbox)
    r.add_get("/api/v1/_stampede/truth", stampede_truth)
    r.add_get("/api/v1/_stampede/stats", stampede_stats)
    r.add_get("/openapi.json", openapi)
