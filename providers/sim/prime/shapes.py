"""The JSON shapes of the Prime-like API: request bodies and query parameters checked the way Prime's
FastAPI/pydantic server checks them (422 `detail` lists), and the sandbox bodies it answers with.

Split from `api.py` (the routes and handlers), which imports these; shapes follow prime-sandboxes 0.5.1.
"""

from __future__ import annotations

import math
import shlex
from typing import Any

from providers.sim.core.clock import SimClock
from providers.sim.core.profile import Limits
from providers.sim.core.simulator import CreateRequest, SimSandbox, iso

DISK_MOUNT_PATH = "/sandbox-workspace"
USER_ID = "user-stampede"
LIMITS: dict[str, int] = {
    "cpu_cores": 1024,
    "memory_gb": 16384,
    "disk_size_gb": 65536,
    "timeout_minutes": 1_000_000,  # ~2 years; idle_timeout_minutes too
}
"""The largest create values accepted (422 above): generous, but finite once turned into MB and seconds.
The OpenAPI document states the same `maximum`s."""


def create_maxima(limits: Limits) -> dict[str, int | float]:
    """LIMITS narrowed to what a profile's `[limits]` accept (the simulator refuses more with a 422), so the
    OpenAPI document served with that profile states the maxima that hold."""
    maxima: dict[str, int | float] = dict(LIMITS)
    maxima["cpu_cores"] = min(LIMITS["cpu_cores"], limits.max_cpu)
    maxima["memory_gb"] = min(LIMITS["memory_gb"], limits.max_memory_mb / 1024)
    if math.isfinite(limits.max_lifetime_s):  # and then no -1 (no lifetime limit) either
        maxima["timeout_minutes"] = min(LIMITS["timeout_minutes"], max(1, math.floor(limits.max_lifetime_s / 60)))
        maxima["lifetime_limited"] = 1
    return maxima


