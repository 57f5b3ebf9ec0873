"""The Prime-like HTTP API over the vendor simulator (aiohttp.web): Prime's paths, bodies and errors.

Shapes follow prime-sandboxes 0.5.1 (models.py, sandbox.py, core/client.py), so Prime's own SDK and our
lean stub client can drive it: REST under `/api/v1` with a Bearer token, snake_case requests, camelCase
`Sandbox` responses with ISO-8601 UTC timestamps ("...Z"), FastAPI-style 422s.

Error shapes (every body is JSON):
- 401 `{"detail": "Not authenticated"}` (no header) / `{"detail": "Invalid API key"}`;
- 404 `{"detail": "Sandbox not found"}` (unknown routes: `{"detail": "Not Found"}`);
- 422 `{"detail": [{"type", "loc": ["body", field], "msg", "input"}, ...]}`;
- 429 + `Retry-After: <int s>` `{"detail": "Sandbox creation rate limit exceeded (30/s)",
  "errorCode": "RATE_LIMITED", "retryAfter": <float real s>}`;
- 429 `{"detail": "Sandbox limit reached: ...", "errorCode": "SANDBOX_LIMIT_REACHED"}`;
- 503 `{"detail": "Insufficient capacity to create sandbox", "errorCode": "INSUFFICIENT_CAPACITY"}`;
- injected transient create errors: 500 `{"detail": "Internal server error"}`, 502 `{"detail": "Bad gateway"}`
  or 503 `{"detail": "Service temporarily unavailable"}` (by create-attempt number, so deterministic);
- REST gateway exec: 401 `{"detail": "Invalid or expired gateway token"}`, 408 `{"detail": "Command timed
  out after N seconds"}`, 409 `{"detail": "Sandbox is not running"}`, 502 `{"error": "sandbox_not_found",
  "detail": "Sandbox not found: ..."}`, 503 `{"detail": "Gateway error: ..."}` (injected exec error);
- ConnectRPC gateway exec (`command_session.CommandSession`): Connect codes, see command_session.py.
- Filesystem checkpoints (`checkpoint`, `get_checkpoint`, a create from `checkpoint_id`): checkpoints.py.

Time: durations the vendor enforces (lifetimes, exec timeouts, `sleep` in commands, the startup
deadline) are vendor seconds and play at the stub's time scale; values a client acts on (Retry-After,
timestamps, token expiry) are real.

Divergences from Prime, on purpose: stub-only `GET /api/v1/_stampede/truth` and `/_stampede/stats`;
`startedAt` is when the sandbox became RUNNING; `is_active=false` lists everything (as the SDK's
`exclude_terminated=False` reads); volumes, networks, GPUs and image builds are not
modelled (422 / 404); one account and team. Exec speaks both the REST gateway shape of prime-sandboxes
0.2.x (gateway.py, what the lean `stub` client uses) and 0.5.x's ConnectRPC `CommandSession`
(command_session.py over sim/core/connect.py, what Prime's current SDK uses).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from providers.sim.core.clock import LoopClock, SimClock
from providers.sim.core.faults import FaultInjector
from providers.sim.core.serving.bearer import bearer_matches
from providers.sim.core.serving.listening import (
    SIMULATOR,
    RunningApp,
    http_url,
    listen,
    stampede_truth,
    vendor_middleware,
)
from providers.sim.core.simulator import (
    NotFound,
    Rejected,
    RejectReason,
    SandboxStatus,
    SnapshotNotFound,
    VendorSimulator,
)
from providers.sim.core.vendor_settings import VendorSettings
from providers.sim.prime.checkpoints import add_checkpoint_routes
from providers.sim.prime.command_session import build_service
from providers.sim.prime.connect_routes import add_connect_routes
from providers.sim.prime.files import add_file_routes
from providers.sim.prime.gateway import GATEWAY_PREFIX, GatewayTokens, exec_handler
from providers.sim.prime.openapi import openapi_document
from providers.sim.prime.shapes import (
    _bool_param,
    _check_create,
    _field_error,
    _int_param,
    _logs,
    create_maxima,
    sandbox_body,
)
from providers.sim.prime.wire_faults import FAULTS, install, transport_faults

API_PREFIX = "/api/v1"
MAX_BATCH_IDS = 100
MAX_PER_PAGE = 1000


@dataclass(frozen=True)
class StubSettings(VendorSettings):
    """The Prime-like stub: which vendor behaviour, how fast, where, and with which API token."""


SIM = SIMULATOR
TOKENS = web.AppKey("stampede_gateway_tokens", GatewayTokens)
API_TOKEN = web.AppKey("stampede_api_token", str)


def _sim(request: web.Request) -> VendorSimulator:
    return request.app[SIM]


def _tokens(request: web.Request) -> GatewayTokens:
    return request.app[TOKENS]


def _base_url(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


# --- errors -------------------------------------------------------------------------------------------


def _detail(status: int, detail: Any, *, headers: dict[str, str] | None = None, **extra: Any) -> web.Response:
    return web.json_response({"detail": detail, **extra}, status=status, headers=headers)


def _not_found() -> web.Response:
    return _detail(404, "Sandbox not found")


def _invalid(errors: list[dict[str, Any]]) -> web.Response:
    return _detail(422, errors)


_TRANSIENT = (
    (500, "Internal server error"),
    (502, "Bad gateway"),
    (503, "Service temporarily unavailable"),
)


def rejection_response(exc: Rejected, clock: SimClock) -> web.Response:
    """A simulator rejection in Prime's words (the module doc lists the exact shapes)."""
    if exc.reason is RejectReason.RATE_LIMITED:
        real = max(0.0, (exc.retry_after or 0.0) * clock.time_scale)
        return web.json_response(
            {"detail": exc.message, "errorCode": "RATE_LIMITED", "retryAfter": round(real, 6)},
            status=429,
            headers={"Retry-After": str(max(1, math.ceil(real)))},
        )
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        return _detail(429, exc.message, errorCode="SANDBOX_LIMIT_REACHED")
    if exc.reason is RejectReason.CAPACITY:
        return _detail(503, "Insufficient capacity to create sandbox", errorCode="INSUFFICIENT_CAPACITY")
    if exc.reason is RejectReason.INVALID:
        return _invalid([_field_error("value_error", None, f"Value error, {exc.message}", None)])
    status, text = _TRANSIENT[(exc.attempt or 0) % len(_TRANSIENT)]
    return _detail(status, text)


