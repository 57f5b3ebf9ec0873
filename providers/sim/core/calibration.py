"""Calibration: the public benchmarks' own protocols run against a profile, side by side with the public figures.

A profile is only as good as its match to the public record, so the match is computed, not asserted in prose.
Each profile's figures live in `targets/<profile>.toml` (value, source and date, tolerance). The protocols are
computesdk/benchmarks' (sequential 100, staggered 100 at 200 ms, burst 100; TTI = create -> first command,
median / p95 / p99 after trimming 5% from both ends, success = ok / runs) plus the 960-wide bursts behind the
SemiAnalysis report, and a held burst (each sandbox kept for a rollout's length after its first command) for
waits in PENDING. Everything runs on the VirtualClock: deterministic, seconds not hours, no network.

A public figure is one run of 100, so it is compared with the median of that statistic over `seeds` simulated
runs (the profile's expected value), not with one lucky seed.
"""

from __future__ import annotations

import math
import statistics
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from providers.base import INIT_PHASES
from providers.sim.core.experiments import BurstResult, simulate_burst, simulate_sequential
from providers.sim.core.profile import Profile, ProfileError, load_profile

TARGETS_DIR = Path(__file__).with_name("targets")
DEFAULT_SEEDS = 10
VERL_READY_TIMEOUT_S = 900.0  # verl/uni-agent PR #47: the init wall budget
VERL_RETRIES = 5  # uni-agent's max_retries before PR #47 (it lowered it to 2)
HELD_BURST_N = 1536  # "burst-held": half again prime-like's warm pool (32 x 32 = 1,024), within its quota of 2,000
HELD_BURST_HOLD_S = 600.0  # each rollout keeps its sandbox this long after its first command (targets/prime-like.toml)
PENDING_THRESHOLD_S = 115.0  # the SDK's old PENDING budget (verifiers PR #2414): "pending_share_115"


@dataclass(frozen=True, slots=True)
class Figure:
    """One public figure: the protocol that produced it, the statistic, and how close the profile must come."""

    protocol: str
    stat: str
    public: float | None  # None for a range-only claim ("happens", "tens of minutes")
    tolerance: float | None  # relative, when `public` is given
    low: float | None
    high: float | None
    source: str


@dataclass(frozen=True, slots=True)
class Row:
    """A figure against the simulated value: the error (relative, for point figures) and whether it passes."""

    figure: Figure
    simulated: float
    error: float | None
    ok: bool


def computesdk_stats(values: Sequence[float], trim: float = 0.05) -> dict[str, float]:
    """computesdk/benchmarks' src/util/stats.ts: trim `trim` from both ends, then median and nearest-rank p95/p99."""
    if not values:
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan}
    ordered = sorted(values)
    cut = math.floor(len(ordered) * trim)
    if cut > 0 and len(ordered) - 2 * cut > 0:
        ordered = ordered[cut : len(ordered) - cut]
    mid = len(ordered) // 2
    median = (ordered[mid - 1] + ordered[mid]) / 2 if len(ordered) % 2 == 0 else ordered[mid]

    def rank(p: float) -> float:
        return ordered[min(max(0, math.ceil(p / 100 * len(ordered)) - 1), len(ordered) - 1)]

    return {"p50": median, "p95": rank(95), "p99": rank(99)}


def _protocols() -> dict[str, Callable[[Profile, int], BurstResult]]:
    return {
        "sequential": lambda p, seed: simulate_sequential(p, 100, seed=seed),
        "staggered": lambda p, seed: simulate_burst(p, 100, seed=seed, spacing_s=0.2),
        "burst": lambda p, seed: simulate_burst(p, 100, seed=seed),
        "burst960": lambda p, seed: simulate_burst(p, 960, seed=seed),
        "burst960-retries": lambda p, seed: simulate_burst(
            p, 960, seed=seed, retries=VERL_RETRIES, ready_timeout_s=VERL_READY_TIMEOUT_S
        ),
        "burst-held": lambda p, seed: simulate_burst(p, HELD_BURST_N, seed=seed, hold_s=HELD_BURST_HOLD_S),
    }


PROTOCOLS: tuple[str, ...] = tuple(_protocols())


