"""A devbox's life on the local Runloop: create (and the refusals), get, list, the `wait_for_status` long poll,
shutdown, suspend / resume and `snapshot_disk`."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from aiohttp import web

from providers.sim.core.records import CreateRequest, NotFound, NotRunning, Rejected, RejectReason, SnapshotFailed
from providers.sim.runloop.shapes import DEFAULT_IMAGE, DEVBOX_USER, STATUSES, metadata_labels, snapshot_view
from providers.sim.runloop.state import Front, error, front_of, read_json

STATUS_HOLD_MAX_S = 30.0  # the server's longest hold of a devbox wait_for_status (the SDK's own constant)
MAX_PAGE = 5000
DEFAULT_PAGE = 20


def _rejection(request: web.Request, front: Front, exc: Rejected) -> web.Response:
    if exc.reason is RejectReason.RATE_LIMITED:
        clock = front.sim.clock
        now = clock.now()  # the real seconds until a token, through the clock as it plays now (a burst's 1:1 wave too)
        wait = max(0.001, clock.wall(now + (exc.retry_after or 0.0)) - clock.wall(now))
        headers = {"Retry-After": str(max(1, math.ceil(wait))), "retry-after-ms": str(math.ceil(wait * 1000))}
        return error(request, 429, "Too many requests: devbox create rate limit exceeded", headers=headers)
    if exc.reason is RejectReason.QUOTA_EXHAUSTED:
        limit = front.sim.profile.quota.max_active
        return error(request, 429, f"Concurrent devbox limit reached: at most {limit:g} running devboxes per account")
    if exc.reason is RejectReason.CAPACITY:
        return error(request, 503, "No capacity available to schedule devbox")
    if exc.reason is RejectReason.INVALID:
        return error(request, 400, exc.message)
    return error(request, 500, "Internal server error")


def _sizes(launch: dict[str, Any]) -> tuple[float, int]:
    sizes = {
        "X_SMALL": (0.5, 1),
        "SMALL": (1, 2),
        "MEDIUM": (2, 4),
        "LARGE": (2, 8),
        "X_LARGE": (4, 16),
        "XX_LARGE": (8, 32),
    }
    cpu, gib = sizes.get(str(launch.get("resource_size_request") or "SMALL"), (1, 2))
    cpu = float(launch.get("custom_cpu_cores") or cpu)
    gib = int(launch.get("custom_gb_memory") or gib)
    return cpu, gib * 1024


async def create_devbox(request: web.Request) -> web.Response:
    front = front_of(request)
    body = await read_json(request)
    metadata = body.get("metadata") or {}
    launch = body.get("launch_parameters") or {}
    env = body.get("environment_variables") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        return error(request, 400, "metadata must be an object of strings")
    if not isinstance(launch, dict) or not isinstance(env, dict):
        return error(request, 400, "launch_parameters and environment_variables must be objects")
    sources = [k for k in ("blueprint_id", "blueprint_name", "snapshot_id") if body.get(k)]
    if len(sources) > 1:
        return error(request, 400, "Only one of (Snapshot ID, Blueprint ID, Blueprint name) should be specified")
    keep_alive = launch.get("keep_alive_time_seconds")
    lifetime = float(keep_alive) if keep_alive else 3600.0
    cpu, memory_mb = _sizes(launch)
    snapshot_id = body.get("snapshot_id")
    req = CreateRequest(
        image=str(body.get("blueprint_id") or body.get("blueprint_name") or DEFAULT_IMAGE),
        labels=metadata_labels(metadata),
        cpu=cpu,
        memory_mb=memory_mb,
        lifetime_s=lifetime,
        name=str(body.get("name") or ""),
        idempotency_key=request.headers.get("x-request-id"),
        env={str(k): str(v) for k, v in env.items()},
        meta={
            "metadata": metadata,
            "launch_parameters": launch,
            "blueprint_id": body.get("blueprint_id"),
            "snapshot_id": snapshot_id,
        },
        user=DEVBOX_USER,
        from_snapshot=str(snapshot_id) if snapshot_id else None,
    )
    try:
        sb = front.sim.create(req)
    except Rejected as exc:
        return _rejection(request, front, exc)
    except NotFound:
        return error(request, 404, f"Snapshot {snapshot_id} not found")
    return web.json_response(front.view(sb))


async def get_devbox(request: web.Request) -> web.Response:
    front = front_of(request)
    try:
        sb = front.find(request)
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    return web.json_response(front.view(sb))


async def list_devboxes(request: web.Request) -> web.Response:
    front = front_of(request)
    query = request.query
    try:
        limit = int(query.get("limit", DEFAULT_PAGE))
    except ValueError:
        return error(request, 400, "limit must be an integer")
    if not 0 < limit <= MAX_PAGE:
        return error(request, 400, f"limit must be between 1 and {MAX_PAGE}")
    status = query.get("status")
    if status is not None and status not in STATUSES:
        return error(request, 400, f"unknown status {status!r}")
    views = [front.view(sb) for sb in reversed(front.sim.list())]  # newest first
    if status is not None:
        views = [v for v in views if v["status"] == status]
    after = query.get("starting_after")
    if after:
        ids = [v["id"] for v in views]
        views = views[ids.index(after) + 1 :] if after in ids else []
    page = views[:limit]
    return web.json_response({"devboxes": page, "has_more": len(views) > limit, "total_count": len(views)})


async def wait_for_devbox(request: web.Request) -> web.Response:
    """The long poll behind `await_running` / `await_suspended`: answer once the status is one asked for."""
    front = front_of(request)
    body = await read_json(request)
    wanted = set(body.get("statuses") or ())
    hold = min(float(body.get("timeout_seconds") or STATUS_HOLD_MAX_S), STATUS_HOLD_MAX_S)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, hold)
    while True:
        try:
            sb = front.find(request)
        except NotFound:
            return error(request, 404, f"Devbox {request.match_info['id']} not found")
        view = front.view(sb)
        if view["status"] in wanted:
            return web.json_response(view)
        remaining = deadline - loop.time()
        if remaining <= 0:
            return error(request, 408, "Timed out waiting for devbox status")
        try:
            await asyncio.wait_for(front.next_change(sb.id).wait(), remaining)
        except TimeoutError:
            pass


async def shutdown_devbox(request: web.Request) -> web.Response:
    front = front_of(request)
    try:
        sb = front.sim.terminate(request.match_info["id"])
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    front.suspending.discard(sb.id)
    return web.json_response(front.view(sb))


async def suspend_devbox(request: web.Request) -> web.Response:
    front = front_of(request)
    devbox_id = request.match_info["id"]
    try:
        seconds = front.sim.pause(devbox_id)
    except NotFound:
        return error(request, 404, f"Devbox {devbox_id} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {devbox_id} is not running ({exc.status})")
    front.suspending.add(devbox_id)
    sb = front.sim.get(devbox_id)

    def saved() -> None:
        front.suspending.discard(devbox_id)
        front.notify(sb)

    asyncio.get_running_loop().call_later(seconds * front.sim.clock.time_scale, saved)
    return web.json_response(front.view(sb))


async def resume_devbox(request: web.Request) -> web.Response:
    front = front_of(request)
    devbox_id = request.match_info["id"]
    if devbox_id in front.suspending:
        return error(request, 400, f"Devbox {devbox_id} is still suspending")
    try:
        sb = front.sim.resume(devbox_id)
    except NotFound:
        return error(request, 404, f"Devbox {devbox_id} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {devbox_id} is not suspended ({exc.status})")
    except Rejected as exc:
        return _rejection(request, front, exc)
    front.resuming.add(devbox_id)
    return web.json_response(front.view(sb))


async def snapshot_disk(request: web.Request) -> web.Response:
    front = front_of(request)
    body = await read_json(request)
    metadata = body.get("metadata") or {}
    try:
        snap = front.sim.snapshot(request.match_info["id"], body.get("name"))
    except NotFound:
        return error(request, 404, f"Devbox {request.match_info['id']} not found")
    except NotRunning as exc:
        return error(request, 400, f"Devbox {exc.sandbox_id} is not running (status: {exc.status})")
    except SnapshotFailed as exc:  # the profile's snapshot_error_prob: its time spent, then the API's server error
        await asyncio.sleep(exc.duration_s * front.sim.clock.time_scale)
        return error(request, 500, exc.message)
    await asyncio.sleep(snap.duration_s * front.sim.clock.time_scale)
    front.snapshot_meta[snap.id] = (dict(metadata), body.get("commit_message"))
    return web.json_response(snapshot_view(snap, front.sim.clock.wall, metadata, body.get("commit_message")))
