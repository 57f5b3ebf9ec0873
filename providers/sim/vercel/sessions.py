"""A named sandbox's sessions on the local Vercel Sandbox: get, stop, extend its timeout, snapshot (which stops it,
as Vercel's snapshots do); and the session lookups every per-session route starts with."""

from __future__ import annotations

import asyncio
import math

from aiohttp import web

from providers.sim.core.serving.listening import SIMULATOR
from providers.sim.core.simulator import NotFound, NotRunning, SnapshotFailed, VendorSimulator
from providers.sim.vercel.shapes import (
    REGION,
    SNAPSHOT_PREFIX,
    bad_request,
    error,
    not_found,
    now_ms,
    read_json,
    sandbox_body,
    session_body,
    session_status,
)
from providers.sim.vercel.state import STATE, Named


def end_session(sim: VendorSimulator, session_id: str) -> None:
    try:
        if sim.get(session_id).active:
            sim.terminate(session_id)
    except (NotFound, NotRunning):
        pass


def find_session(request: web.Request) -> tuple[Named, str] | web.Response:
    state = request.app[STATE]
    session_id = request.match_info["session_id"]
    name = state.by_session.get(session_id)
    named = None if name is None else state.names.get(name)
    if named is None:
        return not_found(f"Session {session_id!r}")
    return named, session_id


def running_session(request: web.Request) -> tuple[Named, str] | web.Response:
    found = find_session(request)
    if isinstance(found, web.Response):
        return found
    if session_status(request.app[SIMULATOR], found[1])[0] != "running":
        return error(410, "sandbox_stopped", f"Session {found[1]!r} is not running")
    return found


async def get_session(request: web.Request) -> web.Response:
    found = find_session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    return web.json_response({"session": session_body(request.app[SIMULATOR], named, session_id)})


async def stop_session(request: web.Request) -> web.Response:
    found = find_session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    sim = request.app[SIMULATOR]
    end_session(sim, session_id)
    body = {"session": session_body(sim, named, session_id), "sandbox": sandbox_body(sim, named), "routes": []}
    return web.json_response(body)


async def extend_timeout(request: web.Request) -> web.Response:
    found = running_session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    body = await read_json(request)
    duration = body.get("duration")
    if not isinstance(duration, int) or duration < 1:
        return bad_request("duration must be a positive number of milliseconds")
    sim = request.app[SIMULATOR]
    sb = sim.get(session_id)
    remaining = sb.created_at + sb.lifetime_s - sim.clock.now() if math.isfinite(sb.lifetime_s) else math.inf
    sim.set_lifetime(session_id, max(0.0, remaining) + duration / 1000)
    named.timeout_ms += duration
    return web.json_response({"session": session_body(sim, named, session_id)})


async def snapshot_session(request: web.Request) -> web.Response:
    found = running_session(request)
    if isinstance(found, web.Response):
        return found
    named, session_id = found
    sim = request.app[SIMULATOR]
    try:
        snap = sim.snapshot(session_id)
    except SnapshotFailed as exc:  # the profile's snapshot_error_prob: its time spent, then the API's server error
        await asyncio.sleep(exc.duration_s * sim.clock.time_scale)
        return error(500, "internal_server_error", exc.message)
    await asyncio.sleep(snap.duration_s * sim.clock.time_scale)
    end_session(sim, session_id)  # Vercel stops the sandbox it snapshots
    named.snapshot_id = snap.id
    now = now_ms()
    snapshot = {
        "id": SNAPSHOT_PREFIX + snap.id,
        "sourceSessionId": session_id,
        "region": REGION,
        "status": "created",
        "sizeBytes": snap.size_bytes,
        "createdAt": now,
        "updatedAt": now,
    }
    return web.json_response({"snapshot": snapshot, "session": session_body(sim, named, session_id)})
