"""A live ramp (or steady run) on the VirtualClock, stage by stage in time: what `stampede run --scenario ramp` does.

`experiments.simulate_ramp` ends a stage after a count of creates and retries a refused create at once, at no cost:
against a capped vendor the refusals burn the count in no time, and a stage above the cap shows 100% failure with no
TTI at all. A live stage lasts its hold (plus the time Locust takes to reach its level), in wall seconds, and its
users loop rollouts back to back for as long as it lasts (the engine's lease): so the number of rollouts in a stage
is set by time. Each user here loops create -> RUNNING -> first command (its TTI) -> the rest of the rollout's work
(`work_s`) -> terminate, and a rollout counts in the stage it started in (the engine stamps the stage at its start).

What a refused create costs live, modelled in vendor seconds:
- one round trip (`turn_s`: the create's answer, the row, the lease starting the next rollout); with no
  `retries` the engine starts the user's next rollout at once (plan `retries`: after `retry_backoff_s`);
- the create client's throttle gate (`CreateThrottle`, `providers/throttle_gate.py`, the stub client's): a 429
  rate-limit answer closes it for every create of the client for its Retry-After (whole wall seconds, at least one,
  at most `max_wait`), then one create at a time goes out as a probe until one is answered with anything but a
  429, which opens it for all the waiting creates at once; an answer that opens it before the Retry-After has
  passed (a create sent before the 429 was read) lets new creates straight through and the waiting ones only when
  it has passed (live, the first of them sleeps it out, the rest queue on its lock); a create held past `max_wait`
  fails `rate_limited` unsent. A quota or capacity refusal opens the gate as any answer does. Time spent at the gate is part of the
  rollout's TTI, as it is live. The engine's outage backoff (`harness/engine/outage_gate.py`) is for refused
  connections, which a simulated vendor never answers with: not modelled.

`once`: each user makes one rollout and stops, a burst sent through the same gate (harness/fitting/live_run.py).

Deterministic per seed; every loop bounded: by the run's end in vendor time (each turn costs at least `turn_s`
> 0) and by `max_rollouts` (the result's stats then say `truncated`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from providers.base import RETRY_BACKOFF_S, THROTTLE_DEFAULT_S, THROTTLE_MAX_WAIT_S
from providers.sim.core.clock import VirtualClock
from providers.sim.core.experiments import BurstResult, BurstSample, _gc_paused, _load, _ProbeWorkload
from providers.sim.core.profile import Profile
from providers.sim.core.records import CreateRequest, Rejected, RejectReason, SimSandbox
from providers.sim.core.simulator import VendorSimulator

RATE_LIMITED = str(RejectReason.RATE_LIMITED)
# How a live gate opening plays (the stub client on a busy event loop), wall seconds: measured, not derived. On a
# 2-core box (e2b-like ramps 50,100,200 and 240,480,960) the waiters went ~0.6 ms apart (one lock hand-over and a
# create sent a loop iteration) and the engine read the first 429 answer, closing the gate again, tens of ms after
# it opened: over 101 openings (ramps to 200, 960 and 1920), 32 / 58 / 104 / 157 / 217 creates through at p10 / p25 /
# p50 / p75 / p90, mean 113, sd 68: a gamma of shape 2.7 (its 39 / 63 / 100 / 149 / 204). The engine has changed
# since, and its openings with it: on 05aa933's, 198 openings of ramps against e2b-like and daytona-like (trials' to
# 100 and 400, runs' to 3,840) let out 5 / 17 / 37 / 59 / 78 refusals at p10 / p25 / p50 / p75 / p90, mean 39.8, a
# gamma of shape 2.2 (22 to 51 a ramp). Being the engine's, a prediction reads it from the trial's own ramp where it
# has one (harness/fitting/gate_cascade.py), and without one times it by the assumed late read of a burst's answers
# (harness/fitting/live_run.py); these stay the default of a simulation given no opening.
GATE_PASS_WALL_S = 6e-4
GATE_OPEN_WALL_S = 40 * GATE_PASS_WALL_S  # mean time an opening stays open before the first 429 read closes it
GATE_OPEN_SHAPE = 2.2  # its spread: gamma shape (mean / sd squared), from the same openings
MAX_ROLLOUTS = 2_000_000  # a bound on one simulated run (a 3,840 ramp against a cap of 100 makes ~10^5)


@dataclass(frozen=True, slots=True)
class CreateThrottle:
    """A create client's gate after a 429 (`providers/throttle_gate.ThrottleGate`), in vendor seconds.

    `step_s` is one wall second in vendor seconds (1 / time scale): the stub vendor's Retry-After header is whole
    wall seconds, at least one, and the client reads the header first; a 429 without one holds `default_s`. When a
    probe's answer opens the gate, the waiters go `pass_s` apart (one lock hand-over each) for as long as the engine
    takes to read the first 429 of theirs (`open_s` on average, gamma of shape `open_shape`, drawn per opening): a
    live opening lets ~100 through, not all of them, nor only the few an instantly read refusal would let through."""

    max_wait_s: float
    default_s: float
    step_s: float
    pass_s: float = 0.0
    open_s: float = 0.0
    open_shape: float = 0.0  # 0: every opening lasts open_s

    def __post_init__(self) -> None:
        if not (self.max_wait_s > 0 and self.default_s > 0 and self.step_s > 0):
            raise ValueError("a create gate needs max_wait_s, default_s and step_s > 0 (a zero wait never ends)")
        if not (self.pass_s >= 0 and self.open_s >= 0 and self.open_shape >= 0):
            raise ValueError("pass_s, open_s and open_shape must be >= 0")

    @classmethod
    def stub_client(
        cls,
        time_scale: float,
        max_backoff_wall_s: float | None = None,
        *,
        opening: tuple[float, float] | None = None,
    ) -> CreateThrottle:
        """The `stub` provider's gate (its `max_backoff_s` option, wall seconds) against a vendor at `time_scale`
        (wall seconds per vendor second). `opening`: creates let out per opening and the gamma shape of their spread,
        as read from the harness's own runs (harness/fitting/gate_cascade.py); None: the default measured below.
        `max_backoff_wall_s` None: the provider's own default."""
        scale = time_scale
        if max_backoff_wall_s is None:
            max_backoff_wall_s = THROTTLE_MAX_WAIT_S
        passes, shape = opening if opening is not None else (GATE_OPEN_WALL_S / GATE_PASS_WALL_S, GATE_OPEN_SHAPE)
        return cls(
            max_backoff_wall_s / scale,
            THROTTLE_DEFAULT_S / scale,
            1.0 / scale,
            GATE_PASS_WALL_S / scale,
            passes * GATE_PASS_WALL_S / scale,
            shape,
        )

    def hold_for(self, retry_after_s: float | None) -> float:
        """Vendor seconds a 429 with the vendor's `retry_after_s` (vendor seconds) closes the gate for."""
        if retry_after_s is None:
            wait = self.default_s
        else:  # the header: ceil of the wall seconds, at least one (providers/sim/prime/api.py)
            wait = max(1, math.ceil(retry_after_s / self.step_s - 1e-9)) * self.step_s
        return min(wait, self.max_wait_s)


