"""A progress line every few seconds while a run goes, from the engines' own counters (not Locust's).

It says where the run is against its plan: elapsed of the planned total, stage i of N and an ETA. A holding
shape (ramp, steady, soak, knee) plans its stages' ramps and holds (a knee may stop early; Locust's `-t` caps
it); a burst cannot know how long its rollouts take, so its ETA follows the share of the step's rollouts that
have ended (`~`: an estimate).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.locust.live.live_view import LiveTotals, LiveView
from harness.locust.live.periodic import Periodic
from harness.locust.run_state import RunState
from harness.results.figures.engine_load import stall_text
from harness.wire.messages import RECENT_WINDOW_S


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What the progress line knows of the run ahead: how many stages and, when the shape can tell, how long."""

    stages: int | None = None
    total_s: float | None = None  # wall seconds planned (or Locust's -t, whichever is first); None: unknown
    step_size: int | None = None  # a burst: rollouts each step releases (its ETA follows how many have ended)
    stage_s: tuple[float, ...] = ()  # a holding shape: each stage's planned ramp + hold (wall seconds)
    run_time_s: float | None = None  # Locust's -t


def holding_plan(levels: Sequence[int], hold_s: float, spawn_rate: float, run_time_s: float | None = None) -> RunPlan:
    """A ramp/steady/soak/knee: each stage spawns up to its level at the spawn rate, then holds."""
    stages, previous = [], 0
    for level in levels:
        ramp = max(level - previous, 0) / spawn_rate if spawn_rate > 0 else 0.0
        stages.append(ramp + hold_s)
        previous = level
    total = sum(stages)
    if run_time_s:
        total = min(total, run_time_s)
    return RunPlan(len(levels), total, stage_s=tuple(stages), run_time_s=run_time_s)


def plan_of(runner: Any, settings: Any) -> RunPlan:
    """The plan of the run's shape (duck-typed: stampede's shapes, or none), capped by Locust's -t."""
    environment = getattr(runner, "environment", None)
    shape = getattr(environment, "shape_class", None)
    options = getattr(environment, "parsed_options", None)
    run_time = getattr(options, "run_time", None)
    run_time_s = float(run_time) if isinstance(run_time, int | float) and run_time > 0 else None
    try:
        if shape is not None and hasattr(shape, "levels") and hasattr(shape, "default_hold"):
            hold = shape.hold(shape.default_hold())
            return holding_plan(shape.levels(), hold, shape.spawn_rate(), run_time_s)
        if shape is not None and hasattr(shape, "size") and hasattr(shape, "burst_size"):
            return RunPlan(int(getattr(settings, "burst_steps", 1)), run_time_s, int(shape.size()))
    except (AttributeError, TypeError, ValueError):  # a line of progress never stops a run
        pass
    return RunPlan(None, run_time_s)


def clock(seconds: float) -> str:
    """`45s`, `2m05s`, `1h02m`: elapsed and remaining time as a reader says it."""
    s = max(round(seconds), 0)
    if s < 100:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta_s(
    elapsed_s: float, plan: RunPlan, stage_index: int, ended_in_stage: int, stage_age_s: float | None = None
) -> float | None:
    """Seconds left: a holding shape's rest of this stage (from how long it has run) and the stages after it; a
    burst's from the share of its rollouts that ended (steps ahead at the same pace); capped by -t; None when
    nothing tells."""
    if plan.stage_s and stage_age_s is not None and 0 < stage_index <= len(plan.stage_s):
        rest = max(plan.stage_s[stage_index - 1] - stage_age_s, 0.0) + sum(plan.stage_s[stage_index:])
        return min(rest, max(plan.run_time_s - elapsed_s, 0.0)) if plan.run_time_s else rest
    if plan.step_size and plan.stages and stage_index > 0:
        done = (stage_index - 1) + min(ended_in_stage / plan.step_size, 1.0)
        if done > 0:
            estimate = elapsed_s / done * (plan.stages - done)
            return min(estimate, plan.total_s - elapsed_s) if plan.total_s else estimate
        return None
    if plan.total_s is not None:
        return max(plan.total_s - elapsed_s, 0.0)
    return None


def _head(elapsed_s: float, stage: str, index: int, plan: RunPlan | None, ended: int, stage_age_s: float | None) -> str:
    if plan is None:
        return f"[{elapsed_s:6.0f}s] {stage or '-':<16}"
    eta = eta_s(elapsed_s, plan, index, ended, stage_age_s)
    planned = elapsed_s + eta if eta is not None and plan.stage_s and stage_age_s is not None else plan.total_s
    total = f"/{clock(planned)}" if planned and not plan.step_size else ""
    of = f" stage {index}/{plan.stages}" if plan.stages and index > 0 else ""
    left = "" if eta is None else (f" ETA ~{clock(eta)}" if plan.step_size else f" ETA {clock(eta)}")
    return f"[{clock(elapsed_s)}{total}{left}]{of} {stage or '-':<16}"


