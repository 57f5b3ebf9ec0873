"""`--metrics-port`: the metric families a scrape returns, the histograms' bucket counts from known rows, the
endpoint over HTTP, and bad input as one line (harness/wire/live_metrics.py, harness/locust/live/metrics_endpoint.py)."""

from __future__ import annotations

import socket
import time
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness.errors import UsageError
from harness.locust.live.metrics_endpoint import MetricsEndpoint, RunView, run_families
from harness.wire.live_metrics import BUCKETS_S, PHASE_FIELDS, BucketCounts, RowMetrics
from harness.wire.messages import EngineStats, HealthSnapshot
from tests.support.commands import stampede


def row(tti: float | None, kind: str | None = None, phase: str | None = None, **durations: float) -> Any:
    values = {name: durations.get(name) for name in PHASE_FIELDS.values()}
    return SimpleNamespace(tti_s=tti, failure_kind=kind, failure_phase=phase, **values)


def test_buckets_are_inclusive_upper_bounds_from_10_ms_to_minutes():
    assert BUCKETS_S[0] == 0.01 and BUCKETS_S[-1] >= 300
    assert list(BUCKETS_S) == sorted(set(BUCKETS_S))
    counts = BucketCounts()
    for seconds in (0.005, 0.01, 0.012, 0.5, 1000.0):
        counts.observe(seconds)
    cumulative = dict(counts.cumulative())
    assert cumulative["0.01"] == 2  # 0.01 itself is at or below its bound, as Prometheus' `le` says
    assert cumulative["0.015"] == 3
    assert cumulative["0.3"] == 3 and cumulative["0.5"] == 4
    assert cumulative["600.0"] == 4 and cumulative["+Inf"] == 5
    assert counts.count == 5 and counts.sum_s == pytest.approx(1000.527)


def test_row_metrics_count_each_duration_and_failures_by_kind_and_phase():
    metrics = RowMetrics()
    metrics.observe(row(0.02, create_s=0.004, ready_s=0.012, exec_s=2.0, terminate_s=0.003))
    metrics.observe(row(None, "capacity", "create", create_s=0.5))
    metrics.observe(row(None, "ready_timeout", "ready", create_s=0.01, ready_s=120.0))
    metrics.observe(row(None, "capacity", "create"))
    assert metrics.tti.count == 1
    assert {name: counts.count for name, counts in metrics.phases.items()} == {
        "create": 3,
        "ready": 2,
        "exec": 1,
        "terminate": 1,
    }
    assert dict(metrics.failures) == {("capacity", "create"): 2, ("ready_timeout", "ready"): 1}
    again = RowMetrics.from_wire(metrics.to_wire())
    assert again == metrics


def test_counts_of_other_edges_are_dropped_not_misread():
    assert BucketCounts.from_wire({"counts": [1, 2, 3], "sum": 1.0}).count == 0
    assert RowMetrics.from_wire(None).tti.count == 0


def engine(inflight: int, ttis: list[float], failures: int = 0) -> EngineStats:
    rows = RowMetrics()
    for tti in ttis:
        rows.observe(row(tti, create_s=tti / 4))
    for _ in range(failures):
        rows.observe(row(None, "rate_limited", "create", create_s=0.05))
    return EngineStats(
        inflight=inflight,
        started=len(ttis) + failures + inflight,
        ok=len(ttis),
        failed=failures,
        health=HealthSnapshot(recent_lag_p99_ms=4.0, recent_lag_max_ms=9.0, cpu_percent=50.0, cpu_seconds=3.5),
        metrics=rows.to_wire(),
    )


def view() -> RunView:
    return RunView(
        engines={"w1-host": engine(500, [0.02, 0.04, 0.04, 0.9]), "w2-host": engine(480, [0.012], failures=2)},
        run_id="r1",
        provider="stub",
        profile="ideal",
        scenario="steady",
        stage="01-steady980",
        target_users=980,
    )


