"""Fit a simulator profile to observations, with the simulator itself as the forward model (issue #31).

Each observation is replayed on the candidate profile (the same protocol at the same width, on the VirtualClock,
as `stampede calibrate` replays the public protocols) and the profile's values are moved until the simulated
quantiles meet the measured ones. Only what the observations can see is moved: the boot median and spread from
the narrowest runs, the vendor's serial create intake from the creates a burst had queued (admission.py), or, where
creates overlapped live sandboxes' requests, its serving queue, each kind of request's turn (serving.py), then the
per-sandbox load delay on top of it when both a narrow run and a wide burst were seen, failure
probabilities from counts, a create bucket's depth from rate-limit refusals, a concurrency cap from quota
refusals. Everything else keeps the prior's value, and `unidentified` says why, so a profile never claims more
than its runs showed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from foundation.quantiles import nearest_rank
from harness.fitting.admission import KEY as ADMISSION_KEY
from harness.fitting.admission import MACHINE as ADMISSION_MACHINE
from harness.fitting.admission import fit_admission, simulate_intake_burst
from harness.fitting.limits import REFUSALS, RETRY_AFTER_KEY, fit_limits
from harness.fitting.observations import QUANTILES, ProtocolObservation
from harness.fitting.ramp_load import fit_load_from_ramp, held_load_delay
from harness.fitting.serving import KEYS as SERVING_KEYS
from harness.fitting.serving import MACHINE as SERVING_MACHINE
from harness.fitting.serving import fit_serving
from providers.sim.core.calibration import computesdk_stats
from providers.sim.core.experiments import BurstResult, simulate_burst, simulate_closed_loop, simulate_sequential
from providers.sim.core.profile import Profile, label_kind, parse_profile

SEEDS = 5  # simulated runs per observation and candidate; the median statistic over them is compared
MAX_SIMULATED = 200  # rollouts replayed per observation (a sequential of 1,000 says no more about the median)
SPREAD_Z = {"p90": 1.2816, "p95": 1.6449}  # standard normal quantiles: log(pq / p50) = z * sigma for a lognormal
NARROW_MAX = 4  # at most this many at once: a run whose TTI is the boot alone, not the burst penalty
WIDE_MIN = 10  # at least this wide: a burst whose extra time over a narrow run is the load delay
ITERATIONS = 6
SATURATION = (0.7, 0.5, 0.35, 0.25, 0.15, 0.1)  # candidate caps: the delay stops growing at this share of a burst
RAMP_WIDTH_MAX = 1000  # a ramp stage replayed for the load cap: at most this many users
SPREAD_MARGIN = 0.02  # a cap must bring the burst's log spread this much closer than no cap to be kept
NO_SETTING_KEYS = (RETRY_AFTER_KEY,)  # fit findings without a profile field: comments in the TOML, not values


@dataclass(frozen=True, slots=True)
class FitRow:
    """One measured statistic beside the fitted profile's simulated one."""

    protocol: str  # "burst@20"
    stat: str
    measured: float
    simulated: float

    @property
    def error(self) -> float:
        """Relative error of the simulated value (nan when the measured one is 0 or missing)."""
        if not self.measured or math.isnan(self.measured) or math.isnan(self.simulated):
            return math.nan
        return (self.simulated - self.measured) / self.measured


@dataclass(frozen=True)
class FitResult:
    """A fitted profile, what was fitted (dotted key -> value), what was not (key -> why) and the fit per protocol."""

    profile: Profile
    prior: str
    fitted: dict[str, float]
    unidentified: dict[str, str]
    rows: list[FitRow]
    sources: tuple[str, ...]
    notes: dict[str, str] = field(default_factory=dict)  # fitted key -> how (e.g. "0 of 120 attempts")
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)  # fitted key -> bootstrap interval
    interval_rounds: int = 0
    # what the runs showed that no profile setting holds (key -> what: the rate limit's Retry-After, limits.py);
    # printed with the fit and written as comments in the profile, never as a value
    observed: dict[str, str] = field(default_factory=dict)

    def prior_source(self, key: str) -> str:
        """Where the prior had a value from (kept for a value the runs did not identify)."""
        return self.profile.sources.get(key, "no source given")


