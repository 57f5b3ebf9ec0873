"""Runloop's wire shapes (runloop-api-client 3.0.0, `types/`): the devbox view, executions, snapshots, errors.

The simulator's states map onto Runloop's devbox statuses: PENDING and PROVISIONING are `provisioning` (a standard
devbox's first status; FLEX devboxes say `queued`), RUNNING is `running`, PAUSED is `suspended` (`suspending` while
the disk is being saved), ERROR is `failure` (with a `failure_reason`), TERMINATED and TIMEOUT are `shutdown` (with
`shutdown_reason` `api_shutdown` or `keep_alive_timeout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from providers.sim.core.records import SandboxStatus, SimSandbox, SimSnapshot
from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser

DEFAULT_IMAGE = "runloop/default"  # the image a devbox without blueprint or snapshot starts from
DEVBOX_USER = SandboxUser("user", 1000, "/home/user")
"""Who commands run as: Runloop's default devbox user (`launch_parameters.user_parameters` names another)."""

_STATUS = {
    SandboxStatus.PENDING: "provisioning",
    SandboxStatus.PROVISIONING: "provisioning",
    SandboxStatus.RUNNING: "running",
    SandboxStatus.PAUSED: "suspended",
    SandboxStatus.ERROR: "failure",
    SandboxStatus.TERMINATED: "shutdown",
    SandboxStatus.TIMEOUT: "shutdown",
}
_FAILURE_REASON = {
    "OOM_KILLED": "out_of_memory",
    "BOOT_FAILED": "health_check_failed",
    "PROVISIONING_TIMEOUT": "health_check_failed",
    "IMAGE_PULL_FAILED": "execution_failed",
    "SANDBOX_CRASHED": "execution_failed",
}
STATUSES = (
    "scheduled",
    "queued",
    "provisioning",
    "initializing",
    "running",
    "suspending",
    "suspended",
    "resuming",
    "failure",
    "shutdown",
)


def status_of(sb: SimSandbox, *, suspending: bool = False, resuming: bool = False) -> str:
    if suspending and sb.status is SandboxStatus.PAUSED:
        return "suspending"
    status = _STATUS[sb.status]
    if resuming and status == "provisioning":
        return "resuming"
    return status


def metadata_labels(metadata: Mapping[str, str]) -> tuple[str, ...]:
    """Runloop's metadata as the simulator's `key=value` labels (what `list` filters on)."""
    return tuple(f"{key}={value}" for key, value in metadata.items())


def ms(wall_s: float) -> int:
    return int(wall_s * 1000)


def devbox_view(sb: SimSandbox, wall_of: Any, *, suspending: bool = False, resuming: bool = False) -> dict[str, Any]:
    """`DevboxView`: `wall_of(vendor_s)` turns the simulator's vendor seconds into real epoch seconds."""
    status = status_of(sb, suspending=suspending, resuming=resuming)
    meta = sb.meta
    view: dict[str, Any] = {
        "id": sb.id,
        "name": sb.name or None,
        "status": status,
        "capabilities": [],
        "create_time_ms": ms(wall_of(sb.created_at)),
        "launch_parameters": dict(meta.get("launch_parameters") or {}),
        "metadata": dict(meta.get("metadata") or {}),
        "state_transitions": [{"status": status, "transition_time_ms": ms(wall_of(sb.updated_at))}],
        "blueprint_id": meta.get("blueprint_id"),
        "snapshot_id": meta.get("snapshot_id"),
        "initiator_type": "api",
    }
    if status == "failure":
        view["failure_reason"] = _FAILURE_REASON.get(sb.error_type or "", "execution_failed")
    if status in ("failure", "shutdown") and sb.ended_at is not None:
        view["end_time_ms"] = ms(wall_of(sb.ended_at))
    if status == "shutdown":
        view["shutdown_reason"] = "keep_alive_timeout" if sb.status is SandboxStatus.TIMEOUT else "api_shutdown"
    return view


def snapshot_view(snap: SimSnapshot, wall_of: Any, metadata: Mapping[str, str], message: str | None) -> dict[str, Any]:
    """`DevboxSnapshotView`."""
    return {
        "id": snap.id,
        "name": snap.name,
        "create_time_ms": ms(wall_of(snap.created_at)),
        "metadata": dict(metadata),
        "source_devbox_id": snap.source_sandbox_id,
        "commit_message": message,
        "size_bytes": snap.size_bytes,
    }


def error_body(status: int, message: str) -> dict[str, Any]:
    """An error answer (the SDK raises its class by status and keeps this body as `exc.body`)."""
    return {"status": status, "message": message}
