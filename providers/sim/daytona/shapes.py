"""Daytona's wire shapes for the simulator's records: sandbox bodies, states, create requests, error envelopes.

Shapes follow daytona 0.226.1's generated clients (`daytona_api_client.models.Sandbox`, `SandboxListItem`,
`CreateSandbox`): camelCase JSON, ISO-8601 UTC timestamps, integer vCPU / GiB. Errors are the API's envelope
(`{"statusCode", "source", "code", "message", "error", "path", "timestamp", "method"}`), which the SDK reads
for its error class (status first, then `(source, code)` for the daemon's codes).

States, from the simulator's: PENDING (waiting for a runner) -> `creating`, PROVISIONING -> `starting`,
RUNNING -> `started`, PAUSED (a stop, which keeps the disk) -> `stopped` (`archived` once archived), ERROR -> `error` (with `errorReason`; `destroyed` once deleted), TERMINATED ->
`destroyed` (or `stopped` after a stop of a sandbox that is not ephemeral), TIMEOUT (its TTL ran out) ->
`destroyed`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from providers.sim.core.clock import SimClock
from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser
from providers.sim.core.simulator import CreateRequest, SandboxStatus, SimSandbox, iso

ORGANIZATION_ID = "stampede-local-org"
REGION = "us"
DEFAULT_SNAPSHOT = "daytonaio/sandbox"
SNAPSHOT_RESOURCES = (1, 1, 3)  # vCPU, GiB, GiB: the API's defaults for a sandbox from the default snapshot
DEFAULT_AUTO_STOP_MIN = 15  # the API's defaults when a create leaves them out
DEFAULT_AUTO_ARCHIVE_MIN = 7 * 24 * 60
DEFAULT_AUTO_DELETE_MIN = -1
OS_USER = "daytona"
SANDBOX_USER = SandboxUser(OS_USER, 1000, "/home/daytona")
"""Who a Daytona sandbox's commands run as: the default snapshot's `daytona` (uid 1000) in `/home/daytona`, which is
also its work dir (the image sets no other WORKDIR)."""
SOURCE_API = "DAYTONA_API"
SOURCE_DAEMON = "DAYTONA_DAEMON"
SOURCE_PROXY = "DAYTONA_PROXY"
_STATUS_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    409: "CONFLICT",
    429: "RATE_LIMIT_EXCEEDED",
    500: "INTERNAL_SERVER_ERROR",
}
UPGRADE_TIER = "To increase concurrency limits, upgrade your organization's Tier (here: --profile-set resource_pool.*)."
PER_SANDBOX_LIMIT = "Need higher resource limits per-sandbox? (the simulator: --profile-set limits.*)"


def error_body(
    status: int, message: str, *, path: str, method: str, code: str | None = None, source: str = SOURCE_API
) -> dict[str, Any]:
    """The envelope every Daytona service answers an error with."""
    return {
        "statusCode": status,
        "source": source,
        "code": code or _STATUS_CODES.get(status, "INTERNAL_SERVER_ERROR"),
        "message": message,
        "error": HTTPStatus(status).phrase,
        "path": path,
        "timestamp": datetime.now(tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "method": method,
    }


@dataclass(frozen=True, slots=True)
class Requested:
    """What a create asked for, in Daytona's terms (kept on the simulator's record, echoed back in bodies)."""

    name: str | None
    snapshot: str | None
    dockerfile: str | None
    labels: Mapping[str, str]
    env: Mapping[str, str]
    user: str
    target: str
    cpu: int
    memory: int
    disk: int
    public: bool
    network_block_all: bool
    auto_stop: int
    auto_archive: int
    auto_delete: int
    ttl_minutes: float | None  # a TTL set later counts from the create: fractional minutes
    queue_timeout: int | None


@dataclass(slots=True)
class Lifecycle:
    """What the front adds to the simulator's record: a user's stop, delete, and the last state it announced."""

    stopped: bool = False
    deleted: bool = False
    archived: bool = False  # a stopped (PAUSED) sandbox the user archived: `start` resumes it all the same
    announced: str | None = None  # the state the last `sandbox.state.updated` event carried


def requested(sb: SimSandbox) -> Requested:
    found = sb.meta.get("daytona")
    assert isinstance(found, Requested)
    return found


def update_requested(sb: SimSandbox, **changes: Any) -> Requested:
    """A setter's change (labels, the auto-stop/archive/delete intervals) kept on the record; labels also
    become the simulator's label strings, so a list by labels sees the new ones."""
    want = dataclasses.replace(requested(sb), **changes)
    sb.meta = {**sb.meta, "daytona": want}
    if "labels" in changes:
        sb.labels = label_strings(want.labels)
    return want


