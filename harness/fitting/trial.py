"""`stampede trial`: the public leaderboard's protocols against one vendor, priced up front, scored, fitted (issue #31).

A team choosing a vendor wants one command that runs what the public leaderboard runs (computesdk/benchmarks:
sequential, staggered 200 ms apart, a burst of 100), then a ramp toward the plan's concurrency cap, and hands back
one scorecard: the leaderboard's composite score computed as its METHODOLOGY.md describes it (5%-trimmed median,
p95, p99, each scored against a 10 s ceiling, weighted 0.60/0.25/0.15, times the success rate) beside stampede's
untrimmed tails, failures by kind, how the vendor refused past its limits, dollars per thousand sandboxes, the
profile fitted to the runs and what it predicts at 960 and at `--target N`. This module holds the protocol list,
the dollar estimate, the scorecard record and its renderer; harness/cli/trial.py runs the protocols.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from foundation.quantiles import nearest_rank
from harness.fitting.admission import KEY as INTAKE_KEY
from harness.fitting.admission import MACHINE as INTAKE_MACHINE
from harness.fitting.observations import QUANTILES, ProtocolObservation, join_timelines
from harness.fitting.serving import KEYS as SERVING_KEYS
from harness.fitting.serving import MACHINE as SERVING_MACHINE
from harness.results.read.dataset import load_rollouts, read_run_info
from harness.results.read.vendor_time import to_vendor_seconds
from providers.sim.core.calibration import computesdk_stats

LEADERBOARD_SIZE = 100  # computesdk/benchmarks' daily runs: 100 iterations, 100 at once
STAGGER_MS = 200  # their staggered mode's delay between launches
CEILING_MS = 10_000.0  # their composite: a timing metric at or above 10 s scores 0
WEIGHTS = {"p50": 0.60, "p95": 0.25, "p99": 0.15}  # their timing weights (median, p95, p99); sum 1
TRIM = 0.05  # their stats drop the fastest and slowest 5% of successes first
SCORED = ("sequential", "staggered", "burst")  # the leaderboard's three modes
RATE_LIMIT_KINDS = ("rate_limited", "quota_exhausted", "capacity")
STAGE_TICK_WALL_S = 1.0  # Locust ticks a load shape once a wall second: no ramp stage is shorter


@dataclass(frozen=True, slots=True)
class TrialProtocol:
    """One protocol of a trial: a `stampede run` shape and how many sandbox-seconds it is expected to hold."""

    name: str  # "sequential" | "staggered" | "burst" | "ramp"
    run_args: tuple[str, ...]  # the `stampede run` options that make this shape
    sandboxes: int  # creates it asks for (a ramp: its users at the top stage, a lower bound)
    sandbox_seconds: float  # vendor sandbox-seconds it is expected to hold (the estimate's basis)


def ramp_stages(size: int, cap: int) -> list[int]:
    """Doubling stages from a quarter of the size up to the plan's cap (the last stage is the cap itself)."""
    top = max(1, cap)
    stage = max(1, min(top, size // 4 or 1))
    stages = []
    while stage < top:
        stages.append(stage)
        stage *= 2
    return [*stages, top]


def protocols(
    size: int, cap: int, sandbox_s: float, ramp_hold_s: float, time_scale: float = 1.0
) -> list[TrialProtocol]:
    """The trial's protocols at `size` (100: the leaderboard's), each with its expected sandbox-seconds.

    `sandbox_s` is one rollout's expected lifetime (create, ready, the command, terminate) in vendor seconds; a
    ramp's stage holds its users for `ramp_hold_s` each, every user re-creating as its rollout ends.
    `stampede run --hold` is wall seconds: `time_scale` (wall seconds per vendor second of a simulated vendor)
    converts the hold, so the ramp holds the same vendor time at any scale."""
    stages = ramp_stages(size, cap)
    held = max(ramp_hold_s, STAGE_TICK_WALL_S / time_scale)  # a stage lasts at least one Locust tick of wall time
    ramp_s = sum(users * (held + sandbox_s) for users in stages)
    ramp_creates = sum(users * max(1, math.ceil(held / max(sandbox_s, 1e-9))) for users in stages)
    return [
        TrialProtocol(
            "sequential", ("--scenario", "burst", "--users", "1", "--burst-steps", str(size)), size, size * sandbox_s
        ),
        TrialProtocol(
            "staggered",
            ("--scenario", "staggered", "--users", str(size), "--stagger-ms", str(STAGGER_MS)),
            size,
            size * sandbox_s,
        ),
        TrialProtocol("burst", ("--scenario", "burst", "--users", str(size)), size, size * sandbox_s),
        TrialProtocol(
            "ramp",
            ("--scenario", "ramp", "--stages", ",".join(map(str, stages)), "--hold", f"{ramp_hold_s * time_scale:g}"),
            ramp_creates,
            ramp_s,
        ),
    ]


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a trial is expected to cost before it starts (None: the vendor has no published price)."""

    sandbox_seconds: float
    sandboxes: int
    dollars: float | None
    per_protocol: dict[str, float | None]
    basis: str  # the price and sandbox size it came from

    def over(self, budget_usd: float | None) -> bool:
        """True when a budget is set and the estimate exceeds it."""
        return budget_usd is not None and self.dollars is not None and self.dollars > budget_usd


def cost(sandbox_seconds: float, sandboxes: int, per_second: float | None, per_create: float | None) -> float | None:
    """Dollars for `sandbox_seconds` of one sandbox size plus a per-create charge (None: no published price)."""
    if per_second is None:
        return None
    return sandbox_seconds * per_second + sandboxes * (per_create or 0.0)


def estimate(plan: Sequence[TrialProtocol], per_second: float | None, per_create: float | None, basis: str) -> Estimate:
    """The trial's dollars before it starts: each protocol's sandbox-seconds at the vendor's per-second price."""
    return Estimate(
        sandbox_seconds=sum(p.sandbox_seconds for p in plan),
        sandboxes=sum(p.sandboxes for p in plan),
        dollars=cost(sum(p.sandbox_seconds for p in plan), sum(p.sandboxes for p in plan), per_second, per_create),
        per_protocol={p.name: cost(p.sandbox_seconds, p.sandboxes, per_second, per_create) for p in plan},
        basis=basis,
    )


def budget_stop(spent_usd: float, budget_usd: float | None, remaining: Sequence[str]) -> str:
    """Why the trial stops before `remaining` ("" to go on): the running cost has passed the budget."""
    if budget_usd is None or spent_usd <= budget_usd or not remaining:
        return ""
    return f"running cost ${spent_usd:.4f} passed --budget-usd {budget_usd:g}; not run: {', '.join(remaining)}"


def metric_score(value_ms: float) -> float:
    """The leaderboard's score of one timing value: 100 at 0 ms, falling linearly to 0 at the 10 s ceiling."""
    return max(0.0, 100.0 * (1.0 - value_ms / CEILING_MS))


@dataclass(frozen=True, slots=True)
class Composite:
    """The leaderboard's composite score of one protocol, beside stampede's untrimmed tails (seconds)."""

    protocol: str
    attempts: int
    success_rate: float
    trimmed: dict[str, float]  # their 5%-trimmed p50/p95/p99, seconds
    timing_score: float
    score: float
    untrimmed: dict[str, float]  # every success counted: p50/p99/max, seconds


def composite(protocol: str, tti_s: Sequence[float], attempts: int) -> Composite:
    """The composite as computesdk/benchmarks describes it: timing score (weighted metric scores of the
    5%-trimmed median, p95, p99 in ms) times the success rate (0 when nothing succeeded)."""
    success = len(tti_s) / attempts if attempts else 0.0
    if not tti_s:
        nan = {k: math.nan for k in WEIGHTS}
        return Composite(
            protocol, attempts, success, nan, 0.0, 0.0, {"p50": math.nan, "p99": math.nan, "max": math.nan}
        )
    stats = computesdk_stats(tti_s, TRIM)
    timing = sum(weight * metric_score(stats[key] * 1000.0) for key, weight in WEIGHTS.items())
    ordered = sorted(tti_s)
    untrimmed = {"p50": nearest_rank(ordered, 0.50), "p99": nearest_rank(ordered, 0.99), "max": ordered[-1]}
    return Composite(protocol, attempts, success, dict(stats), timing, timing * success, untrimmed)


def merged(protocol: str, observations: Sequence[ProtocolObservation]) -> ProtocolObservation | None:
    """One observation of a whole protocol run (a sequential run's steps are stages of one each; the fit and the
    score want them as one protocol of `attempts` sandboxes)."""
    if not observations:
        return None
    samples = tuple(sorted(v for o in observations for v in o.tti_s))
    attempts = sum(o.attempts for o in observations)
    failures: dict[str, int] = {}
    for o in observations:
        for key, n in o.failures.items():
            failures[key] = failures.get(key, 0) + n
    quantiles = {k: nearest_rank(samples, q) for k, q in QUANTILES.items()} if samples else {}
    return ProtocolObservation(
        protocol=protocol,
        concurrency=max(o.concurrency for o in observations),
        attempts=attempts,
        tti_s=samples,
        quantiles=quantiles,
        trimmed=0.0,
        success_rate=len(samples) / attempts if attempts else 0.0,
        failures=failures,
        source=observations[0].source.split(" (")[0],
        exec_overhead_s=tuple(sorted(v for o in observations for v in o.exec_overhead_s)),
        creates=join_timelines([o.creates for o in observations]),  # the limits are fitted from create times
        queue=tuple(q for o in observations for q in o.queue),  # the serving queue's rows (serving.py)
    )


def fit_inputs(protocol: str, observations: Sequence[ProtocolObservation]) -> list[ProtocolObservation]:
    """What the fit reads of one protocol's run: a ramp's stages each on its own (each width is its own evidence of
    how the boot slows with load: merged, a ramp of 25..400 is one stage "of 400" whose median is none of them),
    every other protocol merged into one (a sequential run's steps are one protocol)."""
    if protocol == "ramp":
        return [o for o in observations if o.attempts]
    one = merged(protocol, observations)
    return [one] if one is not None else []


@dataclass
class ProtocolOutcome:
    """How one protocol's run went: its folder, exit status, observations and what it cost."""

    name: str
    run_dir: str | None
    exit_code: int | None
    note: str  # "" when it ran to its end; else why not (a failing vendor, a timeout, the budget)
    attempts: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    sandbox_seconds: float = 0.0
    dollars: float | None = None
    swept: int = 0  # sandboxes the run's own end sweep terminated (left alive by a rollout)
    sweep_error: str | None = None


@dataclass
class Prediction:
    """What the fitted profile predicts at one width: TTI quantiles and failure rate, each with its interval."""

    width: int
    scenario: str
    values: dict[str, float]
    intervals: dict[str, tuple[float, float]]


@dataclass
class Scorecard:
    """Everything a trial says, as written to scorecard.json and printed."""

    provider: str
    profile: str | None
    size: int
    trial_dir: str
    estimate: Estimate
    budget_usd: float | None
    stopped: str  # "" when every protocol ran; else why the trial stopped early
    outcomes: list[ProtocolOutcome]
    composites: list[Composite]
    failures_by_kind: dict[str, int]
    rate_limits: dict[str, Any]
    dollars: float | None
    dollars_per_1000: float | None
    fitted_profile: str | None  # the TOML path
    fitted: dict[str, float]
    unidentified: dict[str, str]
    predictions: list[Prediction]
    prediction_note: str  # what the intervals cover, or why there is no fit or prediction
    leaked: int  # protocols whose end sweep failed or never ran (timed out): sandboxes may be alive

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict (nan becomes null)."""

        def clean(value: Any) -> Any:
            if isinstance(value, float) and not math.isfinite(value):
                return None
            if isinstance(value, dict):
                return {str(k): clean(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [clean(v) for v in value]
            return value

        return {"format": "stampede.trial", "version": 1, **clean(asdict(self))}


def sandbox_seconds(run_dir: str) -> tuple[float, int]:
    """A run's vendor sandbox-seconds (each rollout's whole span, create to terminate) and its creates."""
    info = read_run_info(run_dir)
    frame = load_rollouts(info.run_dir)
    if frame.empty:
        return 0.0, 0
    total = to_vendor_seconds(info, frame).durations["total_s"]
    return float(sum(v for v in total if math.isfinite(v))), len(frame)


def failures_by_kind(outcomes: Sequence[ProtocolOutcome]) -> dict[str, int]:
    """Every protocol's failures, summed by kind (the phase dropped: `kind@phase` -> `kind`)."""
    out: dict[str, int] = {}
    for outcome in outcomes:
        for key, n in outcome.failures.items():
            kind = key.split("@", 1)[0]
            out[kind] = out.get(kind, 0) + n
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def rate_limit_behaviour(outcomes: Sequence[ProtocolOutcome], fitted: Mapping[str, float]) -> dict[str, Any]:
    """How the vendor turned creates away: refusals per protocol by kind, and the limits the fit read from them."""
    per: dict[str, dict[str, int]] = {}
    for outcome in outcomes:
        counts = {k: n for k, n in outcome.failures.items() if k.split("@", 1)[0] in RATE_LIMIT_KINDS}
        if counts:
            per[outcome.name] = counts
    limits = {k: v for k, v in fitted.items() if k in ("create_rate.burst", "create_rate.per_s", "quota.max_active")}
    return {"refusals": per, "limits": limits, "seen": bool(per)}


def _s(value: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f} s"


def _usd(value: float | None) -> str:
    if value is None:
        return "unknown (no published price)"
    return f"${value:,.4f}" if value < 1 else f"${value:,.2f}"


def render_estimate(est: Estimate, budget_usd: float | None) -> str:
    """The line printed before anything starts."""
    budget = f"; budget {_usd(budget_usd)}" if budget_usd is not None else ""
    per = ", ".join(f"{k} {_usd(v)}" for k, v in est.per_protocol.items())
    per = f" ({per})" if est.dollars is not None else ""
    return (
        f"estimate: {_usd(est.dollars)} for ~{est.sandboxes:,} sandboxes, ~{est.sandbox_seconds:,.0f} sandbox-seconds"
        f"{per}{budget}; {est.basis}"
    )


# beside the fitted intake rate: what it is, for a reader of the scorecard who never opens the profile's TOML
_INTAKE_SAYS = (
    " (creates a second: the serial create intake, fitted from the burst's creates taken after it was sent; "
    f"{INTAKE_MACHINE})"
)


def _says(key: str, value: float) -> str:
    """What a fitted figure of the create path is, beside it (the intake, or the serving queue that replaces it)."""
    if key == INTAKE_KEY:
        return _INTAKE_SAYS if math.isfinite(value) else " (no intake apart: the serving queue takes the creates)"
    if key in SERVING_KEYS:
        return f" (vendor seconds a request holds the one serving queue, fitted from the ramp's overlap; {SERVING_MACHINE})"
    return ""


def render(card: Scorecard) -> str:
    """The scorecard as Markdown-ish text: one section per question a buyer asks."""
    lines = [f"# Trial: {card.provider}" + (f" ({card.profile})" if card.profile else "") + f", size {card.size}", ""]
    lines.append(render_estimate(card.estimate, card.budget_usd))
    if card.stopped:
        lines.append(f"stopped early: {card.stopped}")
    lines += ["", "## Runs", "", "| protocol | run | exit | attempts | note |", "|---|---|---|---|---|"]
    for o in card.outcomes:
        lines.append(
            f"| {o.name} | {o.run_dir or '-'} | {o.exit_code if o.exit_code is not None else '-'} | "
            f"{o.attempts} | {o.note or 'ran to its end'} |"
        )
    lines += [
        "",
        "## Leaderboard composite (computesdk/benchmarks: 5%-trimmed, 10 s ceiling, x success) beside untrimmed tails",
        "",
        "| protocol | n | success | p50 | p95 | p99 (trimmed) | timing | composite | p50 | p99 | max (untrimmed) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in card.composites:
        lines.append(
            f"| {c.protocol} | {c.attempts} | {c.success_rate:.1%} | {_s(c.trimmed['p50'])} | {_s(c.trimmed['p95'])} | "
            f"{_s(c.trimmed['p99'])} | {c.timing_score:.2f} | **{c.score:.2f}** | {_s(c.untrimmed['p50'])} | "
            f"{_s(c.untrimmed['p99'])} | {_s(c.untrimmed['max'])} |"
        )
    lines += ["", "## Failures by kind", ""]
    lines += [f"- {k}: {n}" for k, n in card.failures_by_kind.items()] or ["- none"]
    lines += ["", "## Rate-limit behaviour", ""]
    if card.rate_limits["seen"]:
        for proto, counts in card.rate_limits["refusals"].items():
            lines.append(f"- {proto}: " + ", ".join(f"{k} x{n}" for k, n in counts.items()))
        for key, value in card.rate_limits["limits"].items():
            lines.append(f"- fitted {key} = {value:g}")
    else:
        lines.append("- no create was refused (no 429, no quota or capacity refusal) at these widths")
    lines += ["", "## Cost", ""]
    lines.append(f"- this trial: {_usd(card.dollars)} (estimate {_usd(card.estimate.dollars)})")
    lines.append(f"- per 1,000 sandboxes: {_usd(card.dollars_per_1000)} (this trial's mean sandbox lifetime)")
    lines += ["", "## Fitted profile", ""]
    lines.append(f"- written: {card.fitted_profile}" if card.fitted_profile else f"- {card.prediction_note}")
    lines += [f"- {k} = {v:.4g}" + _says(k, v) for k, v in card.fitted.items()]
    if card.unidentified:
        lines.append("- not identifiable from these runs (kept at the prior's value):")
        lines += [f"  - {k}: {why}" for k, why in card.unidentified.items()]
    lines += ["", "## Predicted (fitted profile, simulated)", ""]
    if card.predictions:
        lines += ["| width | scenario | stat | predicted | interval |", "|---|---|---|---|---|"]
        for p in card.predictions:
            for stat, value in p.values.items():
                lo, hi = p.intervals.get(stat, (math.nan, math.nan))
                fmt = (lambda v: f"{v:.1%}") if stat.startswith("fail") else _s
                lines.append(f"| {p.width} | {p.scenario} | {stat} | {fmt(value)} | {fmt(lo)} .. {fmt(hi)} |")
        if card.prediction_note:  # what the intervals cover, and what the prediction carries and does not
            lines += ["", f"- {card.prediction_note}"]
    else:
        lines.append(f"- {card.prediction_note}")
    leak = (
        "0 (every run's end sweep completed)"
        if not card.leaked
        else f"{card.leaked} run(s) not swept: stampede cleanup"
    )
    lines += [
        "",
        f"Runs that may have left sandboxes alive: {leak}",
        f"Trial folder: {card.trial_dir} (scorecard.json)",
    ]
    return "\n".join(lines)


__all__ = [
    "Composite",
    "Estimate",
    "Prediction",
    "ProtocolOutcome",
    "Scorecard",
    "TrialProtocol",
    "budget_stop",
    "composite",
    "estimate",
    "failures_by_kind",
    "fit_inputs",
    "merged",
    "metric_score",
    "protocols",
    "ramp_stages",
    "rate_limit_behaviour",
    "render",
    "render_estimate",
    "sandbox_seconds",
]
