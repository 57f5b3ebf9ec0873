"""Daytona's snapshot registry (`daytona.snapshot.*` of daytona 0.226.1) over the simulator's snapshots.

- `GET /api/snapshots?page&limit&name&sourceSandboxId` -> `PaginatedSnapshots` (`{items, total, page,
  totalPages}`), newest first: the organization's default snapshot (`daytonaio/sandbox`, general, active) and
  every snapshot taken of a sandbox here (`sandbox.create_snapshot`, `changes.py`);
- `GET /api/snapshots/{idOrName}` -> `SnapshotDto`; `DELETE /api/snapshots/{id}` removes a taken one (the
  default snapshot is general: 403, as for another organization's);
- `POST /api/snapshots` (a snapshot built from an image or a Dockerfile) and activate/deactivate answer 501
  naming the build: images are not built here (a create with a declarative image still works, `shapes.py`).
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from providers.sim.core.records import SimSnapshot
from providers.sim.core.simulator import iso
from providers.sim.daytona.front import Front, error, front_of
from providers.sim.daytona.shapes import DEFAULT_SNAPSHOT, MAX_INT, ORGANIZATION_ID, REGION, SNAPSHOT_RESOURCES

DEFAULT_ID = "stampede-default-snapshot"
EPOCH = "1970-01-01T00:00:00.000Z"
MAX_LIMIT = 200


def _default_body() -> dict[str, Any]:
    cpu, memory, disk = SNAPSHOT_RESOURCES
    return {
        "id": DEFAULT_ID,
        "organizationId": None,
        "general": True,
        "name": DEFAULT_SNAPSHOT,
        "imageName": DEFAULT_SNAPSHOT,
        "state": "active",
        "size": 1.0,
        "entrypoint": None,
        "cpu": cpu,
        "gpu": 0,
        "mem": memory,
        "disk": disk,
        "errorReason": None,
        "createdAt": EPOCH,
        "updatedAt": EPOCH,
        "lastUsedAt": None,
        "regionIds": [REGION],
        "sourceSandboxId": None,
        "sandboxClass": "container",
    }


def _taken_body(front: Front, snap: SimSnapshot) -> dict[str, Any]:
    cpu, memory, disk = SNAPSHOT_RESOURCES
    created = iso(front.sim.clock, snap.created_at)
    return {
        **_default_body(),
        "id": snap.id,
        "organizationId": ORGANIZATION_ID,
        "general": False,
        "name": snap.name,
        "imageName": snap.image,
        "size": round(snap.size_bytes / 2**30, 6),
        "cpu": cpu,
        "mem": memory,
        "disk": disk,
        "createdAt": created,
        "updatedAt": created,
        "sourceSandboxId": snap.source_sandbox_id,
    }


def _all(front: Front) -> list[dict[str, Any]]:
    taken = [_taken_body(front, snap) for snap in reversed(front.sim.snapshots())]
    return [*taken, _default_body()]


async def list_snapshots(request: web.Request) -> web.Response:
    front = front_of(request)
    query = request.query
    try:
        page = int(query.get("page", 1))
        limit = int(query.get("limit", 100))
    except ValueError:
        return error(request, 400, "page and limit must be integers")
    if not 1 <= page <= MAX_INT or not 1 <= limit <= MAX_LIMIT:
        return error(request, 400, f"page must be at least 1 and limit between 1 and {MAX_LIMIT}")
    found = _all(front)
    if query.get("name"):
        found = [s for s in found if query["name"].lower() in str(s["name"]).lower()]
    if query.get("sourceSandboxId"):
        found = [s for s in found if s["sourceSandboxId"] == query["sourceSandboxId"]]
    items = found[(page - 1) * limit : page * limit]
    return web.json_response(
        {"items": items, "total": len(found), "page": page, "totalPages": max(1, math.ceil(len(found) / limit))}
    )


def _find(front: Front, id_or_name: str) -> dict[str, Any] | None:
    if id_or_name in (DEFAULT_ID, DEFAULT_SNAPSHOT):
        return _default_body()
    snap = front.snapshot_named(id_or_name)
    return None if snap is None else _taken_body(front, snap)


async def get_snapshot(request: web.Request) -> web.Response:
    found = _find(front_of(request), request.match_info["id"])
    if found is None:
        return error(request, 404, f"Snapshot {request.match_info['id']} not found")
    return web.json_response(found)


async def delete_snapshot(request: web.Request) -> web.Response:
    front = front_of(request)
    found = _find(front, request.match_info["id"])
    if found is None:
        return error(request, 404, f"Snapshot {request.match_info['id']} not found")
    if found["general"]:
        return error(request, 403, "General snapshots cannot be deleted")
    front.sim.delete_snapshot(str(found["id"]))
    return web.Response(status=200)


async def not_built_here(request: web.Request) -> web.Response:
    return error(
        request,
        501,
        "Building or (de)activating snapshots from images is not modelled by the local Daytona (stampede's "
        "simulator): take one of a sandbox with sandbox.create_snapshot, or create sandboxes from an image",
        code="NOT_IMPLEMENTED",
    )


def add_routes(app: web.Application, prefix: str) -> None:
    r = app.router
    r.add_get(f"{prefix}/snapshots", list_snapshots)
    r.add_post(f"{prefix}/snapshots", not_built_here)
    r.add_get(f"{prefix}/snapshots/{{id}}", get_snapshot)
    r.add_delete(f"{prefix}/snapshots/{{id}}", delete_snapshot)
    r.add_post(f"{prefix}/snapshots/{{id}}/activate", not_built_here)
    r.add_post(f"{prefix}/snapshots/{{id}}/deactivate", not_built_here)
