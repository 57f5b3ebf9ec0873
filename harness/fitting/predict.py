"""Predict a wider run from a fitted profile, with how sure the prediction is (issue #31, deliver 3).

A fitted profile is one point estimate from a few small runs; what a user needs to know at 960 is the range the
runs allow. So the prediction is simulated (the simulator's own experiments, on the VirtualClock, seeded) on the
profile and on `bootstrap` refits of it, each refit fitted again (`fit_profile`) to the input observations drawn
again with replacement (`fit.resample`), each simulated with `seeds` seeds. The interval pools every refit's
every seed: the fit's uncertainty and the one run's own sampling noise at that width, which is what a measured run
is compared with. A profile with no inputs (a hand-written, shipped one) gets an interval from the seeds alone,
and the prediction says so. A ramp (or steady run) is simulated in time, as `stampede run` plays it: each stage
holds for its `--hold` (wall seconds / the time scale, in vendor seconds), its users looping rollouts all along, a
refused create costing what it costs live (`LiveRun`, providers/sim/core/timed_ramp.py). A burst is sent at the
pace the inputs' bursts were sent (`burst_spacing`), not at one instant: live, 960 creates leave the harness over
0.2-0.5 s, and the tokens a bucket refills meanwhile let in creates a burst at one instant would have refused.
A burst the vendor refuses for the rate meets the client's create gate as a live one does (harness/fitting/
live_run.py): the creates started after the first 429 is read wait out its Retry-After, and some then get in.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from foundation.quantiles import nearest_rank
from harness.fitting.admission import KEY as INTAKE_KEY
from harness.fitting.admission import fit_admission, intake_rate, simulate_intake_burst
from harness.fitting.fit import WIDE_MIN, FitResult, fit_profile, resample
from harness.fitting.gate_cascade import fit_gate_cascade
from harness.fitting.live_run import BURST_READ_RANGE_WALL_S, DEFAULT_HOLD_S, LiveRun, Shape
from harness.fitting.observations import ProtocolObservation
from harness.fitting.serving import describe as describe_serving
from harness.fitting.serving import resampled as resampled_serving
from providers.sim.core.experiments import BurstResult, simulate_burst, simulate_sequential
from providers.sim.core.profile import Profile
from providers.sim.core.records import RejectReason
from providers.sim.core.timed_ramp import simulate_timed_ramp

SCENARIOS = ("burst", "ramp", "steady", "sequential", "staggered")
DEFAULT_STAGES = (60, 120, 240, 480, 960)  # the ramp scenario's own default stages
INTERVAL = 0.90  # the prediction interval's coverage
TTI_WITHIN = 0.15  # issue #31's done-when: TTI p50 and p99 within 15%
FAILURE_WITHIN = 0.03  # and failure rate within 3 points
SEEDS_ALONE = 20  # runs of a profile with no inputs to refit (fewer when seeds x bootstrap is fewer)
STATS = ("p50", "p95", "p99", "failure")
QUANTILE_OF = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


@dataclass(frozen=True, slots=True)
class Estimate:
    """A predicted statistic: the profile's own value (median over seeds) and the interval around it."""

    value: float
    low: float
    high: float

    def covers(self, measured: float) -> bool:
        """Inside the interval, ends included (a rate's 1 - 100/150 and 50/150 differ in the last bit)."""
        return self.low - 1e-9 <= measured <= self.high + 1e-9


@dataclass(frozen=True, slots=True)
class StagePrediction:
    shape: Shape
    stats: dict[str, Estimate]  # p50/p95/p99 (vendor s), failure (first attempts), failed_after_retries


@dataclass(frozen=True)
class Prediction:
    """What a profile predicts for a scenario, stage by stage, and where its interval comes from."""

    profile: str
    stages: tuple[StagePrediction, ...]
    refits: int  # bootstrap refits behind the interval (0: the simulation seeds alone)
    seeds: int  # simulated runs per refit (or in all, with no refits)
    inputs: tuple[str, ...]  # the observations' sources the refits resampled
    interval_from: str  # one sentence: what the interval covers


