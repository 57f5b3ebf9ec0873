"""Changes to a sandbox after its create, as daytona 0.226.1 asks for them: labels, the auto-stop/archive/delete
intervals, TTL, public, fork, and a snapshot taken of it; and the calls the local Daytona does not model.

- `PUT /api/sandbox/{id}/labels` `{"labels"}` -> `{"labels"}` (`sandbox.set_labels`; the list's label filter sees
  the new ones);
- `POST .../autostop/{m}`, `.../autoarchive/{m}` (0: the maximum), `.../autodelete/{m}` (-1 disables), `.../ttl/{m}`
  (0 disables; counted from now), `.../public/{bool}` -> the `Sandbox`;
- `POST .../fork` `{"name"}` -> the new `Sandbox` (`sandbox.fork`): it starts with a copy of the source's files and
  boots in the profile's fork time;
- `POST .../snapshot` `{"name"}` -> the `Sandbox` once the snapshot is taken (`sandbox.create_snapshot`; the
  profile's snapshot time): `daytona.snapshot.get(name)` finds it, and a create naming it starts from its files.

Anything else under `/api/sandbox/{id}/...` (resize, network settings, SSH access, preview links, ...) and
`/api/volumes...` answers 501 naming the call: the SDK raises a plain `DaytonaError`, never "not found", so a harness does not count
a live sandbox as dead.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from aiohttp import web

from providers.sim.core.simulator import CreateRequest, NotFound, NotRunning, Rejected, SimSandbox, SnapshotFailed
from providers.sim.daytona.front import Front, error, front_of, json_object, served_elsewhere, with_sandbox
from providers.sim.daytona.rest import rejection
from providers.sim.daytona.shapes import MAX_INT, requested, state_of, update_requested

MAX_AUTO_ARCHIVE_MIN = 43200  # what `/api/config` announces, and what 0 stands for
SERVED = (
    "start",
    "stop",
    "archive",
    "toolbox-proxy-url",
    "labels",
    "autostop",
    "autoarchive",
    "autodelete",
    "ttl",
    "public",
    "last-activity",
    "fork",
    "snapshot",
)
"""The sandbox calls served (here and in rest.py): another method on them is a wrong method, not a missing call."""


def _sandbox(request: web.Request) -> tuple[Front, SimSandbox | None, web.Response | None]:
    front = front_of(request)
    try:
        return front, front.find_live(request.match_info["id"]), None
    except NotFound:
        return front, None, error(request, 404, "Sandbox not found", code="SANDBOX_NOT_FOUND")


_on_sandbox = with_sandbox(_sandbox)
"""A call on the path's live sandbox (`_sandbox`): a missing or ended one is answered 404 before the handler."""


def _minutes(request: web.Request, *, minimum: int) -> int | None:
    raw = request.match_info["minutes"]
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if minimum <= value <= MAX_INT else None  # the API's int32


@_on_sandbox
async def replace_labels(request: web.Request, _front: Front, sb: SimSandbox) -> web.Response:
    body = await json_object(request)
    labels = body.get("labels") if body is not None else None
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        return error(request, 400, "labels must be an object of strings")
    want = update_requested(sb, labels=dict(labels))
    return web.json_response({"labels": dict(want.labels)})


