"""Calibration: the public benchmarks' own protocols run against a profile, side by side with the public figures.

A profile is only as good as its match to the public record, so the match is computed, not asserted in prose.
Each profile's figures live in `targets/<profile>.toml` (value, source and date, and the window the simulated
value must fall in: for a daily public benchmark, the lowest to the highest value its own published runs gave over
the month the figure comes from, so the check fails only where the public record rules a value out). The protocols are
computesdk/benchmarks' (sequential 100, staggered 100 at 200 ms, burst 100; TTI = create -> first command,
median / p95 / p99 after trimming 5% from both ends, success = ok / runs) plus the 960-wide bursts behind the
SemiAnalysis report, and a held burst (each sandbox kept for a rollout's length after its first command) for
waits in PENDING. Everything runs on the VirtualClock: deterministic, seconds not hours, no network.

A public figure is one run of 100, so it is compared with the median of that statistic over `seeds` simulated
runs (the profile's expected value), not with one lucky seed. Quantiles are compared like for like (both trimmed as
computesdk trims), and the table prints stampede's own untrimmed quantile of the same runs beside them.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from foundation.sandbox_client import CLIENTS, SandboxClient
from providers.base import INIT_PHASES
from providers.sim.core.experiments import BurstResult, simulate_burst, simulate_sequential
from providers.sim.core.profile import Profile, ProfileError, load_profile, profile_names

TARGETS_DIR = Path(__file__).with_name("targets")
DEFAULT_SEEDS = 10
VERL_READY_TIMEOUT_S = 900.0  # verl/uni-agent PR #47: the init wall budget
VERL_RETRIES = 5  # uni-agent's max_retries before PR #47 (it lowered it to 2)
RL_CLIENT = "swe-rex-uni-agent-pre47"  # the client of the 960 protocols (foundation/sandbox_client.py)
HELD_BURST_N = 1536  # "burst-held": half again prime-like's warm pool (32 x 32 = 1,024), within its quota of 2,000
HELD_BURST_HOLD_S = 600.0  # each rollout keeps its sandbox this long after its first command (targets/prime-like.toml)
PENDING_THRESHOLD_S = 115.0  # the SDK's old PENDING budget (verifiers PR #2414): "pending_share_115"
TRIMMED_STATS = {"p50": 0.50, "p95": 0.95, "p99": 0.99}  # computesdk's quantiles, reported after a 5% trim


@dataclass(frozen=True, slots=True)
class Figure:
    """One public figure: the protocol that produced it, the statistic, and how close the profile must come."""

    protocol: str
    stat: str
    public: float | None  # None for a range-only claim ("happens", "tens of minutes")
    tolerance: float | None  # relative, when `public` is given without a window
    low: float | None  # the window (or the range-only claim's bounds); None = unbounded on that side
    high: float | None
    source: str
    spread: str | None = None  # where the window comes from (the public figure's own day-to-day spread)

    @property
    def name(self) -> str:
        """How the table, the sweep and a failing check name it: `protocol/stat`."""
        return f"{self.protocol}/{self.stat}"

    @property
    def trimmed(self) -> bool:
        """A computesdk quantile: the public value (and the simulated one beside it) is 5%-trimmed at each end."""
        return self.stat in TRIMMED_STATS


@dataclass(frozen=True, slots=True)
class Row:
    """A figure against the simulated value: the error (relative, for point figures) and whether it passes."""

    figure: Figure
    simulated: float
    error: float | None
    ok: bool
    untrimmed: float | None = None  # stampede's own quantile of the same runs, for a trimmed statistic


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


def _protocols(client: SandboxClient | None = None) -> dict[str, Callable[[Profile, int], BurstResult]]:
    rl = CLIENTS[RL_CLIENT] if client is None else client
    return {
        "sequential": lambda p, seed: simulate_sequential(p, 100, seed=seed),
        "staggered": lambda p, seed: simulate_burst(p, 100, seed=seed, spacing_s=0.2),
        "burst": lambda p, seed: simulate_burst(p, 100, seed=seed),
        # the 960 reports came from SWE-ReX under uni-agent before PR #47: its 300 s deadline is the client's
        "burst960": lambda p, seed: simulate_burst(p, 960, seed=seed, client=rl),
        "burst960-retries": lambda p, seed: simulate_burst(p, 960, seed=seed, client=rl),
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
        lows = entry.get("low", [low] * len(stats))
        highs = entry.get("high", [high] * len(stats))
        if not all(len(v) == len(stats) for v in (publics, lows, highs)):
            raise ProfileError(f"{path}: {protocol}: public, low and high need one value per stat")
        for stat, public, lo, hi in zip(stats, publics, lows, highs, strict=True):
            if public is not None and lo is None and hi is None and entry.get("tolerance") is None:
                raise ProfileError(f"{path}: {protocol}/{stat}: a public value needs a window (low, high)")
            figures.append(
                Figure(protocol, stat, public, entry.get("tolerance"), lo, hi, entry["source"], entry.get("spread"))
            )
    return figures


def calibrate(
    profile: str | Profile,
    seeds: int = DEFAULT_SEEDS,
    cache: dict[str, list[BurstResult]] | None = None,
    client: SandboxClient | None = None,
) -> list[Row]:
    """Run every protocol a profile has public figures for, `seeds` times, and compare.

    `cache` (protocol -> runs) is filled as protocols run, so a caller that wants more from the same runs (the
    sweep's 960 columns) does not run them twice. `client` replaces the 960 protocols' RL client (`RL_CLIENT`).
    """
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    figures = load_figures(prof.name)
    runners = _protocols(client)
    cache = {} if cache is None else cache
    rows: list[Row] = []
    for fig in figures:
        if fig.protocol not in cache:
            cache[fig.protocol] = [runners[fig.protocol](prof, seed) for seed in range(seeds)]
        simulated = _median([statistic(r, fig.stat) for r in cache[fig.protocol]])
        untrimmed = _median([r.quantile(TRIMMED_STATS[fig.stat]) for r in cache[fig.protocol]]) if fig.trimmed else None
        error = None
        if fig.public is not None:
            error = (simulated - fig.public) / fig.public if fig.public else math.inf
        if fig.low is None and fig.high is None and fig.tolerance is not None:
            ok = error is not None and abs(error) <= fig.tolerance + 1e-12
        else:
            ok = (fig.low is None or simulated >= fig.low) and (fig.high is None or simulated <= fig.high)
        rows.append(Row(fig, simulated, error, ok, untrimmed))
    return rows


def _median(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return statistics.median(kept) if kept else math.nan


def _fmt(stat: str, value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if stat in ("success", "init_failure_rate", "pending_share_115"):
        return f"{100 * value:.1f}%"
    return f"{value:.3g} s" if value < 100 else f"{value:.0f} s ({value / 60:.1f} min)"


def _window(f: Figure) -> str:
    if f.low is None and f.high is None:
        return f"±{100 * (f.tolerance or 0):.0f}%"
    return f"[{_fmt(f.stat, f.low)}, {_fmt(f.stat, f.high)}]"


def render(profile_name: str, rows: Sequence[Row], seeds: int) -> str:
    """The side-by-side table (Markdown, so providers/sim/README.md can hold it verbatim).

    A computesdk quantile is compared like for like: "public" is their 5%-trimmed statistic and "simulated" is the
    same statistic of the simulated runs; "untrimmed" is stampede's own quantile of those runs (what `stampede run`
    reports), so a reader sees how much the trim hides. The windows' derivations follow the table.
    """
    lines = [
        f"`{profile_name}` (median over {seeds} seeded runs per protocol; VirtualClock)",
        "",
        "| protocol | figure | public | simulated | untrimmed | error | window | ok | source |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    if not rows:
        lines.append("| - | - | - | - | - | - | - | - | no public figures for this profile |")
    for row in rows:
        f = row.figure
        stat = f"{f.stat} (5% trimmed)" if f.trimmed else f.stat
        public = _fmt(f.stat, f.public) if f.public is not None else "-"
        error = f"{100 * row.error:+.1f}%" if row.error is not None else "-"
        untrimmed = _fmt(f.stat, row.untrimmed) if row.untrimmed is not None else "-"
        mark = "yes" if row.ok else "NO"
        lines.append(
            f"| {f.protocol} | {stat} | {public} | {_fmt(f.stat, row.simulated)} | {untrimmed} | {error} "
            f"| {_window(f)} | {mark} | {f.source} |"
        )
    spreads = list(dict.fromkeys(f"{r.figure.protocol}: {r.figure.spread}" for r in rows if r.figure.spread))
    if spreads:
        lines += ["", "Windows:", *(f"- {s}" for s in spreads)]
    return "\n".join(lines)


SWEEP_960 = "burst960"  # the protocol whose outcome a sweep reports beside the checks
CLIENT_PREFIX = "client."  # a swept key naming a field of the 960 protocols' RL client, not of the profile


def client_with(name: str, raw: str) -> SandboxClient:
    """The 960 protocols' RL client with one numeric field replaced (a ProfileError line when that cannot be)."""
    base = CLIENTS[RL_CLIENT]
    if name not in base.values():
        raise ProfileError(f"unknown client field {name!r} ({RL_CLIENT}: {', '.join(base.values())})")
    try:
        changes: dict[str, Any] = {name: int(raw) if isinstance(getattr(base, name), int) else float(raw)}
        return dataclasses.replace(base, **changes)
    except ValueError as exc:
        raise ProfileError(f"client.{name}={raw!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One value of a swept profile field: the 960 outcome (medians over seeds) and every public check's verdict.

    TTI quantiles are stampede's own (untrimmed) over the rollouts that started; `startup_max` is the longest
    first-create -> first-command of the same 960 (retried as the protocol's client retries)."""

    value: str
    failure_960: float  # first attempts that never became usable
    failed_960: float  # rollouts that never got a sandbox, after the client's retries
    tti_p50: float
    tti_p99: float
    startup_max: float
    rows: tuple[Row, ...]

    @property
    def failing(self) -> list[str]:
        return [row.figure.name for row in self.rows if not row.ok]


def sweep(profile: str | Profile, key: str, values: Sequence[str], seeds: int = DEFAULT_SEEDS) -> list[SweepPoint]:
    """The profile with `key` set to each of `values` in turn (dotted field name, as `with_overrides` takes it; or
    `client.<field>` for the 960 protocols' RL client, e.g. `client.startup_deadline_s`, `client.leak_prob`): its
    960 outcome and its calibration, so a reader sees which values the public figures rule out."""
    base = profile if isinstance(profile, Profile) else load_profile(profile)
    points: list[SweepPoint] = []
    for value in values:
        prof, client = base, None
        if key.startswith(CLIENT_PREFIX):
            client = client_with(key[len(CLIENT_PREFIX) :], value)
        else:
            prof = base.with_overrides({key: value})
        runner = _protocols(client)[SWEEP_960]
        cache: dict[str, list[BurstResult]] = {}
        rows = calibrate(prof, seeds=seeds, cache=cache, client=client)
        runs = cache.get(SWEEP_960) or [runner(prof, seed) for seed in range(seeds)]
        points.append(
            SweepPoint(
                value=value,
                failure_960=_median([first_attempt_init_failure_rate(r) for r in runs]),
                failed_960=_median([r.failure_rate for r in runs]),
                tti_p50=_median([r.quantile(0.50) for r in runs]),
                tti_p99=_median([r.quantile(0.99) for r in runs]),
                startup_max=_median([statistic(r, "startup_max") for r in runs]),
                rows=tuple(rows),
            )
        )
    return points


def render_sweep(profile_name: str, key: str, points: Sequence[SweepPoint], seeds: int) -> str:
    """The sweep as a Markdown table: value -> 960 outcome -> which public checks still pass."""
    if key.startswith(CLIENT_PREFIX):
        current = CLIENTS[RL_CLIENT].values().get(key[len(CLIENT_PREFIX) :])
    else:
        current = load_profile(profile_name).numeric_fields().get(key) if profile_name in profile_names() else None
    lines = [
        f"`{profile_name}`: `{key}` swept (median over {seeds} seeded runs; 960 rollouts at once under the"
        f" `{RL_CLIENT}` client, VirtualClock; TTI quantiles untrimmed)",
        "",
        f"| {key} | 960 first attempts failed | 960 failed after retries | 960 TTI p50 | 960 TTI p99"
        " | 960 longest startup | checks passed | failing checks |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for point in points:
        mark = " (profile)" if current is not None and _same(point.value, current) else ""
        passed = sum(1 for row in point.rows if row.ok)
        lines.append(
            f"| {point.value}{mark} | {_fmt('init_failure_rate', point.failure_960)}"
            f" | {_fmt('init_failure_rate', point.failed_960)} | {_fmt('p50', point.tti_p50)}"
            f" | {_fmt('p99', point.tti_p99)} | {_fmt('startup_max', point.startup_max)} | {passed}/{len(point.rows)}"
            f" | {', '.join(point.failing) or '-'} |"
        )
    return "\n".join(lines)


def _same(raw: str, value: float) -> bool:
    try:
        return math.isclose(float(raw), value)
    except ValueError:
        return False
