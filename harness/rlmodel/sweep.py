"""`stampede model --sweep`: the model over a range of concurrency, oversampling or (verl) staleness threshold,
and what to pick.

The recommendation is the cheapest setting that gets within `tolerance` (2%) of the best trainer throughput
found: more concurrency or oversampling past that point buys sandbox-seconds (and, past a vendor's knee, init
failures), not training speed. Cheapest is in dollars per 1,000 accepted samples (sandboxes plus, when its cost
is configured, the trainer's GPUs over the time those samples take) when the sandbox price is known, else in
sandbox-seconds per trained sample (the output says which). Numbers come from the simulation when it ran (it
holds everywhere), else from the closed forms.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from harness.results.render.plain_units import plain, usd
from harness.results.render.report_tables import Table
from harness.rlmodel.closed_form import solve
from harness.rlmodel.config import RLConfig
from harness.rlmodel.cost import Pricing, dollars
from harness.rlmodel.inputs import Plan, build_plan
from harness.rlmodel.latency_input import VendorModel
from harness.rlmodel.result import ModelResult
from harness.rlmodel.simulation import simulate

SweepKind = Literal["concurrency", "oversampling", "staleness_threshold"]
SWEEP_KINDS: tuple[str, ...] = ("concurrency", "oversampling", "staleness_threshold")
Engine = Literal["both", "closed", "simulation"]
DEFAULT_OVERSAMPLING: tuple[float, ...] = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)
DEFAULT_STALENESS: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 1.0)  # verl's documented sweep, and one more


@dataclass(frozen=True, slots=True)
class SweepPoint:
    value: float
    plan: Plan
    closed: ModelResult | None
    simulated: ModelResult | None

    @property
    def best(self) -> ModelResult:
        result = self.simulated or self.closed
        assert result is not None
        return result


@dataclass(frozen=True, slots=True)
class Sweep:
    kind: SweepKind
    points: list[SweepPoint]
    recommendation: str
    pricing: Pricing | None = None
    vendor: str = ""  # the latency model's provider/profile, for the figure's title
    measured: tuple[int, ...] = ()  # the latency model's measured concurrency buckets

    def measured_range(self) -> str:
        """`300`, `60-960` or `none`: where the latency model has data."""
        if not self.measured:
            return "none"
        low, high = min(self.measured), max(self.measured)
        return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def default_values(kind: SweepKind, config: RLConfig) -> list[float]:
    if kind == "oversampling":
        return list(DEFAULT_OVERSAMPLING)
    if kind == "staleness_threshold":
        return list(DEFAULT_STALENESS)
    target = config.concurrency or math.ceil(config.samples_per_step * config.oversampling)
    low = max(8, 2 ** math.floor(math.log2(max(target / 16, 1))))
    values: list[float] = []
    level = low
    while level <= 4 * target and len(values) < 10:
        values.append(float(level))
        level *= 2
    if float(target) not in values:
        values.append(float(target))
    return sorted(values)


def apply(kind: SweepKind, config: RLConfig, value: float) -> RLConfig:
    if kind == "concurrency":
        return config.with_(concurrency=max(round(value), 1))
    if kind == "staleness_threshold":
        return config.with_(staleness_threshold=float(value))
    return config.with_(oversampling=float(value))


def run_sweep(
    kind: SweepKind,
    config: RLConfig,
    vendor: VendorModel,
    values: Sequence[float],
    engine: Engine = "both",
    steps: int | None = None,
    tolerance: float = 0.02,
    pricing_: Pricing | None = None,
) -> Sweep:
    points = []
    for value in values:
        plan = build_plan(apply(kind, config, value), vendor)
        closed = solve(plan) if engine in ("both", "closed") else None
        simulated = simulate(plan, steps=steps) if engine in ("both", "simulation") else None
        points.append(SweepPoint(value, plan, closed, simulated))
    measured = tuple(sorted({int(bucket["concurrency"]) for bucket in vendor.buckets}))
    recommendation = recommend(kind, config, points, tolerance, pricing_)
    return Sweep(kind, points, recommendation, pricing_, vendor.name, measured)


def usd_per_1000(point: SweepPoint, pricing_: Pricing | None) -> float | None:
    """Sandboxes (+ trainer GPUs when configured) per 1,000 accepted samples at this point; None: price unknown."""
    if pricing_ is None:
        return None
    return dollars(point.best, pricing_).total_per_1000_accepted


def recommend(
    kind: SweepKind, config: RLConfig, points: Sequence[SweepPoint], tolerance: float, pricing_: Pricing | None = None
) -> str:
    usable = [p for p in points if p.best.trainer_samples_per_s > 0]
    if not usable:
        return "no setting produced any trained sample: check the latency model's failure rates and the config"
    top = max(p.best.trainer_samples_per_s for p in usable)
    good = [p for p in usable if p.best.trainer_samples_per_s >= (1 - tolerance) * top]
    in_dollars = all(usd_per_1000(p, pricing_) is not None for p in good)
    if in_dollars:
        pick = min(good, key=lambda p: (usd_per_1000(p, pricing_), p.value))
    else:
        pick = min(good, key=lambda p: (p.best.sandbox_seconds_per_trained_sample, p.value))
    r = pick.best
    name = kind.replace("_", " ")
    value = f"{int(pick.value)}" if kind == "concurrency" else f"{pick.value:g}"
    text = (
        f"recommend {name} {value}: trainer {r.trainer_samples_per_s:.3g} samples/s "
        f"({100 * r.trainer_samples_per_s / top:.0f}% of the best found), idle {100 * r.trainer_idle_ratio:.0f}%, "
        f"{plain(r.sandbox_seconds_per_trained_sample, 3)} sandbox-seconds per trained sample"
    )
    if in_dollars:
        what = "sandboxes + trainer GPUs" if pricing_ is not None and pricing_.gpu_per_s is not None else "sandboxes"
        text += (
            f", {usd(usd_per_1000(pick, pricing_))} per 1,000 accepted samples ({what}; cheapest within "
            f"{100 * tolerance:g}% of the best throughput)"
        )
    else:
        text += f" (cheapest in sandbox-seconds within {100 * tolerance:g}% of the best throughput: no sandbox price)"
    best_idle = min(p.best.trainer_idle_ratio for p in usable)
    if best_idle > 0.05:
        text += (
            f"; the trainer still idles {100 * best_idle:.0f}% at best: the generator (inference, sandboxes) is "
            "the bottleneck, so more trainer capacity would be wasted"
        )
    if pick.plan.sandbox.extrapolated:
        text += "; note: this concurrency is outside the latency model's measured range (extrapolated)"
    falling = [
        p for p in usable if p.value > pick.value and p.best.trainer_samples_per_s < 0.95 * r.trainer_samples_per_s
    ]
    if falling:
        text += f"; throughput falls again above {name} {falling[0].value:g} (init failures and spin-up tails)"
    return text


def sweep_table(sweep: Sweep) -> Table:
    header = [
        sweep.kind,
        "C eff",
        "gen/s",
        "trainer/s",
        "idle",
        "step s",
        "lost init",
        "stale",
        "killed",
        "sandbox-s/step",
        "sandbox-s/sample",
        "$/1k accepted",
        "engine",
        "latency model",
    ]
    rows = []
    for point in sweep.points:
        for result in (point.closed, point.simulated):
            if result is None:
                continue
            label = (
                "closed" + ("" if result.holds else " (approx.)") if result.engine == "closed form" else "simulation"
            )
            rows.append(
                [
                    f"{point.value:g}",
                    str(point.plan.concurrency),
                    plain(result.generator_samples_per_s),
                    plain(result.trainer_samples_per_s),
                    f"{100 * result.trainer_idle_ratio:.1f}%",
                    plain(result.step_time_s),
                    f"{100 * result.lost_to_init_failures:.2f}%",
                    f"{100 * result.lost_to_staleness:.2f}%",
                    f"{100 * result.killed_by_oversampling:.1f}%",
                    plain(result.sandbox_seconds_per_step),
                    plain(result.sandbox_seconds_per_trained_sample),
                    _usd(result, sweep.pricing),
                    label,
                    _latency_source(point),
                ]
            )
    title = f"sweep over {sweep.kind} ({sweep.vendor}; latency measured at concurrency {sweep.measured_range()})"
    return Table(title, header, rows, left=frozenset({len(header) - 2, len(header) - 1}))


def _latency_source(point: SweepPoint) -> str:
    """Whether this row's sandbox latency was measured near its concurrency or carried past the measured range."""
    latency = point.plan.sandbox
    buckets = "/".join(str(b) for b in latency.buckets_used)
    return f"EXTRAPOLATED from {buckets}" if latency.extrapolated else f"measured ({buckets})"