def _interval_setter(field: str, minimum: int, zero_means: int | None = None) -> Any:
    @_on_sandbox
    async def handler(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
        value = _minutes(request, minimum=minimum)
        if value is None:
            return error(request, 400, f"interval must be an integer not less than {minimum}")
        if value == 0 and zero_means is not None:
            value = zero_means
        update_requested(sb, **{field: value})
        return web.json_response(front.body(sb))

    return handler


@_on_sandbox
async def set_ttl(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    minutes = _minutes(request, minimum=0)
    if minutes is None:
        return error(request, 400, "ttlMinutes must be a non-negative integer")
    if not sb.active:
        return error(request, 400, f"Sandbox is {state_of(sb, front.life.get(sb.id))}")
    elapsed = front.sim.clock.now() - sb.created_at
    update_requested(sb, ttl_minutes=(elapsed / 60.0 + minutes) if minutes else None)
    try:
        front.sim.set_lifetime(sb.id, minutes * 60.0 if minutes else float("inf"))
    except NotRunning:
        pass  # ended meanwhile: nothing left to bound
    return web.json_response(front.body(sb))


@_on_sandbox
async def set_public(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    raw = request.match_info["public"].lower()
    if raw not in ("true", "false"):
        return error(request, 400, "isPublic must be a boolean value")
    update_requested(sb, public=raw == "true")
    return web.json_response(front.body(sb))


@_on_sandbox
async def last_activity(request: web.Request, _front: Front, _sb: SimSandbox) -> web.Response:
    return web.Response(status=201)


@_on_sandbox
async def fork(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    state = state_of(sb, front.life.get(sb.id))
    if state not in ("started", "stopped", "archived"):
        return error(request, 400, f"Sandbox must be started or stopped to fork (state: {state})")
    body: dict[str, Any] | None = {}
    if request.can_read_body:
        body = await json_object(request)
        if body is None:
            return error(request, 400, "the body must be a JSON object")
    assert body is not None
    name = body.get("name")
    if name is not None and not isinstance(name, str):
        return error(request, 400, "name must be a string")
    if name and name in front.names:
        return error(request, 409, f"Sandbox with name {name} already exists")
    want = dataclasses.replace(requested(sb), name=name or None)
    lifetime = want.ttl_minutes * 60.0 if want.ttl_minutes else math.inf
    cap = front.sim.profile.limits.max_lifetime_s
    req = CreateRequest(
        image=sb.image,
        labels=sb.labels,
        cpu=sb.cpu,
        memory_mb=sb.memory_mb,
        disk_gb=sb.disk_gb,
        lifetime_s=min(lifetime, cap) if math.isfinite(cap) else lifetime,
        name=name or "",
        env=sb.env,
        meta={**sb.meta, "daytona": want},
        user=sb.user,
        fork_of=sb.id,
    )
    try:
        forked = front.sim.create(req)
    except Rejected as exc:
        return rejection(request, front, exc)
    except NotRunning:  # ended meanwhile
        return error(request, 400, f"Sandbox must be started or stopped to fork (state: {state})")
    if name:
        front.names[name] = forked.id
    for callback in front.on_create:
        callback(forked)
    return web.json_response(front.body(forked))


@_on_sandbox
async def snapshot_sandbox(request: web.Request, front: Front, sb: SimSandbox) -> web.Response:
    body = await json_object(request)
    name = body.get("name") if body is not None else None
    if not isinstance(name, str) or not name.strip():
        return error(request, 400, "name is required")
    if front.snapshot_named(name) is not None:
        return error(request, 409, f"Snapshot with name {name} already exists")
    try:
        snap = front.sim.snapshot(sb.id, name=name)
    except NotRunning:
        state = state_of(sb, front.life.get(sb.id))
        return error(request, 400, f"Sandbox must be started or stopped to snapshot (state: {state})")
    except SnapshotFailed as exc:  # the profile's snapshot_error_prob: its time spent, then the API's server error
        await front.sim.clock.sleep(exc.duration_s)
        return error(request, 500, exc.message)
    await front.sim.clock.sleep(snap.duration_s)
    return web.json_response(front.body(sb))


@_on_sandbox
async def unsupported(request: web.Request, _front: Front, _sb: SimSandbox) -> web.Response:
    """A sandbox call the local Daytona does not model: 501 naming it (the sandbox exists: not a 404)."""
    wrong = served_elsewhere(request, request.match_info["rest"], SERVED)
    if wrong is not None:
        return wrong
    what = request.match_info["rest"].split("/")[0] or "this call"
    return error(
        request,
        501,
        f"{request.method} /sandbox/{{id}}/{request.match_info['rest']}: '{what}' is not modelled by the local "
        "Daytona (stampede's simulator)",
        code="NOT_IMPLEMENTED",
    )


async def volumes(request: web.Request) -> web.Response:
    """Volumes (S3-backed mounts shared between sandboxes) are not modelled: 501, so `daytona.volume.*` says so."""
    return error(
        request,
        501,
        "volumes are not modelled by the local Daytona (stampede's simulator)",
        code="NOT_IMPLEMENTED",
    )


def add_routes(app: web.Application, prefix: str) -> None:
    """Register after the REST routes: the last one catches every sandbox call not served."""
    r = app.router
    base = f"{prefix}/sandbox/{{id}}"
    r.add_put(f"{base}/labels", replace_labels)
    r.add_post(f"{base}/autostop/{{minutes}}", _interval_setter("auto_stop", 0))
    r.add_post(f"{base}/autoarchive/{{minutes}}", _interval_setter("auto_archive", 0, MAX_AUTO_ARCHIVE_MIN))
    r.add_post(f"{base}/autodelete/{{minutes}}", _interval_setter("auto_delete", -(2**31)))
    r.add_post(f"{base}/ttl/{{minutes}}", set_ttl)
    r.add_post(f"{base}/public/{{public}}", set_public)
    r.add_post(f"{prefix}/sandbox/{{id}}/last-activity", last_activity)
    r.add_post(f"{base}/fork", fork)
    r.add_post(f"{base}/snapshot", snapshot_sandbox)
    r.add_route("*", f"{base}/{{rest:.+}}", unsupported)
    r.add_route("*", f"{prefix}/volumes{{rest:(/.*)?}}", volumes)
