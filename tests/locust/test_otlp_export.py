"""`--otlp-endpoint`: one trace per rollout with a span per phase, and the Prometheus endpoint's metrics, delivered to
a real OTLP/HTTP receiver by a real run; the spans' layout from a row; bad input as one line; a dead collector
neither fails nor holds up a run (harness/engine/otlp_traces.py, harness/locust/live/otlp_metrics.py)."""

from __future__ import annotations

import os
import random
import re
import socket
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from harness.engine.otlp_traces import rollout_spans, run_resource
from harness.locust.live.metrics_endpoint import RunView, run_families
from harness.locust.live.otlp_metrics import otel_metrics
from harness.wire.live_metrics import BUCKETS_S
from harness.wire.messages import EngineStats, HealthSnapshot
from harness.wire.records import RolloutRecord
from tests.support.commands import stampede
from tests.support.otlp_receiver import otlp_receiver

PHASES = ("create", "ready", "exec", "terminate")
REPO = Path(__file__).resolve().parents[2]


def record(**fields: Any) -> RolloutRecord:
    base: dict[str, Any] = {
        "run_id": "r1",
        "worker": "local",
        "rollout_id": "local-0000001",
        "provider": "stub",
        "profile": "ideal",
        "scenario": "steady",
        "stage": "01",
        "target_users": 4,
        "inflight_at_submit": 1,
        "t_submit": 1_765_000_000.25,
    }
    return RolloutRecord(**{**base, **fields})


def test_a_rows_spans_lie_end_to_end_with_its_durations():
    row = record(create_s=0.01, ready_s=0.02, tti_s=0.031, exec_count=2, exec_s=0.005, terminate_s=0.004, total_s=0.05)
    root, *phases = rollout_spans(row, run_resource("r1", "stub", "ideal", "local"), random.Random(1))
    assert root.name == "rollout" and root.parent is None
    assert [span.name for span in phases] == list(PHASES)
    assert {span.context.trace_id for span in phases} == {root.context.trace_id}
    assert all(span.parent == root.context for span in phases)
    seconds = {span.name: (span.end_time - span.start_time) / 1e9 for span in phases}
    assert seconds == pytest.approx({"create": 0.01, "ready": 0.02, "exec": 0.005, "terminate": 0.004}, abs=1e-6)
    assert phases[0].start_time == root.start_time and phases[-1].end_time == root.end_time
    assert phases[1].start_time == phases[0].end_time  # ready starts where create ended
    assert dict(root.resource.attributes)["worker"] == "local" and root.attributes["exec_count"] == 2


def test_a_failed_rollout_marks_its_root_and_its_failing_phase():
    row = record(create_s=0.5, outcome="failed", failure_kind="ready_timeout", failure_phase="ready", total_s=2.5)
    root, create, ready = rollout_spans(row, run_resource("r1", "stub", "ideal", "local"), random.Random(2))
    assert root.status.status_code.name == "ERROR" and root.attributes["failure.kind"] == "ready_timeout"
    assert create.status.status_code.name == "UNSET"
    assert ready.name == "ready" and ready.status.status_code.name == "ERROR"
    assert (ready.end_time - ready.start_time) / 1e9 == pytest.approx(2.0)  # untimed: to the rollout's end


def test_metrics_are_the_endpoints_families_with_the_same_buckets():
    stats = EngineStats(inflight=3, started=5, ok=2, health=HealthSnapshot(cpu_percent=40.0))
    view = RunView(engines={"w1": stats}, run_id="r1", provider="stub", stage="01", target_users=4)
    families = run_families(view)
    metrics = {metric.name: metric for metric in otel_metrics(families, 1, 2)}
    assert set(metrics) == {family.name for family in families}
    (tti,) = metrics["stampede_tti_wall_seconds"].data.data_points
    assert list(tti.explicit_bounds) == list(BUCKETS_S) and len(tti.bucket_counts) == len(BUCKETS_S) + 1
    completed = metrics["stampede_rollouts_completed"].data
    assert completed.is_monotonic and {p.attributes["outcome"]: p.value for p in completed.data_points}["ok"] == 2


