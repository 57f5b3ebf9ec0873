"""The local Vercel Sandbox: the REST routes vercel-sandbox 0.10.0 calls, over the vendor simulator, on one server.

Vercel serves them under `https://vercel.com/api`; the SDK takes that base URL only as an option
(`SandboxServiceOptions(base_url=...)`, no environment variable), so a user's own script passes `{url}/api` there
and its credentials as `VERCEL_TOKEN`, `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID` (what `serve` prints). Every call
carries `Authorization: Bearer <token>` and `?teamId=`: a wrong token is 401 `{"error": {"code": "unauthorized"}}`,
another team 403 `forbidden`.

A named sandbox runs one session at a time; here a session is one simulated sandbox (its id the session id) and
the name its record (`Named`), kept until it is destroyed, its sessions stopped. Routes (`/api` + …):
- `POST /v3/sandboxes` creates and answers once the session runs (the SDK polls `GET /v2/sandboxes/{name}` every
  0.5 s while `pending`; answering at the boot's end saves the fleet those polls), `{sandbox, session, routes}`.
  Refusals: the create rate 429 `rate_limited` and the plan's vCPU allocation (profile `[vcpu_rate]`) 429
  `vcpu_allocation_limit_exceeded`, both with `Retry-After`; the concurrency cap 429
  `concurrent_sandboxes_limit_exceeded`; no room 503 `capacity_unavailable`; an injected fault 500; bad input 400;
  a name in use 409 `conflict`. A session that fails to start answers its `status` (`failed`; `aborted` when
  stopped while starting), which the SDK raises as `SandboxTerminalStateError`; one past the profile's startup
  deadline 504 `sandbox_start_timeout`. `source: {type: "snapshot", snapshotId}` starts from a snapshot's files.
- `GET /v2/sandboxes/{name}` (`?resume=true` on a stopped one starts a new session, as the SDK asks after a
  `410 sandbox_stopped`), `GET /v2/sandboxes?project=&tags=key:value&limit=&cursor=` (newest first),
  `DELETE /v2/sandboxes/{name}` (destroys: its session stops), `POST /v2/sandboxes/{name}/fork` (a new named
  sandbox starting from a copy of the source's files).
- `GET /v2/sandboxes/sessions/{id}`, `POST …/{id}/stop`, `POST …/{id}/extend-timeout`, `POST …/{id}/snapshot`
  (the session stops, as Vercel's snapshots do).
- `POST …/{id}/cmd` runs `command` + `args`: with `?wait=true&logs=true` (the SDK's `run_process`) the answer is
  NDJSON: `{"command": …}` at the start, `{"stream": "stdout"|"stderr", "data": …}` as output comes (real
  commands; a modelled one's output comes at its end), `{"command": …, exitCode}` at the end; a sandbox that
  ends mid-command `{"stream": "error", "data": {"code": "sandbox_stopped", …}}`. Without them, `{"command"}` at
  once, then `GET …/cmd/{cid}?wait=true` and `GET …/cmd/{cid}/logs` (NDJSON) follow it; `POST …/cmd/{cid}/kill`.
- `POST …/{id}/fs/write` (a gzip tar, paths relative to `x-cwd`), `POST …/{id}/fs/read` (`{path, cwd}`: the bytes,
  404 `file_not_found`), `POST …/{id}/fs/mkdir`.
- `GET /api/v1/_stampede/truth|stats`: the simulator's own record.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import math
import secrets
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from providers.sim.core.clock import LoopClock
from providers.sim.core.records import ExecTicket
from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError, SandboxUser
from providers.sim.core.serving.bearer import tokens_equal
from providers.sim.core.serving.listening import (
    SIMULATOR,
    RunningApp,
    http_url,
    listen,
    stampede_stats,
    stampede_truth,
    vendor_middleware,
)
from providers.sim.core.simulator import (
    CreateRequest,
    ErrorType,
    ExecError,
    ExecOutcome,
    ExecTimedOut,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
    VendorSimulator,
)
from providers.sim.core.vcpu_rate import RESOURCE as VCPU_RATE
from providers.sim.core.vendor_settings import VendorSettings

DEFAULT_PROFILE = "vercel-like"
PREFIX = "/api"
TEAM_ID = "team_stampede"
PROJECT_ID = "prj_stampede"
DEFAULT_IMAGE = "vercel/sandbox/universal:latest"  # the SDK's documented default
DEFAULT_VCPUS = 2  # Vercel's default sandbox size: 2 vCPUs, 2048 MB a vCPU
MB_PER_VCPU = 2048
DEFAULT_TIMEOUT_MS = 300_000  # 5 minutes, Vercel's default sandbox timeout
REGION = "iad1"
USER = SandboxUser(name="vercel-sandbox", uid=1000, home="/vercel/sandbox")
UPLOAD_MAX_BYTES = 256 * 1024 * 1024
LIST_LIMIT = 100
SNAPSHOT_PREFIX = "snap_"  # Vercel's snapshot ids (`snap_…`); the simulator's own id follows it


@dataclass(frozen=True)
class VercelSettings(VendorSettings):
    """The local Vercel Sandbox: which vendor behaviour, how fast, where, and the token it accepts."""

    profile: Any = DEFAULT_PROFILE


@dataclass
class Named:
    """A named sandbox: its current session (a simulated sandbox's id) and what it was created with."""

    name: str
    project_id: str
    session_id: str
    image: str
    vcpus: int
    timeout_ms: int
    tags: dict[str, str]
    env: dict[str, str]
    persistent: bool
    created_ms: int
    snapshot_id: str | None = None


@dataclass
class Command:
    """One command in a session: its log records so far, and its end."""

    id: str
    session_id: str
    name: str
    args: list[str]
    cwd: str
    started_ms: int
    records: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    error: dict[str, str] | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ticket: ExecTicket | None = None

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self.changed.set()


@dataclass
class State:
    """What the handlers share: the named sandboxes and the commands by session."""

    token: str
    names: dict[str, Named] = field(default_factory=dict)
    by_session: dict[str, str] = field(default_factory=dict)  # session id -> name
    commands: dict[str, dict[str, Command]] = field(default_factory=dict)
    waits: dict[str, list[asyncio.Future[SimSandbox]]] = field(default_factory=dict)

    def changed(self, sb: SimSandbox) -> None:
        if sb.status is SandboxStatus.RUNNING or not sb.active:
            for future in self.waits.pop(sb.id, ()):
                if not future.done():
                    future.set_result(sb)
        if not sb.active:
            self.commands.pop(sb.id, None)

    async def running(self, sb: SimSandbox) -> SimSandbox:
        """The sandbox once it runs or ends."""
        if sb.status is SandboxStatus.RUNNING or not sb.active:
            return sb
        future: asyncio.Future[SimSandbox] = asyncio.get_running_loop().create_future()
        self.waits.setdefault(sb.id, []).append(future)
        return await future


STATE = web.AppKey("vercel_state", State)


# --- wire shapes -----------------------------------------------------------------------------------


def _now_ms() -> int:
    return int(time.time() * 1000)


def _error(status: int, code: str, message: str, **headers: str) -> web.Response:
    body = {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers or None)


def _status(sim: VendorSimulator, session_id: str) -> tuple[str, SimSandbox | None]:
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


def _session_body(sim: VendorSimulator, named: Named, session_id: str) -> dict[str, Any]:
    status, sb = _status(sim, session_id)
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
        "stoppedAt": None if status in ("running", "pending") else _now_ms(),
    }


