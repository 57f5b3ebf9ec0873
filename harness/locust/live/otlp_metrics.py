"""`stampede run --otlp-endpoint`: the Prometheus endpoint's metrics, pushed over OTLP/HTTP every few seconds.

Why this shape: the master (or a local runner) already holds every engine's latest figures, and the Prometheus
endpoint's families are their one definition (`harness.locust.live.metrics_endpoint.run_families`: names, help,
labels, bucket edges). So an export lays those same families out as the OpenTelemetry SDK's metric data (a gauge
as a gauge, a counter as a cumulative monotonic sum, a histogram's `le` buckets as explicit bounds) and hands them
to the SDK's OTLP/HTTP exporter: nothing new is counted, no instrument is registered, and a family added to the
endpoint reaches OTLP with no change here. The metric names are the families' names (`stampede_in_flight`,
`stampede_tti_wall_seconds`, ...), each engine a `worker` attribute as it is a label for Prometheus; the resource
carries `run_id`, `provider`, `profile` and `worker` (this process's role).

Exports run on a greenlet of this (gevent) process every `EXPORT_INTERVAL_S`, through the exporter's requests
session on gevent's sockets, so a slow collector holds only that greenlet. A failed export is counted, never raised;
`close` sends the run's final figures (unless the collector's latest export failed: a run's end waits for no dead
collector) and returns the one line the run says about what was not delivered.

Cost: one export renders the families once (~1 ms per engine, the scrape's figure) and encodes a few dozen data
points, every 5 s: nothing per rollout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import gevent
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client.metrics_core import Metric as PromFamily

from harness.locust.live.metrics_endpoint import RunView, run_families

EXPORT_INTERVAL_S = 5.0
EXPORT_TIMEOUT_S = 5.0  # one export, the exporter's retries included
FINAL_TIMEOUT_S = 1.0  # the run's last figures, at its end: what a dead collector can cost a run
SCOPE = InstrumentationScope("stampede.master")
OTEL_LOGGERS = ("opentelemetry",)  # each failed export's warning: the run says its failures once instead


def metrics_url(endpoint: str) -> str:
    """The OTLP/HTTP metrics URL of a collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read)."""
    return endpoint.rstrip("/") + "/v1/metrics"


def _seconds_unit(name: str) -> str:
    return "s" if name.endswith("_seconds") else "By" if name.endswith("_bytes") else ""


def _gauge(family: PromFamily, now_ns: int) -> Gauge:
    return Gauge(
        data_points=[
            NumberDataPoint(
                attributes=dict(sample.labels), start_time_unix_nano=0, time_unix_nano=now_ns, value=sample.value
            )
            for sample in family.samples
        ]
    )


def _sum(family: PromFamily, start_ns: int, now_ns: int) -> Sum:
    total = f"{family.name}_total"
    return Sum(
        data_points=[
            NumberDataPoint(
                attributes=dict(sample.labels), start_time_unix_nano=start_ns, time_unix_nano=now_ns, value=sample.value
            )
            for sample in family.samples
            if sample.name == total
        ],
        aggregation_temporality=AggregationTemporality.CUMULATIVE,
        is_monotonic=True,
    )


def _histogram(family: PromFamily, start_ns: int, now_ns: int) -> Histogram:
    """Prometheus' cumulative `le` buckets back to OTLP's per-bucket counts over the same edges."""
    buckets: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    sums: dict[tuple[tuple[str, str], ...], float] = {}
    for sample in family.samples:
        key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "le"))
        if sample.name.endswith("_bucket"):
            buckets.setdefault(key, []).append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_sum"):
            sums[key] = sample.value
    points = []
    for key, edges in buckets.items():
        cumulative = sorted(edges)
        previous = [0.0, *(n for _, n in cumulative[:-1])]
        points.append(
            HistogramDataPoint(
                attributes=dict(key),
                start_time_unix_nano=start_ns,
                time_unix_nano=now_ns,
                count=int(cumulative[-1][1]),
                sum=sums.get(key, 0.0),
                bucket_counts=[int(n - p) for (_, n), p in zip(cumulative, previous, strict=True)],
                explicit_bounds=[edge for edge, _ in cumulative if edge != float("inf")],
                min=None,  # type: ignore[arg-type]  # unknown from buckets: left unset on the wire
                max=None,  # type: ignore[arg-type]
            )
        )
    return Histogram(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE)


def otel_metrics(families: Iterable[PromFamily], start_ns: int, now_ns: int) -> list[Metric]:
    """The endpoint's families as OpenTelemetry metric data, one metric per family (one with no point yet, say no
    failures, is sent empty: a collector learns every name from the first export) (public: tested)."""
    out: list[Metric] = []
    for family in families:
        data: Gauge | Sum | Histogram
        if family.type == "counter":
            data = _sum(family, start_ns, now_ns)
        elif family.type == "histogram":
            data = _histogram(family, start_ns, now_ns)
        else:
            data = _gauge(family, now_ns)
        out.append(
            Metric(name=family.name, description=family.documentation, unit=_seconds_unit(family.name), data=data)
        )
    return out


def view_resource(view: RunView, role: str) -> Resource:
    """Who the figures are about: the run, its vendor, and which process sent them."""
    return Resource.create(
        {
            "service.name": "stampede",
            "run_id": view.run_id,
            "provider": view.provider,
            "profile": view.profile,
            "worker": role,
        }
    )


@dataclass(slots=True)
class ExportCounts:
    """Exports tried and failed; the first failure's reason, for the one line at the end."""

    tried: int = 0
    failed: int = 0
    first_error: str | None = None
    last_ok: bool = True