def state_of(sb: SimSandbox, life: Lifecycle | None) -> str:
    """The Daytona state of a simulated sandbox."""
    status = sb.status
    if status is SandboxStatus.PENDING:
        return "creating"
    if status is SandboxStatus.PROVISIONING:
        return "starting"
    if status is SandboxStatus.RUNNING:
        return "started"
    if status is SandboxStatus.PAUSED:  # a stop keeps the disk: the simulator's pause
        return "archived" if life is not None and life.archived else "stopped"
    if status is SandboxStatus.ERROR:
        return "destroyed" if life is not None and life.deleted else "error"
    if status is SandboxStatus.TERMINATED and life is not None and life.stopped and not life.deleted:
        return "destroyed" if requested(sb).auto_delete == 0 else "stopped"
    return "destroyed"


def _desired(state: str) -> str:
    return {"destroyed": "destroyed", "stopped": "stopped", "archived": "archived"}.get(state, "started")


def sandbox_body(
    sb: SimSandbox, clock: SimClock, toolbox_url: str, life: Lifecycle | None, *, full: bool = True
) -> dict[str, Any]:
    """A `Sandbox` (full: get, create, delete) or a `SandboxListItem` (list pages)."""
    want = requested(sb)
    state = state_of(sb, life)
    times = sb.isotimes(clock)
    ttl = want.ttl_minutes
    body: dict[str, Any] = {
        "id": sb.id,
        "organizationId": ORGANIZATION_ID,
        "name": want.name or sb.id,
        "snapshot": want.snapshot,
        "user": want.user,
        "labels": dict(want.labels),
        "public": want.public,
        "networkBlockAll": want.network_block_all,
        "target": want.target,
        "cpu": want.cpu,
        "gpu": 0,
        "memory": want.memory,
        "disk": want.disk,
        "state": state,
        "desiredState": _desired(state),
        "errorReason": sb.error_message if state == "error" else None,
        "recoverable": False if state == "error" else None,
        "backupState": "None",
        "autoStopInterval": want.auto_stop,
        "autoArchiveInterval": want.auto_archive,
        "autoDeleteInterval": want.auto_delete,
        "autoDestroyAt": iso(clock, sb.created_at + ttl * 60.0) if ttl else None,
        "queueTimeout": want.queue_timeout,
        "createdAt": times["created_at"],
        "updatedAt": times["updated_at"],
        "lastActivityAt": times["updated_at"],
        "sandboxClass": "container",
        "daemonVersion": "stampede-sim",
        "runnerId": None if sb.node is None else f"runner-{sb.node}",
        "toolboxProxyUrl": toolbox_url,
    }
    if full:
        body["env"] = dict(want.env)
        body["kvm"] = False
        body["volumes"] = []
    return body


# --- create requests -----------------------------------------------------------------------------------


def _string_map(body: Mapping[str, Any], key: str, problems: list[str]) -> dict[str, str]:
    raw = body.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        problems.append(f"{key} must be an object of strings")
        return {}
    return dict(raw)


MAX_INT = 2**31 - 1


def _optional(body: Mapping[str, Any], key: str, kind: type, problems: list[str], *, minimum: int | None = None) -> Any:
    raw = body.get(key)
    if raw is None:
        return None
    if kind is int and isinstance(raw, float) and raw.is_integer():
        raw = int(raw)  # 5.0 is an integer to JSON (and to the API's validator)
    if kind is int and (isinstance(raw, bool) or not isinstance(raw, int)):
        problems.append(f"{key} must be an integer number")
        return None
    if kind is not int and not isinstance(raw, kind):
        problems.append(f"{key} must be a {kind.__name__}")
        return None
    if minimum is not None and raw < minimum:
        problems.append(f"{key} must not be less than {minimum}")
        return None
    if kind is int and not -MAX_INT - 1 <= raw <= MAX_INT:  # the API's int32: a larger one would overflow a float
        problems.append(f"{key} must not be greater than {MAX_INT}")
        return None
    return raw