@dataclass(frozen=True, slots=True)
class RampTiming:
    """How a live ramp runs in time, in vendor seconds (wall seconds / time scale for a simulated vendor)."""

    stage_s: tuple[float, ...]  # each stage's length: reaching its level, then its hold
    spawn_interval_s: float  # between two users joining (Locust's spawn rate)
    work_s: float  # a successful rollout's work after its first command, to its terminate
    turn_s: float  # a round trip and the engine's turn to the next rollout (> 0)
    throttle: CreateThrottle | None = None
    retries: int = 0  # plan retries of an init failure, each attempt its own row
    retry_backoff_s: float = RETRY_BACKOFF_S
    once: bool = False  # each user makes one rollout (its retries included) and stops: a burst sent through the gate
    # after the last stage: how long rollouts still in flight get to finish (the run's stop timeout); those not done
    # then are cancelled, as live, and are no rows (inf: every one finishes, however late)
    stop_s: float = math.inf

    def __post_init__(self) -> None:
        if not self.stage_s or min(self.stage_s) <= 0 or not all(math.isfinite(s) for s in self.stage_s):
            raise ValueError("every stage needs a positive, finite length")
        if not self.turn_s > 0 or not self.spawn_interval_s >= 0 or not self.work_s >= 0:
            raise ValueError("turn_s must be > 0, spawn_interval_s and work_s >= 0")
        if self.retries < 0 or not self.retry_backoff_s >= 0:
            raise ValueError("retries and retry_backoff_s must be >= 0")
        if not self.stop_s >= 0:
            raise ValueError("stop_s must be >= 0")


