"""E2B's calls that keep or copy a sandbox, and its metrics, as e2b 2.56.0 makes them (API key checked by the
server's middleware):

- `POST /sandboxes/{id}/pause` (`Sandbox.pause` / `beta_pause`): 204 once paused (the profile's pause time,
  waited in vendor seconds); 409 when it is already paused; 404 when it ended or never was. A paused sandbox
  holds no quota, lists as `paused`, and its envd answers as a gone sandbox's until it is resumed.
- `POST /sandboxes/{id}/resume` (201 `Sandbox`) and `POST /v2/sandboxes/{id}/connect` on a paused sandbox
  (control_plane.py) resume it: queued, placed and booted again in the profile's resume time, files kept.
- `POST /sandboxes/{id}/snapshots` (`create_snapshot`): 201 `SnapshotInfo{snapshotID, names}` after the
  profile's snapshot time; `GET /snapshots` (filters `sandboxID`, `name`; `limit`/`nextToken` paging, newest
  first); `DELETE /templates/{id}` deletes a snapshot (204; 404 when there is none, which the SDK reads as
  False). `Sandbox.create(<snapshot id or name>)` starts from a copy of it (control_plane.py).
- `POST /sandboxes/{id}/fork` (`fork(count, timeout)`): E2B pauses and snapshots the source first, so the call
  spends one snapshot time (the profile's, kept by no listed snapshot; a failed one is the API's 500), then 201,
  one `{"sandbox": Sandbox}` per fork, each a copy of the source's files booted in the profile's fork time; a
  fork that fails is `{"error": Error}` in its place.
- `GET /sandboxes/{id}/metrics` (`get_metrics(start, end)`): one `SandboxMetric` per 5 s since the sandbox
  started, within `start`..`end` (unix seconds). Simulated: CPU count, memory and disk sizes are the template's
  (shapes.py), CPU use is 100% per running command over the CPUs, memory use a fixed idle base plus 64 MiB per
  running command, disk use the size of the sandbox's own tree. No process is sampled.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from providers.sim.core.simulator import (
    CreateRequest,
    NotFound,
    NotRunning,
    Rejected,
    SandboxStatus,
    SimSandbox,
    SnapshotFailed,
    VendorSimulator,
)
from providers.sim.e2b.app_state import simulator
from providers.sim.e2b.control_plane import STARTS, read_body, rejection_response, start_failure
from providers.sim.e2b.shapes import (
    DEFAULT_TIMEOUT_S,
    TEMPLATE_CPU,
    TEMPLATE_DISK_MB,
    TEMPLATE_MEMORY_MB,
    BadRequest,
    created_body,
    error_body,
)

METRIC_PERIOD_S = 5
MIB = 1024 * 1024
IDLE_MEMORY_BYTES = 96 * MIB  # what an idle sandbox's envd and init hold, modelled
COMMAND_MEMORY_BYTES = 64 * MIB
MAX_FORKS = 100


def _error(status: int, message: str) -> web.Response:
    return web.json_response(error_body(status, message), status=status)


def _not_found(sandbox_id: str) -> web.Response:
    return _error(404, f"sandbox \"{sandbox_id}\" doesn't exist or you don't have access to it")


def _known(sim: VendorSimulator, sandbox_id: str) -> SimSandbox | None:
    try:
        sb = sim.get(sandbox_id)
    except NotFound:
        return None
    return sb if sb.active else None


def _whole(body: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadRequest(f"{key} must be a whole number in {low}..{high}, got {value!r}")
    return value


# --- pause and resume -----------------------------------------------------------------------------------


async def pause_sandbox(request: web.Request) -> web.Response:
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    try:
        await read_body(request)  # `{"memory": bool}`: memory or files only is the same copy here
    except BadRequest as exc:
        return _error(400, str(exc))
    sb = _known(sim, sandbox_id)
    if sb is None:
        return _not_found(sandbox_id)
    if sb.status is SandboxStatus.PAUSED:
        return _error(409, f"sandbox {sandbox_id} is already paused")
    if sb.status is not SandboxStatus.RUNNING:
        return _error(409, f"sandbox {sandbox_id} is not running yet, it cannot be paused")
    try:
        took = sim.pause(sandbox_id)
    except NotRunning:
        return _not_found(sandbox_id)
    await sim.clock.sleep(took)
    return web.Response(status=204)


async def resume_sandbox(request: web.Request) -> web.Response:
    """The older resume route: a paused sandbox runs again (201 `Sandbox`); one that runs is 409."""
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    try:
        timeout = _whole(await read_body(request), "timeout", DEFAULT_TIMEOUT_S, 1, 10**9)
    except BadRequest as exc:
        return _error(400, str(exc))
    sb = _known(sim, sandbox_id)
    if sb is None:
        return _not_found(sandbox_id)
    if sb.status is not SandboxStatus.PAUSED:
        return _error(409, f"sandbox {sandbox_id} is already running")
    try:
        sb = sim.resume(sandbox_id, float(timeout))
    except Rejected as exc:
        return rejection_response(exc, sim)
    except NotRunning:
        return _not_found(sandbox_id)
    sb = await request.app[STARTS].wait(sb)
    if sb.status is SandboxStatus.RUNNING:
        return web.json_response(created_body(sb), status=201)
    return start_failure(sb)


# --- snapshots ----------------------------------------------------------------------------------------------


def _snapshot_body(snapshot: Any) -> dict[str, Any]:
    names = [snapshot.name] if snapshot.name else []
    return {"snapshotID": snapshot.id, "names": names}


async def create_snapshot(request: web.Request) -> web.Response:
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    try:
        body = await read_body(request)
    except BadRequest as exc:
        return _error(400, str(exc))
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        return _error(400, f"name must be a non-empty string, got {name!r}")
    if body.get("memory") is not None and not isinstance(body["memory"], bool):
        return _error(400, f"memory must be a boolean, got {body['memory']!r}")
    if _known(sim, sandbox_id) is None:
        return _not_found(sandbox_id)
    try:
        snapshot = sim.snapshot(sandbox_id, name)
    except (NotFound, NotRunning):
        return _not_found(sandbox_id)
    except SnapshotFailed as exc:  # the profile's snapshot_error_prob: its time spent, then the API's server error
        await sim.clock.sleep(exc.duration_s)
        return _error(500, exc.message)
    await sim.clock.sleep(snapshot.duration_s)
    return web.json_response(_snapshot_body(snapshot), status=201)


async def list_snapshots(request: web.Request) -> web.Response:
    query = request.query
    limit_text, token = query.get("limit", "100"), query.get("nextToken") or "0"
    if not (limit_text.isdigit() and 1 <= int(limit_text) <= 1000):
        return _error(400, f"limit must be a whole number in 1..1000, got {limit_text!r}")
    if not token.isdigit():
        return _error(400, "invalid nextToken")
    found = sorted(simulator(request).snapshots(), key=lambda s: s.created_at, reverse=True)
    if query.get("sandboxID"):
        found = [s for s in found if s.source_sandbox_id == query["sandboxID"]]
    if query.get("name"):
        found = [s for s in found if s.name == query["name"]]
    limit, offset = int(limit_text), int(token)
    page = found[offset : offset + limit]
    headers = {"X-Next-Token": str(offset + limit)} if offset + limit < len(found) else None
    return web.json_response([_snapshot_body(s) for s in page], headers=headers)


async def delete_snapshot(request: web.Request) -> web.Response:
    """`DELETE /templates/{id}`: a snapshot is deleted; a template that is none is E2B's 404 here (no builds)."""
    template_id = request.match_info["template_id"]
    try:
        simulator(request).delete_snapshot(template_id)
    except NotFound:
        return _error(404, f"template '{template_id}' not found")
    return web.Response(status=204)