def _authorize(request: web.Request) -> web.Response | None:
    """Bearer auth on /api/v1, FastAPI's words (the gateway checks its own per-sandbox tokens)."""
    if not (request.path.startswith(API_PREFIX + "/") or request.path == API_PREFIX):
        return None
    header = request.headers.get("Authorization")
    if not header:
        return _detail(401, "Not authenticated")
    return None if bearer_matches(header, request.app[API_TOKEN]) else _detail(401, "Invalid API key")


# FastAPI-style JSON for 404/405 and for our own bugs (never a traceback)
_errors_and_auth = vendor_middleware(
    lambda request, status, message: _detail(status, message), _authorize, front="stub"
)


# --- bodies -------------------------------------------------------------------------------------------


async def _json(request: web.Request) -> tuple[Any, web.Response | None]:
    if not request.can_read_body:
        return None, _invalid([{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}])
    try:
        return await request.json(), None
    except ValueError as exc:
        return None, _invalid(
            [
                {
                    "type": "json_invalid",
                    "loc": ["body", 0],
                    "msg": "JSON decode error",
                    "input": {},
                    "ctx": {"error": str(exc)},
                }
            ]
        )


async def create_sandbox(request: web.Request) -> web.Response:
    body, problem = await _json(request)
    if problem is not None:
        return problem
    req, errors = _check_create(body)
    if req is None:
        return _invalid(errors)
    sim = _sim(request)
    try:
        if req.from_snapshot is not None and not req.image:  # a checkpoint's image, unless docker_image says
            req = dataclasses.replace(req, image=sim.get_snapshot(req.from_snapshot).image)
        sb = sim.create(req)
    except SnapshotNotFound:
        return _detail(404, f"Checkpoint {req.from_snapshot} not found")
    except Rejected as exc:
        return rejection_response(exc, sim.clock)
    out = sandbox_body(sb, sim.clock)
    tokens = _tokens(request)
    out["gatewayAuth"] = tokens.auth_body(tokens.issue(sb.id), _base_url(request))
    return web.json_response(out, status=201)