@dataclass(frozen=True, slots=True)
class Score:
    """One predicted statistic beside the measured one."""

    stage: str
    stat: str
    measured: float
    predicted: Estimate

    @property
    def inside(self) -> bool:
        return self.predicted.covers(self.measured)

    @property
    def within(self) -> bool:
        """Within 15% (TTI) or 3 points (failure rate) of the predicted value: the issue's done-when."""
        if math.isnan(self.measured) or math.isnan(self.predicted.value):
            return False
        if self.stat.startswith("fail"):
            return abs(self.predicted.value - self.measured) <= FAILURE_WITHIN + 1e-12
        return self.measured > 0 and abs(self.predicted.value - self.measured) / self.measured <= TTI_WITHIN + 1e-12


def shapes_for(
    scenario: str, users: int | None = None, stages: Sequence[int] | None = None, hold_s: float | None = None
) -> list[Shape]:
    """The stages a scenario runs: a burst (or staggered, sequential) of `users`, a ramp's `stages` (capped at
    `users` as `stampede run` caps them), a steady run of `users`; a ramp's or steady run's stages hold `hold_s` wall
    seconds each (None: the scenario's own default, as `stampede run` without `--hold`). ValueError for a shape that
    is not one."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r} (predictable: {', '.join(SCENARIOS)})")
    if users is not None and users < 1:
        raise ValueError(f"users must be at least 1, got {users}")
    if hold_s is not None and not (hold_s > 0 and math.isfinite(hold_s)):
        raise ValueError(f"hold must be a positive number of seconds, got {hold_s}")
    if hold_s is not None and scenario not in DEFAULT_HOLD_S:
        raise ValueError(f"a hold is a ramp's or a steady run's; a {scenario} takes none")
    hold = DEFAULT_HOLD_S.get(scenario) if hold_s is None else hold_s
    if scenario == "ramp":
        levels = tuple(stages) if stages else DEFAULT_STAGES
        if any(level < 1 for level in levels):
            raise ValueError("every ramp stage needs at least 1 user")
        if users:
            levels = (*(level for level in levels if level < users), users)
        return [Shape("ramp", level, level, hold) for level in levels]
    if stages:
        raise ValueError(f"stages are a ramp's; a {scenario} takes users")
    if users is None:
        raise ValueError(f"a {scenario} needs a number of users")
    if scenario == "steady":
        return [Shape("steady", users, users, hold)]
    return [Shape(scenario, 1 if scenario == "sequential" else users, users)]


def shapes_from_observations(observations: Sequence[ProtocolObservation], hold_s: float | None = None) -> list[Shape]:
    """The stages a measured run had, to predict that run (`--against`); a ramp's or steady run's with its hold."""
    return [
        Shape(o.protocol, o.concurrency, max(o.attempts, 1), hold_s if o.protocol in DEFAULT_HOLD_S else None)
        for o in observations
    ]


def _timed(shape: Shape) -> bool:
    return shape.protocol in DEFAULT_HOLD_S


def burst_gaps(observations: Sequence[ProtocolObservation]) -> list[float]:
    """Vendor seconds between consecutive creates of the inputs' bursts as the harness sent them
    (`CreateTimeline.sent_s`); empty when no burst has send times (published files)."""
    gaps: list[float] = []
    for obs in observations:
        sent = obs.creates.sent_s if obs.protocol == "burst" and obs.creates is not None else ()
        gaps += [b - a for a, b in itertools.pairwise(sent)]
    return gaps


def burst_spacing(observations: Sequence[ProtocolObservation]) -> float | None:
    """The pace a burst is sent at: the mean of `burst_gaps` (its bursts' first to last send over their gaps); None
    without one. The harness sends one create after another at its own pace, so the pace of its burst of 100 is its
    pace at 960 (agent-sandbox-like's trial: 0.30 ms apart; its burst of 960 left over 0.20 s). The gaps come in
    clumps (a median of 0.1 ms, one of 12.6 ms), so a refit's pace is their mean resampled: 0.14-0.54 ms (90%)."""
    gaps = burst_gaps(observations)
    return statistics.fmean(gaps) if gaps and sum(gaps) > 0 else None


def simulate_shape(
    profile: Profile, shape: Shape, seed: int, retries: int = 0, live: LiveRun | None = None, spacing_s: float = 0.0
) -> BurstResult:
    """One seeded run of a stage on the VirtualClock (a ramp or steady stage on its own: users looping rollouts for
    the stage's time); a burst's creates `spacing_s` vendor seconds apart (0: at one instant)."""
    if shape.protocol == "sequential":
        return simulate_sequential(profile, shape.attempts, seed=seed)
    if shape.protocol == "staggered":
        return simulate_burst(profile, shape.attempts, seed=seed, spacing_s=0.2, retries=retries)
    if _timed(shape):
        timing = (live or LiveRun(time_scale=profile.default_time_scale)).timing(profile, [shape])
        return simulate_timed_ramp(profile, [shape.users], timing, seed=seed)[0]
    result = simulate_intake_burst(profile, shape.users, seed, retries=retries, spacing_s=spacing_s)
    if shape.protocol != "burst" or live is None or not live.throttle or not _rate_limited(result):
        return result
    # its 429s close the client's gate on the creates still being sent (live_run.py): the burst again, through it
    timing = dataclasses.replace(live.burst_timing(profile, shape.users, spacing_s), retries=retries)
    return simulate_timed_ramp(profile, [shape.users], timing, seed=seed)[0]


def _read_late(live: LiveRun, read_wall_s: float) -> LiveRun:
    return dataclasses.replace(live, burst_read_wall_s=read_wall_s)


def _rate_limited(result: BurstResult) -> bool:
    return any(s.phase == "create" and s.failure == str(RejectReason.RATE_LIMITED) for s in result.samples)


def simulate_stages(
    profile: Profile,
    shapes: Sequence[Shape],
    seed: int,
    retries: int = 0,
    live: LiveRun | None = None,
    spacing_s: float = 0.0,
) -> list[BurstResult]:
    """One seeded run of every stage: a ramp's stages (or a steady run's) as one run in time, so the vendor's create
    bucket, quota and pool carry from stage to stage as they do live; other stages each on their own. `live`: how
    the run plays in time (default: the profile's own time scale, `stampede run`'s spawn rate and plan); a burst's
    creates `spacing_s` vendor seconds apart."""
    if len(shapes) > 1 and all(_timed(s) for s in shapes):
        timing = (live or LiveRun(time_scale=profile.default_time_scale)).timing(profile, shapes)
        return simulate_timed_ramp(profile, [s.users for s in shapes], timing, seed=seed)
    return [simulate_shape(profile, shape, seed, retries, live, spacing_s) for shape in shapes]


def run_stats(result: BurstResult, retries: int = 0) -> dict[str, float]:
    """A simulated run's statistics as a stampede run reports them: nearest-rank TTI quantiles of the successes and
    the share of rollouts whose first attempt failed (and, with retries, the share still failed after them)."""
    ttis = result.ttis()
    out = {k: nearest_rank(ttis, q) if ttis else math.nan for k, q in QUANTILE_OF.items()}
    n = max(1, result.n)
    out["failure"] = sum(1 for s in result.samples if not s.ok or s.attempts > 1) / n
    if retries:
        out["failed_after_retries"] = result.failure_rate
    return out


def _interval(values: list[float]) -> tuple[float, float]:
    finite = sorted(v for v in values if not math.isnan(v))
    if not finite:
        return math.nan, math.nan
    return nearest_rank(finite, (1 - INTERVAL) / 2), nearest_rank(finite, (1 + INTERVAL) / 2)


def _median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.median(finite) if finite else math.nan


_COUNTED = re.compile(r"^(\d+) of (\d+) attempts")


def failure_counts(result: FitResult) -> dict[str, tuple[int, int]]:
    """The failure probabilities a fit took from counts (`errors.*`: k of n attempts, as its notes say)."""
    out = {}
    for key in result.fitted:
        found = _COUNTED.match(result.notes.get(key, "")) if key.startswith("errors.") else None
        if found and int(found[2]) > 0:
            out[key] = (int(found[1]), int(found[2]))
    return out


def _resampled_intake(profile: Profile, gaps: Sequence[float], rng: random.Random) -> Profile:
    """`profile` with its intake taken at the mean of `gaps` drawn again (unchanged without an intake or gaps)."""
    if math.isinf(intake_rate(profile)) or len(gaps) < 2:
        return profile
    mean = statistics.fmean(rng.choices(gaps, k=len(gaps)))
    return profile.with_overrides({INTAKE_KEY: 1.0 / mean}) if mean > 0 else profile


def intake_caveat(profile: Profile, shapes: Sequence[Shape], spacing_s: float | None) -> str:
    """What the prediction says of a burst's create path: the serving queue it carries where the fit found one
    (every request's turn, serving.py), else the fitted intake (against a `--local` vendor: the trial machine's,
    not the vendor's), and, when the burst's first sandboxes are due RUNNING before
    its last create is taken (its creates sent and taken, one after another, for longer than the median boot),
    that the contention of their polls and commands for the same cores is not carried (admission.py)."""
    widest = max((s.users for s in shapes if s.protocol == "burst"), default=0)
    rate = intake_rate(profile)
    if profile.serving is not None:
        return (
            f"; carries a serving queue, every request in its turn ({describe_serving(profile.serving)}, fitted "
            "from the trial's ramp; against a --local vendor the trial machine's serving loop, not the vendor), so "
            "a burst's first sandboxes' requests slow the creates behind them; not carried: a request's cost growing "
            "with what is in flight beyond the trial's widest stage, and the harness's own loop sending the burst "
            "slower while it serves those sandboxes too (each burst is sent at the trial's pace)"
        )
    if not widest:
        return ""
    out = ""
    per_create = (spacing_s or 0.0) + (0.0 if math.isinf(rate) else 1.0 / rate)
    if not math.isinf(rate):
        out += (
            f"; carries a serial create intake of {1000 / rate:.3f} ms a create (fitted; against a --local vendor "
            "the trial machine's serving loop, not the vendor)"
        )
    path_s = widest * per_create
    if path_s > profile.boot.median_s:
        out += (
            f"; NOT carried: a burst of {widest} is sent and taken over ~{path_s:.2f} s, longer than the "
            f"{profile.boot.median_s:.3g} s median boot, so its first sandboxes are polled and run commands while "
            "its creates still go through: on the machine running the harness (and a --local vendor) they share "
            "its cores and slow every create, a contention the trial's narrower burst cannot show (no serving queue: "
            "the trial's runs did not identify one, harness/fitting/serving.py)"
        )
    return out


def predict_shapes(
    profile: Profile,
    shapes: Sequence[Shape],
    *,
    observations: Sequence[ProtocolObservation] | None = None,
    prior: Profile | None = None,
    bootstrap: int = 20,
    seeds: int = 3,
    retries: int = 0,
    progress: Callable[[int, int], None] | None = None,
    live: LiveRun | None = None,
) -> Prediction:
    """Predict `shapes` on `profile`; the interval pools `bootstrap` refits (to resampled `observations`, from
    `prior`, the profile itself by default; each failure probability the fit counted, k of n, drawn from its Jeffreys
    posterior Beta(k + 1/2, n - k + 1/2), so a kind never seen still has a rate it may have) x `seeds` seeded runs, or `bootstrap x seeds` runs of the profile alone
    when there are no observations (at most SEEDS_ALONE; `seeds` when `bootstrap` is 0). A burst is sent at the
    pace of the observations' bursts (`burst_spacing`; at one instant without one; each refit at their gaps
    resampled, so a rate limit's failure rate is not one point), and the prediction says so.
    Deterministic: the same inputs give the same numbers."""
    if seeds < 1 or bootstrap < 0:
        raise ValueError("seeds must be at least 1 and bootstrap 0 or more")
    if not shapes:
        raise ValueError("nothing to predict")
    usable = [o for o in observations or () if o.quantiles.get("p50", 0) > 0]
    refits: list[Profile] = []
    counted: dict[str, tuple[int, int]] = {}
    if usable and bootstrap:
        rng, draw = random.Random(0), random.Random(1)
        base = prior or profile
        counted = failure_counts(fit_profile(list(observations or ()), base, profile.name))
        for b in range(bootstrap):
            replica = [resample(o, rng) for o in observations or ()]
            refit = fit_profile(replica, base, profile.name).profile
            if counted:  # a counted rate from its posterior: 0 of 150 is not a rate of exactly 0
                rates = {key: draw.betavariate(k + 0.5, n - k + 0.5) for key, (k, n) in counted.items()}
                refit = refit.with_overrides(rates)
            refits.append(refit)
            if progress is not None:
                progress(b + 1, bootstrap)
    live = live or LiveRun(time_scale=profile.default_time_scale)
    # the harness's own gate, as the trial's ramps saw it open (gate_cascade.py): the engine's, not the vendor's
    cascade = fit_gate_cascade(observations or ()) if live.throttle and live.gate_cascade is None else None
    live = live if cascade is None else dataclasses.replace(live, gate_cascade=cascade)
    spacing, gaps, pace = burst_spacing(observations or ()), burst_gaps(observations or ()), random.Random(2)
    paces = [statistics.fmean(pace.choices(gaps, k=len(gaps))) if spacing else 0.0 for _ in refits]
    # each refit's intake at its own pace: the fitted acceptance gaps resampled (the acceptance times are not part
    # of `resample`, so without this every refit would take the creates at one and the same pace)
    intake_gaps = fit_admission(list(observations or ()), WIDE_MIN).gaps
    refits = [_resampled_intake(refit, intake_gaps, pace) for refit in refits]
    # and its serving queue's costs fitted again to its rows drawn again (serving.py; the rows are not `resample`'s)
    turns = random.Random(3)
    refits = [
        refit
        if refit.serving is None
        else dataclasses.replace(refit, serving=resampled_serving(refit.serving, observations or (), turns))
        for refit in refits
    ]
    if refits:
        draws = [(p, 1000 * (b + 1) + s, paces[b]) for b, p in enumerate(refits) for s in range(seeds)]
        sources = tuple(dict.fromkeys(o.source for o in usable))
        how = (
            f"{INTERVAL:.0%} interval over {len(refits)} bootstrap refits to the {len(sources)} input(s) resampled, "
            f"{seeds} seeded runs each" + ("; counted failure rates from their posterior" if counted else "")
        )
    else:
        draws = [(profile, 1000 + s, spacing or 0.0) for s in range(max(seeds, min(SEEDS_ALONE, seeds * bootstrap)))]
        sources = ()
        why = "the profile names no inputs" if not usable else "no bootstrap asked for"
        how = (
            f"{INTERVAL:.0%} interval over {len(draws)} seeded runs of the profile alone ({why}: "
            "a run's sampling noise only, not the fit's uncertainty)"
        )
    if spacing is not None and any(shape.protocol == "burst" for shape in shapes):
        how += f"; each burst's creates sent {1000 * spacing:.2f} ms apart, the pace of the inputs' bursts"
        how += " (each refit's: their gaps resampled)" if refits else ""
    low_read, high_read = BURST_READ_RANGE_WALL_S
    if live.throttle and any(shape.protocol == "burst" for shape in shapes):
        how += (
            "; a burst that meets the rate limit is sent through the client's gate (its first 429 read, the creates "
            f"started after it wait out the Retry-After), each answer read {1000 * live.burst_read_wall_s:.0f} wall ms "
            f"late while the burst is sent (each simulated run of the interval draws its own, {1000 * low_read:.0f}-"
            f"{1000 * high_read:.0f} ms; assumed: a trial's burst of 100 cannot show it; harness/fitting/live_run.py)"
        )
    how += intake_caveat(profile, shapes, spacing)
    if live.throttle and any(shape.protocol in ("ramp", "steady") for shape in shapes):
        if live.gate_cascade is not None:
            how += f"; {live.gate_cascade.describe()}"
        else:
            how += (
                "; past the rate limit the client's gate lets out, each opening, what the bucket refilled and then "
                f"{live.opening_refusals():.0f} refusals, those sent while the first is read "
                f"{1000 * live.burst_read_wall_s:.0f} wall ms late (each simulated run of the interval: its own "
                f"{1000 * low_read:.0f}-{1000 * high_read:.0f} ms; assumed: the trial's ramps met no rate limit to "
                "read the gate from; harness/fitting/live_run.py)"
            )
    point_runs = [simulate_stages(profile, shapes, s, retries, live, spacing or 0.0) for s in range(seeds)]
    # each pooled run reads the burst's answers as late as a live run may (live_run.py: where a run falls is a race)
    reads = random.Random(4)
    pooled_runs = [
        simulate_stages(p, shapes, seed, retries, _read_late(live, reads.uniform(low_read, high_read)), gap)
        for p, seed, gap in draws
    ]
    stages = []
    for i, shape in enumerate(shapes):
        point = [run_stats(runs[i], retries) for runs in point_runs]
        pooled = [run_stats(runs[i], retries) for runs in pooled_runs]
        stats = {}
        for key in point[0]:
            low, high = _interval([r[key] for r in pooled])
            value = _median([r[key] for r in point])
            stats[key] = Estimate(value, min(low, value), max(high, value))  # the interval holds its own point
        stages.append(StagePrediction(shape, stats))
    return Prediction(profile.name, tuple(stages), len(refits), seeds, sources, how)


def predict(
    profile: Profile,
    scenario: str,
    users: int | None = None,
    stages: Sequence[int] | None = None,
    *,
    observations: Sequence[ProtocolObservation] | None = None,
    prior: Profile | None = None,
    bootstrap: int = 20,
    seeds: int = 3,
    retries: int = 0,
    hold_s: float | None = None,
    live: LiveRun | None = None,
) -> Prediction:
    """Predicted TTI p50/p95/p99 and failure rate of `scenario` (a burst of `users`, a ramp through `stages`, each
    held `hold_s` wall seconds) on a fitted profile, with intervals from bootstrap refits to the `observations` it
    was fitted from; `live`: how the predicted run plays in time (default: the profile's own time scale)."""
    return predict_shapes(
        profile,
        shapes_for(scenario, users, stages, hold_s),
        observations=observations,
        prior=prior,
        bootstrap=bootstrap,
        seeds=seeds,
        retries=retries,
        live=live,
    )


def score(prediction: Prediction, observations: Sequence[ProtocolObservation]) -> list[Score]:
    """Each measured stage beside its predicted one (matched by protocol and width, in order)."""
    left = list(observations)
    out: list[Score] = []
    for stage in prediction.stages:
        match = next(
            (o for o in left if (o.protocol, o.concurrency) == (stage.shape.protocol, stage.shape.users)), None
        )
        if match is None:
            continue
        left.remove(match)
        measured = {k: float(match.quantiles.get(k, math.nan)) for k in QUANTILE_OF}
        measured["failure"] = 1.0 - match.success_rate
        for key, estimate in stage.stats.items():
            if key in measured:
                out.append(Score(stage.shape.label, key, measured[key], estimate))
    return out


_HEADER = re.compile(r"^# fitted by `stampede calibrate --fit` on \S+ from: (?P<inputs>.*)$")
_STAGE = re.compile(r" \([^()]*\)$")


def profile_inputs(path: Path) -> list[str]:
    """The inputs a fitted profile's TOML names (its first line, written by `calibrate --fit`), as run folders;
    empty for a hand-written profile."""
    try:
        first = path.read_text().splitlines()[0] if path.is_file() else ""
    except (OSError, IndexError):
        return []
    found = _HEADER.match(first)
    if not found:
        return []
    return list(dict.fromkeys(_STAGE.sub("", source) for source in found["inputs"].split("; ") if source))


def render(prediction: Prediction, scores: Sequence[Score] | None = None) -> str:
    """The prediction per stage (Markdown), with the measured value beside it when scored."""

    def fmt(key: str, v: float) -> str:
        if math.isnan(v):
            return "-"
        return f"{100 * v:.1f}%" if key.startswith("fail") else f"{v:.3g} s"

    lines = [f"`{prediction.profile}` predicted ({prediction.interval_from}; TTI in vendor seconds)", ""]
    if scores is None:
        lines += ["| stage | stat | predicted | interval |", "|---|---|---|---|"]
        for stage in prediction.stages:
            for key, e in stage.stats.items():
                lines.append(
                    f"| {stage.shape.label} | {key} | {fmt(key, e.value)} | [{fmt(key, e.low)}, {fmt(key, e.high)}] |"
                )
        return "\n".join(lines)
    lines += [
        "| stage | stat | predicted | interval | measured | inside interval | within 15% (failure: 3 pt) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scores:
        e = s.predicted
        lines.append(
            f"| {s.stage} | {s.stat} | {fmt(s.stat, e.value)} | [{fmt(s.stat, e.low)}, {fmt(s.stat, e.high)}] | "
            f"{fmt(s.stat, s.measured)} | {'yes' if s.inside else 'NO'} | {'yes' if s.within else 'NO'} |"
        )
    return "\n".join(lines)