@pytest.mark.parametrize("url", ["127.0.0.1:4318", "ftp://x", "http://", "http://host:99999"])
def test_a_bad_endpoint_is_one_line_and_exit_2(url):
    result = stampede("run", "--otlp-endpoint", url, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--otlp-endpoint" in lines[0] and "Traceback" not in result.stderr


def test_without_the_sdk_it_is_one_line_naming_the_extra(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(  # as after a bare `pip install stampede`
        "import sys\nfor name in ('opentelemetry.sdk', 'opentelemetry.exporter.otlp.proto.http'):\n"
        "    sys.modules[name] = None  # import raises ModuleNotFoundError\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    started = time.monotonic()
    result = stampede(*run_args(tmp_path / "out", "http://127.0.0.1:4318"), timeout=120, env=env)
    assert result.returncode == 2, result.stderr[-2000:]
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, result.stderr
    assert line.startswith("stampede: error: --otlp-endpoint needs the OpenTelemetry SDK"), line
    assert line.endswith("pip install 'stampede[otlp]'"), line
    assert not list((tmp_path / "out").glob("*/rollouts")), "no load ran"
    assert time.monotonic() - started < 60


def run_args(out: Path, endpoint: str) -> list[str]:
    return [
        "run",
        "--profile",
        "ideal",
        "--scenario",
        "steady",
        "--users",
        "4",
        "--spawn-rate",
        "4",
        "--hold",
        "2",
        "--commands",
        "true; echo stampede",  # no sleep: ~40 ms a rollout, some 200 in the hold
        "--otlp-endpoint",
        endpoint,
        "--out",
        str(out),
        "--progress-interval",
        "0",
    ]


def rollouts_of(out: Path) -> dict[str, dict[str, Any]]:
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    return {row["rollout_id"]: row for row in pq.read_table(run_dir / "rollouts").to_pylist()}


@pytest.mark.slow
def test_one_trace_per_rollout_with_its_phases_reaches_a_real_receiver(tmp_path):
    with otlp_receiver() as (endpoint, received):
        started = time.monotonic()
        result = stampede(*run_args(tmp_path, endpoint), timeout=120)
        elapsed = time.monotonic() - started
        assert result.returncode == 0, result.stderr
        assert "OTLP" not in result.stderr, result.stderr  # nothing undelivered to say
        rows = rollouts_of(tmp_path)
        traces: dict[bytes, list[Any]] = {}
        for resource, span in received.spans():
            assert resource["run_id"] == next(iter(rows.values()))["run_id"]
            assert resource["provider"] == "stub" and resource["profile"] == "ideal" and resource["worker"]
            traces.setdefault(span.trace_id, []).append(span)
        names = received.metric_names()
    print(f"{len(rows)} rollouts, {len(traces)} traces, {len(names)} metrics, {elapsed:.1f} s")
    assert len(rows) >= 100
    assert len(traces) == len(rows)
    seen: set[str] = set()
    for spans in traces.values():
        (root,) = [span for span in spans if span.name == "rollout"]
        rollout_id = next(kv.value.string_value for kv in root.attributes if kv.key == "rollout_id")
        seen.add(rollout_id)
        row = rows[rollout_id]
        phases = {span.name: (span.end_time_unix_nano - span.start_time_unix_nano) / 1e9 for span in spans}
        assert all(span.parent_span_id == root.span_id for span in spans if span is not root)
        for phase in PHASES:
            expected = row[f"{phase}_s"]
            if expected is None:
                assert phase not in phases
            else:
                assert phases[phase] == pytest.approx(expected, abs=1e-3), (rollout_id, phase)
        assert root.start_time_unix_nano / 1e9 == pytest.approx(row["t_submit"].timestamp(), abs=1e-3)
    assert seen == set(rows)
    expected_names = {family.name for family in run_families(RunView(engines={"w": EngineStats()}, stage="s"))}
    assert names == expected_names


@pytest.mark.slow
def test_a_dead_collector_neither_fails_nor_holds_up_the_run(tmp_path):
    with socket.socket() as closed:  # a port nobody listens on: every export is refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    started = time.monotonic()
    result = stampede(*run_args(tmp_path, f"http://127.0.0.1:{port}"), timeout=120)
    elapsed = time.monotonic() - started
    print(result.stderr[-2000:], f"{elapsed:.1f} s")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "OTLP" in line]
    assert len(lines) == 2, lines  # traces (the engine) and metrics (this process), once each
    assert any("OTLP traces" in line and "not delivered" in line for line in lines)
    assert any("OTLP metrics" in line and "not delivered" in line for line in lines)
    (traces,) = [line for line in lines if "OTLP traces" in line]
    closing = float(re.search(r"closing took ([0-9.]+)s", traces).group(1))  # type: ignore[union-attr]
    assert closing <= 1.5  # the drain waited out no retries
    assert len(rollouts_of(tmp_path)) >= 100