# --- fork ----------------------------------------------------------------------------------------------------


async def fork_sandbox(request: web.Request) -> web.Response:
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    try:
        body = await read_body(request)
        count = _whole(body, "count", 1, 1, MAX_FORKS)
        timeout = _whole(body, "timeout", DEFAULT_TIMEOUT_S, 1, 10**9)
    except BadRequest as exc:
        return _error(400, str(exc))
    source = _known(sim, sandbox_id)
    if source is None:
        return _not_found(sandbox_id)
    try:  # the checkpoint E2B takes of the source before copying it
        checkpoint = sim.snapshot(sandbox_id)
    except (NotFound, NotRunning):
        return _not_found(sandbox_id)
    except SnapshotFailed as exc:
        await sim.clock.sleep(exc.duration_s)
        return _error(500, exc.message)
    try:
        await sim.clock.sleep(checkpoint.duration_s)
    finally:
        sim.delete_snapshot(checkpoint.id)  # internal to the fork (copies come from the source): never listed
    starts: list[SimSandbox | web.Response] = []
    for _ in range(count):
        req = CreateRequest(
            image=source.image,
            labels=source.labels,
            cpu=source.cpu,
            memory_mb=source.memory_mb,
            lifetime_s=float(timeout),
            env=dict(source.env),
            meta={**source.meta},
            user=source.user,
            fork_of=source.id,
        )
        try:
            starts.append(sim.create(req))
        except Rejected as exc:
            starts.append(rejection_response(exc, sim))
        except (NotFound, NotRunning):
            return _not_found(sandbox_id)
    results: list[dict[str, Any]] = []
    ran = await asyncio.gather(*(request.app[STARTS].wait(s) for s in starts if isinstance(s, SimSandbox)))
    by_id = {sb.id: sb for sb in ran}
    for start in starts:
        if isinstance(start, web.Response):
            results.append({"error": _response_error(start)})
            continue
        sb = by_id[start.id]
        if sb.status is SandboxStatus.RUNNING:
            results.append({"sandbox": created_body(sb)})
        else:
            results.append({"error": _response_error(start_failure(sb))})
    return web.json_response(results, status=201)


