"""Offline burst experiments: N rollouts against the simulator on a virtual clock, no network, no sleeping.

`simulate_burst` (N created at once, or `spacing_s` apart) and `simulate_sequential` (one at a time) drive
create -> ready -> one command -> terminate with callbacks on a `VirtualClock`, and return every rollout's
times and failure: what the calibration tests and profile tuning compare against field reports. A burst can
retry init failures as RL frameworks do (`retries`, a client-side `ready_timeout_s`, `retry_backoff_s`): each
failed attempt is counted in `attempt_failures`, and `startup_s` runs from a rollout's first create to its
first command, across attempts. A burst can also hold each sandbox for `hold_s` vendor seconds after its first
command before terminating it, as an RL rollout does while it runs tool calls, so later creates meet a full
pool; each sample records its PENDING time (`pending_s`: acceptance -> placed on a node, `started_at`).

A `client` (`foundation/sandbox_client.py`: the RL framework's sandbox client) replaces those three knobs with the
framework's own policy: a semaphore on its sandboxes between create and alive, a deadline from each attempt's
start (failures `client_startup_deadline`, the client's, never the vendor's), an install step after RUNNING, a
whole-init budget, retries, and leaks (a failed attempt's sandbox never deleted). Then `startup_s` runs from the
rollout's arrival (before the semaphore) to its first command. `simulate_closed_loop` is the RL pattern itself:
each worker runs rollouts back to back, holding each sandbox for an episode. Where the profile has `[serving]`, each
request a rollout makes (create, the readiness wait's once RUNNING, the command, the terminate) takes its turn at
the vendor's one serving queue (`serving_queue.py`), so live sandboxes' requests slow the creates behind them.

Over 600 lines on purpose: `_ProbeWorkload` is the one rollout every offline experiment drives (bursts, closed
loops, ramps, the timed ramp), and its hooks (the RL client's policy, the serving queue) sit beside the steps they
change; split, a reader would follow one rollout across modules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import math
import random
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from foundation.quantiles import nearest_rank
from foundation.sandbox_client import CLIENT_BUDGET_KIND, CLIENT_DEADLINE_KIND, SandboxClient
from providers.base import IMAGE_SIZE_LABEL, INIT_PHASES, RETRY_BACKOFF_S
from providers.sim.core.clock import VirtualClock
from providers.sim.core.profile import Profile
from providers.sim.core.records import CreateRequest, ExecOutcome, Rejected, SandboxDied, SandboxStatus, SimSandbox
from providers.sim.core.serving_queue import ServingQueue
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
    pull_s: float = 0.0  # of the last attempt's startup, vendor seconds waiting for its image's pull

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
    leaked: int = 0  # sandboxes the client failed to delete (they live on to their lifetime, holding quota)
    peak_client_starting: int = 0  # the most sandboxes the client had between create and alive at once

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
        retry_backoff_s: float = RETRY_BACKOFF_S,
        hold_s: float = 0.0,
        client: SandboxClient | None = None,
        seed: int = 0,
    ) -> None:
        if client is not None:
            retries, retry_backoff_s = client.retries, client.retry_backoff_s
            ready_timeout_s = math.inf  # the client's deadline runs from each attempt's start instead
        self.client = client
        self.seed = seed
        self.leaked = 0
        self._starting: set[int] = set()  # rollouts holding the client's semaphore (create -> alive)
        self.peak_starting = 0
        self._waiting: deque[int] = deque()  # rollouts waiting for the semaphore
        self._draining = False
        self._attempt_at: dict[int, float] = {}
        self.sim = sim
        self.request = request
        self.probe = probe
        self.probe_timeout_s = probe_timeout_s
        self.on_finish = on_finish
        self.retries = retries
        self.ready_timeout_s = ready_timeout_s
        self.retry_backoff_s = retry_backoff_s
        self.hold_s = hold_s
        self.hold_for: Callable[[int], float] = lambda index: hold_s  # a rollout's own episode length
        self.request_for: Callable[[int], CreateRequest] = lambda index: request  # a rollout's own create
        self.samples: dict[int, BurstSample] = {}
        self.attempt_failures: Counter[str] = Counter()
        self._first: dict[int, float] = {}
        self._attempt: dict[int, int] = {}
        self._by_id: dict[str, tuple[int, float]] = {}
        self._installing: set[str] = set()
        serving = sim.profile.serving  # the vendor's API server as one queue (offline only: serving_queue.py)
        self.queue = None if serving is None else ServingQueue(serving, sim.clock)
        sim.add_listener(self._changed)

    def launch(self, index: int) -> None:
        """The rollout asks for a sandbox: its create takes its turn at the vendor's serving queue where the
        profile has one (`serving_queue.py`; its wait counts in its TTI), else is made at once."""
        if self.queue is None:
            self.launch_now(index)
        else:
            self.queue.submit("create", functools.partial(self.launch_now, index, self.sim.clock.now()))

    def _turn(self, kind: str, then: Callable[[], None]) -> None:
        """`then()` once a request of `kind` had its turn at the serving queue (at once without one)."""
        if self.queue is None:
            then()
        else:
            self.queue.submit(kind, then)

    def launch_now(self, index: int, asked_at: float | None = None) -> None:
        """The create made now; `asked_at`: when the rollout asked for it (its TTI runs from then)."""
        now = self.sim.clock.now() if asked_at is None else asked_at
        self._first.setdefault(index, now)
        client = self.client
        if client is not None:
            if len(self._starting) >= client.max_starting:
                self._waiting.append(index)  # the client's semaphore: wait for a sandbox of ours to be alive
                return
            if now - self._first[index] >= client.init_budget_s:
                self._attempt[index] = self._attempt.get(index, 0) + 1
                self._finish(BurstSample(index, now, None, None, CLIENT_BUDGET_KIND, "create", self._attempt[index]))
                self.attempt_failures[CLIENT_BUDGET_KIND] += 1
                return
            self._starting.add(index)
            self.peak_starting = max(self.peak_starting, len(self._starting))
        self._attempt[index] = self._attempt.get(index, 0) + 1
        self._attempt_at[index] = now
        try:
            sb = self.sim.create(self.request_for(index))
        except Rejected as exc:
            self._fail(index, now, None, str(exc.reason), "create")
            return
        self._by_id[sb.id] = (index, now)
        if client is not None:
            give_up = min(now + client.startup_deadline_s, self._first[index] + client.init_budget_s)
            if math.isfinite(give_up):
                self.sim.clock.call_at(give_up, functools.partial(self._client_gives_up, sb))
        elif math.isfinite(self.ready_timeout_s):
            self.sim.clock.call_at(now + self.ready_timeout_s, functools.partial(self._ready_timeout, sb))

    def _release(self, index: int) -> None:
        """The rollout's sandbox is alive (or its attempt over): its place in the client's semaphore goes on."""
        if index in self._starting:
            self._starting.discard(index)
            if self._draining:
                return  # the loop below, further up the stack, hands the place on
            self._draining = True
            try:
                while self._waiting and self.client is not None and len(self._starting) < self.client.max_starting:
                    self.launch(self._waiting.popleft())
            finally:
                self._draining = False

    def _client_gives_up(self, sb: SimSandbox) -> None:
        """The client's deadline (or its init budget) passed before the sandbox was alive: the client's failure."""
        entry = self._by_id.get(sb.id)
        if entry is None or (sb.running_at is not None and sb.id not in self._installing):
            return  # alive already (its probe runs)
        del self._by_id[sb.id]
        self._installing.discard(sb.id)
        client = self.client
        assert client is not None
        index, created = entry
        now = self.sim.clock.now()
        out_of_budget = now >= self._first[index] + client.init_budget_s - 1e-9
        pending = _pending_s(sb)
        if sb.active:
            leak = client.leak_prob > 0 and random.Random(f"{self.seed}:leak:{index}:{self._attempt[index]}").random()
            if client.leak_prob > 0 and leak < client.leak_prob:
                self.leaked += 1  # never deleted: it runs on to its lifetime, counted against the quota
            else:
                self.sim.terminate(sb.id)
        kind = CLIENT_BUDGET_KIND if out_of_budget else CLIENT_DEADLINE_KIND
        self._fail(index, created, sb.id, kind, "ready", pending)

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
        self._release(index)
        if failure == CLIENT_BUDGET_KIND:
            self._finish(BurstSample(index, created, sandbox_id, None, failure, phase, attempt, pending_s=pending_s))
            return
        if phase in INIT_PHASES and attempt <= self.retries:
            self.sim.clock.call_at(self.sim.clock.now() + self.retry_backoff_s, functools.partial(self.launch, index))
            return
        self._finish(BurstSample(index, created, sandbox_id, None, failure, phase, attempt, pending_s=pending_s))

    def _changed(self, sb: SimSandbox) -> None:
        entry = self._by_id.get(sb.id)
        if entry is None:
            return
        index, created = entry
        if sb.status is SandboxStatus.RUNNING and sb.exec_count == 0 and sb.id not in self._installing:
            install_s = self.client.install_s if self.client is not None else 0.0
            if install_s > 0:  # the client's own step (its in-sandbox server, an install) before alive
                self._installing.add(sb.id)
                self.sim.clock.call_at(self.sim.clock.now() + install_s, functools.partial(self._alive, sb))
                return
            self._alive(sb)
        elif not sb.active and sb.running_at is None:
            self._by_id.pop(sb.id, None)
            self._fail(index, created, sb.id, sb.error_type or str(sb.status), "ready", _pending_s(sb))
        elif not sb.active and sb.id in self._installing:
            self._installing.discard(sb.id)
            self._by_id.pop(sb.id, None)
            self._fail(index, created, sb.id, sb.error_type or str(sb.status), "ready", _pending_s(sb))

    def _alive(self, sb: SimSandbox) -> None:
        """The sandbox is usable by the client: its semaphore place goes on, and the probe command runs."""
        self._installing.discard(sb.id)
        entry = self._by_id.get(sb.id)
        if entry is None or not sb.active:
            return
        index, created = entry
        self._release(index)

        def done(result: ExecOutcome | BaseException) -> None:
            now = self.sim.clock.now()
            self._by_id.pop(sb.id, None)
            attempt = self._attempt[index]
            pending = _pending_s(sb)
            if isinstance(result, ExecOutcome):
                startup = now - self._first[index]
                sample = BurstSample(
                    index, created, sb.id, now - created, None, None, attempt, startup, pending, sb.pull_s
                )
            elif isinstance(result, SandboxDied):
                failure = f"died:{result.error_type}"
                sample = BurstSample(index, created, sb.id, None, failure, "exec", attempt, pending_s=pending)
            else:
                failure = type(result).__name__
                sample = BurstSample(index, created, sb.id, None, failure, "exec", attempt, pending_s=pending)
            if sb.active:
                hold = self.hold_for(index)
                let_go = functools.partial(self._turn, "terminate", functools.partial(self._let_go, sb))
                if sample.ok and hold > 0:
                    # the rollout keeps its sandbox (tool calls) and only then lets it go
                    self.sim.clock.call_at(now + hold, let_go)
                elif self.queue is None:
                    self.sim.terminate(sb.id)
                else:
                    let_go()
            if sample.failure is not None:
                self.attempt_failures[sample.failure] += 1
            self._finish(sample)

        def run() -> None:
            if not sb.active:  # it ended while its requests waited their turn
                done(SandboxDied(sb.id, str(sb.status), sb.error_type, sb.error_message or f"Sandbox is {sb.status}"))
                return
            self.sim.exec_start(sb.id, self.probe, timeout_s=self.probe_timeout_s, on_done=done)

        if self.queue is None:
            run()
        else:  # the look that sees it RUNNING (and the auth), then the command, each in its turn
            self.queue.submit("ready", functools.partial(self.queue.submit, "exec", run))

    def _let_go(self, sb: SimSandbox) -> None:
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
    retry_backoff_s: float = RETRY_BACKOFF_S,
    hold_s: float = 0.0,
    arrivals_s: Sequence[float] | None = None,
    client: SandboxClient | None = None,
    setup: Callable[[VendorSimulator], None] | None = None,
    image_mb: float | None = None,
    images: int = 1,
    cold_cache: bool | None = None,
) -> BurstResult:
    """`n` rollouts created at once (or `spacing_s` apart, or at the vendor seconds `arrivals_s` give: a live
    burst's creates as its vendor accepted them) on a VirtualClock, retrying init failures `retries` times (no
    retries by default). Each waits until RUNNING (noticed instantly, or given up after `ready_timeout_s`), runs
    one probe command, keeps the sandbox `hold_s` vendor seconds more (0: none; an RL rollout's tool calls), and
    terminates it. A `client` (the RL framework's sandbox client) replaces `retries`, `ready_timeout_s` and
    `retry_backoff_s` with its own policy; `setup(sim)` runs before the first rollout (leaked sandboxes of an
    earlier run, say). Images: `image_mb` declares the image's size as a rollout plan does (the
    `stampede-image-mb` label: pulled by size where the profile gives a bandwidth, `image_pulls.py`), `images > 1`
    gives rollout i the image `{image}-{i % images}` (SWE-bench's one image per task), and `cold_cache` True starts
    the initial nodes with no image, False with every one (None: the profile's `pool.initial_nodes_warm`).
    """
    prof = _load(profile)
    if cold_cache is not None:
        prof = prof.with_overrides({"pool.initial_nodes_warm": not cold_cache})
    if n < 0 or images < 1:
        raise ValueError("n must be >= 0 and images >= 1")
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
        client=client,
        seed=seed,
    )
    if image_mb is not None or images > 1:
        labels = req.labels + ((f"{IMAGE_SIZE_LABEL}={image_mb:g}",) if image_mb is not None else ())
        sized = dataclasses.replace(req, labels=labels)
        named = [dataclasses.replace(sized, image=f"{req.image}-{k}") for k in range(images)] if images > 1 else [sized]
        work.request_for = lambda index: named[index % len(named)]
    with _gc_paused():
        if setup is not None:
            setup(sim)
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
    return BurstResult(prof.name, n, seed, samples, stats, dict(work.attempt_failures), work.leaked, work.peak_starting)


def simulate_closed_loop(
    profile: Profile | str,
    workers: int,
    rollouts_per_worker: int,
    seed: int = 0,
    *,
    hold_s: float,
    hold_spread: float = 0.0,
    client: SandboxClient | None = None,
    ramp_s: float = 0.0,
    start_at_s: float = 0.0,
    lifetime_s: float = 3600.0,
    setup: Callable[[VendorSimulator], None] | None = None,
    probe: str = "echo ready",
) -> BurstResult:
    """The RL pattern (uni-agent's): `workers` rollouts in flight, each worker running `rollouts_per_worker`
    rollouts back to back; a rollout holds its sandbox `hold_s` vendor seconds (its episode; with `hold_spread` s,
    uniform in hold_s x [1 - s, 1 + s], seeded per rollout, so the waves after the first drift apart) after its first
    command, and the worker's next rollout asks for a sandbox when the episode ends (at once after a failure).
    Workers start at `start_at_s`, `ramp_s / workers` apart (0: all at once, the first wave a burst); `setup(sim)`
    runs first (leaked sandboxes of an earlier run, created before `start_at_s`). Sample index
    `w * rollouts_per_worker + k` is worker w's k-th rollout; in flight `workers`, creates/s about
    `workers / (hold_s + startup)`: 960 workers holding 600 s give uni-agent's ~1.6 creates/s.
    """
    prof = _load(profile)
    if workers < 0 or rollouts_per_worker < 1 or not hold_s >= 0 or not ramp_s >= 0 or not start_at_s >= 0:
        raise ValueError("workers >= 0, rollouts_per_worker >= 1, and hold_s, ramp_s, start_at_s >= 0")
    if not 0.0 <= hold_spread < 1.0:
        raise ValueError("hold_spread must be in [0, 1)")
    clock = VirtualClock()
    sim = VendorSimulator(prof, seed=seed, clock=clock)
    req = CreateRequest(image="python:3.12-slim", labels=("stampede-sim-closed-loop",), lifetime_s=lifetime_s)

    def next_one(index: int) -> None:
        if (index + 1) % rollouts_per_worker == 0:
            return
        wait = work.hold_for(index) if work.samples[index].ok else 0.0
        clock.call_at(clock.now() + wait, functools.partial(work.launch, index + 1))

    work = _ProbeWorkload(sim, req, probe, 60.0, next_one, hold_s=hold_s, client=client, seed=seed)
    if hold_spread:
        work.hold_for = lambda index: (
            hold_s * (1.0 + hold_spread * (2.0 * random.Random(f"{seed}:hold:{index}").random() - 1.0))
        )
    with _gc_paused():
        if setup is not None:
            setup(sim)
        for w in range(workers):
            clock.call_at(
                start_at_s + (w * ramp_s / workers if ramp_s else 0.0),
                functools.partial(work.launch, w * rollouts_per_worker),
            )
        clock.run()
    stats = sim.stats()
    sim.close()
    n = workers * rollouts_per_worker
    samples = tuple(work.samples[i] for i in range(n))
    return BurstResult(prof.name, n, seed, samples, stats, dict(work.attempt_failures), work.leaked, work.peak_starting)


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


def simulate_ramp(
    profile: Profile | str, levels: Sequence[int], attempts: Sequence[int], seed: int = 0
) -> list[BurstResult]:
    """A ramp as one run, one result per stage: `levels[k]` users in stage k, each creating again as its rollout
    ends (a refused create too), stage k over once `attempts[k]` rollouts started in it; then the next level's extra
    users join. The vendor's state (its create bucket, quota, pool) carries from stage to stage, as in a live ramp
    (`stampede run --scenario ramp`); a rollout counts in the stage it started in."""
    prof = _load(profile)
    if not levels or len(levels) != len(attempts) or min(levels) < 1 or min(attempts) < 1:
        raise ValueError("a ramp needs one attempts count per level, every level and count at least 1")
    clock = VirtualClock()
    sim = VendorSimulator(prof, seed=seed, clock=clock)
    req = CreateRequest(image="python:3.12-slim", labels=("stampede-sim-ramp",), lifetime_s=3600.0)
    stage_of: list[int] = []
    started = [0] * len(levels)
    current = [0]

    def start() -> None:
        k = current[0]
        if started[k] >= attempts[k]:
            if k + 1 >= len(levels):
                return  # the last stage's rollouts are all started: this user stops
            current[0] = k = k + 1
            for _ in range(max(0, levels[k] - levels[k - 1])):
                clock.call_at(clock.now(), start)
        started[k] += 1
        stage_of.append(k)
        work.launch(len(stage_of) - 1)

    def next_one(index: int) -> None:
        clock.call_at(clock.now(), start)

    work = _ProbeWorkload(sim, req, "echo ready", 60.0, next_one, seed=seed)
    with _gc_paused():
        for _ in range(levels[0]):
            clock.call_at(0.0, start)
        clock.run()
    stats = sim.stats()
    sim.close()
    out = []
    for k in range(len(levels)):
        samples = tuple(work.samples[i] for i, stage in enumerate(stage_of) if stage == k and i in work.samples)
        out.append(BurstResult(prof.name, len(samples), seed, samples, stats, {}))
    return out
