"""The boot's load delay read from a trial's ramp, where its burst cannot show it (issue #31).

A burst of 100 shows the delay each booting sandbox adds to the others only when the burst's own boot is the boot
unloaded plus that delay. Against a vendor that pulls the image onto cold nodes it is not: coreweave-like's burst of
100 waits ~8 s for the pulls, the delay at 100 (0.2 s) drowns in them, and the burst fits no delay at all. The same
trial's ramp then runs on warm nodes to 400 users, and its stages' medians rise with their width (2.19, 2.29, 2.48,
2.75 s at 50 to 400 against the vendor's 0.002 s a booting sandbox): the delay shows there.

A ramp's TTI also carries the spawn rate, the users creating again as their rollouts end, and the pool filling,
which a delay fitted by a closed formula would take for boot congestion. So the ramp is replayed as it ran
(`simulate_timed_ramp` with the run's own time scale, spawn rate, plan and holds, `live_run.live_run_of`), every
stage in turn so the pool and the bucket carry over, and the delay is the one whose replay meets the medians of the
stages wider than the burst in which no create was refused. Its cap is held where the widest of them left it, as
the burst's is (`fit._fit_load_delay`): growth past what a run saw is not identified. The prediction of the ramp to
3,840 that missed with no delay (coreweave-like's stage of 480: 3.15 s against 4.57 measured) meets it with the
delay this reads (4.59 s).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from foundation.quantiles import nearest_rank
from harness.fitting.limits import REFUSALS
from harness.fitting.live_run import LiveRun, Shape, live_run_of
from harness.fitting.observations import ProtocolObservation
from providers.sim.core.profile import Profile
from providers.sim.core.timed_ramp import simulate_timed_ramp

SEEDS = 2  # replays per candidate delay: a ramp's stage has hundreds of rollouts, its median moves little by seed
STEPS = 8  # bisection steps: the delay to within 1/256 of its bracket
MAX_DELAY_S = 1.0  # per booting sandbox: far above any vendor's (coreweave-like's prior: 0.002)


@dataclass(frozen=True, slots=True)
class RampLoad:
    """A delay fitted from one run's ramp: the profile carrying it, and the stages it was read from."""

    profile: Profile
    stages: tuple[int, ...]
    run: str

    def note(self) -> str:
        widths = ", ".join(f"ramp@{width}" for width in self.stages)
        return f"the ramp's stages wider than the burst ({widths}), replayed as the run played them"


def held_load_delay(profile: Profile, delay: float, booting: int) -> Profile:
    """`profile` whose boots each slow by `delay` per other sandbox booting, held once `booting` boot at once: the
    one shape both fits of the load delay try (from a burst's spread, and here from a ramp's stages). The keys'
    sources stay the prior's: the fit names what it fitted when it writes the profile."""
    boot = dataclasses.replace(profile.boot, load_delay_s=delay, load_delay_max_s=delay * (booting - 1))
    return dataclasses.replace(profile, boot=boot)


def _refused(observation: ProtocolObservation) -> bool:
    return any(kind.split("@")[0] in REFUSALS for kind in observation.failures)


LiveOf = Callable[[Path | str], tuple[LiveRun, float | None]]


def fit_load_from_ramp(
    profile: Profile,
    observations: Sequence[ProtocolObservation],
    burst_width: int,
    live_of: LiveOf = live_run_of,
) -> RampLoad | None:
    """The delay (and its held cap) one ramp run's replay needs to meet its stages wider than `burst_width`; None
    when no ramp of our own runs has such a stage, or the replay without any delay is already as slow as they.
    `live_of`: how a run played (its folder's run.json by default)."""
    by_run: dict[str, list[ProtocolObservation]] = {}
    for observation in observations:
        if observation.protocol == "ramp" and observation.creates is not None:
            by_run.setdefault(observation.creates.run, []).append(observation)
    for run, stages in by_run.items():
        read = [
            i
            for i, o in enumerate(stages)
            if o.concurrency > burst_width and not _refused(o) and o.quantiles.get("p50", 0) > 0
        ]
        if read:
            return _fit_run(profile, run, stages, read, live_of)
    return None


def _fit_run(
    profile: Profile, run: str, stages: list[ProtocolObservation], read: list[int], live_of: LiveOf
) -> RampLoad | None:
    live, hold = live_of(run)
    shapes = [Shape("ramp", o.concurrency, o.concurrency, hold) for o in stages]
    widest = max(stages[i].concurrency for i in read)

    def error(delay: float) -> float:
        candidate = held_load_delay(profile, delay, widest)
        timing = live.timing(candidate, shapes)
        per_seed = [
            simulate_timed_ramp(candidate, [s.users for s in shapes], timing, seed=seed) for seed in range(SEEDS)
        ]
        errs = []
        for i in read:
            medians = [nearest_rank(r[i].ttis(), 0.5) for r in per_seed if r[i].ttis()]
            if medians:
                errs.append(math.log(statistics.median(medians) / stages[i].quantiles["p50"]))
        return statistics.fmean(errs) if errs else 0.0

    if error(0.0) >= 0:
        return None
    # the bracket as the burst's fit sets it: every stage's median spread over its width, doubled until too slow
    low, high = 0.0, max(0.001, max(stages[i].quantiles["p50"] for i in read) / widest)
    while error(high) < 0:
        if high >= MAX_DELAY_S:
            return None  # slower than any delay makes it: something else (a pool, a queue), not boot load
        high *= 2
    for _ in range(STEPS):  # bisection on a monotone error: a larger delay, slower stages
        mid = (low + high) / 2
        low, high = (mid, high) if error(mid) < 0 else (low, mid)
    return RampLoad(held_load_delay(profile, (low + high) / 2, widest), tuple(stages[i].concurrency for i in read), run)
