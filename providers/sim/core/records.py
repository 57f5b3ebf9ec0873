"""The simulator's records: sandbox states, the errors its control plane raises, requests and sandboxes.

Shared by the control plane (`simulator.py`), the command model (`commands.py`) and the fronts that
translate them to wire protocols (providers/sim/prime, providers/sim/modal).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from providers.sim.core.clock import SimClock, TimerHandle
from providers.sim.core.sandbox_state.sandbox_tree import SandboxUser

if TYPE_CHECKING:
    from providers.sim.core.execution.isolated_shell import RealProcess


class SandboxStatus(enum.StrEnum):
    """Prime's status vocabulary, used as the simulator's own."""

    PENDING = "PENDING"  # accepted, waiting for a slot
    PROVISIONING = "PROVISIONING"  # pulling the image / booting
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"  # kept (files, id) without a node slot; `resume` queues it again
    ERROR = "ERROR"
    TERMINATED = "TERMINATED"  # by the user
    TIMEOUT = "TIMEOUT"  # lifetime reached


ACTIVE_STATUSES = frozenset(
    {SandboxStatus.PENDING, SandboxStatus.PROVISIONING, SandboxStatus.RUNNING, SandboxStatus.PAUSED}
)
"""Not ended (a PAUSED sandbox lives on: it holds no node slot and no concurrency quota, but its files and id)."""


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
    `restore` marks a TRANSIENT refusal of a start from a snapshot or fork source (the profile's `fork_error_prob`):
    a front whose vendor answers a failed restore apart from a failed create words it so.
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
        restore: bool = False,
    ) -> None:
        super().__init__(message)
        self.reason = RejectReason(reason)
        self.message = message
        self.retry_after = retry_after
        self.attempt = attempt
        self.resource = resource
        self.limit = limit
        self.restore = restore

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class NotFound(Exception):
    def __init__(self, sandbox_id: str) -> None:
        super().__init__(f"sandbox {sandbox_id!r} not found")
        self.sandbox_id = sandbox_id


class SnapshotNotFound(NotFound):
    """No snapshot by that id or name (a NotFound, so a front that answers "not found" for both needs no more)."""

    def __init__(self, snapshot_id: str) -> None:
        Exception.__init__(self, f"snapshot {snapshot_id!r} not found")
        self.sandbox_id = snapshot_id
        self.snapshot_id = snapshot_id


class SnapshotFailed(Exception):
    """The vendor failed a snapshot (`[errors] snapshot_error_prob`): nothing was kept; `duration_s` is the vendor
    time it spent before failing (a front waits it, then answers its vendor's server error)."""

    def __init__(self, sandbox_id: str, duration_s: float) -> None:
        super().__init__(f"snapshot of sandbox {sandbox_id} failed: internal error while saving its filesystem")
        self.sandbox_id = sandbox_id
        self.duration_s = duration_s
        self.message = str(self)


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
    user: SandboxUser | None = None  # who commands run as; None: root in /root (E2B and Daytona pass SandboxUser())
    from_snapshot: str | None = None  # start with a copy of this snapshot's files (id or name)
    fork_of: str | None = None  # start with a copy of this running or paused sandbox's files; boots in fork time
    pause_at_timeout: bool = False  # at its lifetime a RUNNING sandbox pauses, not ends (E2B's autoPause)


@dataclass(frozen=True, slots=True)
class SimSnapshot:
    """A copy of one sandbox's files, kept until deleted or the simulator closes. `duration_s`: the vendor seconds
    taking it costs (drawn from the profile's `[sandbox]`; the front waits that long before answering)."""

    id: str
    name: str
    source_sandbox_id: str
    image: str
    created_at: float
    size_bytes: int
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float


_QUEUED, _PULLING, _BOOTING, _RUNNING, _ENDED, _PAUSED = range(6)


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
    pull_s: float = 0.0  # vendor seconds it waited for its image's pull (placed -> pulled; 0: the node had it)
    state_bytes: int = 0  # bytes of files a fork started with (its source's; its boot grows with them)
    user: SandboxUser | None = None  # None: root
    from_snapshot: str | None = None  # the snapshot id it started from
    fork_of: str | None = None  # the sandbox it was forked from
    pause_count: int = 0
    paused_s: float = 0.0  # vendor seconds spent PAUSED (ended pauses; the current one is `now - paused_at`)
    paused_at: float | None = None  # when the current pause began (None while not paused)
    resumed_at: float | None = None  # when the last resume was asked for
    pause_at_timeout: bool = False  # its lifetime pauses it when RUNNING (E2B's autoPause); else it ends
    _phase: int = field(default=_QUEUED, repr=False)
    _timers: list[TimerHandle] = field(default_factory=list, repr=False)
    _lifetime_timer: TimerHandle | None = field(default=None, repr=False)  # also in _timers; replaced by set_lifetime
    _remaining_s: float = field(default=0.0, repr=False)  # lifetime left when paused
    _resuming: bool = field(default=False, repr=False)  # placed again after a pause: boots in resume time, no pull
    # commands in flight, in start order (a dict, not a set: resolution order must not depend on id())
    _execs: dict[ExecTicket, None] = field(default_factory=dict, repr=False)

    @classmethod
    def accepted(cls, req: CreateRequest, sandbox_id: str, seq: int, now: float) -> SimSandbox:
        """The record of a create just accepted (PENDING)."""
        return cls(
            id=sandbox_id,
            seq=seq,
            name=req.name or f"sandbox-{seq}",
            image=req.image,
            labels=tuple(req.labels),
            cpu=float(req.cpu),
            memory_mb=int(req.memory_mb),
            lifetime_s=float(req.lifetime_s),
            disk_gb=float(req.disk_gb),
            status=SandboxStatus.PENDING,
            created_at=now,
            updated_at=now,
            idempotency_key=req.idempotency_key,
            env=dict(req.env),
            start_command=tuple(req.start_command),
            meta=dict(req.meta),
            user=req.user,
            pause_at_timeout=req.pause_at_timeout,
        )

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
            "pull_s": self.pull_s,
            "exec_count": self.exec_count,
            "pause_count": self.pause_count,
            "paused_s": self.paused_s,
        }


def iso(clock: SimClock, t: float | None) -> str | None:
    """Vendor time `t` as the ISO-8601 UTC wall-clock timestamp a vendor API would print."""
    if t is None:
        return None
    stamp = datetime.fromtimestamp(clock.wall(t), tz=UTC).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")


class ExecTicket:
    """One command in flight; resolved once with an ExecOutcome or an exception."""

    __slots__ = ("done", "on_done", "process", "sb", "timer")

    def __init__(self, sb: SimSandbox, on_done: Callable[[ExecOutcome | BaseException], None]) -> None:
        self.sb = sb
        self.timer: TimerHandle | None = None
        self.on_done = on_done
        self.done = False
        # a real command's process (`isolated_shell.RealProcess`: stdin, signals, pty size); None when modelled
        self.process: RealProcess | None = None

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
        if self.process is not None:
            self.process.kill()  # a real command outlives no answer: timed out, its sandbox ended, caller gone
        self.sb._execs.pop(self, None)