def base_image(dockerfile: str) -> str | None:
    """The image a declarative build starts from (`FROM x` of the SDK's generated Dockerfile)."""
    for line in dockerfile.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0].upper() == "FROM":
            return words[1]
    return None


def parse_create(body: Any, lifetime_cap_s: float) -> tuple[CreateRequest | None, list[str]]:
    """The simulator's request for a `CreateSandbox` body, or the validation messages (a 400)."""
    if not isinstance(body, dict):
        return None, ["body must be a JSON object"]
    problems: list[str] = []
    labels = _string_map(body, "labels", problems)
    env = _string_map(body, "env", problems)
    name = _optional(body, "name", str, problems)
    snapshot = _optional(body, "snapshot", str, problems)
    if snapshot is not None and not snapshot.strip():
        snapshot = None  # blank: the default snapshot
    user = _optional(body, "user", str, problems) or OS_USER
    target = _optional(body, "target", str, problems) or REGION
    public = bool(_optional(body, "public", bool, problems))
    block_all = bool(_optional(body, "networkBlockAll", bool, problems))
    auto_stop = _optional(body, "autoStopInterval", int, problems, minimum=0)
    auto_archive = _optional(body, "autoArchiveInterval", int, problems, minimum=0)
    auto_delete = _optional(body, "autoDeleteInterval", int, problems)
    ttl = _optional(body, "ttlMinutes", int, problems, minimum=0)
    queue_timeout = _optional(body, "queueTimeout", int, problems, minimum=1)
    sizes = [_optional(body, key, int, problems, minimum=1) for key in ("cpu", "memory", "disk")]
    build = body.get("buildInfo")
    dockerfile = None
    if build is not None:
        dockerfile = build.get("dockerfileContent") if isinstance(build, dict) else None
        if not isinstance(dockerfile, str) or base_image(dockerfile) is None:
            problems.append("buildInfo.dockerfileContent must be a Dockerfile with a FROM line")
    if body.get("volumes") is not None and body.get("volumes") != []:
        problems.append("volumes are not modelled by the simulator")
    if problems:
        return None, problems
    if dockerfile is not None:  # a declarative build: the request's resources (the API's defaults otherwise)
        cpu, memory, disk = (given or default for given, default in zip(sizes, SNAPSHOT_RESOURCES, strict=True))
        image = base_image(dockerfile) or ""
    else:  # a snapshot: its resources, whatever the request says (as the API does)
        cpu, memory, disk = SNAPSHOT_RESOURCES
        image = snapshot or DEFAULT_SNAPSHOT
    lifetime = ttl * 60.0 if ttl else math.inf
    if math.isfinite(lifetime_cap_s):
        lifetime = min(lifetime, lifetime_cap_s)
    want = Requested(
        name=name,
        snapshot=None if dockerfile else (snapshot or DEFAULT_SNAPSHOT),
        dockerfile=dockerfile,
        labels=labels,
        env=env,
        user=user,
        target=target,
        cpu=cpu,
        memory=memory,
        disk=disk,
        public=public,
        network_block_all=block_all,
        auto_stop=DEFAULT_AUTO_STOP_MIN if auto_stop is None else auto_stop,
        auto_archive=DEFAULT_AUTO_ARCHIVE_MIN if auto_archive is None else auto_archive,
        auto_delete=DEFAULT_AUTO_DELETE_MIN if auto_delete is None else auto_delete,
        ttl_minutes=ttl or None,
        queue_timeout=queue_timeout,
    )
    request = CreateRequest(
        image=image,
        labels=label_strings(labels),
        cpu=float(cpu),
        memory_mb=memory * 1024,
        disk_gb=float(disk),
        lifetime_s=lifetime,
        name=name or "",
        env=env,
        meta={"daytona": want},
        user=sandbox_user(user),
    )
    return request, []


def sandbox_user(name: str) -> SandboxUser:
    """The OS user a create names (`user`), as the simulator's: `daytona` by default, `root` in `/root`."""
    if name == OS_USER:
        return SANDBOX_USER
    return SandboxUser.root() if name == "root" else SandboxUser(name, 1000, f"/home/{name}")


def label_strings(labels: Mapping[str, str]) -> tuple[str, ...]:
    """Daytona's label map as the simulator's label strings (`key=value`), for its subset match."""
    return tuple(f"{key}={value}" for key, value in sorted(labels.items()))
