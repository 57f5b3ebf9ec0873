"""`--abort-on-threshold`: stop a run as soon as a threshold is crossed beyond doubt.

Every CHECK_INTERVAL_S the thresholds that cannot un-cross (upper bounds on failure counts: `failures<N`,
`failures.KIND<=N`, whole run or per stage; `Threshold.monotone`) are checked against the engines' merged live
counters (harness.wire.stage_counters, the progress line's source). Counts only grow, and every failure the live
counters saw is also a row in the parquet, so one crossed now is crossed in the final summary too. Quantiles and
rates can still come back while a run goes, so they are only checked at its end.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence

from harness.locust.live.live_view import LiveView
from harness.locust.live.periodic import Periodic
from harness.results.figures.thresholds import COUNT_METRIC, RunFigures, Threshold, Verdict, evaluate

CHECK_INTERVAL_S = 1.0


def live_figures(live: LiveView) -> RunFigures:
    """The counts the live view holds, per stage and summed over the run, as threshold figures."""
    stages: dict[str, Mapping[str, float]] = {}
    run: dict[str, float] = {COUNT_METRIC: 0.0}
    for name, stats in live.stages().items():
        figures = {COUNT_METRIC: float(stats.failed)}
        for kind, count in stats.failures.items():
            figures[f"{COUNT_METRIC}.{kind}"] = float(count)
            run[f"{COUNT_METRIC}.{kind}"] = run.get(f"{COUNT_METRIC}.{kind}", 0.0) + count
        run[COUNT_METRIC] += stats.failed
        stages[name] = figures
    return RunFigures(run=run, stages=stages)


def crossed_for_good(thresholds: Sequence[Threshold], live: LiveView) -> list[Verdict]:
    """The monotone thresholds the live counters have crossed (a stage not yet seen is no verdict yet)."""
    watched = [threshold for threshold in thresholds if threshold.monotone]
    return [verdict for verdict in evaluate(watched, live_figures(live)) if verdict.verdict == "crossed"]


def unwatched_note(thresholds: Sequence[Threshold]) -> str | None:
    """The line telling a user which of their thresholds the live abort cannot act on (checked at the end)."""
    unwatched = [threshold.text for threshold in thresholds if not threshold.monotone]
    if not unwatched:
        return None
    return (
        f"--abort-on-threshold acts on upper bounds on failure counts only; checked at the end of the run instead: "
        f"{', '.join(unwatched)}"
    )


class ThresholdWatch:
    """A greenlet checking the live counters; calls `on_crossed` once, with what was crossed, then ends."""

    def __init__(
        self,
        live: LiveView,
        thresholds: Sequence[Threshold],
        on_crossed: Callable[[list[Verdict]], None],
        interval_s: float = CHECK_INTERVAL_S,
    ) -> None:
        self.live = live
        self.note = unwatched_note(thresholds)
        self.thresholds = [threshold for threshold in thresholds if threshold.monotone]
        self.on_crossed = on_crossed
        self.interval_s = interval_s
        self._periodic = Periodic(interval_s, self._check)

    @property
    def watching(self) -> bool:
        return bool(self.thresholds)

    def start(self) -> None:
        if self.note:
            print(f"stampede: {self.note}", file=sys.stderr, flush=True)
        if self.watching:
            self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()

    def _check(self) -> bool:
        crossed = crossed_for_good(self.thresholds, self.live)
        if crossed:
            self.on_crossed(crossed)
        return bool(crossed)
