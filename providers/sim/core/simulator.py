"""The vendor simulator: a seeded, deterministic model of a sandbox vendor's control plane.

Vendor-neutral on purpose: the fronts (the Prime-like HTTP API here, a Modal gRPC front elsewhere)
translate it to wire protocols. All times are vendor seconds on a `SimClock`; the model is what field
reports say breaks fleets at scale:

- a create-rate token bucket (429 `RATE_LIMITED` with the time until the next token), and the control plane's
  serial admission of accepted creates (`account.admit_per_s`: a create waits in PENDING for its turn);
- an account concurrency quota counting every sandbox not yet ended, leaked ones included (but the PAUSED);
- a node pool with slots, autoscaling after a lag, idle scale-down, and an optional CAPACITY rejection;
- cold image pulls shared per node and image, with an optional failure probability;
- lognormal boot times slowed by start-pipeline congestion: `max(1, n_starting/knee) ** exponent`,
  with n_starting the account's sandboxes booting (pulled, not yet RUNNING) when the boot starts, so a 960-wide burst
  collapses into "Runtime did not start within 299s" while a 100-wide one does not;
- a startup deadline, lifetimes, injected create/boot/exec failures, exec overhead plus the command's
  own duration from the tiny shell (`shell.py`), or a real one in the sandbox's own files (`isolated_shell.py`);
- each sandbox's file tree (made on first use, removed when it ends), pause and resume, snapshots and forks.

Memory: on a live clock an ended sandbox is forgotten `retention_s` real seconds after it ended (vendors forget them too; a
client asking about it later gets NotFound). Its truth row moves to a `TruthArchive` on disk first, so
`truth()` still has every sandbox of the run, and fronts drop their own per-sandbox state in a prune
listener. A soak's memory then holds only the sandboxes of the last `retention_s`, whatever its length.

Determinism: per-sandbox draws are keyed by (seed, acceptance number, purpose) and per-create draws by
(seed, create-attempt number), so the same calls at the same virtual times give the same truth.

The pieces: the records and errors (`records.py`, re-exported here for the fronts), the control plane's
lifecycle (this module: accept, deadlines, lifetimes and end), its start pipeline (`pipeline.py`: queue, placement,
pulls, boots; `autoscale.py` adds and removes nodes), its admission (`admission.py`: validation, the create-rate
bucket, quotas, capacity refusals), pause and resume (`pausing.py`), snapshots and forks (`snapshots.py`, the files
in `sandbox_tree.py`), one command's model (`commands.py`), the memory of ended sandboxes (`truth_archive.py`), and
the offline burst experiments (`experiments.py`).
"""

from __future__ import annotations

import asyncio
import builtins
import hashlib
import math
import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from providers.sim.core.admission import Admission
from providers.sim.core.clock import LoopClock, SimClock
from providers.sim.core.execution.commands import start_command
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.core.loop_watch import LoopWatch
from providers.sim.core.pipeline import StartPipeline
from providers.sim.core.profile import Profile
from providers.sim.core.records import (
    _BOOTING,
    _ENDED,
    _PAUSED,
    _PULLING,
    _QUEUED,
    _RUNNING,
    ACTIVE_STATUSES,
    CreateRequest,
    ErrorType,
    ExecError,
    ExecOutcome,
    ExecTicket,
    ExecTimedOut,
    NotFound,
    NotRunning,
    Rejected,
    RejectReason,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
    SimSnapshot,
    SnapshotFailed,
    SnapshotNotFound,
    iso,
)
from providers.sim.core.sandbox_state.pausing import Pausing
from providers.sim.core.sandbox_state.sandbox_tree import SandboxTree, SandboxTrees
from providers.sim.core.sandbox_state.snapshots import Snapshots, user_of
from providers.sim.core.transfers import TransferRefused, Transfers
from providers.sim.core.truth_archive import Retention

__all__ = [
    "ACTIVE_STATUSES",
    "CreateRequest",
    "ErrorType",
    "ExecError",
    "ExecOutcome",
    "ExecTimedOut",
    "NotFound",
    "NotRunning",
    "RejectReason",
    "Rejected",
    "SandboxDied",
    "SandboxStatus",
    "SimSandbox",
    "SimSnapshot",
    "SnapshotFailed",
    "SnapshotNotFound",
    "TransferRefused",
    "VendorSimulator",
    "iso",
]


