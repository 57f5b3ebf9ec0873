"""The vendor simulator: a seeded, deterministic model of a sandbox vendor's control plane.

Vendor-neutral on purpose: the fronts (the Prime-like HTTP API here, a Modal gRPC front elsewhere)
translate it to wire protocols. All times are vendor seconds on a `SimClock`; the model is what field
reports say breaks fleets at scale:

- a create-rate token bucket (429 `RATE_LIMITED` with the time until the next token);
- an account concurrency quota counting every sandbox not yet ended, leaked ones included;
- a node pool with slots, autoscaling after a lag, idle scale-down, and an optional CAPACITY rejection;
- cold image pulls shared per node and image, with an optional failure probability;
- lognormal boot times slowed by start-pipeline congestion: `max(1, n_starting/knee) ** exponent`,
  with n_starting the account's sandboxes in PROVISIONING when the boot starts, so a 960-wide burst
  collapses into "Runtime did not start within 299s" while a 100-wide one does not;
- a startup deadline, lifetimes, injected create/boot/exec failures, exec overhead plus the command's
  own duration from the tiny shell (`shell.py`).

Determinism: per-sandbox draws are keyed by (seed, acceptance number, purpose) and per-create draws by
(seed, create-attempt number), so the same calls at the same virtual times give the same truth.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import enum
import functools
import gc
import hashlib
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from providers.sim.core.clock import SimClock, TimerHandle, VirtualClock
from providers.sim.core.draws import Stream
from providers.sim.core.pool import Node, NodePool, Pull
from providers.sim.core.profile import Profile
from providers.sim.core.shell import DEFAULT_PATH, run_shell


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

    `attempt` is the create-attempt number (fronts use it to pick a deterministic 5xx flavour).
    """

    def __init__(
        self,
        reason: RejectReason,
        message: str,
        *,
        retry_after: float | None = None,
        attempt: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = RejectReason(reason)
        self.message = message
        self.retry_after = retry_after
        self.attempt = attempt

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
    started_at: float | None = None
    running_at: float | None = None
    ended_at: float | None = None
    node: int | None = None
    exec_count: int = 0
    first_exec_done_at: float | None = None  # the first command that completed: what a client calls TTI
    _phase: int = field(default=_QUEUED, repr=False)
    _timers: list[TimerHandle] = field(default_factory=list, repr=False)
    # commands in flight, in start order (a dict, not a set: resolution order must not depend on id())
    _execs: dict[_ExecTicket, None] = field(default_factory=dict, repr=False)

    @property
    def active(self) -> bool:
        return self._phase != _ENDED

    def isotimes(self, clock: SimClock) -> dict[str, str | None]:
        """Wall-clock ISO-8601 UTC timestamps ("...Z") of this sandbox's lifecycle."""
        return {
            name: iso(clock, getattr(self, name))
            for name in ("created_at", "updated_at", "started_at", "running_at", "ended_at")
        }


def iso(clock: SimClock, t: float | None) -> str | None:
    """Vendor time `t` as the ISO-8601 UTC wall-clock timestamp a vendor API would print."""
    if t is None:
        return None
    stamp = datetime.fromtimestamp(clock.wall(t), tz=UTC).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")


class _ExecTicket:
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


class VendorSimulator:
    """One vendor account's control plane. Not thread-safe: call it from the clock's thread/loop."""

    def __init__(self, profile: Profile, *, seed: int, clock: SimClock) -> None:
        self.profile = profile
        self.seed = int(seed)
        self.clock = clock
        self._sandboxes: dict[str, SimSandbox] = {}
        self._order: list[SimSandbox] = []
        self._active: dict[str, SimSandbox] = {}
        self._idempotency: dict[str, str] = {}
        self._attempts = 0
        self._listeners: list[Callable[[SimSandbox], None]] = []
        self._closed = False
        # create-rate bucket
        self._tokens = profile.create_rate.burst
        self._tokens_at = clock.now()
        # pool and the start pipeline
        self.pool = NodePool(profile.pool.slots_per_node)
        self._queue: deque[SimSandbox] = deque()
        self._n_waiting = 0
        self._n_provisioning = 0
        self._dispatch_timer: TimerHandle | None = None
        self._scale_timers: set[TimerHandle] = set()
        for _ in range(profile.pool.initial_nodes):
            self.pool.add(warm=profile.pool.initial_nodes_warm, now=clock.now())
        # bookkeeping
        self.rejections: Counter[str] = Counter()
        self.ended: Counter[str] = Counter()
        self.exec_counts: Counter[str] = Counter()
        self.peak_active = 0
        self.peak_provisioning = 0

    # --- public API ---------------------------------------------------------------------------------

    def add_listener(self, callback: Callable[[SimSandbox], None]) -> None:
        """Called (synchronously) after every status change of any sandbox."""
        self._listeners.append(callback)

    def create(self, req: CreateRequest) -> SimSandbox:
        """Accept a sandbox (status PENDING) or raise Rejected. An idempotency key seen before returns the
        sandbox it created, spending neither a rate token nor quota."""
        if self._closed:
            raise RuntimeError("the simulator is closed")
        if req.idempotency_key is not None:
            known = self._idempotency.get(req.idempotency_key)
            if known is not None:
                return self._sandboxes[known]
        self._validate(req)
        now = self.clock.now()
        attempt = self._attempts
        self._attempts += 1
        retry_after = self._take_token(now)
        if retry_after is not None:
            self.rejections[RejectReason.RATE_LIMITED] += 1
            raise Rejected(
                RejectReason.RATE_LIMITED,
                f"Sandbox creation rate limit exceeded ({self.profile.create_rate.per_s:g}/s)",
                retry_after=retry_after,
                attempt=attempt,
            )
        if Stream(self.seed, "create", attempt).chance(self.profile.errors.create_transient_prob):
            self.rejections[RejectReason.TRANSIENT] += 1
            raise Rejected(RejectReason.TRANSIENT, "Internal error while creating the sandbox", attempt=attempt)
        limit = self.profile.quota.max_active
        if len(self._active) >= limit:
            self.rejections[RejectReason.QUOTA_EXHAUSTED] += 1
            raise Rejected(
                RejectReason.QUOTA_EXHAUSTED,
                f"Sandbox limit reached: {len(self._active)} active sandboxes, the account allows {limit:g}",
                attempt=attempt,
            )
        pool = self.pool
        at_max = len(pool) + pool.booting >= self.profile.pool.max_nodes
        if at_max and pool.free_slots < 1 and self._n_waiting >= self.profile.pool.max_queue:
            self.rejections[RejectReason.CAPACITY] += 1
            raise Rejected(RejectReason.CAPACITY, "Insufficient capacity to create sandbox", attempt=attempt)
        return self._accept(req, now)

    def get(self, sandbox_id: str) -> SimSandbox:
        try:
            return self._sandboxes[sandbox_id]
        except KeyError:
            raise NotFound(sandbox_id) from None

    def list(self, *, labels: Sequence[str] = (), active_only: bool = False) -> list[SimSandbox]:
        """Sandboxes in acceptance order, optionally only active ones, carrying every label in `labels`."""
        source = self._active.values() if active_only else self._order
        if not labels:
            return list(source)
        wanted = set(labels)
        return [sb for sb in source if wanted.issubset(sb.labels)]

    def terminate(self, sandbox_id: str) -> SimSandbox:
        """End a sandbox as TERMINATED (idempotent: an ended sandbox is returned as it is)."""
        sb = self.get(sandbox_id)
        if sb._phase != _ENDED:
            self._end(sb, SandboxStatus.TERMINATED, None, None)
        return sb

    def exec_start(
        self,
        sandbox_id: str,
        command: str,
        *,
        timeout_s: float,
        on_done: Callable[[ExecOutcome | BaseException], None],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> _ExecTicket:
        """Start a command; `on_done` later receives an ExecOutcome or ExecTimedOut / SandboxDied / ExecError.

        Raises NotFound or NotRunning at once. The callback form works on any clock (the VirtualClock
        included); `exec` is the awaitable form for a live loop.
        """
        sb = self.get(sandbox_id)
        if sb._phase != _RUNNING:
            raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        k = sb.exec_count
        sb.exec_count += 1
        errors = self.profile.errors
        draws = Stream(self.seed, "exec", sb.seq, k)
        overhead = draws.lognormal(self.profile.exec.overhead_median_s, self.profile.exec.overhead_sigma)
        fails = draws.chance(errors.exec_error_prob)
        dies = draws.chance(errors.exec_death_prob)
        ooms = draws.chance(errors.exec_oom_prob)
        when_frac = draws.uniform()
        full_env = {"PATH": DEFAULT_PATH, "HOME": "/root", "HOSTNAME": sb.id[:12], **sb.env, **(env or {})}
        result = run_shell(command, env=full_env, cwd=cwd or self.profile.exec.default_cwd, memory_mb=sb.memory_mb)
        total = overhead + result.duration_s
        now = self.clock.now()
        # the earliest of these happens; ties resolve in this order
        events: list[tuple[float, int, str]] = [(now + total, 5, "done"), (now + timeout_s, 4, "timeout")]
        if fails:
            events.append((now + overhead, 0, "error"))
        if dies:
            events.append((now + when_frac * total, 1, "crash"))
        if ooms:
            events.append((now + when_frac * total, 2, "oom"))
        if result.oom_at_s is not None:
            events.append((now + overhead + result.oom_at_s, 3, "memhog"))
        when, _, kind = min(events)
        ticket = _ExecTicket(sb, on_done)
        sb._execs[ticket] = None

        def fire() -> None:
            if ticket.done:
                return
            if kind == "done":
                self.exec_counts["ok"] += 1
                if sb.first_exec_done_at is None:
                    sb.first_exec_done_at = self.clock.now()
                ticket.resolve(ExecOutcome(result.exit_code, result.stdout, result.stderr, total))
            elif kind == "timeout":
                self.exec_counts["timeout"] += 1
                ticket.resolve(ExecTimedOut(sb.id, timeout_s))
            elif kind == "error":
                self.exec_counts["error"] += 1
                ticket.resolve(ExecError(sb.id, "Transient error while running the command"))
            elif kind == "crash":
                self.exec_counts["died"] += 1
                self._end(
                    sb,
                    SandboxStatus.ERROR,
                    ErrorType.SANDBOX_CRASHED,
                    "Sandbox crashed while running a command",
                )
            else:
                self.exec_counts["oom"] += 1
                mb = result.oom_mb if kind == "memhog" and result.oom_mb is not None else None
                detail = f" ({mb:g} MiB requested)" if mb is not None else ""
                self._end(
                    sb,
                    SandboxStatus.ERROR,
                    ErrorType.OOM_KILLED,
                    f"Sandbox was killed: out of memory, limit {sb.memory_mb} MiB{detail}",
                )

        if math.isfinite(when):
            ticket.timer = self.clock.call_at(when, fire)
        return ticket

    async def exec(
        self,
        sandbox_id: str,
        command: str,
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> ExecOutcome:
        """Run one command (needs a clock that advances while awaiting: LoopClock)."""
        fut: asyncio.Future[ExecOutcome | BaseException] = asyncio.get_running_loop().create_future()

        def done(result: ExecOutcome | BaseException) -> None:
            if not fut.done():
                fut.set_result(result)

        ticket = self.exec_start(sandbox_id, command, timeout_s=timeout_s, on_done=done, env=env, cwd=cwd)
        try:
            result = await fut
        except asyncio.CancelledError:
            ticket.cancel()
            raise
        if isinstance(result, BaseException):
            raise result
        return result

    def stats(self) -> builtins.dict[str, Any]:
        """Counters for dashboards and tests: current occupancy, pool, tokens, end states, rejections."""
        now = self.clock.now()
        tokens = min(
            self.profile.create_rate.burst,
            self._tokens + (now - self._tokens_at) * self.profile.create_rate.per_s,
        )
        by_status: Counter[str] = Counter(sb.status for sb in self._active.values())
        return {
            "now": now,
            "created": len(self._order),
            "create_attempts": self._attempts,
            "active": len(self._active),
            "pending": by_status[SandboxStatus.PENDING],
            "provisioning": by_status[SandboxStatus.PROVISIONING],
            "running": by_status[SandboxStatus.RUNNING],
            "waiting_for_slot": self._n_waiting,
            "peak_active": self.peak_active,
            "peak_provisioning": self.peak_provisioning,
            "nodes": len(self.pool),
            "nodes_booting": self.pool.booting,
            "free_slots": _finite_or_none(self.pool.free_slots),
            "tokens": _finite_or_none(tokens),
            "ended": dict(self.ended),
            "rejected": {str(k): v for k, v in self.rejections.items()},
            "execs": dict(self.exec_counts),
        }

    def truth(self) -> builtins.list[builtins.dict[str, Any]]:
        """The vendor's own record of every sandbox: lifecycle times in vendor seconds and epoch seconds."""
        wall = self.clock.wall

        def w(t: float | None) -> float | None:
            return None if t is None else wall(t)

        return [
            {
                "id": sb.id,
                "seq": sb.seq,
                "name": sb.name,
                "labels": list(sb.labels),
                "status": str(sb.status),
                "error_type": sb.error_type,
                "error_message": sb.error_message,
                "node": sb.node,
                "created_s": sb.created_at,
                "started_s": sb.started_at,
                "running_s": sb.running_at,
                "ended_s": sb.ended_at,
                "created_wall": w(sb.created_at),
                "started_wall": w(sb.started_at),
                "running_wall": w(sb.running_at),
                "ended_wall": w(sb.ended_at),
                "first_exec_done_s": sb.first_exec_done_at,
                "first_exec_done_wall": w(sb.first_exec_done_at),
                "exec_count": sb.exec_count,
            }
            for sb in self._order
        ]

    def close(self) -> None:
        """Cancel every timer; commands in flight fail with SandboxDied. Sandboxes keep their state."""
        self._closed = True
        if self._dispatch_timer is not None:
            self._dispatch_timer.cancel()
        for handle in self._scale_timers:
            handle.cancel()
        self._scale_timers.clear()
        for node in list(self.pool.nodes.values()):
            if node.idle_timer is not None:
                node.idle_timer.cancel()
            for pull in node.pulls.values():
                if pull.timer is not None:
                    pull.timer.cancel()
        for sb in list(self._active.values()):
            for handle in sb._timers:
                handle.cancel()
            for ticket in list(sb._execs):
                ticket.resolve(SandboxDied(sb.id, str(sb.status), None, "the simulator shut down"))

    # --- model --------------------------------------------------------------------------------------

    def _validate(self, req: CreateRequest) -> None:
        limits = self.profile.limits
        problem = None
        if not isinstance(req.image, str) or not req.image.strip():
            problem = "image is required"
        elif not req.cpu > 0 or req.cpu > limits.max_cpu:
            problem = f"cpu must be in (0, {limits.max_cpu:g}], got {req.cpu:g}"
        elif not req.memory_mb > 0 or req.memory_mb > limits.max_memory_mb:
            problem = f"memory_mb must be in (0, {limits.max_memory_mb:g}], got {req.memory_mb:g}"
        elif not req.lifetime_s > 0 or (
            req.lifetime_s > limits.max_lifetime_s and math.isfinite(limits.max_lifetime_s)
        ):
            problem = f"lifetime_s must be in (0, {limits.max_lifetime_s:g}], got {req.lifetime_s:g}"
        if problem is not None:
            self.rejections[RejectReason.INVALID] += 1
            raise Rejected(RejectReason.INVALID, problem)

    def _take_token(self, now: float) -> float | None:
        """Spend one create token; return None, or the vendor seconds until the next token."""
        rate = self.profile.create_rate
        if math.isinf(rate.burst) or math.isinf(rate.per_s):
            return None
        self._tokens = min(rate.burst, self._tokens + (now - self._tokens_at) * rate.per_s)
        self._tokens_at = now
        if self._tokens >= 1.0 - 1e-9:
            self._tokens -= 1.0
            return None
        return (1.0 - self._tokens) / rate.per_s

    def _accept(self, req: CreateRequest, now: float) -> SimSandbox:
        seq = len(self._order)
        digest = hashlib.blake2b(f"{self.seed}:{seq}".encode(), digest_size=12).hexdigest()
        sb = SimSandbox(
            id=f"sb{digest}",
            seq=seq,
            name=req.name or f"sandbox-{seq}",
            image=req.image,
            labels=tuple(req.labels),
            cpu=float(req.cpu),
            memory_mb=int(req.memory_mb),
            lifetime_s=float(req.lifetime_s),
            status=SandboxStatus.PENDING,
            created_at=now,
            updated_at=now,
            idempotency_key=req.idempotency_key,
            env=dict(req.env),
            start_command=tuple(req.start_command),
            meta=dict(req.meta),
        )
        self._sandboxes[sb.id] = sb
        self._order.append(sb)
        self._active[sb.id] = sb
        self.peak_active = max(self.peak_active, len(self._active))
        if req.idempotency_key is not None:
            self._idempotency[req.idempotency_key] = sb.id
        deadline = self.profile.startup.deadline_s
        if math.isfinite(deadline):
            sb._timers.append(self.clock.call_at(now + deadline, lambda: self._deadline(sb)))
        if math.isfinite(sb.lifetime_s):
            sb._timers.append(self.clock.call_at(now + sb.lifetime_s, lambda: self._lifetime(sb)))
        self._queue.append(sb)
        self._n_waiting += 1
        if self._dispatch_timer is None:
            # placement happens just after the create returns, as on a real scheduler: a create
            # response always shows PENDING, and a burst of creates at one instant is placed in order
            self._dispatch_timer = self.clock.call_at(now, self._dispatch_soon)
        self._notify(sb)
        return sb

    def _dispatch_soon(self) -> None:
        self._dispatch_timer = None
        self._dispatch()

    def _dispatch(self) -> None:
        """Place waiting sandboxes, oldest first, on free slots; ask for nodes when some must wait."""
        queue = self._queue
        pool = self.pool
        while self._n_waiting > 0 and pool.free_slots >= 1:
            sb = queue.popleft()
            if sb._phase != _QUEUED:
                continue  # ended while waiting
            node = pool.pick(sb.image)
            if node is None:  # pragma: no cover - free_slots says otherwise
                queue.appendleft(sb)
                break
            self._n_waiting -= 1
            self._place(sb, node)
        if self._n_waiting > 0:
            self._scale_up()
        elif queue:
            queue.clear()  # only sandboxes that ended while waiting are left in it

    def _scale_up(self) -> None:
        pool = self.pool
        spec = self.profile.pool
        slots = spec.slots_per_node
        deficit = self._n_waiting - pool.booting * slots
        if deficit <= 0:
            return
        need = 1 if math.isinf(slots) else math.ceil(deficit / slots)
        room = spec.max_nodes - len(pool) - pool.booting
        add = int(min(need, room))
        if add <= 0:
            return
        pool.booting += add
        handle: TimerHandle | None = None

        def arrive() -> None:
            if handle is not None:
                self._scale_timers.discard(handle)
            pool.booting -= add
            now = self.clock.now()
            for _ in range(add):
                node = pool.add(warm=False, now=now)
                self._maybe_idle(node)
            self._dispatch()

        handle = self.clock.call_at(self.clock.now() + spec.scale_up_lag_s, arrive)
        self._scale_timers.add(handle)

    def _maybe_idle(self, node: Node) -> None:
        """Schedule scale-down of a node that has nothing to do, if the pool may shrink."""
        spec = self.profile.pool
        if node.used or not math.isfinite(spec.scale_down_idle_s) or math.isinf(node.slots):
            return
        now = self.clock.now()
        node.idle_since = now

        def check() -> None:
            node.idle_timer = None
            if node.alive and node.used == 0 and node.idle_since == now and len(self.pool) > spec.initial_nodes:
                for pull in node.pulls.values():
                    if pull.timer is not None:
                        pull.timer.cancel()
                self.pool.remove(node)

        if node.idle_timer is not None:
            node.idle_timer.cancel()
        node.idle_timer = self.clock.call_at(now + spec.scale_down_idle_s, check)

    def _place(self, sb: SimSandbox, node: Node) -> None:
        now = self.clock.now()
        self.pool.take_slot(node)
        if node.idle_timer is not None:
            node.idle_timer.cancel()
            node.idle_timer = None
        sb.node = node.id
        sb.status = SandboxStatus.PROVISIONING
        sb.started_at = now
        sb.updated_at = now
        self._n_provisioning += 1
        self.peak_provisioning = max(self.peak_provisioning, self._n_provisioning)
        if node.has_image(sb.image):
            self._notify(sb)
            self._start_boot(sb)
            return
        sb._phase = _PULLING
        pull = node.pulls.get(sb.image)
        if pull is None:
            spec = self.profile.image
            draws = Stream(self.seed, "pull", sb.seq)
            duration = draws.lognormal(spec.pull_median_s, spec.pull_sigma)
            pull = Pull(image=sb.image, ends_at=now + duration, fails=draws.chance(spec.pull_failure_prob))
            node.pulls[sb.image] = pull
            self.pool.index_image(node, sb.image)
            pull.timer = self.clock.call_at(pull.ends_at, lambda: self._pull_done(node, pull))
        pull.waiters.append(sb)
        self._notify(sb)

    def _pull_done(self, node: Node, pull: Pull) -> None:
        node.pulls.pop(pull.image, None)
        if pull.fails:
            for sb in pull.waiters:
                if sb._phase == _PULLING:
                    self._end(
                        sb,
                        SandboxStatus.ERROR,
                        ErrorType.IMAGE_PULL_FAILED,
                        f"Failed to pull image {sb.image!r}",
                    )
            return
        node.images.add(pull.image)
        self.pool.index_image(node, pull.image)
        for sb in pull.waiters:
            if sb._phase == _PULLING:
                self._start_boot(sb)

    def _start_boot(self, sb: SimSandbox) -> None:
        spec = self.profile.boot
        now = self.clock.now()
        sb._phase = _BOOTING
        congestion = max(1.0, self._n_provisioning / spec.congestion_knee) ** spec.congestion_exponent
        draws = Stream(self.seed, "boot", sb.seq)
        duration = draws.lognormal(spec.median_s, spec.sigma) * congestion
        crashes = draws.chance(self.profile.errors.boot_crash_prob)
        crash_frac = draws.uniform()
        if crashes:
            sb._timers.append(self.clock.call_at(now + crash_frac * duration, lambda: self._boot_crash(sb)))
        else:
            sb._timers.append(self.clock.call_at(now + duration, lambda: self._boot_done(sb)))

    def _boot_done(self, sb: SimSandbox) -> None:
        if sb._phase != _BOOTING:
            return
        now = self.clock.now()
        sb._phase = _RUNNING
        sb.status = SandboxStatus.RUNNING
        sb.running_at = now
        sb.updated_at = now
        self._n_provisioning -= 1
        self._notify(sb)

    def _boot_crash(self, sb: SimSandbox) -> None:
        if sb._phase == _BOOTING:
            self._end(
                sb,
                SandboxStatus.ERROR,
                ErrorType.BOOT_FAILED,
                "Sandbox failed to start: the container exited during boot",
            )

    def _deadline(self, sb: SimSandbox) -> None:
        if sb._phase in (_QUEUED, _PULLING, _BOOTING):
            message = self.profile.startup.timeout_message.format(deadline_s=self.profile.startup.deadline_s)
            self._end(sb, SandboxStatus.ERROR, ErrorType.PROVISIONING_TIMEOUT, message)

    def _lifetime(self, sb: SimSandbox) -> None:
        if sb._phase != _ENDED:
            self._end(
                sb,
                SandboxStatus.TIMEOUT,
                ErrorType.TIMEOUT,
                f"Sandbox exceeded its maximum lifetime of {sb.lifetime_s:g}s",
            )

    def _end(self, sb: SimSandbox, status: SandboxStatus, error_type: str | None, message: str | None) -> None:
        phase = sb._phase
        if phase == _ENDED:
            return
        now = self.clock.now()
        sb._phase = _ENDED
        sb.status = status
        sb.error_type = None if error_type is None else str(error_type)
        sb.error_message = message
        sb.ended_at = now
        sb.updated_at = now
        del self._active[sb.id]
        for handle in sb._timers:
            handle.cancel()
        sb._timers.clear()
        if phase == _QUEUED:
            self._n_waiting -= 1
        else:
            if phase in (_PULLING, _BOOTING):
                self._n_provisioning -= 1
            node = self.pool.nodes.get(sb.node) if sb.node is not None else None
            if node is not None:
                self.pool.release_slot(node)
                self._maybe_idle(node)
        self.ended[f"{status}/{sb.error_type}" if sb.error_type else str(status)] += 1
        if sb._execs:
            died = SandboxDied(sb.id, str(status), sb.error_type, message or f"Sandbox is {status}")
            for ticket in list(sb._execs):
                ticket.resolve(died)
        self._notify(sb)
        if phase != _QUEUED and self._n_waiting > 0:
            self._dispatch()

    def _notify(self, sb: SimSandbox) -> None:
        for callback in self._listeners:
            callback(sb)


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


# --- offline workloads for calibration and fast tests ---------------------------------------------


@dataclass(frozen=True, slots=True)
class BurstSample:
    """One simulated rollout: create -> RUNNING -> one probe command -> terminate.

    `tti_s` is create -> probe returned (vendor seconds; the harness's headline metric, with instant
    notice of RUNNING); `failure` is the reject reason, the error type or the exec failure.
    """

    index: int
    created_at: float
    sandbox_id: str | None
    tti_s: float | None
    failure: str | None
    phase: str | None  # "create", "ready" or "exec" for failures

    @property
    def ok(self) -> bool:
        return self.failure is None


@dataclass(frozen=True)
class BurstResult:
    profile: str
    n: int
    seed: int
    samples: tuple[BurstSample, ...]
    stats: Mapping[str, Any]

    def ttis(self) -> list[float]:
        """TTIs of the successful rollouts, sorted."""
        return sorted(s.tti_s for s in self.samples if s.tti_s is not None)

    def quantile(self, q: float) -> float:
        """Nearest-rank quantile of the successful TTIs (untrimmed)."""
        values = self.ttis()
        if not values:
            return math.nan
        rank = max(1, math.ceil(q * len(values)))
        return values[rank - 1]

    @property
    def failure_rate(self) -> float:
        return sum(1 for s in self.samples if not s.ok) / max(1, len(self.samples))

    def failures(self) -> Counter[str]:
        return Counter(s.failure for s in self.samples if s.failure is not None)

    def init_failures(self) -> int:
        """Rollouts that never got a usable sandbox (what RL users call init failures)."""
        return sum(1 for s in self.samples if s.phase in ("create", "ready"))

    def summary(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "n": self.n,
            "seed": self.seed,
            "ok": sum(1 for s in self.samples if s.ok),
            "failure_rate": self.failure_rate,
            "init_failures": self.init_failures(),
            "failures": dict(self.failures()),
            "p50": self.quantile(0.50),
            "p95": self.quantile(0.95),
            "p99": self.quantile(0.99),
            "max": self.quantile(1.0),
        }


class _ProbeWorkload:
    """Drives rollouts on a VirtualClock with callbacks (no event loop, no real sleeping)."""

    def __init__(
        self,
        sim: VendorSimulator,
        request: CreateRequest,
        probe: str,
        probe_timeout_s: float,
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        self.sim = sim
        self.request = request
        self.probe = probe
        self.probe_timeout_s = probe_timeout_s
        self.on_finish = on_finish
        self.samples: dict[int, BurstSample] = {}
        self._by_id: dict[str, tuple[int, float]] = {}
        sim.add_listener(self._changed)

    def launch(self, index: int) -> None:
        now = self.sim.clock.now()
        try:
            sb = self.sim.create(self.request)
        except Rejected as exc:
            self._finish(BurstSample(index, now, None, None, str(exc.reason), "create"))
            return
        self._by_id[sb.id] = (index, now)

    def _changed(self, sb: SimSandbox) -> None:
        entry = self._by_id.get(sb.id)
        if entry is None:
            return
        index, created = entry
        if sb.status is SandboxStatus.RUNNING and sb.exec_count == 0:

            def done(result: ExecOutcome | BaseException) -> None:
                now = self.sim.clock.now()
                self._by_id.pop(sb.id, None)
                if isinstance(result, ExecOutcome):
                    sample = BurstSample(index, created, sb.id, now - created, None, None)
                elif isinstance(result, SandboxDied):
                    sample = BurstSample(index, created, sb.id, None, f"died:{result.error_type}", "exec")
                else:
                    sample = BurstSample(index, created, sb.id, None, type(result).__name__, "exec")
                if sb.active:
                    self.sim.terminate(sb.id)
                self._finish(sample)

            self.sim.exec_start(sb.id, self.probe, timeout_s=self.probe_timeout_s, on_done=done)
        elif not sb.active and sb.running_at is None:
            self._by_id.pop(sb.id, None)
            self._finish(BurstSample(index, created, sb.id, None, sb.error_type or str(sb.status), "ready"))

    def _finish(self, sample: BurstSample) -> None:
        self.samples[sample.index] = sample
        if self.on_finish is not None:
            self.on_finish(sample.index)


@contextlib.contextmanager
def _gc_paused() -> Any:
    """Offline runs allocate millions of short-lived, acyclic-in-practice objects; the cyclic collector
    would rescan the growing heap again and again (a third of the run time at 100k sandboxes)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _load(profile: Profile | str) -> Profile:
    if isinstance(profile, Profile):
        return profile
    from providers.sim.core.profile import load_profile

    return load_profile(profile)


def simulate_burst(
    profile: Profile | str,
    n: int,
    seed: int = 0,
    *,
    image: str = "python:3.12-slim",
    probe: str = "echo ready",
    probe_timeout_s: float = 60.0,
    request: CreateRequest | None = None,
    spacing_s: float = 0.0,
) -> BurstResult:
    """`n` rollouts created at once (or `spacing_s` apart), no client retries, on a VirtualClock.

    Each waits until RUNNING (noticed instantly), runs one probe command, and is terminated.
    """
    prof = _load(profile)
    if n < 0:
        raise ValueError("n must be >= 0")
    clock = VirtualClock()
    sim = VendorSimulator(prof, seed=seed, clock=clock)
    req = request or CreateRequest(image=image, labels=("stampede-sim-burst",), lifetime_s=3600.0)
    work = _ProbeWorkload(sim, req, probe, probe_timeout_s)
    with _gc_paused():
        for i in range(n):
            if spacing_s > 0:
                clock.call_at(i * spacing_s, functools.partial(work.launch, i))
            else:
                work.launch(i)
        clock.run()
    stats = sim.stats()
    sim.close()
    samples = tuple(work.samples[i] for i in range(n))
    return BurstResult(prof.name, n, seed, samples, stats)


def simulate_sequential(
    profile: Profile | str,
    n: int,
    seed: int = 0,
    *,
    image: str = "python:3.12-slim",
    probe: str = "echo ready",
    probe_timeout_s: float = 60.0,
    request: CreateRequest | None = None,
) -> BurstResult:
    """`n` rollouts one after another (the next created when the previous finished), as computesdk's
    sequential mode does."""
    prof = _load(profile)
    clock = VirtualClock()
    sim = VendorSimulator(prof, seed=seed, clock=clock)
    req = request or CreateRequest(image=image, labels=("stampede-sim-sequential",), lifetime_s=3600.0)

    def next_one(finished: int) -> None:
        if finished + 1 < n:
            clock.call_at(clock.now(), functools.partial(work.launch, finished + 1))

    work = _ProbeWorkload(sim, req, probe, probe_timeout_s, on_finish=next_one)
    with _gc_paused():
        if n > 0:
            work.launch(0)
        clock.run()
    stats = sim.stats()
    sim.close()
    samples = tuple(work.samples[i] for i in range(n))
    return BurstResult(prof.name, n, seed, samples, stats)
