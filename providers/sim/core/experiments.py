"""Offline burst experiments: N rollouts against the simulator on a virtual clock, no network, no sleeping.

`simulate_burst` (N created at once, or `spacing_s` apart) and `simulate_sequential` (one at a time) drive
create -> ready -> one command -> terminate with callbacks on a `VirtualClock`, and return every rollout's
times and failure: what the calibration tests and profile tuning compare against field reports. A burst can
retry init failures as RL frameworks do (`retries`, a client-side `ready_timeout_s`, `retry_backoff_s`): each
failed attempt is counted in `attempt_failures`, and `startup_s` runs from a rollout's first create to its
first command, across attempts. A burst can also hold each sandbox for `hold_s` vendor seconds after its first
command before terminating it, as an RL rollout does while it runs tool calls, so later creates meet a full
pool; each sample records its PENDING time (`pending_s`: acceptance -> placed on a node, `started_at`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from foundation.quantiles import nearest_rank
from providers.base import INIT_PHASES
from providers.sim.core.clock import VirtualClock
from providers.sim.core.profile import Profile
from providers.sim.core.records import CreateRequest, ExecOutcome, Rejected, SandboxDied, SandboxStatus, SimSandbox
from providers.sim.core.simulator import VendorSimulator


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
    attempts: int = 1
    startup_s: float | None = None  # first attempt's create -> first command done (= tti_s without retries)
    pending_s: float | None = None  # the last attempt's sandbox: accepted -> left PENDING; None if it never did

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
    attempt_failures: Mapping[str, int] = field(default_factory=dict)  # every failed attempt, by kind

    def startups(self) -> list[float]:
        """Startup latencies (first create -> interactive, across retries) of the rollouts that got there, sorted."""
        return sorted(s.startup_s for s in self.samples if s.startup_s is not None)

    def ttis(self) -> list[float]:
        """TTIs of the successful rollouts, sorted."""
        return sorted(s.tti_s for s in self.samples if s.tti_s is not None)

    def quantile(self, q: float) -> float:
        """Nearest-rank quantile of the successful TTIs (untrimmed)."""
        return nearest_rank(self.ttis(), q)

    def pendings(self) -> list[float]:
        """PENDING times (vendor seconds, acceptance -> placed on a node) of the sandboxes that left PENDING,
        sorted; a sandbox that ended while still PENDING (or a rejected create) has none."""
        return sorted(s.pending_s for s in self.samples if s.pending_s is not None)

    @property
    def pending_max(self) -> float:
        """The longest PENDING (NaN when no sandbox left PENDING)."""
        values = self.pendings()
        return values[-1] if values else math.nan

    @property
    def pending_p99(self) -> float:
        """Nearest-rank p99 of the PENDING times (untrimmed)."""
        return nearest_rank(self.pendings(), 0.99)

    def pending_share_over(self, threshold_s: float) -> float:
        """Share of all `n` rollouts whose sandbox stayed PENDING longer than `threshold_s` before being placed."""
        return sum(1 for s in self.samples if s.pending_s is not None and s.pending_s > threshold_s) / max(1, self.n)

    def never_left_pending(self) -> int:
        """Accepted sandboxes that ended still PENDING (a rollout's last attempt)."""
        return sum(1 for s in self.samples if s.sandbox_id is not None and s.pending_s is None)

    @property
    def failure_rate(self) -> float:
        return sum(1 for s in self.samples if not s.ok) / max(1, len(self.samples))

    def failures(self) -> Counter[str]:
        return Counter(s.failure for s in self.samples if s.failure is not None)

    def init_failures(self) -> int:
        """Rollouts that never got a usable sandbox (what RL users call init failures)."""
        return sum(1 for s in self.samples if s.phase in INIT_PHASES)

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
            "pending_max": self.pending_max,
            "pending_p99": self.pending_p99,
        }


def _pending_s(sb: SimSandbox) -> float | None:
    """Vendor seconds from acceptance to leaving PENDING (placement on a node); None if it never left."""
    return None if sb.started_at is None else sb.started_at - sb.created_at


