"""The progress line's TTI in vendor seconds by the summary's own rule, while the run goes.

At a time scale other than 1 the summary converts each rollout with the simulated vendor's own record
(`harness.results.read.vendor_time`: vendor = wall - held_wall + held_vendor): the harness's own milliseconds stay
as measured and only what the vendor held is stretched. Dividing the whole wall TTI by the time scale stretched the
harness's share too (a burst of 200 at 0.1: p50 ~16 vendor s live, 5.7 in the summary). Here the rows this
process's users received in the stage are joined, at each progress tick, with the embedded vendor's record so far
and converted by that same function, then read by the one quantile rule. A process without the rows (a master: its
workers' users hold them) or without a simulated vendor's record says `wall / scale` instead, as an estimate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.locust.run_folder import truth_rows

ROW_FIELDS = ("sandbox_id", "t_submit", "create_s", "ready_s", "tti_s", "exec_s", "terminate_s", "total_s")


class LiveVendorSeconds:
    """One run's rows by stage (those with a TTI), converted to vendor seconds on demand against the vendor's record."""

    def __init__(self, run_id: str, time_scale: float, fetch_truth: Callable[[], list[dict[str, Any]]]) -> None:
        self.run_id = run_id
        self.time_scale = time_scale
        self.fetch_truth = fetch_truth
        self._rows: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def add(self, stage: str, record: dict[str, Any]) -> None:
        """A row a user received (in its greenlet): kept when it has a TTI and a sandbox."""
        if record.get("tti_s") is not None and record.get("sandbox_id"):
            self._rows[stage].append({name: record.get(name) for name in ROW_FIELDS})

    def tti_quantiles(self, stage: str, qs: tuple[float, ...] = (0.5, 0.99)) -> tuple[float, ...] | None:
        """The stage's TTI quantiles in vendor seconds, as the summary will compute them; None when it cannot tell."""
        rows = list(self._rows.get(stage, ()))
        if not rows:
            return None
        import pandas as pd  # on the first progress line with rows, not on the way to the first rollout

        from foundation.quantiles import nearest_rank
        from harness.results.read.dataset import RunInfo
        from harness.results.read.vendor_time import DURATIONS, to_vendor_seconds, usable_truth

        try:
            truth = pd.DataFrame(truth_rows(self.run_id, self.fetch_truth()))
        except Exception:  # a line of progress never stops a run: without the record, no figure
            return None
        if not usable_truth(truth):
            return None
        frame = pd.DataFrame(rows)
        for name in DURATIONS:
            frame[name] = pd.to_numeric(frame.get(name), errors="coerce")
        info = RunInfo(Path("."), self.run_id, "", "", "", self.time_scale, True, "running", "", None)
        tti = sorted(float(v) for v in to_vendor_seconds(info, frame, truth).durations["tti_s"] if v == v)
        return tuple(nearest_rank(tti, q) for q in qs) if tti else None
