"""The vendor's serial create intake, fitted from when a burst's creates were let in (issue #31).

What a burst's create times show on this harness (the kept runs of issue #31, 2026-12-06): the harness issues a
burst's creates one after another and most of them reach the vendor only once it has issued them all (a burst of 960
is sent over 0.19-0.50 s; its first tenth is accepted only as the sending ends); the vendor then takes them one after
another, at a pace of its own. That pace is the intake this module fits: the slope of the acceptance times of the
creates let in after the burst's last send (before it, acceptances follow the harness's sends). It is a serial
queue with a per-create time, so it carries from 100 to 960 where nothing else is in flight: prime-like's 0.179 ms a
create at 100 was 0.184 at 960, runloop-like's 0.141 was 0.164. Against a `--local` vendor the intake is this
machine's serving loop (no shipped profile has an admission queue), so the figure describes the machine, and the
fit's note says so. Two things it does not carry, both this machine's, named where the prediction is printed:
when a burst's first sandboxes are ready while it is still being sent, their polls and commands share the cores
and each create slows (ideal-like: 0.16 -> 0.57 ms a create at 960; daytona-like 0.31 -> 0.58), and the wait
while the harness issues the burst is the harness's own, not the vendor's (the engine's loop-lag correction
already takes part of it out of a measured TTI, 0-25 ms at 100 and 39-293 ms at 960).

Only a burst the create bucket did not refuse counts: past a 429 the acceptances follow the bucket's refill, not
the intake (limits.py fits that).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.fitting.observations import CreateTimeline, ProtocolObservation
from providers.sim.core.experiments import BurstResult, simulate_burst
from providers.sim.core.profile import Profile

KEY = "account.admit_per_s"
MIN_CREATES = 10  # a burst with fewer accepted creates gives no slope worth fitting
RATE_REFUSALS = ("rate_limited",)  # a burst with one of these was paced by the bucket, not by admission
MACHINE = (
    "against a --local vendor this is this machine's serving loop, not the vendor (no shipped profile has an "
    "admission queue): the figure describes the machine the trial ran on"
)


@dataclass(frozen=True, slots=True)
class AdmissionFit:
    """The fitted intake rate (creates a second) and how, or None and why not; `gaps` are the seconds between the
    successive acceptances it was read from (a prediction resamples them for its interval)."""

    rate: float | None
    note: str
    unidentified: str | None
    gaps: tuple[float, ...] = ()


def _refused_by_bucket(obs: ProtocolObservation) -> bool:
    if obs.creates is not None and any(k in RATE_REFUSALS for k in obs.creates.refused_s):
        return True
    return any(key.partition("@")[0] in RATE_REFUSALS for key in obs.failures)


def acceptance_slope(accepted_s: Sequence[float]) -> float:
    """Seconds between successive acceptances: the least-squares slope of the sorted accepted times against
    their order (robust to one late straggler in a way the first-to-last span is not)."""
    times = np.sort(np.asarray(accepted_s, dtype=float))
    if len(times) < 2:
        raise ValueError("a slope needs at least two accepted creates")
    order = np.arange(len(times), dtype=float)
    return float(np.polyfit(order, times, 1)[0])


def queued_acceptances(creates: CreateTimeline) -> tuple[float, ...]:
    """The acceptances of the creates the vendor took from its queue: those after the burst's last send (all of
    them when the sends were not recorded), sorted. Before the last send, acceptances follow the harness's sends."""
    accepted = sorted(creates.accepted_s)
    if not creates.sent_s:
        return tuple(accepted)
    issued = max(creates.sent_s)
    return tuple(t for t in accepted if t > issued)


def fit_admission(observations: Sequence[ProtocolObservation], min_width: int) -> AdmissionFit:
    """The intake rate from the bursts at least `min_width` wide whose creates were all let in by the bucket: the
    median over them of 1 / the slope of their queued acceptances (`queued_acceptances`; a burst with fewer than
    `MIN_CREATES` of them: all its acceptances, as the note says)."""
    rates: list[float] = []
    used: list[str] = []
    gaps: list[float] = []
    for obs in observations:
        if obs.protocol != "burst" or obs.concurrency < min_width or obs.creates is None:
            continue
        if len(obs.creates.accepted_s) < MIN_CREATES or _refused_by_bucket(obs):
            continue
        queued = queued_acceptances(obs.creates)
        times, how = queued, "after the harness had sent its last"
        if len(queued) < MIN_CREATES:
            times, how = (
                tuple(sorted(obs.creates.accepted_s)),
                "all of them: too few were sent before the vendor took them",
            )
        slope = acceptance_slope(times)
        if slope > 0:
            rates.append(1.0 / slope)
            gaps += [b - a for a, b in itertools.pairwise(times)]
            used.append(
                f"burst@{obs.concurrency}: {len(times)} of its {len(obs.creates.accepted_s)} creates accepted {how}, "
                f"{1000 * slope:.3f} ms a create"
            )
    if not rates:
        return AdmissionFit(
            None,
            "",
            f"no burst of {min_width} or more with its create times and no create-rate refusal",
        )
    rate = statistics.median(rates)
    note = f"fitted: the serial intake's pace from {'; '.join(used)}; {MACHINE}"
    return AdmissionFit(rate, note, None, tuple(gaps))


def intake_rate(profile: Profile) -> float:
    """The profile's intake rate (creates a second; inf: none)."""
    return profile.account.admit_per_s if profile.account is not None else math.inf


def simulate_intake_burst(profile: Profile, n: int, seed: int, **options: Any) -> BurstResult:
    """A burst of `n` on `profile` through its serial intake (or, where the profile has `[serving]`, through its
    serving queue: the creates sent `spacing_s` apart, each taking its turn among the live sandboxes' requests,
    providers/sim/core/serving_queue.py): the whole burst waits in the vendor's queue at once
    (the harness has issued it) and create k is taken, accepted or refused, at k / `account.admit_per_s`, its wait
    counted in its TTI (from when it joined the queue). Without an intake rate: `simulate_burst` as it is (its
    `spacing_s` then says how the harness sent the burst). The simulator's own admission (after the bucket) is left
    out here: the intake already spaces the creates, and a 429 is decided when the vendor takes the request."""
    if profile.serving is not None:  # the serving queue takes the creates in turn, sent at the harness's pace
        return simulate_burst(profile.with_overrides({KEY: math.inf}), n, seed=seed, **options)
    rate = intake_rate(profile)
    if math.isinf(rate) or n < 2:
        return simulate_burst(profile, n, seed=seed, **options)
    options.pop("spacing_s", None)
    arrivals = [k / rate for k in range(n)]
    plain = profile.with_overrides({KEY: math.inf})
    result = simulate_burst(plain, n, seed=seed, arrivals_s=arrivals, **options)
    samples = tuple(
        dataclasses.replace(
            s,
            tti_s=None if s.tti_s is None else s.tti_s + arrivals[s.index],
            startup_s=None if s.startup_s is None else s.startup_s + arrivals[s.index],
        )
        for s in result.samples
    )
    return dataclasses.replace(result, samples=samples)