async def get_sandbox(request: web.Request) -> web.Response:
    sim = _sim(request)
    try:
        sb = sim.get(request.match_info["sandbox_id"])
    except NotFound:
        return _not_found()
    return web.json_response(sandbox_body(sb, sim.clock))


async def list_sandboxes(request: web.Request) -> web.Response:
    q = request.query
    page, p1 = _int_param(q.get("page"), "page", 1, 1, 10**9)
    per_page, p2 = _int_param(q.get("per_page"), "per_page", 50, 1, MAX_PER_PAGE)
    is_active, p3 = _bool_param(q.get("is_active"), "is_active")
    status = q.get("status")
    p4 = None
    if status is not None and status not in SandboxStatus.__members__ and status != "PAUSED":
        p4 = {
            "type": "enum",
            "loc": ["query", "status"],
            "msg": f"Input should be one of {', '.join(SandboxStatus)}",
            "input": status,
        }
    problems = [p for p in (p1, p2, p3, p4) if p is not None]
    if problems:
        return _invalid(problems)
    labels = q.getall("labels", [])
    sim = _sim(request)
    found = sim.list(labels=labels, active_only=is_active is True)
    if status is not None:
        found = [sb for sb in found if sb.status == status]
    found.reverse()  # newest first
    start = (page - 1) * per_page
    chosen = found[start : start + per_page]
    return web.json_response(
        {
            "sandboxes": [sandbox_body(sb, sim.clock) for sb in chosen],
            "total": len(found),
            "page": page,
            "perPage": per_page,
            "hasNext": start + per_page < len(found),
        }
    )


async def batch_status(request: web.Request) -> web.Response:
    body, problem = await _json(request)
    if problem is not None:
        return problem
    ids = body.get("sandbox_ids") if isinstance(body, dict) else None
    if not isinstance(body, dict) or "sandbox_ids" not in body:
        return _invalid([{"type": "missing", "loc": ["body", "sandbox_ids"], "msg": "Field required", "input": body}])
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        return _invalid([_field_error("list_type", "sandbox_ids", "Input should be a valid list of strings", ids)])
    if len(ids) > MAX_BATCH_IDS:
        return _invalid(
            [
                _field_error(
                    "too_long",
                    "sandbox_ids",
                    f"List should have at most {MAX_BATCH_IDS} items after validation, not {len(ids)}",
                    len(ids),
                )
            ]
        )
    if len(set(ids)) != len(ids):
        return _invalid([_field_error("value_error", "sandbox_ids", "Value error, sandbox_ids must be unique", ids)])
    sim = _sim(request)
    statuses, errors = [], []
    for sandbox_id in ids:
        try:
            sb = sim.get(sandbox_id)
        except NotFound:
            errors.append({"sandbox_id": sandbox_id, "code": "NOT_FOUND", "message": "Sandbox not found"})
            continue
        statuses.append(
            {
                "sandbox_id": sb.id,
                "status": str(sb.status),
                "error_type": sb.error_type,
                "error_message": sb.error_message,
                "pending_image_build_id": None,
            }
        )
    return web.json_response({"statuses": statuses, "errors": errors})


async def delete_sandbox(request: web.Request) -> web.Response:
    sim = _sim(request)
    try:
        sb = sim.terminate(request.match_info["sandbox_id"])
    except NotFound:
        return _not_found()
    return web.json_response({"id": sb.id, "status": str(sb.status), "message": "Sandbox deleted"})


