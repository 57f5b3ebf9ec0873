"""A progress line every few seconds while a run goes, from the engines' own counters (not Locust's)."""

from __future__ import annotations

import sys
import time
from typing import Any

from harness.locust.live_view import LiveView
from harness.locust.periodic import Periodic
from harness.locust.run_state import RunState
from harness.wire.messages import RECENT_WINDOW_S


def format_progress(
    elapsed_s: float, stage: str, users: int, target: int, live: LiveView, time_scale: float | None = None
) -> str:
    """One line; TTI in vendor seconds (wall / time scale, as live counters have no vendor truth), unit stated."""
    totals = live.totals()
    head = f"[{elapsed_s:6.0f}s] {stage or '-':<16} users {users}/{target}"
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
    else:
        tti = f"TTI p50 {p50 / scale:.2f} p99 {p99 / scale:.2f} vendor s (wall / {scale:g}; stage)"
    engines = f" over {totals.engines} engines" if totals.engines > 1 else ""
    dropped = f" dropped {totals.dropped}" if totals.dropped else ""
    return (
        f"{head} | in flight {totals.inflight}{engines} | ok {totals.ok} failed {totals.failed}"
        + (f" ({kinds})" if kinds else "")
        + f"{dropped} | {tti} | loop lag p99 {totals.loop_lag_p99_ms:.0f}ms (last {RECENT_WINDOW_S:g}-{2 * RECENT_WINDOW_S:g}s) cpu {'/'.join(map(str, totals.cpu_percent))}%"
    )


class ProgressPrinter:
    """Prints to stderr from its own greenlet; stopping it never blocks the run."""

    def __init__(self, runner: Any, state: RunState, interval_s: float, time_scale: float | None = None) -> None:
        self.runner = runner
        self.time_scale = time_scale
        self.state = state
        self.interval_s = interval_s
        self.t0 = time.monotonic()
        self._periodic = Periodic(interval_s, self._print)

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    def _print(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)

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
        )