def format_progress(
    elapsed_s: float,
    stage: str,
    users: int,
    target: int,
    live: LiveView,
    time_scale: float | None = None,
    plan: RunPlan | None = None,
    stage_index: int = 0,
    stage_age_s: float | None = None,
    vendor_tti: tuple[float, ...] | None = None,
) -> str:
    """One line; TTI in vendor seconds, unit stated: `vendor_tti` (p50, p99) when the rows were converted by the
    summary's rule (harness.locust.live.live_vendor_seconds), else wall / time scale, said to be an estimate.
    With a `plan`: elapsed of the planned total, stage i/N and the ETA lead it."""
    totals = live.totals()
    ended = live.stage(stage).ended if stage and plan is not None and plan.step_size else 0
    head = f"{_head(elapsed_s, stage, stage_index, plan, ended, stage_age_s)} users {users}/{target}"
    if not totals.engines:
        return head
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(totals.failures.items(), key=lambda kv: -kv[1])[:3])
    stats = live.stage(stage) if stage else None
    p50 = stats.tti_quantile(0.5) if stats else None
    p99 = stats.tti_quantile(0.99) if stats else None
    scale = time_scale if time_scale and time_scale > 0 else 1.0
    if p50 is None or p99 is None:
        tti = "TTI -"
    elif scale == 1.0:
        tti = f"TTI p50 {p50:.2f}s p99 {p99:.2f}s (stage)"
    elif vendor_tti is not None:
        tti = f"TTI p50 {vendor_tti[0]:.2f} p99 {vendor_tti[1]:.2f} vendor s (stage)"
    else:  # no vendor record to convert with: harness time stretched too, so it reads high
        tti = f"TTI p50 {p50 / scale:.2f} p99 {p99 / scale:.2f} vendor s (estimate: wall / {scale:g}; stage)"
    engines = f" over {totals.engines} engines" if totals.engines > 1 else ""
    dropped = f" dropped {totals.dropped}" if totals.dropped else ""
    return (
        f"{head} | in flight {totals.inflight}{engines} | ok {totals.ok} failed {totals.failed}"
        + (f" ({kinds})" if kinds else "")
        + f"{dropped} | {tti} | {lag_text(totals)} cpu {'/'.join(map(str, totals.cpu_percent))}%"
    )


def lag_text(totals: LiveTotals) -> str:
    """The engines' loop lag: the recent p99, a stall beside it (a p99 hides one frozen probe among hundreds), and
    an engine not answering at all (frozen now: its last counters would otherwise read as if all were well)."""
    window = f"(last {RECENT_WINDOW_S:g}-{2 * RECENT_WINDOW_S:g}s)"
    text = f"loop lag p99 {totals.loop_lag_p99_ms:.0f}ms{stall_text(totals.loop_lag_max_ms)} {window}"
    if totals.silent_s:
        text = f"engine stalled {totals.silent_s:.0f} s (not answering) | " + text
    return text


def _counts(line: str) -> str:
    """A line without its clock (elapsed, ETA) and the engines' health (lag, CPU): two lines that say the same of
    the run's rollouts compare equal, so a run does not end on a repeat of its last tick's counts."""
    counts = line.partition(" users ")[2]
    for health in (" | engine stalled", " | loop lag"):
        counts = counts.partition(health)[0]
    return counts


class ProgressPrinter:
    """Prints to stderr from its own greenlet; stopping it never blocks the run."""

    def __init__(
        self,
        runner: Any,
        state: RunState,
        interval_s: float,
        time_scale: float | None = None,
        vendor_tti: Callable[[str], tuple[float, ...] | None] | None = None,
    ) -> None:
        self.runner = runner
        self.time_scale = time_scale
        self.vendor_tti = vendor_tti  # a stage's TTI p50, p99 in vendor seconds by the summary's rule, if known
        self.state = state
        self.interval_s = interval_s
        self.t0 = time.monotonic()
        self.plan = plan_of(runner, state.settings)
        self._periodic = Periodic(interval_s, self._print)
        self._last_line = ""

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        """Stops the ticks and prints the run's final counts, unless the last tick printed the same: a run that ends
        between two ticks (or before the first) would otherwise leave its last line short of the rollouts that
        ended. Call it before the run state leaves its stage."""
        running = self._periodic.running
        self._periodic.stop()
        if not running:
            return
        try:
            line = self.line()
            if _counts(line) != _counts(self._last_line):
                self._write(line)
        except Exception:  # a line of progress never stops a run's end (the drain and the results follow)
            pass

    def _print(self) -> None:
        self._write(self.line())

    def _write(self, line: str) -> None:
        self._last_line = line
        print(line, file=sys.stderr, flush=True)

    def line(self) -> str:
        runner = self.runner
        stage = self.state.stage
        return format_progress(
            time.monotonic() - self.t0,
            stage.name,
            int(getattr(runner, "user_count", 0)),
            stage.target_users or int(getattr(runner, "target_user_count", 0) or 0),
            self.state.live,
            self.time_scale,
            self.plan,
            stage.index,
            self._stage_age(),
            self.vendor_tti(stage.name) if self.vendor_tti is not None and stage.name else None,
        )

    def _stage_age(self) -> float | None:
        """How long the shape has been in its stage (its own clock), for a holding shape's ETA."""
        shape = getattr(getattr(self.runner, "environment", None), "shape_class", None)
        age = getattr(shape, "stage_age", None)
        try:
            return float(age()) if callable(age) else None
        except (TypeError, ValueError):
            return None