def statistic(result: BurstResult, stat: str) -> float:
    """One statistic of one simulated run, computed as the public source computes it."""
    if stat in ("p50", "p95", "p99"):
        return computesdk_stats(result.ttis())[stat]
    if stat == "success":
        return 1.0 - result.failure_rate
    if stat == "init_failure_rate":  # first attempts that never became usable
        return first_attempt_init_failure_rate(result)
    if stat == "tti_max":
        ttis = result.ttis()
        return ttis[-1] if ttis else math.nan
    if stat == "startup_max":
        startups = result.startups()
        return startups[-1] if startups else math.nan
    if stat == "startup_p50":
        startups = result.startups()
        return startups[len(startups) // 2] if startups else math.nan
    if stat == "pending_max":  # the longest wait in PENDING (acceptance -> placed on a node)
        return result.pending_max
    if stat == "pending_p99":
        return result.pending_p99
    if stat == "pending_share_115":  # rollouts whose sandbox sat in PENDING past the SDK's old 115 s budget
        return result.pending_share_over(PENDING_THRESHOLD_S)
    raise ValueError(f"unknown statistic {stat!r}")


def first_attempt_init_failure_rate(result: BurstResult) -> float:
    """Share of rollouts whose first attempt never became usable (retried, or given up at once)."""
    failed = sum(1 for s in result.samples if s.attempts > 1 or s.phase in INIT_PHASES)
    return failed / max(1, result.n)


def load_figures(profile_name: str) -> list[Figure]:
    """The public figures for a profile (empty when it has none: e.g. `ideal`)."""
    path = TARGETS_DIR / f"{profile_name}.toml"
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from None
    figures: list[Figure] = []
    for entry in data.get("figure", []):
        protocol = entry["protocol"]
        if protocol not in PROTOCOLS:
            raise ProfileError(f"{path}: unknown protocol {protocol!r} (known: {', '.join(PROTOCOLS)})")
        stats = entry["stat"]
        publics = entry.get("public", [None] * len(stats))
        low, high = entry.get("range", [None, None])
        for stat, public in zip(stats, publics, strict=True):
            figures.append(Figure(protocol, stat, public, entry.get("tolerance"), low, high, entry["source"]))
    return figures


def calibrate(profile: str | Profile, seeds: int = DEFAULT_SEEDS) -> list[Row]:
    """Run every protocol a profile has public figures for, `seeds` times, and compare."""
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    figures = load_figures(prof.name)
    runners = _protocols()
    cache: dict[str, list[BurstResult]] = {}
    rows: list[Row] = []
    for fig in figures:
        if fig.protocol not in cache:
            cache[fig.protocol] = [runners[fig.protocol](prof, seed) for seed in range(seeds)]
        values = [statistic(r, fig.stat) for r in cache[fig.protocol]]
        simulated = statistics.median(v for v in values if not math.isnan(v)) if values else math.nan
        if fig.public is not None:
            error = (simulated - fig.public) / fig.public if fig.public else math.inf
            ok = abs(error) <= (fig.tolerance or 0.0) + 1e-12
        else:
            error = None
            ok = (fig.low is None or simulated >= fig.low) and (fig.high is None or simulated <= fig.high)
        rows.append(Row(fig, simulated, error, ok))
    return rows


def _fmt(stat: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if stat in ("success", "init_failure_rate", "pending_share_115"):
        return f"{100 * value:.1f}%"
    return f"{value:.3g} s" if value < 100 else f"{value:.0f} s ({value / 60:.1f} min)"


def render(profile_name: str, rows: Sequence[Row], seeds: int) -> str:
    """The side-by-side table (Markdown, so providers/sim/README.md can hold it verbatim)."""
    lines = [
        f"`{profile_name}` (median over {seeds} seeded runs per protocol; VirtualClock)",
        "",
        "| protocol | figure | public | simulated | error | tolerance | ok | source |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if not rows:
        lines.append("| - | - | - | - | - | - | - | no public figures for this profile |")
    for row in rows:
        f = row.figure
        if f.public is not None:
            public, error, tol = (
                _fmt(f.stat, f.public),
                f"{100 * (row.error or 0.0):+.1f}%",
                f"±{100 * (f.tolerance or 0):.0f}%",
            )
        else:
            public, error = "-", "-"
            tol = f"[{_fmt(f.stat, f.low)}, {_fmt(f.stat, f.high)}]"
        mark = "yes" if row.ok else "NO"
        lines.append(
            f"| {f.protocol} | {f.stat} | {public} | {_fmt(f.stat, row.simulated)} | {error} | {tol} | {mark} | {f.source} |"
        )
    return "\n".join(lines)