class OtlpMetricsPusher:
    """The periodic export of a run's metrics from this process (started now, `close` at the run's end)."""

    def __init__(
        self, view: Callable[[], RunView | None], endpoint: str, role: str, interval_s: float = EXPORT_INTERVAL_S
    ) -> None:
        for name in OTEL_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        self.view = view
        self.endpoint = endpoint
        self.role = role
        self.interval_s = interval_s
        self.counts = ExportCounts()
        self.start_ns = time.time_ns()
        self._exporting = False
        self._cut_off = False  # that export is counted by `close`, not by itself
        self.exporter = OTLPMetricExporter(endpoint=metrics_url(endpoint), timeout=EXPORT_TIMEOUT_S)
        self._loop = gevent.spawn(self._run)

    def _run(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            self.export_now(EXPORT_TIMEOUT_S)

    def export_now(self, timeout_s: float) -> None:
        """One export of the figures as they are now (nothing before the run's session exists); never raises."""
        try:
            view = self.view()
            if view is None:
                return
            metrics = otel_metrics(run_families(view), self.start_ns, time.time_ns())
            data = MetricsData(
                resource_metrics=[
                    ResourceMetrics(
                        resource=view_resource(view, self.role),
                        scope_metrics=[ScopeMetrics(scope=SCOPE, metrics=metrics, schema_url="")],
                        schema_url="",
                    )
                ]
            )
            self._exporting = True
            try:
                result = self.exporter.export(data, timeout_millis=timeout_s * 1000)
            finally:
                self._exporting = False
            ok, error = result is MetricExportResult.SUCCESS, "refused, or the collector could not be reached"
        except Exception as exc:  # a collector's trouble is never the run's
            ok, error = False, f"{type(exc).__name__}: {exc}"
        if self._cut_off:  # `close` counted it
            return
        self.counts.tried += 1
        self.counts.last_ok = ok
        if not ok:
            self.counts.failed += 1
            self.counts.first_error = self.counts.first_error or error

    def _shutdown_exporter(self) -> None:
        try:
            self.exporter.shutdown(timeout_millis=FINAL_TIMEOUT_S * 1000)
        except Exception:  # a closing exporter's trouble has nothing left to lose
            pass

    def close(self) -> str | None:
        """The run's final figures (skipped when the latest export failed), then the one line on what was lost.
        Bounded by `FINAL_TIMEOUT_S`: the exporter's own retries follow its 5 s timeout, not the export's."""
        final: gevent.Greenlet | None = None
        if not self._exporting:
            self._loop.kill()
            if self.counts.last_ok:
                final = gevent.spawn(self.export_now, FINAL_TIMEOUT_S)
                final.join(FINAL_TIMEOUT_S)
        if self._exporting:  # an export still retrying (the loop's, or the final one): the run's end does not wait
            self._cut_off = True
            self.counts.tried += 1
            self.counts.failed += 1
            self.counts.first_error = self.counts.first_error or "the collector had not answered by the run's end"
        self._shutdown_exporter()  # ends any retries (a kill alone can land in a call that swallows it)
        for greenlet in (self._loop, final):
            if greenlet is not None:
                greenlet.kill(timeout=FINAL_TIMEOUT_S)
        if not self.counts.failed:
            return None
        return (
            f"stampede: OTLP metrics to {self.endpoint}: {self.counts.failed} of {self.counts.tried} exports not "
            f"delivered: {self.counts.first_error}"
        )
