"""A served simulated vendor watches its own loop, and a run says when that process stalled: a stall there delays
every sandbox at once, which the engine's own health rows cannot see (providers/sim/core/loop_watch.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from harness.results.export.summary_json import validate_summary
from providers.sim.core.loop_watch import PROBE_S, LoopWatch
from tests.support.serve_process import get_json, ready_line, spawn_serve, stop_serve
from tests.support.stalls import run_with_vendor_stopped, stopped_for

REPO = Path(__file__).resolve().parents[2]
STOP_S = 0.6  # longer than the 250 ms stall rule by more than a probe interval


def test_the_watch_keeps_the_worst_and_the_p99_of_its_probes():
    watch = LoopWatch()
    for lag in [0.001] * 98 + [0.2, 0.5]:
        watch.record(lag)
    watch.record(-0.001)  # a clock read early is no lag
    facts = watch.facts()
    assert facts["probes"] == 101 and facts["lag_max_ms"] == 500.0
    assert facts["lag_p99_ms"] == 200.0  # nearest rank: the 100th of 101
    assert facts["late_ms"] == pytest.approx(798.0)


@pytest.mark.slow
def test_a_served_vendor_stopped_for_a_while_says_so_in_its_truth_answer():
    serve = spawn_serve("providers.sim.prime.serve", "--profile", "ideal", "--token", "t", "--exit-on-stdin-eof")
    try:
        ready = ready_line(serve)
        time.sleep(3 * PROBE_S)
        stopped_for(serve.pid, STOP_S)
        time.sleep(3 * PROBE_S)  # the probe that was due during the stop wakes, late by the stop
        status, answer = get_json(f"{ready['url']}/api/v1/_stampede/truth", "t")
    finally:
        stop_serve(serve)
    assert status == 200 and answer["loop"]["probes"] >= 3
    assert answer["loop"]["lag_max_ms"] >= 1000 * (STOP_S - PROBE_S)  # a busy machine only makes it later


@pytest.mark.slow
def test_a_run_whose_vendor_stalled_marks_its_summary(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        "--scenario",
        "burst-hold",
        "--users",
        "20",
        "--hold",
        "8",
        "--profile",
        "ideal",
        "--out",
        str(tmp_path),
        "--progress-interval",
        "0",
    ]
    code, out, err = run_with_vendor_stopped(argv, tmp_path, REPO, after_s=1.0, stop_s=STOP_S)
    assert code == 0, err[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    line = next(text for text in out.splitlines() if text.startswith("simulated vendor's own loop"))
    assert "(!) it stalled past 250 ms" in line, line
    written = json.loads((run_dir / "summary.json").read_text())
    validate_summary(written)
    (loop,) = written["vendor_loop"]
    assert loop["bound"] and loop["lag_max_ms"] >= 1000 * (STOP_S - PROBE_S)
