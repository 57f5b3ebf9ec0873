"""The progress line's TTI in vendor seconds is the summary's: at a time scale, both convert by the vendor's record.

A real `stampede run` (a burst against the embedded stub at --time-scale 0.1); its last progress line's TTI p50 is
checked against the p50 of the rows the summary reads (`tti_vendor_s`), within what the rows the line had not seen
yet can move a median: no tolerance picked by hand.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

from foundation.quantiles import nearest_rank_index

REPO = Path(__file__).resolve().parents[2]
STAMPEDE_RUN = (sys.executable, "-m", "harness.cli", "run", "--progress-interval", "1")
LINE = re.compile(r"\| ok (\d+) failed (\d+).*TTI p50 ([\d.]+) p99 ([\d.]+) vendor s")


def test_the_last_progress_line_shows_the_summarys_tti_p50_at_a_time_scale(tmp_path):
    result = subprocess.run(
        [*STAMPEDE_RUN, "--scenario", "burst", "--users", "200", "--time-scale", "0.1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [match for line in result.stderr.splitlines() if (match := LINE.search(line))]
    assert lines, result.stderr[-2000:]
    ok, failed, live_p50 = int(lines[-1][1]), int(lines[-1][2]), float(lines[-1][3])
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    tti = sorted(pd.read_parquet(run / "rollouts", columns=["tti_vendor_s"])["tti_vendor_s"].dropna())
    n = len(tti)
    unseen = max(n - (ok + failed), 0)  # rows that ended after the last line: each moves its median one rank
    rank = nearest_rank_index(n, 0.5)
    low, high = tti[max(rank - unseen - 1, 0)], tti[min(rank + unseen + 1, n - 1)]
    assert math.floor(low * 100) / 100 <= live_p50 <= math.ceil(high * 100) / 100, (
        f"live p50 {live_p50} vendor s, the summary's rows put it in [{low:.3f}, {high:.3f}] (n={n}, unseen={unseen})"
    )