class _Gate:
    """`ThrottleGate` on the VirtualClock: FIFO waiters, one probe at a time while closed, an opening's cascade."""

    def __init__(self, clock: VirtualClock, throttle: CreateThrottle, send: Callable[[int], None], seed: int) -> None:
        self.clock = clock
        self.throttle = throttle
        self.send = send
        self.give_up: Callable[[int], None] = lambda index: None
        self.closed = False
        self.until = 0.0
        self.open_until = 0.0  # an opening: no answer to a create is read before this (a busy loop's cascade)
        self.opened = False  # an answer opened the gate: the waiters' cascade begins when they are let go
        self.probe: int | None = None
        self.waiting: deque[tuple[int, float]] = deque()
        self._wakes: set[float] = set()
        self._rng = random.Random(f"{seed}:create-gate")

    def enter(self, index: int) -> None:
        if not self.closed:
            self.send(index)
            return
        self.waiting.append((index, self.clock.now()))
        self.pump()

    def answered(self, index: int, retry_after: float | None, rate_limited: bool) -> None:
        """The answer to a create sent through the gate (the probe's, or any create's while it was open)."""
        now = self.clock.now()
        if rate_limited:
            self.until = max(self.until, now + self.throttle.hold_for(retry_after))
            self.closed = True
        else:
            self.opened = self.opened or self.closed
            self.closed = False
        if self.probe == index:
            self.probe = None
        self.pump()

    def read_at(self, answered_at: float) -> float:
        """When the client reads an answer that came back at `answered_at`: not before the opening's end."""
        return max(answered_at, self.open_until)

    def pump(self) -> None:
        """Let through whom the gate lets through now; wake up again when the next one may go."""
        now = self.clock.now()
        self._wakes.discard(now)
        # a waiter held past max_wait fails rate_limited, never sent, even behind a probe still out (live, each waits
        # on the lock with its own timeout); the waiters are in order of arrival, so of deadline
        while self.waiting and now >= self.waiting[0][1] + self.throttle.max_wait_s - 1e-9:
            self.give_up(self.waiting.popleft()[0])
        while self.probe is None and self.waiting:
            index, since = self.waiting[0]
            if now < self.until - 1e-12:  # the first waiter sleeps out the backoff, even if an answer opened the gate
                self._wake(min(self.until, since + self.throttle.max_wait_s))
                return
            if not self.closed:
                if self.opened:  # an opening: the waiters cascade until a 429 of theirs is read (`read_at`)
                    self.opened = False
                    shape = self.throttle.open_shape
                    spread = self._rng.gammavariate(shape, 1.0 / shape) if shape > 0 else 1.0
                    self.open_until = now + self.throttle.open_s * spread
                self.waiting.popleft()
                self.send(index)
                if self.throttle.pass_s > 0 and self.waiting:
                    self._wake(now + self.throttle.pass_s)  # the next hand-over
                    return
                continue
            self.waiting.popleft()
            self.probe = index
            self.send(index)
            break  # the rest wait for the probe's answer, each only until its own deadline
        if self.waiting:
            self._wake(self.waiting[0][1] + self.throttle.max_wait_s)

    def _wake(self, t: float) -> None:
        if t not in self._wakes:
            self._wakes.add(t)
            self.clock.call_at(t, self.pump)