def _sandbox_body(sim: VendorSimulator, named: Named) -> dict[str, Any]:
    status, _ = _status(sim, named.session_id)
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
        "updatedAt": _now_ms(),
        "statusUpdatedAt": _now_ms(),
        "tags": named.tags,
    }


def _full_body(sim: VendorSimulator, named: Named) -> dict[str, Any]:
    return {
        "sandbox": _sandbox_body(sim, named),
        "session": _session_body(sim, named, named.session_id),
        "routes": [],
    }


def _command_body(cmd: Command) -> dict[str, Any]:
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
            return _error(429, "vcpu_allocation_limit_exceeded", exc.message, **{"Retry-After": retry})
        return _error(429, "rate_limited", exc.message, **{"Retry-After": retry})
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        limit = sim.profile.quota.max_active
        message = f"You have reached the limit of {limit:g} concurrent sandboxes for your plan"
        return _error(429, "concurrent_sandboxes_limit_exceeded", message)
    if exc.reason is RejectReason.CAPACITY:
        return _error(503, "capacity_unavailable", "No capacity available to create the sandbox, retry shortly")
    if exc.reason is RejectReason.INVALID:
        return _error(400, "bad_request", exc.message)
    return _error(500, "internal_server_error", "An unexpected error occurred while creating the sandbox")