def _response_error(response: web.Response) -> dict[str, Any]:
    assert response.body is not None and isinstance(response.body, bytes)
    found: dict[str, Any] = json.loads(response.body)
    return found


# --- metrics -------------------------------------------------------------------------------------------------


def _tree_bytes(sim: VendorSimulator, sb: SimSandbox) -> int:
    if sb.id not in sim.trees:
        return 0
    total = 0
    root: Path = sim.tree(sb.id).root
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


async def sandbox_metrics(request: web.Request) -> web.Response:
    sim, sandbox_id = simulator(request), request.match_info["sandbox_id"]
    query = request.query
    bounds: list[float] = []
    for key, default in (("start", -math.inf), ("end", math.inf)):
        text = query.get(key)
        if text is None:
            bounds.append(default)
        elif text.lstrip("-").isdigit():
            bounds.append(float(text))
        else:
            return _error(400, f"{key} must be unix seconds, got {text!r}")
    sb = _known(sim, sandbox_id)
    if sb is None:
        return _not_found(sandbox_id)
    started = sim.clock.wall(sb.created_at)
    running = len(sb._execs) if sb.status is SandboxStatus.RUNNING else 0
    point = {
        "cpuCount": TEMPLATE_CPU,
        "cpuUsedPct": round(min(100.0, 100.0 * running / TEMPLATE_CPU), 2),
        "memUsed": 0 if sb.status is SandboxStatus.PAUSED else IDLE_MEMORY_BYTES + COMMAND_MEMORY_BYTES * running,
        "memTotal": TEMPLATE_MEMORY_MB * MIB,
        "memCache": 0,
        "diskUsed": _tree_bytes(sim, sb),
        "diskTotal": TEMPLATE_DISK_MB * MIB,
    }
    now = time.time()
    first = max(started, bounds[0])
    k = max(0, math.ceil((first - started) / METRIC_PERIOD_S))
    metrics: list[dict[str, Any]] = []
    while started + k * METRIC_PERIOD_S <= min(now, bounds[1]) and len(metrics) < 1000:
        at = started + k * METRIC_PERIOD_S
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at)) + f".{int(at % 1 * 1e6):06d}Z"
        metrics.append({"timestamp": stamp, "timestampUnix": int(at), **point})
        k += 1
    return web.json_response(metrics)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_post("/sandboxes/{sandbox_id}/pause", pause_sandbox)
    r.add_post("/sandboxes/{sandbox_id}/resume", resume_sandbox)
    r.add_post("/sandboxes/{sandbox_id}/snapshots", create_snapshot)
    r.add_get("/snapshots", list_snapshots)
    r.add_delete("/templates/{template_id}", delete_snapshot)
    r.add_post("/sandboxes/{sandbox_id}/fork", fork_sandbox)
    r.add_get("/sandboxes/{sandbox_id}/metrics", sandbox_metrics)