def _simulate(profile: Profile, obs: ProtocolObservation, seed: int) -> BurstResult:
    n = max(1, min(obs.attempts or obs.concurrency, MAX_SIMULATED))
    if obs.protocol == "sequential":
        return simulate_sequential(profile, n, seed=seed)
    if obs.protocol == "staggered":
        return simulate_burst(profile, n, seed=seed, spacing_s=0.2)
    width = max(1, min(obs.concurrency, MAX_SIMULATED))
    if obs.protocol in ("steady", "ramp"):  # a stage of `width` users, each creating again when its rollout ends
        per_user = max(1, n // width)
        return simulate_closed_loop(profile, width, per_user, seed=seed, hold_s=0.0)
    # through the fitted intake, or the serving queue at the pace the burst was sent, as a prediction plays it
    sent = obs.creates.sent_s if obs.creates is not None else ()
    pace = (max(sent) - min(sent)) / (len(sent) - 1) if len(sent) > 1 else 0.0
    return simulate_intake_burst(profile, width, seed, spacing_s=pace)


def _stats(values: Sequence[float], trimmed: float) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    if trimmed > 0:
        return computesdk_stats(ordered, trimmed)
    return {k: nearest_rank(ordered, q) for k, q in QUANTILES.items()}


def simulated_stats(profile: Profile, obs: ProtocolObservation, seeds: int = SEEDS) -> dict[str, float]:
    """The observation's statistics on the profile: the median over `seeds` simulated runs, plus `success`."""
    runs = [_simulate(profile, obs, seed) for seed in range(seeds)]
    per_run = [_stats(r.ttis(), obs.trimmed) for r in runs]
    out = {k: statistics.median(s[k] for s in per_run if k in s) for k in obs.quantiles if any(k in s for s in per_run)}
    out["success"] = statistics.median(1.0 - r.failure_rate for r in runs)
    return out


def _spread_key(obs: ProtocolObservation) -> str | None:
    return next((k for k in SPREAD_Z if k in obs.quantiles), None)


def _fit_boot(profile: Profile, narrow: list[ProtocolObservation]) -> Profile:
    """Move boot.median_s and boot.sigma until the narrow runs' p50 and spread (p90 or p95 over p50) match."""
    for _ in range(ITERATIONS):
        ratios, spreads = [], []
        for obs in narrow:
            sim = simulated_stats(profile, obs)
            if obs.quantiles.get("p50", 0) > 0 and sim.get("p50", 0) > 0:
                ratios.append(math.log(obs.quantiles["p50"] / sim["p50"]))
                key = _spread_key(obs)
                if key and key in sim and sim[key] > 0:
                    measured = math.log(obs.quantiles[key] / obs.quantiles["p50"])
                    simulated = math.log(sim[key] / sim["p50"])
                    spreads.append((measured - simulated) / SPREAD_Z[key])
        if not ratios:
            break
        median = profile.boot.median_s * math.exp(statistics.fmean(ratios))
        sigma = max(0.0, profile.boot.sigma + (statistics.fmean(spreads) if spreads else 0.0))
        profile = dataclasses.replace(profile, boot=dataclasses.replace(profile.boot, median_s=median, sigma=sigma))
    return profile


def _fit_load_delay(profile: Profile, wide: list[ProtocolObservation]) -> tuple[Profile, int]:
    """With the boot fitted from narrow runs: the per-sandbox load delay and where it stops growing.

    The delay's cap shows in a burst's shape, not its median: a delay still growing at the burst's last sandbox
    spreads the burst (its first sandboxes boot unloaded, its last ones carry the whole delay), one that stopped
    growing early moves most of the burst by the same amount. So for each candidate saturation (the cap reached at
    `k` sandboxes booting, k from the widest burst down to a tenth of it) the delay is fitted to the bursts' p50,
    and the candidate whose spread (p90 or p95 over p50) meets the bursts' is kept; a cap no burst reached stays
    "held at the widest burst's". Returns the profile and `k`."""
    widest = max(obs.concurrency for obs in wide)

    def error(candidate: Profile) -> float:
        errs = [
            math.log(simulated_stats(candidate, obs)["p50"] / obs.quantiles["p50"])
            for obs in wide
            if obs.quantiles.get("p50", 0) > 0
        ]
        return statistics.fmean(errs) if errs else 0.0

    def spread_error(candidate: Profile) -> float:
        errs = []
        for obs in wide:
            key = _spread_key(obs)
            sim = simulated_stats(candidate, obs)
            if key and obs.quantiles.get("p50", 0) > 0 and sim.get("p50", 0) > 0 and sim.get(key, 0) > 0:
                measured = math.log(obs.quantiles[key] / obs.quantiles["p50"])
                errs.append(math.log(sim[key] / sim["p50"]) - measured)
        return abs(statistics.fmean(errs)) if errs else 0.0

    # no delay is one profile whatever the cap: the bursts already as slow as measured without one need none
    if error(held_load_delay(profile, 0.0, widest)) >= 0:
        return held_load_delay(profile, 0.0, widest), widest

    def fitted_at(k: int) -> Profile:
        low, high = 0.0, max(0.001, max(obs.quantiles.get("p50", 0.0) for obs in wide) / k)
        while error(held_load_delay(profile, high, k)) < 0 and high < 60:
            high *= 2
        for _ in range(12):  # bisection on a monotone error
            mid = (low + high) / 2
            low, high = (mid, high) if error(held_load_delay(profile, mid, k)) < 0 else (low, mid)
        return held_load_delay(profile, (low + high) / 2, k)

    best, best_k = fitted_at(widest), widest
    best_err = spread_error(best)
    for share in SATURATION:
        k = max(2, round(share * widest))
        if k >= widest:
            continue
        candidate = fitted_at(k)
        err = spread_error(candidate)
        if err < best_err - SPREAD_MARGIN:  # a cap only where the shape asks for one, not for noise
            best, best_k, best_err = candidate, k, err
    return best, best_k


def _closed_loop_p50(profile: Profile, width: int) -> float:
    """A ramp stage of `width` users on the profile, each creating again as its rollout ends: the median TTI over
    `SEEDS` runs (two rollouts a user: the stage's first wave and the steady state after it)."""
    runs = [simulate_closed_loop(profile, width, 2, seed=seed, hold_s=0.0) for seed in range(SEEDS)]
    return statistics.median(r.quantile(0.5) for r in runs if r.ttis())


def _fit_load_cap(profile: Profile, ramps: list[ProtocolObservation]) -> Profile | None:
    """Where a burst ended before the load delay stopped growing, a ramp's wider stages show where it stops: each
    stage's median on the profile (as a closed loop of its users) against the measured one, the cap moved between
    the burst's held delay and no cap up to the widest stage. None when the stages ask for no more than the burst's
    (the delay held where the burst left it)."""
    delay, held = profile.boot.load_delay_s, profile.boot.load_delay_max_s
    widest = min(max(o.concurrency for o in ramps), RAMP_WIDTH_MAX)

    def with_cap(cap: float) -> Profile:
        return dataclasses.replace(profile, boot=dataclasses.replace(profile.boot, load_delay_max_s=cap))

    def error(cap: float) -> float:
        candidate = with_cap(cap)
        errs = [
            math.log(_closed_loop_p50(candidate, min(o.concurrency, RAMP_WIDTH_MAX)) / o.quantiles["p50"])
            for o in ramps
        ]
        return statistics.fmean(errs)

    low, high = held, delay * (widest - 1)
    if high <= low or error(low) >= 0:
        return None
    if error(high) <= 0:
        return with_cap(high)
    for _ in range(10):  # bisection: a higher cap, a slower stage
        mid = (low + high) / 2
        low, high = (mid, high) if error(mid) < 0 else (low, mid)
    return with_cap((low + high) / 2)


def _count(observations: Sequence[ProtocolObservation], *kinds: str, phase: str | None = None) -> int:
    total = 0
    for obs in observations:
        for key, n in obs.failures.items():
            kind, _, at = key.partition("@")
            if kind in kinds and (phase is None or at == phase):
                total += n
    return total


def fit_profile(observations: Sequence[ProtocolObservation], prior: Profile, name: str) -> FitResult:
    """A profile named `name`: the prior with every value these observations identify fitted to them."""
    if not observations:
        raise ValueError("no observations to fit")
    with_tti = [o for o in observations if o.quantiles.get("p50", 0) > 0]
    if not with_tti:
        raise ValueError("no observation has a successful sandbox (no TTI to fit)")
    profile = dataclasses.replace(prior, name=name)
    fitted: dict[str, float] = {}
    notes: dict[str, str] = {}
    unidentified: dict[str, str] = {}
    narrowest = min(o.concurrency for o in with_tti)
    narrow = [o for o in with_tti if o.concurrency <= max(NARROW_MAX, narrowest)]
    # bursts only: the forward model replays a burst exactly, while a ramp's TTI carries its spawn rate, its 429
    # retries and its re-creating users, which a load delay fitted to it would take for boot congestion
    wide = [o for o in with_tti if o.concurrency >= WIDE_MIN and o.protocol == "burst"]
    overheads = sorted(v for o in observations for v in o.exec_overhead_s)
    if overheads:  # before the boot: the TTI's first command carries one overhead
        median = nearest_rank(overheads, 0.50)
        sigma = math.log(nearest_rank(overheads, 0.90) / median) / SPREAD_Z["p90"] if median > 0 else 0.0
        exec_ = dataclasses.replace(profile.exec, overhead_median_s=median, overhead_sigma=max(0.0, sigma))
        profile = dataclasses.replace(profile, exec=exec_)
        fitted["exec.overhead_median_s"], fitted["exec.overhead_sigma"] = median, exec_.overhead_sigma
        notes["exec.overhead_median_s"] = notes["exec.overhead_sigma"] = f"{len(overheads)} command calls"
    else:
        unidentified["exec.overhead_median_s"] = unidentified["exec.overhead_sigma"] = (
            "no run had a plan's steps (per-command times beyond the command's own)"
        )
    profile = _fit_boot(profile, narrow)
    boot_from = ", ".join(sorted({f"{o.protocol}@{o.concurrency}" for o in narrow}))
    for key in ("boot.median_s", "boot.sigma"):
        notes[key] = f"from {boot_from}"
    fitted["boot.median_s"], fitted["boot.sigma"] = profile.boot.median_s, profile.boot.sigma
    # the serial intake first (the creates a burst had queued, taken one after another), so the load delay fitted
    # next on top of it takes only the burst's extra time the intake does not explain (admission.py)
    admission = fit_admission(observations, WIDE_MIN)
    # the serving queue where creates overlapped live sandboxes' requests (serving.py): it takes the creates one
    # after another itself, so a profile with it has no separate intake (each create would wait twice)
    serving = fit_serving(observations)
    unidentified.update(serving.unidentified)
    if serving.serving is not None:
        profile = dataclasses.replace(profile.with_overrides({ADMISSION_KEY: math.inf}), serving=serving.serving)
        fitted.update(serving.fitted)
        notes.update(dict.fromkeys(serving.fitted, serving.note))
        fitted[ADMISSION_KEY] = math.inf
        intake = (
            "" if admission.rate is None else f" (the burst's own intake read {1000 / admission.rate:.3f} ms a create)"
        )
        notes[ADMISSION_KEY] = f"none apart: the serving queue takes the creates in turn ([serving] create_s){intake}"
    elif admission.rate is not None:
        profile = profile.with_overrides({ADMISSION_KEY: admission.rate})
        fitted[ADMISSION_KEY], notes[ADMISSION_KEY] = admission.rate, admission.note
    else:
        unidentified[ADMISSION_KEY] = admission.unidentified or "no burst's create times"
    wide = [o for o in wide if o.concurrency > max(NARROW_MAX, narrowest)]
    if wide:
        profile, saturated = _fit_load_delay(profile, wide)
        burst_width = max(o.concurrency for o in wide)
        fitted["boot.load_delay_s"] = profile.boot.load_delay_s
        fitted["boot.load_delay_max_s"] = profile.boot.load_delay_max_s
        notes["boot.load_delay_s"] = f"{burst_width} at once against {boot_from}"
        notes["boot.load_delay_max_s"] = (
            f"the burst's spread: the delay stops growing at ~{saturated} booting"
            if saturated < burst_width
            else f"no cap seen up to the widest burst ({burst_width}): held at its delay beyond it"
        )
        # a ramp stage wider than the burst, every create let in: its users boot together as in a wider burst
        ramps = [
            o for o in with_tti if o.protocol == "ramp" and o.concurrency > burst_width and not _count([o], *REFUSALS)
        ]
        capped = _fit_load_cap(profile, ramps) if ramps and saturated >= burst_width else None
        if capped is not None:
            profile = capped
            fitted["boot.load_delay_max_s"] = profile.boot.load_delay_max_s
            stages = ", ".join(f"ramp@{o.concurrency}" for o in ramps)
            notes["boot.load_delay_max_s"] = f"the ramp's stages wider than the burst ({stages}), no create refused"
        # a burst that showed no delay may have been slow for another reason (cold nodes pulling the image): a
        # wider ramp of warm nodes shows it (ramp_load.py)
        from_ramp = fit_load_from_ramp(profile, with_tti, burst_width) if profile.boot.load_delay_s == 0 else None
        if from_ramp is not None:
            profile = from_ramp.profile
            fitted["boot.load_delay_s"] = profile.boot.load_delay_s
            fitted["boot.load_delay_max_s"] = profile.boot.load_delay_max_s
            notes["boot.load_delay_s"] = from_ramp.note()
            notes["boot.load_delay_max_s"] = (
                f"not seen to stop growing up to ramp@{max(from_ramp.stages)}: held beyond it"
            )
    else:
        why = f"no burst of {WIDE_MIN} or more beside a narrower run (widest: {max(o.concurrency for o in with_tti)})"
        if narrowest > NARROW_MAX:
            why = f"no narrow run (sequential, <= {NARROW_MAX} at once) to separate the boot from the burst penalty"
        unidentified["boot.load_delay_s"] = unidentified["boot.load_delay_max_s"] = why
    widest = max(o.concurrency for o in observations)
    collapse = "no run showed a collapse" if widest >= prior.boot.congestion_knee else "no run"
    unidentified["boot.congestion_knee"] = unidentified["boot.congestion_exponent"] = (
        f"{collapse} reached the prior's knee ({prior.boot.congestion_knee:g}); widest: {widest}"
        if widest < prior.boot.congestion_knee
        else f"{collapse}; this fit does not move the knee"
    )
    # failures by kind and phase, from counts (rate-limit and quota refusals are limits, fitted below)
    attempts = sum(o.attempts for o in observations)
    create_errors = _count(observations, "create_error", "transport", phase="create")
    created = attempts - _count(
        observations, "create_error", "transport", "rate_limited", "quota_exhausted", "capacity"
    )
    boot_crashes = _count(observations, "died_before_ready", "ready_timeout")
    for key, n, of in (
        ("errors.create_transient_prob", create_errors, attempts),
        ("errors.boot_crash_prob", boot_crashes, created),
    ):
        fitted[key] = n / of if of else 0.0
        notes[key] = f"{n} of {of} attempts" + (f"; 95% upper bound {3 / of:.2g}" if n == 0 and of else "")
    limits = fit_limits(observations)  # the create bucket and the cap, from when creates were let in (limits.py)
    fitted.update(limits.fitted)
    notes.update(limits.notes)
    unidentified.update(limits.unidentified)
    unidentified["pool.max_nodes"] = "capacity and queueing show only where a ramp fills the pool; none did"
    changes = {k: v for k, v in fitted.items() if not k.startswith(("boot.median_s", "boot.sigma", "exec."))}
    profile = profile.with_overrides(changes) if changes else profile
    rows: list[FitRow] = []
    labels = [f"{obs.protocol}@{obs.concurrency}" for obs in observations]
    for obs, label in zip(observations, labels, strict=True):
        sim = simulated_stats(profile, obs)
        if labels.count(label) > 1:  # the same shape in two inputs: say which
            label += f" {Path(obs.source).name}"
        for stat, value in obs.quantiles.items():
            if stat in sim:
                rows.append(FitRow(label, stat, float(value), sim[stat]))
        rows.append(FitRow(label, "success", obs.success_rate, sim["success"]))
    sources = tuple(dict.fromkeys(o.source for o in observations))
    return FitResult(profile, prior.name, fitted, unidentified, rows, sources, notes, observed=dict(limits.observed))


INTERVAL = 0.90  # the bootstrap interval's coverage


def resample(obs: ProtocolObservation, rng: random.Random) -> ProtocolObservation:
    """One bootstrap replicate: the raw samples drawn again with replacement and each failure count drawn again
    from its observed rate (binomial); an observation with only published quantiles stays as it is."""
    if not obs.tti_s:
        return obs
    samples = tuple(sorted(rng.choices(obs.tti_s, k=len(obs.tti_s))))
    stats = _stats(samples, obs.trimmed)
    failures = {
        key: sum(rng.random() < n / obs.attempts for _ in range(obs.attempts)) if obs.attempts else n
        for key, n in obs.failures.items()
    }
    overheads = tuple(sorted(rng.choices(obs.exec_overhead_s, k=len(obs.exec_overhead_s))))
    return dataclasses.replace(
        obs,
        tti_s=samples,
        quantiles={k: stats[k] for k in obs.quantiles if k in stats},
        failures=failures,
        exec_overhead_s=overheads,
    )


def with_intervals(
    result: FitResult, observations: Sequence[ProtocolObservation], prior: Profile, rounds: int
) -> FitResult:
    """The fit again on `rounds` bootstrap replicates of the observations: each fitted value's 90% interval (the
    uncertainty a prediction from this profile carries; observations with only published quantiles add none)."""
    rng = random.Random(0)
    draws: dict[str, list[float]] = {key: [] for key in result.fitted}
    for _ in range(rounds):
        replica = fit_profile([resample(o, rng) for o in observations], prior, result.profile.name)
        for key in draws:
            if key in replica.fitted:
                draws[key].append(replica.fitted[key])
    intervals = {}
    for key, values in draws.items():
        ordered = sorted(values)
        if len(ordered) >= 2 and ordered[0] != ordered[-1]:  # a count of 0 in every replicate: its note says more
            intervals[key] = (nearest_rank(ordered, (1 - INTERVAL) / 2), nearest_rank(ordered, (1 + INTERVAL) / 2))
    return dataclasses.replace(result, intervals=intervals, interval_rounds=rounds)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return "inf" if value == math.inf else repr(float(value)) if isinstance(value, float) else str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def _toml_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def profile_toml(result: FitResult, today: dt.date | None = None) -> str:
    """The fitted profile as TOML: dated, naming its inputs, every number with `_source` and `_label`."""
    profile, day = result.profile, (today or dt.datetime.now(dt.UTC).date()).isoformat()
    inputs = "; ".join(result.sources)
    fitted_label = f"calibrated: fitted by stampede calibrate --fit from {inputs}"
    lines = [
        f"# fitted by `stampede calibrate --fit` on {day} from: {inputs}",
        f"# prior: {result.prior}",
        *(f"# {key} (seen; no profile setting): {text}" for key, text in result.observed.items()),
        *(
            f"# {k}: not identifiable from these runs: {why}"
            for k, why in result.unidentified.items()
            if k in NO_SETTING_KEYS or (k in SERVING_KEYS and profile.serving is None)
        ),
        *(
            ["# [serving] absent: no serving queue, as the prior (harness/fitting/serving.py)"]
            if profile.serving is None
            else []
        ),
        f"name = {_toml_string(profile.name)}",
        f"description = {_toml_string(f'fitted {day} from {inputs} (prior {result.prior})')}",
        f"default_time_scale = {_toml_value(profile.default_time_scale)}",
        f"default_time_scale_source = {_toml_string(f'the prior ({result.prior})')}",
        f"default_time_scale_label = {_toml_string('assumed: the prior value; a fit does not set the time scale')}",
    ]
    for section, values in profile.as_dict().items():
        if not isinstance(values, dict):
            continue
        lines += ["", f"[{section}]"]
        obj = getattr(profile, section)
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            lines.append(f"{f.name} = {_toml_value(value)}")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            key = f"{section}.{f.name}"
            if key in result.fitted:
                how = result.notes.get(key)
                source, label = f"fitted {day}: {how or inputs}", fitted_label
                if key == ADMISSION_KEY:  # a figure of the machine where the vendor was --local: the label says so
                    label = f"{fitted_label}; {ADMISSION_MACHINE}"
                elif key in SERVING_KEYS:
                    label = f"{fitted_label}; {SERVING_MACHINE}"
                if key in result.intervals:
                    low, high = result.intervals[key]
                    source += (
                        f"; {INTERVAL:.0%} bootstrap interval [{low:.4g}, {high:.4g}] over {result.interval_rounds}"
                    )
            elif key in result.unidentified:
                source = f"the prior ({result.prior}): {result.prior_source(key)}"
                label = (
                    f"assumed: the prior's ({result.prior}); not identifiable from these runs: "
                    f"{result.unidentified[key]}"
                )
            else:
                source = f"the prior ({result.prior}): {result.prior_source(key)}"
                prior_label = profile.labels.get(key, "")
                label = prior_label if label_kind(prior_label) else f"assumed: the prior's ({result.prior})"
            lines.append(f"{f.name}_source = {_toml_string(source)}")
            lines.append(f"{f.name}_label = {_toml_string(label)}")
    return "\n".join(lines) + "\n"


def write_profile_toml(result: FitResult, path: Path) -> Path:
    """Write the fitted profile; it parses back as a profile (checked before writing)."""
    import tomllib

    text = profile_toml(result)
    parse_profile(tomllib.loads(text), where=str(path), path=str(path))
    path.write_text(text)
    return path