def simulate_timed_ramp(
    profile: Profile | str,
    levels: Sequence[int],
    timing: RampTiming,
    seed: int = 0,
    *,
    max_rollouts: int = MAX_ROLLOUTS,
) -> list[BurstResult]:
    """A live ramp as one run on the VirtualClock, one result per stage: `levels[k]` users in stage k, which lasts
    `timing.stage_s[k]` vendor seconds; each user loops rollouts back to back until the last stage ends. Rollouts
    in flight then get `timing.stop_s` to finish (a run's stop timeout): a rollout not over by then (its work after
    the first command included) is cancelled and is no row, as a live run's cancelled rows are no outcome. The
    vendor's state carries from stage to stage. A sample is one attempt (one row of a live run); its `tti_s` runs
    from the rollout's start, the gate included."""
    prof = _load(profile)
    if not levels or len(levels) != len(timing.stage_s) or min(levels) < 1:
        raise ValueError("a timed ramp needs one length per level, every level at least 1 user")
    if max_rollouts < 1:
        raise ValueError("max_rollouts must be at least 1")
    clock = VirtualClock()
    sim = VendorSimulator(prof, seed=seed, clock=clock)
    req = CreateRequest(image="python:3.12-slim", labels=("stampede-sim-ramp",), lifetime_s=3600.0)
    bounds = [0.0]
    for length in timing.stage_s:
        bounds.append(bounds[-1] + length)
    end = bounds[-1]
    stage_of: list[int] = []
    user_of: list[int] = []
    attempt_of: list[int] = []
    started_at: list[float] = []
    sent_at: dict[int, float] = {}
    refused: dict[int, Rejected] = {}
    sending: list[int] = []  # the index whose create is being sent (a refusal finishes inside `launch`)
    truncated = [False]
    over_at: dict[int, float] = {}  # when each row's rollout is over (its first command, then its work)

    def stage_at(t: float) -> int:
        k = 0
        while k + 1 < len(levels) and t >= bounds[k + 1] - 1e-12:
            k += 1
        return k

    def begin(user: int, attempt: int = 1, stage: int | None = None) -> None:
        now = clock.now()
        if now >= end - 1e-12 and attempt == 1:
            return  # the run is over: this user starts no new rollout (a retry of one in flight still goes)
        if len(stage_of) >= max_rollouts:
            truncated[0] = True
            return
        index = len(stage_of)
        stage_of.append(stage_at(now) if stage is None else stage)  # a retry keeps its rollout's stage
        user_of.append(user)
        attempt_of.append(attempt)
        started_at.append(now)
        if gate is None:
            send(index)
        else:
            gate.enter(index)

    create = sim.create

    def create_noting_refusal(request: CreateRequest) -> SimSandbox:
        try:
            return create(request)
        except Rejected as exc:
            if sending:
                refused[sending[-1]] = exc
            raise

    setattr(sim, "create", create_noting_refusal)  # noqa: B010 - the workload drops a refusal's Retry-After

    def send(index: int) -> None:
        sent_at[index] = clock.now()
        if work.queue is None:
            sent(index)
        else:  # the create takes its turn at the vendor's serving queue; its refusal is known once it had it
            work.queue.submit("create", functools.partial(sent, index))

    def sent(index: int) -> None:
        """The create reaches the vendor (the simulator decides it now) and its answer goes back."""
        sending.append(index)
        try:
            work.launch_now(index, sent_at[index])
        finally:
            sending.pop()
        exc = refused.pop(index, None)
        back = clock.now() + timing.turn_s  # the answer reaches the client one round trip later
        if gate is not None:
            back = gate.read_at(back)
        if exc is not None:
            clock.call_at(back, functools.partial(answer_refusal, index, exc))
        elif gate is not None:
            clock.call_at(back, functools.partial(gate.answered, index, None, False))

    def answer_refusal(index: int, exc: Rejected) -> None:
        if gate is not None:
            gate.answered(index, exc.retry_after, str(exc.reason) == RATE_LIMITED)
        ended(index)

    def give_up(index: int) -> None:
        now = clock.now()
        work.samples[index] = BurstSample(index, now, None, None, RATE_LIMITED, "create")
        ended(index)

    def finished(index: int) -> None:
        if sending and sending[-1] == index and index in refused:
            return  # a refused create: its answer comes a round trip later (answer_refusal)
        ended(index)

    def ended(index: int) -> None:
        """A row is over: the user's next attempt or rollout starts when the live engine would start it."""
        sample = work.samples[index]
        over_at[index] = clock.now() + (timing.work_s if sample.ok else 0.0)  # its work, then its terminate
        user, attempt = user_of[index], attempt_of[index]
        if sample.ok:
            if not timing.once:
                clock.call_at(clock.now() + timing.work_s + timing.turn_s, functools.partial(begin, user))
        elif sample.phase in ("create", "ready") and attempt <= timing.retries:
            wait = timing.retry_backoff_s + (0.0 if sample.phase == "create" else timing.turn_s)
            clock.call_at(clock.now() + wait, functools.partial(begin, user, attempt + 1, stage_of[index]))
        elif not timing.once:
            late = 0.0 if sample.phase == "create" else timing.turn_s
            clock.call_at(clock.now() + late, functools.partial(begin, user))

    work = _ProbeWorkload(sim, req, "echo ready", 60.0, finished, hold_s=timing.work_s, seed=seed)
    gate = _Gate(clock, timing.throttle, send, seed) if timing.throttle is not None else None
    if gate is not None:
        gate.give_up = give_up
    users = 0
    for k, level in enumerate(levels):
        for j in range(max(0, level - users)):
            clock.call_at(bounds[k] + j * timing.spawn_interval_s, functools.partial(begin, users + j))
        users = max(users, level)
    cutoff = end + timing.stop_s
    with _gc_paused():
        if math.isfinite(cutoff):
            clock.run_until(cutoff)
        else:
            clock.run()
    stats = {**sim.stats(), "truncated": truncated[0]}
    sim.close()
    out = []
    for k in range(len(levels)):
        rows = [i for i in _rows(stage_of, k, work) if over_at.get(i, math.inf) <= cutoff]
        samples = tuple(_from_start(work.samples[i], started_at[i], sent_at.get(i)) for i in rows)
        out.append(BurstResult(prof.name, len(samples), seed, samples, stats, {}))
    return out


def _rows(stage_of: list[int], k: int, work: _ProbeWorkload) -> list[int]:
    return [i for i, stage in enumerate(stage_of) if stage == k and i in work.samples]


def _from_start(sample: BurstSample, started: float, sent: float | None) -> BurstSample:
    """The row as the live harness records it: TTI from the rollout's start (its wait at the gate included)."""
    waited = (sent - started) if sent is not None else 0.0
    if sample.tti_s is None or waited <= 0:
        return dataclasses.replace(sample, created_at=started)
    return dataclasses.replace(sample, created_at=started, tti_s=sample.tti_s + waited)


__all__ = ["MAX_ROLLOUTS", "CreateThrottle", "RampTiming", "simulate_timed_ramp"]