def _usd(result: ModelResult, pricing_: Pricing | None) -> str:
    value = dollars(result, pricing_).total_per_1000_accepted if pricing_ is not None else None
    return usd(value)


def sweep_plot(sweep: Sweep) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = sweep_figure(sweep)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def sweep_title(sweep: Sweep) -> str:
    """The figure's title: the vendor, what was swept over which range, and where the latency was measured."""
    low, high = min(p.value for p in sweep.points), max(p.value for p in sweep.points)
    swept = f"{plain(low)}-{plain(high)}" if low != high else plain(low)
    where = f"latency measured at concurrency {sweep.measured_range()}"
    return f"{sweep.vendor or 'vendor'}\n{sweep.kind.replace('_', ' ')} {swept} ({where})"


def sweep_figure(sweep: Sweep) -> Any:
    """The sweep's matplotlib figure (a concurrency sweep shades the measured range: outside it, extrapolated)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6.5), sharex=True, layout="constrained")
    fig.suptitle(sweep_title(sweep), fontsize=10)
    twin = top.twinx()
    x = [p.value for p in sweep.points]
    for engine, style in (("closed", "o-"), ("simulation", "s--")):
        found = [p.closed if engine == "closed" else p.simulated for p in sweep.points]
        results = [r for r in found if r is not None]
        if len(results) != len(found):
            continue
        top.plot(
            x, [r.trainer_samples_per_s for r in results], style, color="C0", label=f"trainer samples/s ({engine})"
        )
        top.plot(
            x, [r.generator_samples_per_s for r in results], style, color="C1", label=f"generator samples/s ({engine})"
        )
        twin.plot(x, [100 * r.trainer_idle_ratio for r in results], style, color="C3", alpha=0.6)
        bottom.plot(
            x,
            [r.sandbox_seconds_per_trained_sample for r in results],
            style,
            color="C2",
            label=f"sandbox-s per trained sample ({engine})",
        )
    twin.set_ylabel("trainer idle (%)", color="C3")
    twin.set_ylim(0, 100)
    twin.grid(False)
    top.set_ylabel("samples/s")
    top.legend(fontsize=7, loc="upper left")
    bottom.set_ylabel("sandbox-seconds per trained sample")
    bottom.set_xlabel(sweep.kind)
    bottom.legend(fontsize=7)
    for axis in (top.yaxis, bottom.yaxis, twin.yaxis):
        axis.set_major_formatter(FuncFormatter(lambda value, _: plain(value)))
    if sweep.kind == "concurrency":
        bottom.set_xscale("log", base=2)
        bottom.xaxis.set_major_formatter(FuncFormatter(lambda value, _: plain(value)))
        bottom.xaxis.set_minor_formatter(NullFormatter())
        if sweep.measured:
            low, high = min(sweep.measured), max(sweep.measured)
            label = f"measured: {sweep.measured_range()} (outside: extrapolated)"
            for ax in (top, bottom):
                if low == high:  # one bucket: a line, not a band
                    ax.axvline(low, color="0.4", linestyle=":", linewidth=1.5, label=label if ax is top else None)
                else:
                    ax.axvspan(low, high, color="0.85", alpha=0.5, label=label if ax is top else None, zorder=0)
            top.legend(fontsize=7, loc="upper left")
    return fig
