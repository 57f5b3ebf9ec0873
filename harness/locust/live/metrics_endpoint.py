"""`stampede run --metrics-port`: the run's live figures as a Prometheus endpoint, per worker, on the master.

Why this shape: every engine already sends its cumulative counters, and its rows' histograms
(`harness.wire.live_metrics.RowMetrics`, one `observe` per row where the engine records it), with the `stats`
answer a local runner polls every 0.5 s and each worker ships to its master every second (the live view,
`harness.locust.live.live_view.LiveView`). A scrape lays the latest of those snapshots out as metric families, one
label `worker` per engine (`local` for a one-process run), so the endpoint adds nothing per rollout on this side:
no lock, no thread, no message. The server is prometheus_client's, on its own registry (not the global default, so
nothing else registered in the process leaks into a run's figures); under `stampede run` gevent has patched
threading, so it serves from a greenlet of the process it reports on.

Durations are the engine's wall seconds as measured (`*_wall_seconds`): the summary's vendor seconds whenever the
time scale is 1 (`stampede_time_scale`), which is every real vendor and every simulated one at its default.

Cost, measured 2026-12-06 on 2 shared cores (load 2.3-3.4): `STAMPEDE_METRICS_PORT=19190 python
bench/bench_harness_share.py --against <HEAD before this change> --rounds 3`, 64 in flight on the stub's ideal profile,
a real Prometheus scraping the port every second: engine 402.1 µs and Locust 61.9 µs of CPU a lifecycle against 393.2
and 57.9 before (medians; total 465.4 vs 451.5 µs, +3%, inside the rounds' own spread of 428-466 µs), at ~1,000
lifecycles a second. Of that the engine's `observe` is 1.2 µs a row; a scrape renders in ~1 ms per engine (median scrape
1.4 ms as Prometheus timed it, p90 18 ms while the process was busy; two of 44 hit the 1 s timeout at a run's start or
end, when the process's loop is held by its own work, so a scrape interval of a few seconds is the safe one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from harness.errors import UsageError
from harness.wire.live_metrics import RowMetrics
from harness.wire.messages import EngineStats

PREFIX = "stampede"
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class RunView:
    """What a scrape reads of the run going now: each engine's latest stats and who the run is."""

    engines: dict[str, EngineStats] = field(default_factory=dict)  # engine (worker) name -> latest stats
    run_id: str = ""
    provider: str = ""
    profile: str = ""
    scenario: str = ""
    stage: str = ""
    target_users: int = 0
    time_scale: float = 1.0


class RunCollector(Collector):
    """The metric families of one `RunView`, built at each scrape from the snapshots the live view holds."""

    def __init__(self, view: Callable[[], RunView | None]) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        view = self.view()
        if view is None:
            return iter(())
        return iter(run_families(view))


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["worker", *(labels or [])])


def _counter(name: str, doc: str, labels: list[str] | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=["worker", *(labels or [])])


def run_families(view: RunView) -> list[Metric]:
    """Every family a scrape returns, from the engines' latest snapshots (public: the unit tests read it)."""
    info = GaugeMetricFamily(
        f"{PREFIX}_run_info",
        "the run being measured (1): its id, provider, profile and scenario",
        labels=["run_id", "provider", "profile", "scenario"],
    )
    info.add_metric([view.run_id, view.provider, view.profile, view.scenario], 1)
    stage = GaugeMetricFamily(f"{PREFIX}_stage_target_users", "the current stage's target users", labels=["stage"])
    if view.stage:
        stage.add_metric([view.stage], view.target_users)
    scale = GaugeMetricFamily(
        f"{PREFIX}_time_scale",
        "vendor seconds per wall second: at 1 the *_wall_seconds histograms are the summary's vendor seconds",
    )
    scale.add_metric([], view.time_scale)
    in_flight = _gauge("in_flight", "rollouts submitted and not ended, per engine")
    sandboxes = _gauge("live_sandboxes", "sandboxes the engine holds now")
    started = _counter("rollouts_started", "rollout attempts submitted")
    completed = _counter(
        "rollouts_completed", "rollout attempts ended, by outcome (ok, failed, cancelled)", ["outcome"]
    )
    failures = _counter("rollout_failures", "failed rollout attempts by failure kind and phase", ["kind", "phase"])
    tti = HistogramMetricFamily(
        f"{PREFIX}_tti_wall_seconds",
        "time to interactive (submit of create -> first command returned), engine wall seconds",
        labels=["worker"],
    )
    phases = HistogramMetricFamily(
        f"{PREFIX}_phase_wall_seconds",
        "each phase of a rollout (create, ready, exec summed over commands, terminate), engine wall seconds",
        labels=["worker", "phase"],
    )
    lag_p99 = _gauge("engine_loop_lag_p99_seconds", "the engine's event-loop lag p99 over its last 10-20 s")
    lag_max = _gauge("engine_loop_lag_max_seconds", "the engine's longest event-loop lag over its last 10-20 s")
    cpu = _gauge("engine_cpu_ratio", "the engine process's CPU since its previous report (1.0: one core)")
    cpu_total = _counter("engine_cpu_seconds", "the engine process's CPU (user + system) over its life")
    rss = _gauge("engine_resident_bytes", "the engine process's resident memory")
    for worker, stats in sorted(view.engines.items()):
        in_flight.add_metric([worker], stats.inflight)
        sandboxes.add_metric([worker], stats.live_sandboxes)
        started.add_metric([worker], stats.started)
        for outcome, n in (("ok", stats.ok), ("failed", stats.failed), ("cancelled", stats.cancelled)):
            completed.add_metric([worker, outcome], n)
        rows = RowMetrics.from_wire(stats.metrics)
        for (kind, phase), n in sorted(rows.failures.items()):
            failures.add_metric([worker, kind, phase], n)
        tti.add_metric([worker], buckets=rows.tti.cumulative(), sum_value=rows.tti.sum_s)
        for name, counts in rows.phases.items():
            phases.add_metric([worker, name], buckets=counts.cumulative(), sum_value=counts.sum_s)
        health = stats.health
        lag_p99.add_metric([worker], health.recent_lag_p99_ms / 1000)
        lag_max.add_metric([worker], health.recent_lag_max_ms / 1000)
        cpu.add_metric([worker], health.cpu_percent / 100)
        cpu_total.add_metric([worker], health.cpu_seconds)
        rss.add_metric([worker], health.rss_mb * 1024 * 1024)
    return [
        *(info, stage, scale, in_flight, sandboxes, started, completed, failures, tti, phases),
        *(lag_p99, lag_max, cpu, cpu_total, rss),
    ]


class MetricsEndpoint:
    """The HTTP server a scraper reads; bound when made (a port in use is the user's one-line error), closed once."""

    def __init__(self, view: Callable[[], RunView | None], port: int, host: str = DEFAULT_HOST) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RunCollector(view))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise UsageError(f"--metrics-port {port}: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self.host = host
        self.port = int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def session_view(session: Any) -> RunView | None:
    """A `StampedeSession`'s run as a scrape sees it (None before the session exists)."""
    if session is None:
        return None
    state, settings, vendor = session.state, session.settings, session.vendor
    return RunView(
        engines=dict(state.live.snapshots),
        run_id=str(state.run_id or ""),
        provider=str(settings.provider),
        profile=str(getattr(vendor, "profile", "") or settings.profile),
        scenario=str(session.role.scenario),
        stage=str(state.stage.name),
        target_users=int(state.stage.target_users),
        time_scale=float(getattr(vendor, "time_scale", None) or 1.0),
    )
