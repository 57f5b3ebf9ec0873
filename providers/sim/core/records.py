"""The simulator's records: sandbox states, the errors its control plane raises, requests and sandboxes.

Shared by the control plane (`simulator.py`), the command model (`commands.py`) and the fronts that
translate them to wire protocols (providers/sim/prime, providers/sim/modal).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from providers.sim.core.clock import SimClock, TimerHandle


class SandboxStatus(enum.StrEnum):
    """Prime's status vocabulary, used as the simulator's own."""

    PENDING = "PENDING"  # accepted, waiting for a slot
    PROVISIONING = "PROVISIONING"  # pulling the image / booting
    RUNNING = "RUNNING"
    ERROR = "ERROR"
    TERMINATED = "TERMINATED"  # by the user
    TIMEOUT = "TIMEOUT"  # lifetime reached


ACTIVE_STATUSES = frozenset({SandboxStatus.PENDING, SandboxStatus.PROVISIONING, SandboxStatus.RUNNING})


class ErrorType(enum.StrEnum):
    PROVISIONING_TIMEOUT = "PROVISIONING_TIMEOUT"
    BOOT_FAILED = "BOOT_FAILED"
    IMAGE_PULL_FAILED = "IMAGE_PULL_FAILED"
    OOM_KILLED = "OOM_KILLED"
    TIMEOUT = "TIMEOUT"
    SANDBOX_CRASHED = "SANDBOX_CRASHED"  # died while running a command (injected)


class RejectReason(enum.StrEnum):
    RATE_LIMITED = "RATE_LIMITED"
    QUOTA_EXHAUSTED = "QUOTA_EXHAUSTED"
    CAPACITY = "CAPACITY"
    TRANSIENT = "TRANSIENT"
    INVALID = "INVALID"


class Rejected(Exception):
    """The vendor refused a create. `retry_after` (vendor seconds) is set for RATE_LIMITED.

    `attempt` is the create-attempt number (fronts use it to pick a deterministic 5xx flavour). A quota refused
    by the resource pool names the `resource` (`cpu`, `memory`, `disk`) and its `limit`, for fronts to word.
    """

    def __init__(
        self,
        reason: RejectReason,
        message: str,
        *,
        retry_after: float | None = None,
        attempt: int | None = None,
        resource: str | None = None,
        limit: float | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = RejectReason(reason)
        self.message = message
        self.retry_after = retry_after
        self.attempt = attempt
        self.resource = resource
        self.limit = limit

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class NotFound(Exception):
    def __init__(self, sandbox_id: str) -> None:
        super().__init__(f"sandbox {sandbox_id!r} not found")
        self.sandbox_id = sandbox_id


class NotRunning(Exception):
    """Exec on a sandbox that is not RUNNING now (still starting, or ended)."""

    def __init__(self, sandbox_id: str, status: str, error_type: str | None, message: str | None) -> None:
        super().__init__(f"sandbox {sandbox_id} is {status}" + (f" ({error_type}: {message})" if error_type else ""))
        self.sandbox_id = sandbox_id
        self.status = status
        self.error_type = error_type
        self.message = message


class ExecTimedOut(Exception):
    def __init__(self, sandbox_id: str, timeout_s: float) -> None:
        super().__init__(f"command in sandbox {sandbox_id} timed out after {timeout_s:g}s")
        self.sandbox_id = sandbox_id
        self.timeout_s = timeout_s


class SandboxDied(Exception):
    """The sandbox ended while the command ran (OOM, crash, lifetime, terminated by the user)."""

    def __init__(self, sandbox_id: str, status: str, error_type: str | None, message: str) -> None:
        super().__init__(f"sandbox {sandbox_id} died during exec: {status} {error_type or ''} {message}".strip())
        self.sandbox_id = sandbox_id
        self.status = status
        self.error_type = error_type
        self.message = message


class ExecError(Exception):
    """An injected transient failure of the exec path (gateway error); the sandbox lives on."""

    def __init__(self, sandbox_id: str, message: str) -> None:
        super().__init__(message)
        self.sandbox_id = sandbox_id
        self.message = message


@dataclass(frozen=True)
class CreateRequest:
    image: str
    labels: tuple[str, ...] = ()
    cpu: float = 1.0
    memory_mb: int = 1024
    lifetime_s: float = 3600.0  # inf: no lifetime limit
    disk_gb: float = 0.0  # what it holds of a resource pool's disk (fronts that know the size set it)
    name: str = ""
    idempotency_key: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    start_command: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)  # front-specific fields echoed back (disk, team...)


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float


_QUEUED, _PULLING, _BOOTING, _RUNNING, _ENDED = range(5)


@dataclass(slots=True, eq=False)
class SimSandbox:
    """The vendor's record of one sandbox (a live view: fronts read it, nobody else writes it).

    Times are vendor seconds since the simulator started; `started_at` is when provisioning began,
    `running_at` when it became usable, `ended_at` when it ended (None while not applicable).
    """

    id: str
    seq: int
    name: str
    image: str
    labels: tuple[str, ...]
    cpu: float
    memory_mb: int
    lifetime_s: float
    status: SandboxStatus
    created_at: float
    updated_at: float
    idempotency_key: str | None
    env: Mapping[str, str]
    start_command: tuple[str, ...]
    meta: Mapping[str, Any]
    error_type: str | None = None
    error_message: str | None = None
    disk_gb: float = 0.0
    started_at: float | None = None
    running_at: float | None = None
    ended_at: float | None = None
    node: int | None = None
    exec_count: int = 0
    first_exec_done_at: float | None = None  # the first command that completed: what a client calls TTI
    first_exec_started_at: float | None = None  # when that command reached the vendor
    exec_busy_s: float = 0.0  # vendor seconds spent running commands that completed (overhead + own time)
    _phase: int = field(default=_QUEUED, repr=False)
    _timers: list[TimerHandle] = field(default_factory=list, repr=False)
    _lifetime_timer: TimerHandle | None = field(default=None, repr=False)  # also in _timers; replaced by set_lifetime
    # commands in flight, in start order (a dict, not a set: resolution order must not depend on id())
    _execs: dict[ExecTicket, None] = field(default_factory=dict, repr=False)

    @property
    def active(self) -> bool:
        return self._phase != _ENDED

    def isotimes(self, clock: SimClock) -> dict[str, str | None]:
        """Wall-clock ISO-8601 UTC timestamps ("...Z") of this sandbox's lifecycle."""
        return {
            name: iso(clock, getattr(self, name))
            for name in ("created_at", "updated_at", "started_at", "running_at", "ended_at")
        }

    def truth_row(self, wall: Callable[[float], float]) -> dict[str, Any]:
        """The vendor's own record of this sandbox: lifecycle times in vendor seconds and epoch seconds."""

        def w(t: float | None) -> float | None:
            return None if t is None else wall(t)

        return {
            "id": self.id,
            "seq": self.seq,
            "name": self.name,
            "labels": list(self.labels),
            "status": str(self.status),
            "error_type": self.error_type,
            "error_message": self.error_message,
            "node": self.node,
            "created_s": self.created_at,
            "started_s": self.started_at,
            "running_s": self.running_at,
            "ended_s": self.ended_at,
            "created_wall": w(self.created_at),
            "started_wall": w(self.started_at),
            "running_wall": w(self.running_at),
            "ended_wall": w(self.ended_at),
            "first_exec_done_s": self.first_exec_done_at,
            "first_exec_done_wall": w(self.first_exec_done_at),
            "first_exec_start_wall": w(self.first_exec_started_at),
            "first_exec_start_s": self.first_exec_started_at,
            "exec_busy_s": self.exec_busy_s,
            "exec_count": self.exec_count,
        }


def iso(clock: SimClock, t: float | None) -> str | None:
    """Vendor time `t` as the ISO-8601 UTC wall-clock timestamp a vendor API would print."""
    if t is None:
        return None
    stamp = datetime.fromtimestamp(clock.wall(t), tz=UTC).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")


class ExecTicket:
    """One command in flight; resolved once with an ExecOutcome or an exception."""

    __slots__ = ("done", "on_done", "sb", "timer")

    def __init__(self, sb: SimSandbox, on_done: Callable[[ExecOutcome | BaseException], None]) -> None:
        self.sb = sb
        self.timer: TimerHandle | None = None
        self.on_done = on_done
        self.done = False

    def resolve(self, result: ExecOutcome | BaseException) -> None:
        if self.done:
            return
        self.cancel()
        self.on_done(result)

    def cancel(self) -> None:
        """Forget the command without reporting (the caller went away)."""
        self.done = True
        if self.timer is not None:
            self.timer.cancel()
        self.sb._execs.pop(self, None)