async def bulk_delete(request: web.Request) -> web.Response:
    body, problem = await _json(request)
    if problem is not None:
        return problem
    if not isinstance(body, dict):
        return _invalid([_field_error("model_attributes_type", None, "Input should be a valid dictionary", body)])
    ids, labels = body.get("sandbox_ids"), body.get("labels")
    errors = []
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        errors.append(_field_error("list_type", "sandbox_ids", "Input should be a valid list of strings", ids))
    if labels is not None and not (isinstance(labels, list) and all(isinstance(i, str) for i in labels)):
        errors.append(_field_error("list_type", "labels", "Input should be a valid list of strings", labels))
    for name in ("team_id", "user_id"):  # accepted and ignored (one account), but typed as Prime types them
        if body.get(name) is not None and not isinstance(body[name], str):
            errors.append(_field_error("string_type", name, "Input should be a valid string", body[name]))
    if "all_users" in body and not isinstance(body["all_users"], bool):
        errors.append(_field_error("bool_type", "all_users", "Input should be a valid boolean", body["all_users"]))
    if not errors and not ids and not labels:
        errors.append(_field_error("value_error", None, "Value error, provide sandbox_ids or labels", body))
    if errors:
        return _invalid(errors)
    sim = _sim(request)
    succeeded: list[str] = []
    failed: list[dict[str, str]] = []
    if ids:
        for sandbox_id in dict.fromkeys(ids):
            try:
                sb = sim.get(sandbox_id)
            except NotFound:
                failed.append({"sandbox_id": sandbox_id, "error": "Sandbox not found"})
                continue
            if labels and not set(labels).issubset(sb.labels):
                failed.append({"sandbox_id": sandbox_id, "error": "Sandbox does not carry the given labels"})
                continue
            sim.terminate(sandbox_id)
            succeeded.append(sandbox_id)
    else:
        for sb in sim.list(labels=labels or (), active_only=True):
            sim.terminate(sb.id)
            succeeded.append(sb.id)
    message = f"Deleted {len(succeeded)} sandbox(es)" + (f", {len(failed)} failed" if failed else "")
    return web.json_response({"succeeded": succeeded, "failed": failed, "message": message})


async def error_context(request: web.Request) -> web.Response:
    try:
        sb = _sim(request).get(request.match_info["sandbox_id"])
    except NotFound:
        return _not_found()
    return web.json_response({"status": str(sb.status), "error_type": sb.error_type, "error_message": sb.error_message})


async def sandbox_logs(request: web.Request) -> web.Response:
    sim = _sim(request)
    try:
        sb = sim.get(request.match_info["sandbox_id"])
    except NotFound:
        return _not_found()
    return web.json_response({"logs": _logs(sb, sim.clock)})


async def sandbox_auth(request: web.Request) -> web.Response:
    try:
        sb = _sim(request).get(request.match_info["sandbox_id"])
    except NotFound:
        return _not_found()
    tokens = _tokens(request)
    return web.json_response(tokens.auth_body(tokens.issue(sb.id), _base_url(request)))


async def stampede_stats(request: web.Request) -> web.Response:
    """The core's stats answer, plus the transport faults this front injected."""
    sim = _sim(request)
    injected = dict(request.app[FAULTS].injected) if FAULTS in request.app else {}
    return web.json_response({**sim.facts(), "stats": sim.stats(), "faults_injected": injected})


async def openapi(request: web.Request) -> web.Response:
    return web.json_response(openapi_document(create_maxima(_sim(request).profile.limits)))


# --- app, runner, serve -------------------------------------------------------------------------------

SimulatorSource = StubSettings | VendorSimulator | Callable[[], VendorSimulator]


