"""Pause and resume: a sandbox kept (id, files, lifetime left) without a node slot, then placed again.

What the vendors document, and so what is modelled: a pause saves the sandbox and frees its host (E2B: "only
running sandboxes count toward your concurrency limit", so a PAUSED sandbox holds no quota; Daytona's stopped
sandboxes give back vCPU and memory but keep their disk, so the resource pool keeps only the disk). Commands in
flight die with the pause (real ones too: E2B's memory snapshot, processes kept across a pause, is not modelled;
Daytona's stop behaves so); the lifetime clock stops and restarts on resume with what was left, or with the
lifetime the resume asks for (E2B's `connect(timeout=...)`). A resume is admitted again (QUOTA_EXHAUSTED when the
account is full), queues for a slot like a create, and boots in the profile's `sandbox.resume_median_s` instead of
a cold boot (no image pull: the snapshot travels with it). `created_at`, `started_at` and `running_at` keep the
first start, so a truth row's TTI is the create's; `pause_count` and `paused_s` say how long it was away.
A sandbox created with `pause_at_timeout` (E2B's autoPause) is paused by its lifetime instead of ended; with no
lifetime left, its resume must be given one (E2B's connect always is).

The simulator composes one `Pausing`; a node slot back and a place in the queue are the start pipeline's
(`pipeline.py`), the timers the simulator's (`PauseHost`).
"""

from __future__ import annotations

import math
from typing import Protocol

from providers.sim.core.admission import Admission
from providers.sim.core.clock import SimClock
from providers.sim.core.draws import Stream
from providers.sim.core.execution.isolated_shell import IsolatedShell
from providers.sim.core.pipeline import StartPipeline
from providers.sim.core.profile import Profile
from providers.sim.core.records import (
    _PAUSED,
    _QUEUED,
    _RUNNING,
    NotRunning,
    SandboxDied,
    SandboxStatus,
    SimSandbox,
)


class PauseHost(Protocol):
    """What pausing needs of the simulator (the simulator is one; no import of it here)."""

    profile: Profile
    seed: int
    clock: SimClock
    admission: Admission
    real_shell: IsolatedShell | None
    _pipeline: StartPipeline

    def get(self, sandbox_id: str) -> SimSandbox: ...

    def _arm_timers(self, sb: SimSandbox, remaining_s: float, now: float) -> None: ...

    def _notify(self, sb: SimSandbox) -> None: ...

    def _quota_count(self) -> int: ...


class Pausing:
    """Pause and resume for one simulator; `count` is how many of its sandboxes are PAUSED now."""

    def __init__(self, host: PauseHost) -> None:
        self.host = host
        self.count = 0
        self.pauses = 0
        self.resumes = 0

    def pause(self, sandbox_id: str) -> float:
        """RUNNING -> PAUSED now; returns the vendor seconds the pause takes (the front waits them before answering).

        Raises NotFound, or NotRunning for a sandbox that is not RUNNING (starting, already PAUSED, ended)."""
        host = self.host
        sb = host.get(sandbox_id)
        if sb._phase != _RUNNING:
            raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
        now = host.clock.now()
        sb._remaining_s = sb.created_at + sb.lifetime_s - now if sb._lifetime_timer is not None else math.inf
        for handle in sb._timers:
            handle.cancel()
        sb._timers.clear()
        sb._lifetime_timer = None
        host._pipeline.leave(sb, _RUNNING)
        sb._phase = _PAUSED
        sb.status = SandboxStatus.PAUSED
        sb.node = None
        sb.paused_at = now
        sb.updated_at = now
        sb.pause_count += 1
        self.count += 1
        self.pauses += 1
        host.admission.hold(sb, -1.0, disk=False)
        if sb._execs:  # before the processes are killed: a command cut short died, it did not exit 137
            died = SandboxDied(sb.id, str(SandboxStatus.PAUSED), None, "the sandbox was paused")
            for ticket in list(sb._execs):
                ticket.resolve(died)
        if host.real_shell is not None:
            host.real_shell.stop(sb.id)  # real commands and background jobs end too: memory is not kept
        spec = host.profile.sandbox
        factor = Stream(host.seed, "pause", sb.seq, sb.pause_count).lognormal(1.0, spec.sigma)
        host._notify(sb)
        host._pipeline.refill()  # the freed slot goes to a sandbox that waits for one
        return factor * (spec.pause_median_s + spec.pause_per_gib_s * sb.memory_mb / 1024)

    def resume(self, sandbox_id: str, lifetime_s: float | None = None) -> SimSandbox:
        """PAUSED -> PENDING (queued for a slot), then PROVISIONING and RUNNING in the profile's resume time.

        `lifetime_s`: vendor seconds it may live from now (None: what was left when it paused). Raises NotFound,
        NotRunning for a sandbox that is not PAUSED, Rejected (QUOTA_EXHAUSTED) when the account is full."""
        host = self.host
        sb = host.get(sandbox_id)
        if sb._phase != _PAUSED:
            raise NotRunning(sb.id, sb.status, sb.error_type, sb.error_message)
        if lifetime_s is not None and not lifetime_s > 0:
            raise ValueError(f"lifetime_s must be > 0, got {lifetime_s!r}")
        if lifetime_s is None and not sb._remaining_s > 0:  # paused at its timeout: nothing left to run again with
            raise ValueError(f"sandbox {sb.id} paused at its timeout: its resume needs a lifetime_s")
        host.admission.readmit(sb, active=host._quota_count())
        now = host.clock.now()
        self.count -= 1
        self.resumes += 1
        host.admission.hold(sb, 1.0, disk=False)
        sb.paused_s += now - (sb.paused_at if sb.paused_at is not None else now)
        sb.paused_at = None
        sb.resumed_at = now
        sb.updated_at = now
        sb._phase = _QUEUED
        sb._resuming = True
        sb.status = SandboxStatus.PENDING
        host._arm_timers(sb, sb._remaining_s if lifetime_s is None else float(lifetime_s), now)
        host._pipeline.enqueue(sb, now)
        host._notify(sb)
        return sb

    def boot_time(self, sb: SimSandbox) -> float:
        """The vendor seconds a resumed (else a forked) sandbox boots in, instead of a cold boot's."""
        spec = self.host.profile.sandbox
        if sb._resuming:
            return Stream(self.host.seed, "resume", sb.seq, sb.pause_count).lognormal(spec.resume_median_s, spec.sigma)
        median = spec.fork_median_s + spec.fork_per_gib_s * sb.state_bytes / float(1 << 30)  # by the source's files
        return Stream(self.host.seed, "fork", sb.seq).lognormal(median, spec.sigma)

    def ended(self, sb: SimSandbox, phase: int) -> None:
        """A sandbox ended from `phase`: a PAUSED one gives its place back (it held no slot and no quota)."""
        if phase == _PAUSED:
            self.count -= 1
            if sb.paused_at is not None and sb.ended_at is not None:
                sb.paused_s += sb.ended_at - sb.paused_at
            sb.paused_at = None