class _ProbeWorkload:
    """Drives rollouts on a VirtualClock with callbacks (no event loop, no real sleeping)."""

    def __init__(
        self,
        sim: VendorSimulator,
        request: CreateRequest,
        probe: str,
        probe_timeout_s: float,
        on_finish: Callable[[int], None] | None = None,
        *,
        retries: int = 0,
        ready_timeout_s: float = math.inf,
        retry_backoff_s: float = 1.0,
        hold_s: float = 0.0,
    ) -> None:
        self.sim = sim
        self.request = request
        self.probe = probe
        self.probe_timeout_s = probe_timeout_s
        self.on_finish = on_finish
        self.retries = retries
        self.ready_timeout_s = ready_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.hold_s = hold_s
        self.samples: dict[int, BurstSample] = {}
        self.attempt_failures: Counter[str] = Counter()
        self._first: dict[int, float] = {}
        self._attempt: dict[int, int] = {}
        self._by_id: dict[str, tuple[int, float]] = {}
        sim.add_listener(self._changed)

    def launch(self, index: int) -> None:
        now = self.sim.clock.now()
        self._first.setdefault(index, now)
        self._attempt[index] = self._attempt.get(index, 0) + 1
        try:
            sb = self.sim.create(self.request)
        except Rejected as exc:
            self._fail(index, now, None, str(exc.reason), "create")
            return
        self._by_id[sb.id] = (index, now)
        if math.isfinite(self.ready_timeout_s):
            self.sim.clock.call_at(now + self.ready_timeout_s, functools.partial(self._ready_timeout, sb))

    def _ready_timeout(self, sb: SimSandbox) -> None:
        entry = self._by_id.get(sb.id)
        if entry is None or sb.running_at is not None:
            return
        del self._by_id[sb.id]
        pending = _pending_s(sb)  # None: given up on while still PENDING
        if sb.active:
            self.sim.terminate(sb.id)  # the client gives up on it and cleans up, as the harness does
        self._fail(entry[0], entry[1], sb.id, "ready_timeout", "ready", pending)

    def _fail(
        self,
        index: int,
        created: float,
        sandbox_id: str | None,
        failure: str,
        phase: str,
        pending_s: float | None = None,
    ) -> None:
        self.attempt_failures[failure] += 1
        attempt = self._attempt[index]
        if phase in INIT_PHASES and attempt <= self.retries:
            self.sim.clock.call_at(self.sim.clock.now() + self.retry_backoff_s, functools.partial(self.launch, index))
            return
        self._finish(BurstSample(index, created, sandbox_id, None, failure, phase, attempt, pending_s=pending_s))

    def _changed(self, sb: SimSandbox) -> None:
        entry = self._by_id.get(sb.id)
        if entry is None:
            return
        index, created = entry
        if sb.status is SandboxStatus.RUNNING and sb.exec_count == 0:

            def done(result: ExecOutcome | BaseException) -> None:
                now = self.sim.clock.now()
                self._by_id.pop(sb.id, None)
                attempt = self._attempt[index]
                pending = _pending_s(sb)
                if isinstance(result, ExecOutcome):
                    startup = now - self._first[index]
                    sample = BurstSample(index, created, sb.id, now - created, None, None, attempt, startup, pending)
                elif isinstance(result, SandboxDied):
                    failure = f"died:{result.error_type}"
                    sample = BurstSample(index, created, sb.id, None, failure, "exec", attempt, pending_s=pending)
                else:
                    failure = type(result).__name__
                    sample = BurstSample(index, created, sb.id, None, failure, "exec", attempt, pending_s=pending)
                if sb.active:
                    if sample.ok and self.hold_s > 0:
                        # the rollout keeps its sandbox (tool calls) and only then lets it go
                        self.sim.clock.call_at(now + self.hold_s, functools.partial(self._release, sb))
                    else:
                        self.sim.terminate(sb.id)
                if sample.failure is not None:
                    self.attempt_failures[sample.failure] += 1
                self._finish(sample)

            self.sim.exec_start(sb.id, self.probe, timeout_s=self.probe_timeout_s, on_done=done)
        elif not sb.active and sb.running_at is None:
            self._by_id.pop(sb.id, None)
            self._fail(index, created, sb.id, sb.error_type or str(sb.status), "ready", _pending_s(sb))

    def _release(self, sb: SimSandbox) -> None:
        if sb.active:  # it may have ended meanwhile (lifetime)
            self.sim.terminate(sb.id)

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
    retries: int = 0,
    ready_timeout_s: float = math.inf,
    retry_backoff_s: float = 1.0,
    hold_s: float = 0.0,
    arrivals_s: Sequence[float] | None = None,
) -> BurstResult:
    """`n` rollouts created at once (or `spacing_s` apart, or at the vendor seconds `arrivals_s` give: a live
    burst's creates as its vendor accepted them) on a VirtualClock, retrying init failures `retries` times (no
    retries by default). Each waits until RUNNING (noticed instantly, or given up after `ready_timeout_s`), runs
    one probe command, keeps the sandbox `hold_s` vendor seconds more (0: none; an RL rollout's tool calls), and
    terminates it.
    """
    prof = _load(profile)
    if n < 0:
        raise ValueError("n must be >= 0")
    if arrivals_s is not None and (len(arrivals_s) != n or not all(a >= 0 for a in arrivals_s)):
        raise ValueError("arrivals_s must give n times >= 0")
    if not hold_s >= 0:
        raise ValueError("hold_s must be >= 0")
    clock = VirtualClock()
    sim = VendorSimulator(prof, seed=seed, clock=clock)
    req = request or CreateRequest(image=image, labels=("stampede-sim-burst",), lifetime_s=3600.0)
    work = _ProbeWorkload(
        sim,
        req,
        probe,
        probe_timeout_s,
        retries=retries,
        ready_timeout_s=ready_timeout_s,
        retry_backoff_s=retry_backoff_s,
        hold_s=hold_s,
    )
    with _gc_paused():
        for i in range(n):
            if arrivals_s is not None:
                clock.call_at(float(arrivals_s[i]), functools.partial(work.launch, i))
            elif spacing_s > 0:
                clock.call_at(i * spacing_s, functools.partial(work.launch, i))
            else:
                work.launch(i)
        clock.run()
    stats = sim.stats()
    sim.close()
    samples = tuple(work.samples[i] for i in range(n))
    return BurstResult(prof.name, n, seed, samples, stats, dict(work.attempt_failures))


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
    return BurstResult(prof.name, n, seed, samples, stats, dict(work.attempt_failures))