# --- auth ------------------------------------------------------------------------------------------


def _authorize(request: web.Request) -> web.Response | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not tokens_equal(value.strip(), request.app[STATE].token):
        return _error(401, "unauthorized", "The token provided is not valid")
    if request.path.startswith(f"{PREFIX}/v1/_stampede/"):
        return None
    if request.query.get("teamId", TEAM_ID) != TEAM_ID:
        return _error(403, "forbidden", "You don't have permission to access this team")
    return None


# --- handlers --------------------------------------------------------------------------------------


class BadBody(Exception):
    """A request body that is not a JSON object: 400 `bad_request` (`_bad_bodies`), as Vercel answers it."""


async def _json(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise BadBody("the request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadBody("the request body must be a JSON object")
    return body


@web.middleware
async def _bad_bodies(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
    except BadBody as exc:
        return _error(400, "bad_request", str(exc))
    return response


def _bad(message: str) -> web.Response:
    return _error(400, "bad_request", message)


def _named(request: web.Request) -> Named | None:
    return request.app[STATE].names.get(request.match_info["name"])


def _not_found(what: str) -> web.Response:
    return _error(404, "not_found", f"{what} was not found")


async def _start(request: web.Request, named: Named, req: CreateRequest) -> web.Response:
    """Create the session's simulated sandbox and answer once it runs (or how it ended)."""
    state, sim = request.app[STATE], request.app[SIMULATOR]
    try:
        sb = sim.create(req)
    except Rejected as exc:
        return rejection(exc, sim)
    except NotFound as exc:
        return _not_found(f"Snapshot or sandbox {exc.sandbox_id!r}")
    named.session_id = sb.id
    named.name = named.name or sb.id
    state.names[named.name] = named
    state.by_session[sb.id] = named.name
    sb = await state.running(sb)
    if sb.error_type == ErrorType.PROVISIONING_TIMEOUT:
        return _error(504, "sandbox_start_timeout", f"The sandbox did not start: {sb.error_message}")
    return web.json_response(_full_body(sim, named), status=200)


def _create_request(named: Named, *, from_snapshot: str | None = None, fork_of: str | None = None) -> CreateRequest:
    return CreateRequest(
        image=named.image,
        labels=tuple(f"{key}={value}" for key, value in sorted(named.tags.items())),
        cpu=float(named.vcpus),
        memory_mb=named.vcpus * MB_PER_VCPU,
        lifetime_s=named.timeout_ms / 1000,
        name=named.name,
        env=named.env,
        meta={"project_id": named.project_id},
        user=USER,
        from_snapshot=from_snapshot,
        fork_of=fork_of,
    )


def _parse_new(body: dict[str, Any], base: Named | None = None) -> Named | str:
    """A create's (or fork's) body as a Named record, or the problem in words."""
    resources = body.get("resources") or {}
    if not isinstance(resources, dict):
        return "resources must be an object"
    vcpus = resources.get("vcpus", base.vcpus if base else DEFAULT_VCPUS)
    timeout = body.get("timeout", base.timeout_ms if base else DEFAULT_TIMEOUT_MS)
    tags = body.get("tags", dict(base.tags) if base else {}) or {}
    env = body.get("env", dict(base.env) if base else {}) or {}
    image = body.get("image") or (base.image if base else DEFAULT_IMAGE)
    if not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus < 1:
        return f"resources.vcpus must be a positive integer, got {vcpus!r}"
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 1:
        return f"timeout must be a positive number of milliseconds, got {timeout!r}"
    if not (isinstance(tags, dict) and all(isinstance(v, str) for v in tags.values())):
        return "tags must map strings to strings"
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        return "env must map strings to strings"
    name = body.get("name") or ""  # none: its first session's id (so the simulator's record and the name agree)
    if not isinstance(name, str):
        return "name must be a string"
    project = body.get("projectId") or (base.project_id if base else None)
    if not isinstance(project, str) or not project:
        return "projectId is required"
    return Named(
        name=name,
        project_id=project,
        session_id="",
        image=str(image),
        vcpus=vcpus,
        timeout_ms=timeout,
        tags=dict(tags),
        env=dict(env),
        persistent=bool(body.get("persistent", base.persistent if base else False)),
        created_ms=_now_ms(),
    )


def _in_use(state: State, sim: VendorSimulator, name: str) -> bool:
    named = state.names.get(name)
    return named is not None and _status(sim, named.session_id)[0] in ("pending", "running")


async def create_sandbox(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    body = await _json(request)
    named = _parse_new(body)
    if isinstance(named, str):
        return _bad(named)
    if named.name and _in_use(state, sim, named.name):
        return _error(409, "conflict", f"A sandbox named {named.name!r} already exists")
    source = body.get("source")
    snapshot = None
    if isinstance(source, dict) and source.get("type") == "snapshot":
        snapshot = source.get("snapshotId") or source.get("snapshot_id")
        if not isinstance(snapshot, str):
            return _bad("source.snapshotId is required")
        snapshot = snapshot.removeprefix(SNAPSHOT_PREFIX)
        named.snapshot_id = snapshot
    return await _start(request, named, _create_request(named, from_snapshot=snapshot))


async def fork_sandbox(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    source = _named(request)
    if source is None:
        return _not_found(f"Sandbox {request.match_info['name']!r}")
    body = await _json(request)
    named = _parse_new({"projectId": source.project_id, **body}, base=source)
    if isinstance(named, str):
        return _bad(named)
    if named.name and _in_use(state, sim, named.name):
        return _error(409, "conflict", f"A sandbox named {named.name!r} already exists")
    running = _status(sim, source.session_id)[0] == "running"
    if running:
        return await _start(request, named, _create_request(named, fork_of=source.session_id))
    return await _start(request, named, _create_request(named, from_snapshot=source.snapshot_id))


async def get_sandbox(request: web.Request) -> web.Response:
    named = _named(request)
    if named is None:
        return _not_found(f"Sandbox {request.match_info['name']!r}")
    sim = request.app[SIMULATOR]
    if request.query.get("resume") == "true" and _status(sim, named.session_id)[0] not in ("pending", "running"):
        # a new session, from the sandbox's snapshot when it has one (the SDK resumes a stopped sandbox so)
        return await _start(request, named, _create_request(named, from_snapshot=named.snapshot_id))
    return web.json_response(_full_body(sim, named))


async def list_sandboxes(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    query = request.query
    tag = query.get("tags")
    key, sep, value = (tag or "").partition(":")
    if tag is not None and not sep:
        return _bad("tags must be key:value")
    project = query.get("project") or PROJECT_ID
    try:
        limit = int(query.get("limit", LIST_LIMIT))
        offset = int(query.get("cursor") or 0)
    except ValueError:
        return _bad("limit and cursor must be whole numbers")
    if not 1 <= limit <= 1000 or offset < 0:
        return _bad("limit must be in 1..1000")
    found = [n for n in state.names.values() if n.project_id == project and (tag is None or n.tags.get(key) == value)]
    found.sort(key=lambda n: n.created_ms, reverse=query.get("sortOrder", "desc") != "asc")
    page = found[offset : offset + limit]
    following = str(offset + limit) if offset + limit < len(found) else None
    body = {
        "sandboxes": [_sandbox_body(sim, n) for n in page],
        "pagination": {"count": len(page), "next": following, "prev": None},
    }
    return web.json_response(body)


async def destroy_sandbox(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    named = _named(request)
    if named is None:
        return _not_found(f"Sandbox {request.match_info['name']!r}")
    _stop(sim, named.session_id)
    body = _full_body(sim, named)
    state.names.pop(named.name, None)
    state.by_session.pop(named.session_id, None)
    return web.json_response(body)


def _stop(sim: VendorSimulator, session_id: str) -> None:
    try:
        if sim.get(session_id).active:
            sim.terminate(session_id)
    except (NotFound, NotRunning):
        pass


def _session(request: web.Request) -> tuple[Named, str] | web.Response:
    state = request.app[STATE]
    session_id = request.match_info["session_id"]
    name = state.by_session.get(session_id)
    named = None if name is None else state.names.get(name)
    if named is None:
        return _not_found(f"Session {session_id!r}")
    return named, session_id


def _running_session(request: web.Request) -> tuple[Named, str] | web.Response:
    found = _session(request)
    if isinstance(found, web.Response):
        return found
    if _status(request.app[SIMULATOR], found[1])[0] != "running":
        return _error(410, "sandbox_stopped", f"Session {found[1]!r} is not running")
    return found


async def get_session(request: web.Request) -> web.Response:
    found = _session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    return web.json_response({"session": _session_body(request.app[SIMULATOR], named, session_id)})


async def stop_session(request: web.Request) -> web.Response:
    found = _session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    sim = request.app[SIMULATOR]
    _stop(sim, session_id)
    body = {"session": _session_body(sim, named, session_id), "sandbox": _sandbox_body(sim, named), "routes": []}
    return web.json_response(body)


async def extend_timeout(request: web.Request) -> web.Response:
    found = _running_session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    body = await _json(request)
    duration = body.get("duration")
    if not isinstance(duration, int) or duration < 1:
        return _bad("duration must be a positive number of milliseconds")
    sim = request.app[SIMULATOR]
    sb = sim.get(session_id)
    remaining = sb.created_at + sb.lifetime_s - sim.clock.now() if math.isfinite(sb.lifetime_s) else math.inf
    sim.set_lifetime(session_id, max(0.0, remaining) + duration / 1000)
    named.timeout_ms += duration
    return web.json_response({"session": _session_body(sim, named, session_id)})


async def snapshot_session(request: web.Request) -> web.Response:
    found = _running_session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    sim = request.app[SIMULATOR]
    snap = sim.snapshot(session_id)
    await asyncio.sleep(snap.duration_s * sim.clock.time_scale)
    _stop(sim, session_id)  # Vercel stops the sandbox it snapshots
    named.snapshot_id = snap.id
    now = _now_ms()
    snapshot = {
        "id": SNAPSHOT_PREFIX + snap.id,
        "sourceSessionId": session_id,
        "region": REGION,
        "status": "created",
        "sizeBytes": snap.size_bytes,
        "createdAt": now,
        "updatedAt": now,
    }
    return web.json_response({"snapshot": snapshot, "session": _session_body(sim, named, session_id)})


# --- commands --------------------------------------------------------------------------------------


def _start_command(request: web.Request, session_id: str, body: dict[str, Any]) -> Command | web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    name, args = body.get("command"), body.get("args") or []
    if not isinstance(name, str) or not name or not isinstance(args, list):
        return _bad("command must be a non-empty string and args a list of strings")
    cwd = body.get("cwd") or USER.home
    env = body.get("env") or {}
    timeout_ms = body.get("timeout")
    timeout_s = math.inf if not isinstance(timeout_ms, int) else timeout_ms / 1000 / sim.clock.time_scale
    cmd = Command(
        id=f"cmd_{secrets.token_hex(12)}",
        session_id=session_id,
        name=name,
        args=[str(a) for a in args],
        cwd=str(cwd),
        started_ms=_now_ms(),
    )

    def out(stream: str) -> Any:
        return lambda data: cmd.add({"stream": stream, "data": data.decode(errors="replace")})

    def done(result: ExecOutcome | BaseException) -> None:
        if isinstance(result, ExecOutcome):
            if cmd.ticket is None or cmd.ticket.process is None:  # a modelled command: its output comes now
                if result.stdout:
                    cmd.add({"stream": "stdout", "data": result.stdout})
                if result.stderr:
                    cmd.add({"stream": "stderr", "data": result.stderr})
            cmd.exit_code = result.exit_code
        elif isinstance(result, ExecTimedOut):
            cmd.exit_code = 137  # killed at its timeout
        elif isinstance(result, SandboxDied):
            cmd.error = {"code": "sandbox_stopped", "message": f"The sandbox stopped: {result.message}"}
        elif isinstance(result, ExecError):
            cmd.error = {"code": "internal_error", "message": result.message}
        else:
            cmd.error = {"code": "internal_error", "message": str(result)}
        cmd.ended.set()
        cmd.changed.set()

    try:
        cmd.ticket = sim.exec_start(
            session_id,
            shlex.join([cmd.name, *cmd.args]),
            timeout_s=timeout_s,
            on_done=done,
            env={str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else None,
            cwd=cmd.cwd,
            on_stdout=out("stdout"),
            on_stderr=out("stderr"),
        )
    except (NotFound, NotRunning):
        return _error(410, "sandbox_stopped", f"Session {session_id!r} is not running")
    state.commands.setdefault(session_id, {})[cmd.id] = cmd
    return cmd


async def _stream(request: web.Request, cmd: Command, *, with_command: bool) -> web.StreamResponse:
    """NDJSON: the command (when `with_command`), its output as it comes, its end."""
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
    await response.prepare(request)

    async def line(record: dict[str, Any]) -> None:
        await response.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")

    if with_command:
        await line({"command": _command_body(cmd)})
    sent = 0
    while True:
        cmd.changed.clear()
        while sent < len(cmd.records):
            await line(cmd.records[sent])
            sent += 1
        if cmd.ended.is_set():
            break
        await cmd.changed.wait()
    if cmd.error is not None:
        await line({"stream": "error", "data": cmd.error})
    elif with_command:
        await line({"command": _command_body(cmd)})
    await response.write_eof()
    return response


async def run_command(request: web.Request) -> web.StreamResponse:
    found = _running_session(request)
    if isinstance(found, web.Response):
        return found
    body = await _json(request)
    cmd = _start_command(request, found[1], body)
    if isinstance(cmd, web.Response):
        return cmd
    if request.query.get("wait") == "true" or body.get("wait") is True:
        return await _stream(request, cmd, with_command=True)
    return web.json_response({"command": _command_body(cmd)})


def _command(request: web.Request) -> Command | web.Response:
    session_id, command_id = request.match_info["session_id"], request.match_info["command_id"]
    cmd = request.app[STATE].commands.get(session_id, {}).get(command_id)
    return _not_found(f"Command {command_id!r}") if cmd is None else cmd


async def get_command(request: web.Request) -> web.Response:
    cmd = _command(request)
    if isinstance(cmd, web.Response):
        return cmd
    if request.query.get("wait") == "true":
        await cmd.ended.wait()
    if cmd.error is not None:
        return _error(410, cmd.error["code"], cmd.error["message"])
    return web.json_response({"command": _command_body(cmd)})


async def command_logs(request: web.Request) -> web.StreamResponse:
    cmd = _command(request)
    if isinstance(cmd, web.Response):
        return cmd
    return await _stream(request, cmd, with_command=False)


async def list_commands(request: web.Request) -> web.Response:
    found = _session(request)
    if isinstance(found, web.Response):
        return found
    commands = request.app[STATE].commands.get(found[1], {}).values()
    return web.json_response({"commands": [_command_body(c) for c in commands]})


async def kill_command(request: web.Request) -> web.Response:
    cmd = _command(request)
    if isinstance(cmd, web.Response):
        return cmd
    if cmd.ticket is not None and not cmd.ended.is_set():
        if cmd.ticket.process is not None:
            cmd.ticket.process.kill()
        else:
            cmd.ticket.cancel()
            cmd.exit_code = 137
            cmd.ended.set()
            cmd.changed.set()
    return web.json_response({"command": _command_body(cmd)})


# --- files -----------------------------------------------------------------------------------------


async def write_files(request: web.Request) -> web.Response:
    found = _running_session(request)
    if isinstance(found, web.Response):
        return found
    tree = request.app[SIMULATOR].tree(found[1])
    cwd = request.headers.get("x-cwd") or USER.home
    raw = await request.read()
    try:
        archive = tarfile.open(fileobj=io.BytesIO(gzip.decompress(raw)), mode="r:")
        members = archive.getmembers()
        for member in members:
            if member.isdir():
                tree.writable(member.name, cwd=cwd).mkdir(parents=True, exist_ok=True)
                continue
            if not member.isfile():
                continue
            target = tree.writable(member.name, cwd=cwd)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = archive.extractfile(member)
            target.write_bytes(data.read() if data is not None else b"")
            target.chmod(member.mode & 0o7777 or 0o644)
    except (OSError, EOFError, tarfile.TarError) as exc:
        if isinstance(exc, SandboxPathError):
            return _error(403, "permission_denied", str(exc))
        return _bad(f"the body is not a gzip tar archive: {exc}")
    return web.json_response({})


async def read_file(request: web.Request) -> web.StreamResponse:
    found = _running_session(request)
    if isinstance(found, web.Response):
        return found
    body = await _json(request)
    path = body.get("path")
    if not isinstance(path, str) or not path:
        return _bad("path is required")
    tree = request.app[SIMULATOR].tree(found[1])
    try:
        data = tree.host_path(path, cwd=body.get("cwd") or USER.home).read_bytes()
    except FileNotFoundError:
        return _error(404, "file_not_found", f"File not found: {path}")
    except IsADirectoryError:
        return _bad(f"{path} is a directory")
    except OSError as exc:
        return _error(403, "permission_denied", str(exc))
    return web.Response(body=data, content_type="application/octet-stream")


async def make_directory(request: web.Request) -> web.Response:
    found = _running_session(request)
    if isinstance(found, web.Response):
        return found
    body = await _json(request)
    path = body.get("path")
    if not isinstance(path, str) or not path:
        return _bad("path is required")
    tree = request.app[SIMULATOR].tree(found[1])
    try:
        tree.writable(path, cwd=body.get("cwd") or USER.home).mkdir(
            parents=body.get("recursive", True) is not False, exist_ok=True
        )
    except FileNotFoundError:
        return _error(404, "not_found", f"Parent directory of {path} not found")
    except OSError as exc:
        return _error(403, "permission_denied", str(exc))
    return web.json_response({})


# --- the application -------------------------------------------------------------------------------


def create_app(settings: VercelSettings) -> web.Application:
    """The local Vercel Sandbox as an aiohttp Application; the simulator is built on the app's loop at startup.
    Profile problems raise ProfileError here, before anything listens."""
    profile = settings.resolved_profile()
    scale = settings.resolved_time_scale(profile)
    middleware = vendor_middleware(
        lambda request, status, message: _error(status, "not_found" if status == 404 else "error", message),
        _authorize,
        front="local vercel",
    )
    app = web.Application(middlewares=[middleware, _bad_bodies], client_max_size=UPLOAD_MAX_BYTES)
    state = State(token=settings.token)
    app[STATE] = state

    async def on_startup(app: web.Application) -> None:
        clock = LoopClock(scale)
        clock.start()
        sim = VendorSimulator(profile, seed=settings.seed, clock=clock)
        sim.add_listener(state.changed)
        app[SIMULATOR] = sim

    async def on_cleanup(app: web.Application) -> None:
        if SIMULATOR in app:
            app[SIMULATOR].close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    r, p, s = app.router, PREFIX, f"{PREFIX}/v2/sandboxes/sessions/{{session_id}}"
    r.add_post(f"{p}/v3/sandboxes", create_sandbox)
    r.add_get(f"{p}/v2/sandboxes", list_sandboxes)
    r.add_get(s, get_session)
    r.add_post(f"{s}/stop", stop_session)
    r.add_post(f"{s}/extend-timeout", extend_timeout)
    r.add_post(f"{s}/snapshot", snapshot_session)
    r.add_post(f"{s}/cmd", run_command)
    r.add_get(f"{s}/cmd", list_commands)
    r.add_get(f"{s}/cmd/{{command_id}}", get_command)
    r.add_get(f"{s}/cmd/{{command_id}}/logs", command_logs)
    r.add_post(f"{s}/cmd/{{command_id}}/kill", kill_command)
    r.add_post(f"{s}/fs/write", write_files)
    r.add_post(f"{s}/fs/read", read_file)
    r.add_post(f"{s}/fs/mkdir", make_directory)
    r.add_get(f"{p}/v2/sandboxes/{{name}}", get_sandbox)
    r.add_delete(f"{p}/v2/sandboxes/{{name}}", destroy_sandbox)
    r.add_post(f"{p}/v2/sandboxes/{{name}}/fork", fork_sandbox)
    r.add_get(f"{p}/v1/_stampede/truth", stampede_truth)
    r.add_get(f"{p}/v1/_stampede/stats", stampede_stats)
    return app


@dataclass
class RunningVercel(RunningApp):
    """A local Vercel Sandbox listening on a port of this loop. `close()` stops it."""

    @property
    def base_url(self) -> str:
        """What `SandboxServiceOptions(base_url=...)` takes (Vercel's own is `https://vercel.com/api`)."""
        return self.url + PREFIX

    def sdk_environment(self) -> dict[str, str]:
        """The credentials a user's own script sets for the unmodified SDK (the base URL is an option, not an
        environment variable: `base_url`)."""
        return {"VERCEL_TOKEN": self.token, "VERCEL_TEAM_ID": TEAM_ID, "VERCEL_PROJECT_ID": PROJECT_ID}


async def start_vercel(settings: VercelSettings) -> RunningVercel:
    """Start the local Vercel Sandbox on the running loop (tests, `serve`); port 0 picks a free port."""
    app = create_app(settings)
    runner, port = await listen(app, settings.host, settings.port)
    return RunningVercel(url=http_url(settings.host, port), port=port, token=settings.token, app=app, runner=runner)