def _finite(value: int | float) -> bool:
    """A JSON number Python can hold as a finite float (an integer of 400 digits cannot)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _field_error(kind: str, name: str | None, msg: str, value: Any) -> dict[str, Any]:
    loc: list[Any] = ["body"] if name is None else ["body", name]
    return {"type": kind, "loc": loc, "msg": msg, "input": value}


def sandbox_body(sb: SimSandbox, clock: SimClock) -> dict[str, Any]:
    """The camelCase `Sandbox` object exactly as prime_sandboxes.models.Sandbox parses it."""
    meta = sb.meta
    start = sb.start_command
    secrets_in = meta.get("secrets") or None
    return {
        "id": sb.id,
        "name": sb.name,
        "dockerImage": sb.image,
        "startCommand": {"executable": start[0], "args": list(start[1:])} if start else None,
        "cpuCores": sb.cpu,
        "memoryGB": meta.get("memory_gb", sb.memory_mb / 1024),
        "diskSizeGB": meta.get("disk_size_gb", 5.0),
        "diskMountPath": DISK_MOUNT_PATH,
        "gpuCount": 0,
        "gpuType": None,
        "vm": meta.get("vm", True),
        "networkAllowlist": meta.get("network_allowlist"),
        "networkDenylist": meta.get("network_denylist"),
        "status": str(sb.status),
        "timeoutMinutes": meta.get("timeout_minutes", _minutes(sb.lifetime_s)),
        "idleTimeoutMinutes": meta.get("idle_timeout_minutes"),
        "terminationReason": None,
        "environmentVars": dict(sb.env) or None,
        "secrets": {k: "********" for k in secrets_in} if secrets_in else None,
        "advancedConfigs": meta.get("advanced_configs"),
        "labels": list(sb.labels),
        "createdAt": iso(clock, sb.created_at),
        "updatedAt": iso(clock, sb.updated_at),
        "startedAt": iso(clock, sb.running_at),
        "terminatedAt": iso(clock, sb.ended_at),
        "exitCode": None,
        "errorType": sb.error_type,
        "errorMessage": sb.error_message,
        "userId": USER_ID,
        "teamId": meta.get("team_id"),
        "region": meta.get("region"),
        "pendingImageBuildId": None,
    }


def _minutes(lifetime_s: float) -> int:
    return -1 if math.isinf(lifetime_s) else max(1, round(lifetime_s / 60))


def _logs(sb: SimSandbox, clock: SimClock) -> str:
    lines = [f"{iso(clock, sb.created_at)} sandbox {sb.id} accepted (PENDING)"]
    if sb.started_at is not None:
        lines.append(f"{iso(clock, sb.started_at)} scheduled on node {sb.node}; provisioning image {sb.image}")
    if sb.running_at is not None:
        lines.append(f"{iso(clock, sb.running_at)} sandbox is RUNNING")
    if sb.ended_at is not None:
        tail = f" {sb.error_type}: {sb.error_message}" if sb.error_type else ""
        lines.append(f"{iso(clock, sb.ended_at)} sandbox {sb.status}{tail}")
    return "\n".join(lines) + "\n"


# --- request validation (FastAPI-shaped 422s) --------------------------------------------------------


def _check_create(body: Any) -> tuple[CreateRequest | None, list[dict[str, Any]]]:
    if not isinstance(body, dict):
        return None, [
            _field_error(
                "model_attributes_type",
                None,
                "Input should be a valid dictionary or object to extract fields from",
                body,
            )
        ]
    errors: list[dict[str, Any]] = []

    def get(name: str, kind: str, *, required: bool = False, default: Any = None, nullable: bool = True) -> Any:
        """The field's value, or `default` when absent (or null, for an Optional field of Prime's model)."""
        if name not in body or (body[name] is None and nullable and not required):
            if required:
                errors.append({"type": "missing", "loc": ["body", name], "msg": "Field required", "input": body})
            return default
        value = body[name]
        ok = {
            "str": isinstance(value, str),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value),
            "int": (isinstance(value, int) and not isinstance(value, bool))
            or (isinstance(value, float) and value.is_integer()),  # 60.0 is an integer, to JSON Schema and pydantic
            "bool": isinstance(value, bool),
            "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value),
            "dict[str,str]": isinstance(value, dict) and all(isinstance(v, str) for v in value.values()),
            "dict": isinstance(value, dict),
        }[kind]
        if not ok:
            msg = {
                "str": ("string_type", "Input should be a valid string"),
                "number": ("float_type", "Input should be a valid number"),
                "int": ("int_type", "Input should be a valid integer"),
                "bool": ("bool_type", "Input should be a valid boolean"),
                "list[str]": ("list_type", "Input should be a valid list of strings"),
                "dict[str,str]": ("dict_type", "Input should be a valid dictionary of strings"),
                "dict": ("dict_type", "Input should be a valid dictionary"),
            }[kind]
            errors.append(_field_error(msg[0], name, msg[1], value))
            return default
        return int(value) if kind == "int" else value

    def positive(name: str, value: Any, most: float) -> None:
        """Above 0 and at most `most`: a size beyond it would overflow on its way to the simulator."""
        if isinstance(value, (int, float)) and not value > 0:
            errors.append(_field_error("greater_than", name, "Input should be greater than 0", value))
        elif isinstance(value, (int, float)) and value > most:
            msg = f"Input should be less than or equal to {most:g}"
            errors.append(_field_error("less_than_equal", name, msg, value))

    def at_most(name: str, value: Any, most: int) -> None:
        if isinstance(value, int) and value > most:
            errors.append(_field_error("less_than_equal", name, f"Input should be less than or equal to {most}", value))

    name = get("name", "str", required=True)
    image = get("docker_image", "str")
    checkpoint = get("checkpoint_id", "str")  # its files (and its image, without docker_image): checkpoints.py
    if image is None and checkpoint is None:
        if not any(e["loc"] == ["body", "docker_image"] for e in errors):  # not already a type error
            errors.append(
                _field_error(
                    "value_error",
                    None,
                    "Value error, docker_image is required unless checkpoint_id is set",
                    None,
                )
            )
    elif isinstance(image, str) and not image.strip():
        errors.append(_field_error("value_error", "docker_image", "Value error, docker_image must not be empty", image))
    cpu = get("cpu_cores", "number", default=1.0, nullable=False)
    positive("cpu_cores", cpu, LIMITS["cpu_cores"])
    memory_gb = get("memory_gb", "number", default=1.0, nullable=False)
    positive("memory_gb", memory_gb, LIMITS["memory_gb"])
    disk = get("disk_size_gb", "number", default=5.0)
    positive("disk_size_gb", disk, LIMITS["disk_size_gb"])
    gpus = get("gpu_count", "int", default=0, nullable=False)
    if isinstance(gpus, int) and gpus != 0:
        errors.append(
            _field_error("value_error", "gpu_count", "Value error, GPUs are not modelled by the simulator", gpus)
        )
    minutes = get("timeout_minutes", "int", default=60, nullable=False)
    at_most("timeout_minutes", minutes, LIMITS["timeout_minutes"])
    if isinstance(minutes, int) and not (minutes == -1 or minutes >= 1):
        errors.append(
            _field_error(
                "value_error",
                "timeout_minutes",
                "Value error, timeout_minutes must be >= 1 or -1 (no limit)",
                minutes,
            )
        )
    idle = get("idle_timeout_minutes", "int")
    at_most("idle_timeout_minutes", idle, LIMITS["timeout_minutes"])
    env = get("environment_vars", "dict[str,str]", default={})
    secrets_in = get("secrets", "dict[str,str]", default={})
    labels = get("labels", "list[str]", default=[], nullable=False)
    team_id = get("team_id", "str")
    region = get("region", "str")
    key = get("idempotency_key", "str")
    vm = get("vm", "bool", default=True, nullable=False)
    allow = get("network_allowlist", "list[str]")
    deny = get("network_denylist", "list[str]")
    advanced = get("advanced_configs", "dict")
    start = body.get("start_command")
    argv: tuple[str, ...] = ()
    if isinstance(start, str):
        try:
            argv = tuple(shlex.split(start))
        except ValueError:  # e.g. an unclosed quote: Prime takes any string, so keep it word by word
            argv = tuple(start.split())
    elif isinstance(start, dict):
        exe, args = start.get("executable"), start.get("args", [])
        if not isinstance(exe, str) or not exe:
            errors.append(
                _field_error("string_too_short", "start_command", "executable should have at least 1 character", start)
            )
        elif not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            errors.append(_field_error("list_type", "start_command", "args should be a valid list of strings", start))
        else:
            argv = (exe, *args)
    elif start is not None:
        errors.append(_field_error("model_type", "start_command", "Input should be a valid StartCommand", start))
    if errors:
        return None, errors
    meta = {
        "memory_gb": memory_gb,
        "disk_size_gb": disk,
        "timeout_minutes": minutes,
        "idle_timeout_minutes": idle,
        "team_id": team_id,
        "region": region,
        "vm": vm,
        "network_allowlist": allow,
        "network_denylist": deny,
        "advanced_configs": advanced,
        "secrets": dict(secrets_in),
    }
    req = CreateRequest(
        image=image or "",
        from_snapshot=checkpoint if isinstance(checkpoint, str) else None,
        labels=tuple(labels),
        cpu=float(cpu),
        memory_mb=max(1, round(memory_gb * 1024)),
        lifetime_s=math.inf if minutes == -1 else minutes * 60.0,
        name=name,
        idempotency_key=key,
        env=dict(env),
        start_command=argv,
        meta=meta,
    )
    return req, []


def _bool_param(raw: str | None, name: str) -> tuple[bool | None, dict[str, Any] | None]:
    if raw is None:
        return None, None
    lowered = raw.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True, None
    if lowered in ("false", "0", "no", "off"):
        return False, None
    return None, {
        "type": "bool_parsing",
        "loc": ["query", name],
        "msg": "Input should be a valid boolean",
        "input": raw,
    }


def _int_param(raw: str | None, name: str, default: int, lo: int, hi: int) -> tuple[int, dict[str, Any] | None]:
    if raw is None:
        return default, None
    try:
        value = int(raw)
    except ValueError:
        return default, {
            "type": "int_parsing",
            "loc": ["query", name],
            "msg": "Input should be a valid integer",
            "input": raw,
        }
    if not lo <= value <= hi:
        return default, {
            "type": "value_error",
            "loc": ["query", name],
            "msg": f"Input should be between {lo} and {hi}",
            "input": raw,
        }
    return value, None


# --- handlers -----------------------------------------------------------------------------------------
