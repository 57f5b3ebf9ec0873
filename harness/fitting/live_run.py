"""How the `stampede run` being predicted plays out in time (issue #31): its stages, time scale, spawn rate and plan,
and the create client's gate after a 429, as the simulator's `RampTiming` takes them.

A prediction is only as good as its picture of the live run: a ramp's stage lasts its hold in wall seconds, a
refused create costs a round trip, and the stub client holds every create after a 429 (providers/throttle_gate.py).
A burst that meets the vendor's rate limit meets that gate too: the engine reads the first 429 while it is still
sending the burst, the creates it starts after that wait out the Retry-After, and one opening later lets in those the
bucket refilled meanwhile (`LiveRun.burst_timing`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.fitting.gate_cascade import GateCascade
from providers.sim.core.profile import Profile
from providers.sim.core.timed_ramp import GATE_OPEN_SHAPE, GATE_PASS_WALL_S, CreateThrottle, RampTiming

# A ramp or steady stage lasts its hold once its level is reached (harness/locust/shapes.py), wall seconds; its
# users loop rollouts back to back all along, so how many it makes is the simulation's to say (providers/sim/core/
# timed_ramp.py). The holds `stampede run` uses when `--hold` is not given:
DEFAULT_HOLD_S = {"ramp": 15.0, "steady": 60.0}  # _HoldingShape.default_hold, SteadyShape.default_hold
DEFAULT_SPAWN_RATE = 100.0  # harness/locust/settings.py: users a stage adds per wall second
DEFAULT_STOP_WALL_S = 60.0  # `stampede run --stop-timeout`'s default (harness/cli/run.py), a run's run.json its own
STAGE_TICK_WALL_S = 1.0  # Locust ticks a shape once a wall second: a level is seen reached on the next tick
TURN_WALL_S = 0.005  # a request's round trip and the engine's turn to the next rollout, wall seconds (localhost)
DEFAULT_COMMANDS = (("true",), ("echo", "stampede"), ("sleep", "2"))  # harness/wire/plan.py DEFAULT_COMMANDS
# While the engine sends a burst, it reads each create's answer late: in bursts of 960 on a 2-core machine
# (2026-12-07, stub client, e2b-like and agent-sandbox-like), 50-80 ms after the vendor's decision (the vendor's
# records against the ops' answers), against well under 1 ms in the trial's burst of 100, which is all sent before
# its first answer. A trial cannot see it, so it is assumed, at the top of that range: it sets when the gate closes.
# Where in that range one live run falls is a race (the same burst of 960 run again let 216-271 creates in), so each
# simulated run behind a prediction's interval draws its own delay from the range; the point estimate keeps the top.
BURST_READ_WALL_S = 0.08
BURST_READ_RANGE_WALL_S = (0.05, 0.08)
# A gate opening is a small burst. Its waiters go out one lock hand-over apart, the vendor lets in
# what its bucket refilled over the hold and refuses the rest, and the gate closes only when the engine reads the
# first 429. Read from a measured ramp's creates (2026-12-08, coreweave-like to 3,840, 50/s refilled): per opening
# ~53 let in over ~43 ms, then 429s for another 67 ms (1,920) and 73 ms (3,840) at the median, 120-157 of them. That
# is the late read of a burst's answers, so where a trial's ramp met no rate limit (no cascade to read) the same
# assumed delay sets how many refusals an opening lets out: 80 ms over the 0.6 ms hand-over, ~133.
# The adapters whose create client holds every create after a 429 for its Retry-After, whole wall seconds, one probe at
# a time (providers/throttle_gate.py): the gate `CreateThrottle.stub_client` models. Modal's holds for its own hint;
# the other SDKs retry or fail on their own terms, not modelled.
GATED_CREATES = frozenset({"stub", "prime"})


@dataclass(frozen=True, slots=True)
class Shape:
    """One stage to predict: a protocol ("burst", "ramp", ...), its width and how many creates it asks for."""

    protocol: str
    users: int
    attempts: int  # a ramp or steady stage: its first wave only (time, not a count, ends it: `hold_s`)
    hold_s: float | None = None  # a ramp or steady stage: how long it holds its level, wall seconds (`--hold`)

    @property
    def label(self) -> str:
        return f"{self.protocol}@{self.users}"


@dataclass(frozen=True, slots=True)
class LiveRun:
    """How the `stampede run` being predicted plays out in time: its wall seconds per vendor second, how fast a stage
    adds users, what a rollout does after its first command, the engine's retries, and whether the create client
    holds its creates after a 429 (`GATED_CREATES`: the stub and Prime adapters' gate)."""

    time_scale: float = 1.0
    spawn_rate: float = DEFAULT_SPAWN_RATE
    commands: tuple[tuple[str, ...], ...] = DEFAULT_COMMANDS
    retries: int = 0
    retry_backoff_s: float | None = None  # None: the rollout plan's default (RampTiming's, which reads it)
    throttle: bool = True
    max_backoff_wall_s: float | None = None  # None: the stub client's default (CreateThrottle.stub_client's)
    gate_cascade: GateCascade | None = None  # None: the simulator's default opening (gate_cascade.py says why not)
    burst_read_wall_s: float = BURST_READ_WALL_S  # how late a burst's create answers are read while it is sent
    stop_wall_s: float = DEFAULT_STOP_WALL_S  # a ramp's end: how long rollouts in flight get (`--stop-timeout`)

    def work_s(self, profile: Profile) -> float:
        """Vendor seconds of a rollout after its first command: each later command's round trip and the vendor's
        mean per-command overhead, and what a `sleep N` sleeps."""
        per_command = profile.exec.overhead_median_s * math.exp(profile.exec.overhead_sigma**2 / 2)
        total = 0.0
        for argv in self.commands[1:]:
            total += per_command + TURN_WALL_S / self.time_scale
            if len(argv) == 2 and argv[0] == "sleep":
                with contextlib.suppress(ValueError):
                    total += max(0.0, float(argv[1]))
        return total

    def opening_refusals(self) -> float:
        """Refusals one opening of the client's gate lets out: read from the trial's ramp where it met the rate
        limit (`gate_cascade`), else those sent while the first is read late, `burst_read_wall_s` (the note on
        "a gate opening" above GATED_CREATES)."""
        if self.gate_cascade is not None:
            return self.gate_cascade.mean
        return self.burst_read_wall_s / GATE_PASS_WALL_S

    def opening_shape(self) -> float:
        return self.gate_cascade.shape if self.gate_cascade is not None else GATE_OPEN_SHAPE

    def timing(self, profile: Profile, shapes: Sequence[Shape]) -> RampTiming:
        """The ramp's stages in vendor seconds: reaching each level (Locust's spawn rate, seen on its next tick),
        then its hold."""
        scale, added, lengths = self.time_scale, 0, []
        for shape in shapes:
            new = max(0, shape.users - added)
            added = max(added, shape.users)
            hold = shape.hold_s if shape.hold_s is not None else DEFAULT_HOLD_S.get(shape.protocol, 15.0)
            reach = (math.floor(new / self.spawn_rate) + 1) * STAGE_TICK_WALL_S
            lengths.append((reach + hold) / scale)
        throttle = None
        if self.throttle:
            held = CreateThrottle.stub_client(scale, self.max_backoff_wall_s).hold_for  # the gate's hold after a 429
            # an opening lets in what the bucket refilled over the hold, then refusals until the first is read
            per_s, depth = profile.create_rate.per_s, profile.create_rate.burst
            refilled = min(depth, per_s * held(1.0 / per_s)) if math.isfinite(per_s) else 0.0
            opening = (refilled + self.opening_refusals(), self.opening_shape())
            throttle = CreateThrottle.stub_client(scale, self.max_backoff_wall_s, opening=opening)
        timing = RampTiming(
            stage_s=tuple(lengths),
            spawn_interval_s=1.0 / self.spawn_rate / scale,
            work_s=self.work_s(profile),
            turn_s=TURN_WALL_S / scale,
            throttle=throttle,
            retries=self.retries,
            stop_s=self.stop_wall_s / scale,
        )
        if self.retry_backoff_s is not None:
            timing = dataclasses.replace(timing, retry_backoff_s=self.retry_backoff_s)
        return timing

    def burst_timing(self, profile: Profile, users: int, spacing_s: float) -> RampTiming:
        """A burst through the create client's gate: `users` users each making one rollout, started `spacing_s`
        vendor seconds apart (the harness's pace), each create's answer read `burst_read_wall_s` late."""
        timing = self.timing(profile, [Shape("burst", users, users)])
        started_by = users * spacing_s + STAGE_TICK_WALL_S / self.time_scale  # every user starts inside the stage
        read_s = self.burst_read_wall_s / self.time_scale
        # a burst's run ends when its rollouts do, however late: no stop timeout cuts it
        return dataclasses.replace(
            timing, stage_s=(started_by,), spawn_interval_s=spacing_s, turn_s=read_s, once=True, stop_s=math.inf
        )


def live_run_of(run_dir: Path | str) -> tuple[LiveRun, float | None]:
    """How a measured run played (`--against`): its time scale, spawn rate, plan and provider from its run.json,
    and its hold (wall seconds; None when it recorded none). A folder that is not a run: one UsageError line."""
    from harness.results.read.dataset import read_run_info

    info = read_run_info(run_dir)
    shape, params = _mapping(info.manifest, "shape"), _mapping(info.manifest, "parameters")
    plan, options = _mapping(params, "plan"), _mapping(params, "provider_options")
    hold = _number(shape.get("hold_s")) or _number(params.get("hold_s"))
    spawn = _number(shape.get("spawn_rate")) or _number(params.get("spawn_rate")) or DEFAULT_SPAWN_RATE
    commands = plan.get("commands")
    stop = _number(info.manifest.get("stop_timeout_s"), zero=True)  # a ramp's own; 0: cancelled at once
    live = LiveRun(
        time_scale=info.time_scale,
        spawn_rate=spawn,
        commands=tuple(tuple(str(w) for w in c) for c in commands) if commands else DEFAULT_COMMANDS,
        retries=int(_number(plan.get("retries")) or 0),
        retry_backoff_s=_number(plan.get("retry_backoff_s"), zero=True),  # a plan's 0 is no backoff, not the default
        throttle=info.provider in GATED_CREATES,
        max_backoff_wall_s=_number(options.get("max_backoff_s")),
        stop_wall_s=DEFAULT_STOP_WALL_S if stop is None else stop,
    )
    return live, hold


def _mapping(parent: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _number(value: object, zero: bool = False) -> float | None:
    """A positive finite number from a manifest (`zero`: or 0), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and (number > 0 or (zero and number == 0)) else None
