"""Prime's filesystem checkpoints the way prime-sandboxes 0.5.x calls them, over the simulator's snapshots.

- `POST /api/v1/sandbox/{id}/checkpoints` (`checkpoint`): a copy of the sandbox's files now (`VendorSimulator.snapshot`),
  answered `PENDING`; it turns `DURABLE` once the profile's snapshot time has passed (vendor seconds).
  A sandbox that is not running: 409; unknown: 404.
- `GET /api/v1/sandbox/checkpoints/{checkpoint_id}` (`get_checkpoint`, and `wait_for_checkpoint` once the batch
  lookup below is found missing): its state.
- `POST /api/v1/sandbox/checkpoints:batchGet` is not served (404): the SDK then looks each checkpoint up on its own,
  as it does against a platform without batches.
- `POST /api/v1/sandbox` with `checkpoint_id` starts from the checkpoint's files (`CreateRequest.from_snapshot`; its
  image when `docker_image` is not given): `shapes._check_create` and `api.create_sandbox`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from providers.sim.core.records import iso
from providers.sim.core.simulator import (
    NotFound,
    NotRunning,
    SimSnapshot,
    SnapshotFailed,
    SnapshotNotFound,
    VendorSimulator,
)

Getter = Callable[[web.Request], VendorSimulator]


def checkpoint_body(sim: VendorSimulator, snap: SimSnapshot) -> dict[str, Any]:
    """`SandboxCheckpoint` as the API answers it."""
    durable_at = snap.created_at + snap.duration_s
    durable = sim.clock.now() >= durable_at
    return {
        "id": snap.id,
        "sandbox_id": snap.source_sandbox_id,
        "parent_id": None,
        "state": "DURABLE" if durable else "PENDING",
        "depth": 0,
        "docker_image": snap.image,
        "disk_size_bytes": snap.size_bytes,
        "stored_bytes": snap.size_bytes,
        "occupied_bytes": snap.size_bytes,
        "error": None,
        "created_at": iso(sim.clock, snap.created_at),
        "updated_at": iso(sim.clock, durable_at if durable else snap.created_at),
    }


def add_checkpoint_routes(router: web.UrlDispatcher, prefix: str, get_sim: Getter) -> None:
    """Register the two checkpoint calls under the API prefix (before the `/sandbox/{id}` resources)."""

    async def take(request: web.Request) -> web.Response:
        sim = get_sim(request)
        try:
            snap = sim.snapshot(request.match_info["sandbox_id"])
        except NotFound:
            return web.json_response({"detail": "Sandbox not found"}, status=404)
        except NotRunning as exc:
            return web.json_response({"detail": f"Sandbox is not running ({exc.status})"}, status=409)
        except SnapshotFailed as exc:  # the profile's snapshot_error_prob: the API's server error, nothing kept
            return web.json_response({"detail": exc.message}, status=500)
        return web.json_response(checkpoint_body(sim, snap), status=201)

    async def get(request: web.Request) -> web.Response:
        sim = get_sim(request)
        try:
            snap = sim.get_snapshot(request.match_info["checkpoint_id"])
        except SnapshotNotFound:
            return web.json_response({"detail": "Checkpoint not found"}, status=404)
        return web.json_response(checkpoint_body(sim, snap))

    router.add_get(f"{prefix}/sandbox/checkpoints/{{checkpoint_id}}", get)
    router.add_post(f"{prefix}/sandbox/{{sandbox_id:[^/:]+}}/checkpoints", take)