def create_app(source: SimulatorSource | None = None, *, token: str | None = None) -> web.Application:
    """The stub as an aiohttp Application.

    `source`: StubSettings (the simulator is built on the app's loop at startup, with a LoopClock), a
    ready VendorSimulator, or a zero-argument factory called at startup. `token` overrides the API
    token (required unless `source` is StubSettings). Profile problems raise ProfileError here, before
    anything listens.
    """
    settings = source if isinstance(source, StubSettings) else None
    if source is None:
        settings = StubSettings()
    api_token = token or (settings.token if settings is not None else None)
    if not api_token:
        raise ValueError("create_app needs an API token (token=...) when not given StubSettings")
    # transport faults first: the hostile network sits in front of the vendor's own auth and errors
    app = web.Application(middlewares=[transport_faults, _errors_and_auth], client_max_size=4 * 1024 * 1024)
    app[API_TOKEN] = api_token
    app[TOKENS] = GatewayTokens()
    install(app)
    owned = False
    if settings is not None:
        profile = settings.resolved_profile()
        scale = settings.resolved_time_scale(profile)

        def factory() -> VendorSimulator:
            clock = LoopClock(scale)
            clock.start()
            return VendorSimulator(profile, seed=settings.seed, clock=clock)

        owned = True
        maker: Callable[[], VendorSimulator] | None = factory
    elif isinstance(source, VendorSimulator):
        app[SIM] = source
        maker = None
    else:
        assert callable(source)
        maker, owned = source, True

    async def on_startup(app: web.Application) -> None:
        if maker is not None:
            app[SIM] = maker()
        app[SIM].add_prune_listener(app[TOKENS].forget)  # a pruned sandbox's gateway token goes with it
        app[FAULTS] = FaultInjector(app[SIM].profile.faults)  # the profile's [faults] (inactive without one)

    async def on_cleanup(app: web.Application) -> None:
        if owned and SIM in app:
            app[SIM].close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    r = app.router
    p = API_PREFIX
    r.add_post(f"{p}/sandbox/status:batchGet", batch_status)
    add_checkpoint_routes(r, p, _sim)
    r.add_post(f"{p}/sandbox", create_sandbox)
    r.add_get(f"{p}/sandbox", list_sandboxes)
    r.add_delete(f"{p}/sandbox", bulk_delete)
    one = f"{p}/sandbox/{{sandbox_id:[^/:]+}}"  # no ':', so `status:batchGet` is its own resource (and Allow)
    r.add_get(one, get_sandbox)
    r.add_delete(one, delete_sandbox)
    r.add_get(f"{one}/error-context", error_context)
    r.add_get(f"{one}/logs", sandbox_logs)
    r.add_post(f"{one}/auth", sandbox_auth)
    r.add_get(f"{p}/_stampede/truth", stampede_truth)
    r.add_get(f"{p}/_stampede/stats", stampede_stats)
    r.add_post(f"{GATEWAY_PREFIX}/{{user_ns}}/{{job_id}}/exec", exec_handler(_sim, _tokens))
    add_file_routes(r, GATEWAY_PREFIX, _sim, _tokens)
    add_connect_routes(r, GATEWAY_PREFIX, build_service(_sim, _tokens), _tokens)
    r.add_get("/openapi.json", openapi)
    return app


@dataclass
class RunningStub(RunningApp):
    """A stub listening on a port of this loop. `close()` stops it (sandboxes are not terminated)."""

    @property
    def api_url(self) -> str:
        return self.url + API_PREFIX


async def start_stub(
    source: SimulatorSource | None = None,
    *,
    token: str | None = None,
    host: str | None = None,
    port: int | None = None,
) -> RunningStub:
    """Start the stub on the running loop (tests, the embedded engine); port 0 picks a free port."""
    settings = source if isinstance(source, StubSettings) else StubSettings()
    app = create_app(source if source is not None else settings, token=token)
    bind_host = host or settings.host
    runner, bound_port = await listen(app, bind_host, settings.port if port is None else port)
    return RunningStub(
        url=http_url(bind_host, bound_port), port=bound_port, token=app[API_TOKEN], app=app, runner=runner
    )