RETENTION_S = 60.0
"""Real seconds an ended sandbox stays known (its commands' results, status, an idempotent retry) before it
is pruned: longer than any client's follow-up call, short enough that a 960-wide soak keeps ~1 minute of
ended sandboxes."""


class VendorSimulator:
    """One vendor account's control plane. Not thread-safe: call it from the clock's thread/loop."""

    def __init__(self, profile: Profile, *, seed: int, clock: SimClock, retention_s: float | None = None) -> None:
        """`retention_s`: real seconds an ended sandbox stays known; None: RETENTION_S on a live clock (a
        served vendor), never pruned on a virtual one (offline experiments read every sandbox at the end)."""
        self.profile = profile
        self.seed = int(seed)
        self.clock = clock
        if retention_s is None:
            retention_s = RETENTION_S if isinstance(clock, LoopClock) else math.inf
        # in vendor seconds on this clock (one vendor second lasts `time_scale` real seconds)
        self._retention = Retention(float(retention_s) / clock.time_scale, clock.wall, self._forget)
        # A served vendor (live clock) mixes a per-instance nonce into its ids: one restarted mid-run with the same
        # seed must never hand a second rollout an id already recorded. Offline (virtual clock) ids stay a function of
        # the seed and counter alone, so a seed's truth is reproducible; every draw stays seeded either way.
        self._id_nonce = secrets.token_hex(8) if isinstance(clock, LoopClock) else ""
        self._sandboxes: dict[str, SimSandbox] = {}  # known sandboxes, in acceptance order
        self._accepted = 0
        self._active: dict[str, SimSandbox] = {}
        self._idempotency: dict[str, str] = {}
        self._attempts = 0
        self._listeners: list[Callable[[SimSandbox], None]] = []
        self.loop_watch: LoopWatch | None = None  # a served vendor's own loop (watch_loop)
        self._closed = False
        self.admission = Admission(profile, self.seed, clock.now())  # validation, create rate, quotas
        self._trees: SandboxTrees | None = None  # made on first use: a load test that touches no file makes none
        self.real_shell: IsolatedShell | None = None  # real commands' processes (`commands.real_shell_of`)
        self._pausing = Pausing(self)
        self._snapshots = Snapshots(self, self._id_nonce)
        self.transfers = Transfers(profile.sandbox, clock, profile.errors, self.seed)  # files in and out
        # the queue, the node pool and boots
        notify, boot = self._notify, self._pausing.boot_time
        self._pipeline = StartPipeline(profile, self.seed, clock, end=self._end, notify=notify, special_boot=boot)
        self.pool = self._pipeline.pool
        self.autoscaler = self._pipeline.autoscaler
        # bookkeeping
        self.ended: Counter[str] = Counter()
        self.dying = 0  # terminated sandboxes still counted against the quota while they tear down
        self.exec_counts: Counter[str] = Counter()
        self.peak_active = 0
        # serial admission (`account.admit_per_s`): the last create let into the pipeline, and those waiting
        self._admitted_at = -math.inf
        self._admitting: set[str] = set()

    # --- public API ---------------------------------------------------------------------------------

    def add_prune_listener(self, callback: Callable[[SimSandbox, builtins.dict[str, Any]], None]) -> None:
        """Call `callback(sandbox, truth_row)` when an ended sandbox is forgotten: a front drops its own state
        for it, and may add its fields to the truth row before the row is archived."""
        self._retention.listeners.append(callback)

    @property
    def retention_s(self) -> float:
        """Vendor seconds an ended sandbox stays known (inf: never pruned)."""
        return self._retention.retention_s

    @property
    def known(self) -> int:
        """Sandboxes still held in memory (active, or ended within the retention window)."""
        return len(self._sandboxes)

    def add_listener(self, callback: Callable[[SimSandbox], None]) -> None:
        """Called (synchronously) after every status change of any sandbox."""
        self._listeners.append(callback)

    def create(self, req: CreateRequest) -> SimSandbox:
        """Accept a sandbox (status PENDING) or raise Rejected. An idempotency key seen before returns the
        sandbox it created, spending neither a rate token nor quota."""
        if self._closed:
            raise RuntimeError("the simulator is closed")
        self.clock.note_arrival()  # a live clock plays a burst's sending 1:1 (LoopClock.note_arrival says why)
        if req.idempotency_key is not None:
            known = self._idempotency.get(req.idempotency_key)
            if known is not None:
                return self._sandboxes[known]
        if req.from_snapshot is not None or req.fork_of is not None:
            self._snapshots.check_source(req)
        self.admission.validate(req)
        now = self.clock.now()
        attempt = self._attempts
        self._attempts += 1
        # a PAUSED sandbox holds no quota (E2B); one terminated but still tearing down does ([account] teardown_s)
        active = len(self._active) - self._pausing.count + self.dying
        self.admission.admit(req, now, attempt, active=active, no_room=self._pipeline.no_room())
        return self._accept(req, now)

    def get(self, sandbox_id: str) -> SimSandbox:
        try:
            return self._sandboxes[sandbox_id]
        except KeyError:
            raise NotFound(sandbox_id) from None

    def list(self, *, labels: Sequence[str] = (), active_only: bool = False) -> list[SimSandbox]:
        """Sandboxes in acceptance order, optionally only active ones, carrying every label in `labels`."""
        source = self._active.values() if active_only else self._sandboxes.values()
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

    def set_lifetime(self, sandbox_id: str, remaining_s: float) -> SimSandbox:
        """Make an active sandbox end `remaining_s` vendor seconds from now, shorter or longer than it was
        (E2B's `set_timeout`: the lifetime restarts from the call). Raises NotFound, or NotRunning once ended."""
        sb = self.get(sandbox_id)
        if sb._phase == _ENDED:
            raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
        if not remaining_s >= 0:  # 0: the lifetime is up now (E2B's `set_timeout(0)`)
            raise ValueError(f"remaining_s must be >= 0, got {remaining_s!r}")
        old = sb._lifetime_timer
        if old is not None:
            old.cancel()
            sb._timers.remove(old)
        sb._lifetime_timer = None
        sb._remaining_s = remaining_s  # a PAUSED sandbox's lifetime runs again from its resume
        self._arm_timers(sb, remaining_s, self.clock.now(), deadline=False, lifetime=sb._phase != _PAUSED)
        return sb

    @property
    def trees(self) -> SandboxTrees:
        """Every sandbox's files and every snapshot, under one temporary folder (made on first use, removed by close)."""
        if self._trees is None:
            self._trees = SandboxTrees()
        return self._trees

    def tree(self, sandbox_id: str) -> SandboxTree:
        """The sandbox's `/` (a PAUSED one's too): NotFound, or NotRunning once ended (its files went with it)."""
        sb = self.get(sandbox_id)
        if sb._phase == _ENDED:
            raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
        return self.trees.get(sb.id, user_of(sb))

    # pause and resume (`pausing.Pausing`), snapshots (`snapshots.Snapshots`): what each does and raises is said there
    def pause(self, sandbox_id: str) -> float:
        return self._pausing.pause(sandbox_id)

    def resume(self, sandbox_id: str, lifetime_s: float | None = None) -> SimSandbox:
        return self._pausing.resume(sandbox_id, lifetime_s)

    def snapshot(self, sandbox_id: str, name: str | None = None) -> SimSnapshot:
        return self._snapshots.take(sandbox_id, name)

    def snapshots(self) -> builtins.list[SimSnapshot]:
        return self._snapshots.all()

    def get_snapshot(self, id_or_name: str) -> SimSnapshot:
        return self._snapshots.get(id_or_name)

    def delete_snapshot(self, id_or_name: str) -> SimSnapshot:
        return self._snapshots.delete(id_or_name)

    def transfer_start(
        self,
        sandbox_id: str,
        direction: str,
        size_bytes: int,
        on_done: Callable[[float], None],
        on_failed: Callable[[TransferRefused], None] | None = None,
    ) -> None:
        """A file of `size_bytes` moving into ("upload") or out of ("download") a RUNNING sandbox; `on_done(seconds)`
        when it arrived (`transfers.py`). Raises NotFound, NotRunning, or TransferRefused (a vendor cap, or a file
        the profile's `[errors]` fails: `on_failed` part-way when one is given and the transfer takes time)."""
        sb = self.get(sandbox_id)
        if sb._phase != _RUNNING:
            raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
        self.transfers.start(sb.id, direction, size_bytes, on_done, on_failed)

    async def transfer(self, sandbox_id: str, direction: str, size_bytes: int) -> float:
        """`transfer_start` awaited on a live loop (a front's files API waits it before it answers): the seconds
        the file took (0 at once when nothing bounds transfers)."""
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        def done(seconds: float) -> None:
            if not fut.done():
                fut.set_result(seconds)

        def failed(exc: TransferRefused) -> None:
            if not fut.done():
                fut.set_exception(exc)

        self.transfer_start(sandbox_id, direction, size_bytes, done, failed)
        return await fut

    def exec_start(
        self,
        sandbox_id: str,
        command: str,
        *,
        timeout_s: float,
        on_done: Callable[[ExecOutcome | BaseException], None],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        on_stderr: Callable[[bytes], None] | None = None,
        stdin: bool = False,
        pty: tuple[int, int] | None = None,
    ) -> ExecTicket:
        """Start a command; `on_done` later receives an ExecOutcome or ExecTimedOut / SandboxDied / ExecError.

        Raises NotFound or NotRunning at once. The callback form works on any clock (the VirtualClock
        included); `exec` is the awaitable form for a live loop. The model of a command: `commands.py`.
        With real commands (profile `[sandbox] commands = "real"`, live clock) `on_stdout`/`on_stderr` get output
        as it comes, `stdin=True` gives it a pipe, `pty=(cols, rows)` a terminal, and `ticket.process` is the
        `RealProcess` a front writes stdin and sends signals to.
        """
        sb = self.get(sandbox_id)
        if on_stdout is None and on_stderr is None and not stdin and pty is None:
            return start_command(self, sb, command, timeout_s=timeout_s, on_done=on_done, env=env, cwd=cwd)
        return start_command(
            self,
            sb,
            command,
            timeout_s=timeout_s,
            on_done=on_done,
            env=env,
            cwd=cwd,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            stdin=stdin,
            pty=pty,
        )

    async def exec(
        self,
        sandbox_id: str,
        command: str,
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        on_stderr: Callable[[bytes], None] | None = None,
    ) -> ExecOutcome:
        """Run one command (needs a clock that advances while awaiting: LoopClock); cancelling kills a real one."""
        fut: asyncio.Future[ExecOutcome | BaseException] = asyncio.get_running_loop().create_future()

        def done(result: ExecOutcome | BaseException) -> None:
            if not fut.done():
                fut.set_result(result)

        ticket = self.exec_start(
            sandbox_id,
            command,
            timeout_s=timeout_s,
            on_done=done,
            env=env,
            cwd=cwd,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
        )
        try:
            result = await fut
        except asyncio.CancelledError:
            ticket.cancel()
            raise
        if isinstance(result, BaseException):
            raise result
        return result

    def facts(self) -> builtins.dict[str, Any]:
        """Which run this is: what every truth and stats answer, and every front's ready line, carries; a served
        vendor's, also how late its own loop ran (`watch_loop`)."""
        facts = {"profile": self.profile.name, "seed": self.seed, "time_scale": self.clock.time_scale}
        return facts if self.loop_watch is None else {**facts, "loop": self.loop_watch.facts()}

    def watch_loop(self) -> None:
        """Watch the running loop this vendor is served on (loop_watch.py says why)."""
        if self.loop_watch is None:
            self.loop_watch = LoopWatch()
        self.loop_watch.start()

    def stats(self) -> builtins.dict[str, Any]:
        """Counters for dashboards and tests: current occupancy, pool, tokens, end states, rejections."""
        now = self.clock.now()
        by_status: Counter[str] = Counter(sb.status for sb in self._active.values())
        return {
            "now": now,
            "created": self._accepted,
            "known": len(self._sandboxes),
            "pruned": self._retention.archive.count,
            "create_attempts": self._attempts,
            "active": len(self._active),
            "pending": by_status[SandboxStatus.PENDING],
            "provisioning": by_status[SandboxStatus.PROVISIONING],
            "running": by_status[SandboxStatus.RUNNING],
            "paused": self._pausing.count,
            "pauses": self._pausing.pauses,
            "resumes": self._pausing.resumes,
            "snapshots": len(self._snapshots),
            "waiting_for_slot": self._pipeline.n_waiting,
            "peak_active": self.peak_active,
            "peak_provisioning": self._pipeline.peak_provisioning,
            "dying": self.dying,
            "start_waits": self._pipeline.start_waits,
            "pulled_mb": self._pipeline.registry.moved_mb,  # image layers moved by size (`image_pulls.py`)
            "nodes": len(self.pool),
            "nodes_booting": self.pool.booting,
            "free_slots": _finite_or_none(self.pool.free_slots),
            "tokens": _finite_or_none(self.admission.tokens(now)),
            "ended": dict(self.ended),
            "rejected": {str(k): v for k, v in self.admission.rejections.items()},
            "execs": dict(self.exec_counts),
            "transferred_bytes": dict(self.transfers.moved_bytes),
            "transfers_refused": dict(self.transfers.refused),
            # the profile's [errors] for the rollout steps: files failed part-way, snapshots and restores failed
            "steps_failed": {**self.transfers.failed, **self._snapshots.failed},
        }

    def truth(self) -> builtins.list[builtins.dict[str, Any]]:
        """The vendor's own record of every sandbox (pruned ones included), in acceptance order: lifecycle
        times in vendor seconds and epoch seconds."""
        return self._retention.truth([sb.truth_row(self.clock.wall) for sb in self._sandboxes.values()])

    def close(self) -> None:
        """Cancel every timer; commands in flight fail with SandboxDied. Sandboxes keep their state; their files and
        the snapshots are removed."""
        self._closed = True
        self._pipeline.close()
        self.transfers.close()
        for sb in list(self._active.values()):
            for handle in sb._timers:
                handle.cancel()
            for ticket in list(sb._execs):
                ticket.resolve(SandboxDied(sb.id, str(sb.status), None, "the simulator shut down"))
        self._snapshots.close()
        if self.real_shell is not None:
            self.real_shell.close()  # every real command and background job ends with its namespace
        if self._trees is not None:
            self._trees.close()  # every sandbox's files and every snapshot go with it

    # --- model --------------------------------------------------------------------------------------

    def _accept(self, req: CreateRequest, now: float) -> SimSandbox:
        self._retention.prune(now)
        seq = self._accepted
        self._accepted += 1
        digest = hashlib.blake2b(f"{self.seed}:{seq}{self._id_nonce}".encode(), digest_size=12).hexdigest()
        sb = SimSandbox.accepted(req, f"sb{digest}", seq, now)
        if req.from_snapshot is not None or req.fork_of is not None:
            self._snapshots.seed_tree(sb, req)
        self._sandboxes[sb.id] = sb
        self._active[sb.id] = sb
        self.admission.hold(sb, 1.0)
        self.peak_active = max(self.peak_active, len(self._active))
        if req.idempotency_key is not None:
            self._idempotency[req.idempotency_key] = sb.id
        self._arm_timers(sb, sb.lifetime_s, now)
        admit_at = self._admission_time(now)
        if admit_at > now:
            self._admitting.add(sb.id)
            self.clock.call_at(admit_at, lambda: self._admit(sb))
        else:
            self._pipeline.enqueue(sb, now)
        self._notify(sb)
        return sb

    def _admission_time(self, now: float) -> float:
        """When the control plane lets this create into the pipeline: at once, or (`account.admit_per_s`) one after
        another at that rate, max(now, previous admission + 1 / rate)."""
        rate = self.profile.account.admit_per_s if self.profile.account is not None else math.inf
        if math.isinf(rate):
            return now
        self._admitted_at = max(now, self._admitted_at + 1.0 / rate)
        return self._admitted_at

    def _admit(self, sb: SimSandbox) -> None:
        """Its turn came: into the start pipeline, unless it ended meanwhile (its deadline, a terminate)."""
        if sb.id in self._admitting:
            self._admitting.discard(sb.id)
            self._pipeline.enqueue(sb, self.clock.now())

    def _arm_timers(
        self, sb: SimSandbox, remaining_s: float, now: float, *, deadline: bool = True, lifetime: bool = True
    ) -> None:
        """The startup deadline (counted from now) and the lifetime (`remaining_s` from now) of a sandbox queued."""
        deadline_s = self.profile.startup.deadline_s
        if deadline and math.isfinite(deadline_s):
            sb._timers.append(self.clock.call_at(now + deadline_s, lambda: self._deadline(sb)))
        sb.lifetime_s = now - sb.created_at + remaining_s
        if lifetime and math.isfinite(remaining_s):
            sb._lifetime_timer = self.clock.call_at(now + remaining_s, lambda: self._lifetime(sb))
            sb._timers.append(sb._lifetime_timer)

    def _quota_count(self) -> int:
        """The sandboxes the account's concurrency quota counts: every one not ended, but the PAUSED."""
        return len(self._active) - self._pausing.count + self.dying

    def _deadline(self, sb: SimSandbox) -> None:
        if sb._phase in (_QUEUED, _PULLING, _BOOTING):
            message = self.profile.startup.timeout_message.format(deadline_s=self.profile.startup.deadline_s)
            self._end(sb, SandboxStatus.ERROR, ErrorType.PROVISIONING_TIMEOUT, message)

    def _lifetime(self, sb: SimSandbox) -> None:
        if sb.pause_at_timeout and sb._phase == _RUNNING:  # E2B's autoPause: kept with its files, resumed by call
            self._pausing.pause(sb.id)
            return
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
        self.admission.hold(sb, -1.0, compute=phase != _PAUSED)
        teardown_s = self.profile.account.teardown_s if self.profile.account is not None else 0.0
        if status is SandboxStatus.TERMINATED and teardown_s > 0 and phase != _PAUSED:
            self.dying += 1  # slow to die: it holds its place in the quota a while longer
            self.clock.call_at(now + teardown_s, self._died)
        for handle in sb._timers:
            handle.cancel()
        sb._timers.clear()
        if phase == _PAUSED:
            self._pausing.ended(sb, phase)
        elif sb.id in self._admitting:
            self._admitting.discard(sb.id)  # ended before its admission: never in the pipeline's queue
        else:
            self._pipeline.leave(sb, phase)
        self.ended[f"{status}/{sb.error_type}" if sb.error_type else str(status)] += 1
        self._retention.ended(sb)
        if sb._execs:  # before its processes are killed: a command cut short died with it, it did not exit 137
            died = SandboxDied(sb.id, str(status), sb.error_type, message or f"Sandbox is {status}")
            for ticket in list(sb._execs):
                ticket.resolve(died)
        if self.real_shell is not None:
            self.real_shell.stop(sb.id)  # its processes first, so none writes into the tree being removed
        if self._trees is not None:
            self._trees.remove(sb.id)  # its files go with it (snapshots taken of it stay)
        self._notify(sb)
        if phase not in (_QUEUED, _PAUSED) and self._pipeline.n_waiting > 0:
            self._pipeline.dispatch()  # the freed slot goes to the oldest waiting

    def _died(self) -> None:
        self.dying -= 1

    def _forget(self, sb: SimSandbox) -> bool:
        """Drop an ended sandbox from memory (its truth row is archived by `Retention.prune`)."""
        if self._sandboxes.pop(sb.id, None) is None:
            return False
        if sb.idempotency_key is not None and self._idempotency.get(sb.idempotency_key) == sb.id:
            del self._idempotency[sb.idempotency_key]
        return True

    def _notify(self, sb: SimSandbox) -> None:
        for callback in self._listeners:
            callback(sb)


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


# --- offline workloads for calibration and fast tests ---------------------------------------------