def scraped(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_families_names_labels_and_the_tti_histogram_per_worker():
    from prometheus_client import CollectorRegistry, generate_latest

    from harness.locust.live.metrics_endpoint import RunCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(view))
    families = scraped(generate_latest(registry).decode())
    assert {
        "stampede_run_info",
        "stampede_stage_target_users",
        "stampede_time_scale",
        "stampede_in_flight",
        "stampede_live_sandboxes",
        "stampede_rollouts_started",
        "stampede_rollouts_completed",
        "stampede_rollout_failures",
        "stampede_tti_wall_seconds",
        "stampede_phase_wall_seconds",
        "stampede_engine_loop_lag_p99_seconds",
        "stampede_engine_loop_lag_max_seconds",
        "stampede_engine_cpu_ratio",
        "stampede_engine_cpu_seconds",
        "stampede_engine_resident_bytes",
    } <= set(families)
    in_flight = {s.labels["worker"]: s.value for s in families["stampede_in_flight"].samples}
    assert in_flight == {"w1-host": 500, "w2-host": 480}
    buckets = {
        (s.labels["worker"], s.labels["le"]): s.value
        for s in families["stampede_tti_wall_seconds"].samples
        if s.name.endswith("_bucket")
    }
    assert buckets[("w1-host", "0.01")] == 0 and buckets[("w1-host", "0.02")] == 1
    assert buckets[("w1-host", "0.05")] == 3 and buckets[("w1-host", "1.0")] == 4
    assert buckets[("w2-host", "0.015")] == 1 and buckets[("w2-host", "+Inf")] == 1
    failures = [(s.labels, s.value) for s in families["stampede_rollout_failures"].samples if s.name.endswith("_total")]
    assert failures == [({"worker": "w2-host", "kind": "rate_limited", "phase": "create"}, 2.0)]
    phases = {
        (s.labels["worker"], s.labels["phase"]): s.value
        for s in families["stampede_phase_wall_seconds"].samples
        if s.name.endswith("_count")
    }
    assert phases[("w2-host", "create")] == 3 and phases[("w2-host", "ready")] == 0
    lag = {s.labels["worker"]: s.value for s in families["stampede_engine_loop_lag_p99_seconds"].samples}
    assert lag["w1-host"] == pytest.approx(0.004)
    assert {s.value for s in families["stampede_engine_cpu_ratio"].samples} == {0.5}


def test_no_run_yet_scrapes_empty_and_the_endpoint_serves_over_http():
    endpoint = MetricsEndpoint(lambda: None, 0)
    try:
        assert endpoint.host == "127.0.0.1" and endpoint.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=5) as answer:
            assert b"stampede_" not in answer.read()
    finally:
        endpoint.close()
    families = run_families(view())
    assert len({family.name for family in families}) == len(families)


def test_a_port_in_use_is_one_usage_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=rf"--metrics-port {port}: cannot listen on 127.0.0.1:{port}"):
            MetricsEndpoint(lambda: None, port)


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_a_bad_port_is_one_line_and_exit_2(port):
    result = stampede("run", "--metrics-port", port, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--metrics-port" in lines[0] and "Traceback" not in result.stderr


def test_a_port_in_use_stops_the_run_before_any_load(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        result = stampede(
            "run", "--profile", "ideal", "--metrics-port", str(port), "--out", str(tmp_path), "-u", "4", timeout=120
        )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if "--metrics-port" in line] == [
        f"stampede: error: --metrics-port {port}: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert not any(tmp_path.iterdir())  # no run folder: nothing started
    assert time.monotonic() - started < 60


def test_a_worker_is_told_the_port_is_the_masters():
    result = stampede("run", "--worker", "--metrics-port", "9100", timeout=60)
    assert result.returncode == 2
    assert "--metrics-port is the master's" in result.stderr and "Traceback" not in result.stderr
