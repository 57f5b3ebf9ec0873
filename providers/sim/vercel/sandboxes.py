"""Named sandboxes on the local Vercel Sandbox: create (from a snapshot too), fork, get (`?resume=true` starts a new
session), list and destroy; a create answers once its session runs."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from providers.sim.core.serving.listening import SIMULATOR
from providers.sim.core.simulator import CreateRequest, ErrorType, NotFound, Rejected, VendorSimulator
from providers.sim.vercel.sessions import end_session
from providers.sim.vercel.shapes import (
    DEFAULT_IMAGE,
    DEFAULT_TIMEOUT_MS,
    DEFAULT_VCPUS,
    LIST_LIMIT,
    MB_PER_VCPU,
    PROJECT_ID,
    SNAPSHOT_PREFIX,
    USER,
    bad_request,
    error,
    full_body,
    not_found,
    now_ms,
    read_json,
    rejection,
    sandbox_body,
    session_status,
)
from providers.sim.vercel.state import STATE, Named, State


def _named(request: web.Request) -> Named | None:
    return request.app[STATE].names.get(request.match_info["name"])


async def _start(request: web.Request, named: Named, req: CreateRequest) -> web.Response:
    """Create the session's simulated sandbox and answer once it runs (or how it ended)."""
    state, sim = request.app[STATE], request.app[SIMULATOR]
    try:
        sb = sim.create(req)
    except Rejected as exc:
        return rejection(exc, sim)
    except NotFound as exc:
        return not_found(f"Snapshot or sandbox {exc.sandbox_id!r}")
    named.session_id = sb.id
    named.name = named.name or sb.id
    state.names[named.name] = named
    state.by_session[sb.id] = named.name
    sb = await state.running(sb)
    if sb.error_type == ErrorType.PROVISIONING_TIMEOUT:
        return error(504, "sandbox_start_timeout", f"The sandbox did not start: {sb.error_message}")
    return web.json_response(full_body(sim, named), status=200)


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
        created_ms=now_ms(),
    )


def _in_use(state: State, sim: VendorSimulator, name: str) -> bool:
    named = state.names.get(name)
    return named is not None and session_status(sim, named.session_id)[0] in ("pending", "running")


async def create_sandbox(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    body = await read_json(request)
    named = _parse_new(body)
    if isinstance(named, str):
        return bad_request(named)
    if named.name and _in_use(state, sim, named.name):
        return error(409, "conflict", f"A sandbox named {named.name!r} already exists")
    source = body.get("source")
    snapshot = None
    if isinstance(source, dict) and source.get("type") == "snapshot":
        snapshot = source.get("snapshotId") or source.get("snapshot_id")
        if not isinstance(snapshot, str):
            return bad_request("source.snapshotId is required")
        snapshot = snapshot.removeprefix(SNAPSHOT_PREFIX)
        named.snapshot_id = snapshot
    return await _start(request, named, _create_request(named, from_snapshot=snapshot))


async def fork_sandbox(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    source = _named(request)
    if source is None:
        return not_found(f"Sandbox {request.match_info['name']!r}")
    body = await read_json(request)
    named = _parse_new({"projectId": source.project_id, **body}, base=source)
    if isinstance(named, str):
        return bad_request(named)
    if named.name and _in_use(state, sim, named.name):
        return error(409, "conflict", f"A sandbox named {named.name!r} already exists")
    running = session_status(sim, source.session_id)[0] == "running"
    if running:
        return await _start(request, named, _create_request(named, fork_of=source.session_id))
    return await _start(request, named, _create_request(named, from_snapshot=source.snapshot_id))


async def get_sandbox(request: web.Request) -> web.Response:
    named = _named(request)
    if named is None:
        return not_found(f"Sandbox {request.match_info['name']!r}")
    sim = request.app[SIMULATOR]
    if request.query.get("resume") == "true" and session_status(sim, named.session_id)[0] not in ("pending", "running"):
        # a new session, from the sandbox's snapshot when it has one (the SDK resumes a stopped sandbox so)
        return await _start(request, named, _create_request(named, from_snapshot=named.snapshot_id))
    return web.json_response(full_body(sim, named))


async def list_sandboxes(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    query = request.query
    tag = query.get("tags")
    key, sep, value = (tag or "").partition(":")
    if tag is not None and not sep:
        return bad_request("tags must be key:value")
    project = query.get("project") or PROJECT_ID
    try:
        limit = int(query.get("limit", LIST_LIMIT))
        offset = int(query.get("cursor") or 0)
    except ValueError:
        return bad_request("limit and cursor must be whole numbers")
    if not 1 <= limit <= 1000 or offset < 0:
        return bad_request("limit must be in 1..1000")
    found = [n for n in state.names.values() if n.project_id == project and (tag is None or n.tags.get(key) == value)]
    found.sort(key=lambda n: n.created_ms, reverse=query.get("sortOrder", "desc") != "asc")
    page = found[offset : offset + limit]
    following = str(offset + limit) if offset + limit < len(found) else None
    body = {
        "sandboxes": [sandbox_body(sim, n) for n in page],
        "pagination": {"count": len(page), "next": following, "prev": None},
    }
    return web.json_response(body)


async def destroy_sandbox(request: web.Request) -> web.Response:
    state, sim = request.app[STATE], request.app[SIMULATOR]
    named = _named(request)
    if named is None:
        return not_found(f"Sandbox {request.match_info['name']!r}")
    end_session(sim, named.session_id)
    body = full_body(sim, named)
    state.names.pop(named.name, None)
    state.by_session.pop(named.session_id, None)
    return web.json_response(body)
