"""`stampede run --otlp-endpoint`: one OpenTelemetry trace per rollout, a span per phase, from the engine's rows.

Why the engine: it is where every row is made (`harness.engine.run.EngineRun.record_row`, the rows the parquet files
and the summary read); a master never sees a row until the run's end, when the workers ship their shards. So the
spans are built from a finished row's own figures, `t_submit` (the one wall-clock anchor) and its phase seconds, and
nothing new is timed on the hot path: the trace says what the row says.

A trace: the root span `rollout` from `t_submit` for `total_s`, and beside it one child per timed phase, laid end to
end as the row measures them: `create` (submit -> the vendor acknowledged an id), `ready` (-> usable), `exec` (the
commands' summed seconds, from ready's end: the row holds the sum, not each command's instants; `exec_count` says how
many) and `terminate` (its seconds, ending where the rollout did). A failed rollout's root and its failing phase carry
status ERROR and `failure.kind` / `failure.phase`; a phase that failed before it had a duration gets a span from the
last timed phase's end to the rollout's. Resource attributes: `run_id`, `provider`, `profile`, `worker`.

The spans are SDK `ReadableSpan`s made directly (no tracer, sampler or context: the rollout is over) and handed to the
SDK's `BatchSpanProcessor`, whose own thread encodes and posts them (OTLP over HTTP/protobuf). Export failures never
reach the engine's loop: `CountingExporter` counts what was delivered and what was not, and the engine says it once,
at its drain (`RolloutTracer.close`, off the loop, bounded). An unreachable collector costs a queue of at most
`MAX_QUEUE` spans (the SDK drops beyond it, counted here as undelivered) and the export thread's retries.

Cost per rollout, measured 2026-12-06 on 2 shared cores: building its five spans on the engine's loop 13-22 µs
(`rollout_spans`, timeit over a `RolloutRecord`, best of three, load 8-10; handing them to the processor is a deque
append each); the export thread's encoding 110-340 µs (the SDK's own OTLP encoder in Python, 25-70 µs a span), off the
loop but on the same interpreter lock and cores. End to end, `STAMPEDE_OTLP_ENDPOINT=<a local receiver> python
bench/bench_harness_share.py --against <the checkout before> --rounds 2 --seconds 10` (64 in flight, ideal stub, load
3.8-4.5): engine 556.7 µs and Locust 61.8 µs of CPU a lifecycle against 374.4 and 55.5 without (+182 µs, +44% in
total), 784 against 1,088 lifecycles a second. So a trace of every rollout is opt-in, for runs whose rate leaves the
engine room (the loop lag panel says when it does not). A 200-rollout run delivers every trace
(tests/locust/test_otlp_export.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harness.wire.live_metrics import PHASE_FIELDS
from harness.wire.records import RolloutRecord

EXPORT_TIMEOUT_S = 5.0  # one batch's post, retries included: an unreachable collector holds the export thread this long
CLOSE_TIMEOUT_S = 5.0  # the drain waits at most this for the last batches
FAILING_CLOSE_TIMEOUT_S = 0.5  # ... and this when the latest batch failed or none was delivered yet
MAX_QUEUE = 8192  # spans waiting for the export thread (5 a rollout: ~1,600 rollouts)
SCHEDULE_DELAY_MS = 1000
SCOPE = InstrumentationScope("stampede.engine")
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NS = 1_000_000_000
OTEL_LOGGERS = ("opentelemetry",)  # the SDK's and exporter's own warnings: said once by us at the end instead


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of a collector's base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT` is read)."""
    return endpoint.rstrip("/") + "/v1/traces"


@dataclass(slots=True)
class ExportTally:
    """What an exporter was given and what it delivered; the first error, for the one line at the end."""

    delivered: int = 0
    failed: int = 0
    first_error: str | None = None
    last_ok: bool = True  # the latest batch's fate: a close does not wait on a collector that just failed
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, n: int, ok: bool, error: str | None = None) -> None:
        with self.lock:
            self.last_ok = ok
            if ok:
                self.delivered += n
            else:
                self.failed += n
                if self.first_error is None:
                    self.first_error = error or "refused, or the collector could not be reached"


class CountingExporter(SpanExporter):
    """The OTLP exporter, its results counted and its exceptions kept (never raised into the engine)."""

    def __init__(self, inner: SpanExporter, tally: ExportTally) -> None:
        self.inner = inner
        self.tally = tally

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # the SDK catches too, but would log a traceback per batch
            self.tally.add(len(spans), False, f"{type(exc).__name__}: {exc}")
            return SpanExportResult.FAILURE
        self.tally.add(len(spans), result is SpanExportResult.SUCCESS, None)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def quiet_sdk_logs() -> None:
    """The SDK logs each failed batch (and its retries); a run says its export failures once, at its end."""
    for name in OTEL_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _ns(epoch_s: float) -> int:
    return round(epoch_s * _NS)


def _context(trace_id: int, rng: random.Random) -> SpanContext:
    return SpanContext(trace_id, rng.getrandbits(64) or 1, is_remote=False, trace_flags=_SAMPLED)


def rollout_spans(row: RolloutRecord, resource: Resource, rng: random.Random) -> list[ReadableSpan]:
    """One finished row as its trace: the root `rollout` span, then one span per phase it timed (public: tested)."""
    trace_id = rng.getrandbits(128) or 1
    root = _context(trace_id, rng)
    t0 = row.t_submit
    timed = [(name, getattr(row, attribute)) for name, attribute in PHASE_FIELDS.items()]
    durations = {name: seconds for name, seconds in timed if seconds is not None}
    end = t0 + (row.total_s if row.total_s is not None else sum(durations.values()))
    failed_phase = row.failure_phase if row.failure_kind is not None else None
    error = Status(StatusCode.ERROR, row.failure_kind) if row.failure_kind is not None else Status(StatusCode.UNSET)
    spans: list[tuple[str, float, float]] = []  # (phase, start, end) epoch seconds
    cursor = t0
    for name in ("create", "ready", "exec"):
        seconds = durations.get(name)
        if seconds is not None:
            spans.append((name, cursor, cursor + seconds))
            cursor += seconds
    if "terminate" in durations:
        spans.append(("terminate", max(cursor, end - durations["terminate"]), end))
    if failed_phase is not None and failed_phase not in durations:
        spans.append((failed_phase, cursor, max(cursor, end)))
    attributes: dict[str, str | int] = {
        "rollout_id": row.rollout_id,
        "stage": row.stage,
        "outcome": row.outcome,
        "target_users": row.target_users,
        "inflight_at_submit": row.inflight_at_submit,
        "attempt": row.attempt,
        "exec_count": row.exec_count,
    }
    if row.sandbox_id:
        attributes["sandbox_id"] = row.sandbox_id
    if row.failure_kind is not None:
        attributes["failure.kind"] = row.failure_kind
        attributes["failure.phase"] = row.failure_phase or "unknown"
    out = [
        ReadableSpan(
            "rollout",
            context=root,
            resource=resource,
            attributes=attributes,
            kind=SpanKind.INTERNAL,
            status=error,
            start_time=_ns(t0),
            end_time=_ns(end),
            instrumentation_scope=SCOPE,
        )
    ]
    for name, start, stop in spans:
        failing = name == failed_phase
        phase_attributes: dict[str, str | int] = {"phase": name}
        if name == "exec":
            phase_attributes["exec_count"] = row.exec_count
        if failing:
            phase_attributes["failure.kind"] = row.failure_kind or "unknown"
        out.append(
            ReadableSpan(
                name,
                context=_context(trace_id, rng),
                parent=root,
                resource=resource,
                attributes=phase_attributes,
                status=error if failing else Status(StatusCode.UNSET),
                start_time=_ns(start),
                end_time=_ns(stop),
                instrumentation_scope=SCOPE,
            )
        )
    return out


def run_resource(run_id: str, provider: str, profile: str, worker: str) -> Resource:
    """Who the spans are about: the resource every span of this engine carries."""
    return Resource.create(
        {"service.name": "stampede", "run_id": run_id, "provider": provider, "profile": profile, "worker": worker}
    )


class RolloutTracer:
    """One engine run's traces: `record` a finished row (from `record_row`), `close` at the drain."""

    def __init__(self, endpoint: str, resource: Resource, *, timeout_s: float = EXPORT_TIMEOUT_S) -> None:
        quiet_sdk_logs()
        self.endpoint = endpoint
        self.resource = resource
        self.tally = ExportTally()
        self.rollouts = 0
        self.spans = 0
        self._rng = random.Random()
        self._exporter = OTLPSpanExporter(endpoint=traces_url(endpoint), timeout=timeout_s)
        self.processor = BatchSpanProcessor(
            CountingExporter(self._exporter, self.tally),
            max_queue_size=MAX_QUEUE,
            schedule_delay_millis=SCHEDULE_DELAY_MS,
        )

    def record(self, row: RolloutRecord) -> None:
        """A finished row's trace queued for the export thread (never raises into the caller)."""
        try:
            spans = rollout_spans(row, self.resource, self._rng)
        except Exception:  # a row we cannot lay out is a trace fewer, never a lost row
            self.rollouts += 1
            return
        self.rollouts += 1
        self.spans += len(spans)
        on_end = self.processor.on_end
        for span in spans:
            on_end(span)

    def _shutdown(self) -> None:
        try:
            self.processor.shutdown()
        except Exception as exc:  # never a traceback at a run's end for a collector's sake
            self.tally.add(0, False, f"{type(exc).__name__}: {exc}")

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> str | None:
        """Blocking (run it off the loop): the last batches, then the one line on what was not delivered, if any."""
        started = time.monotonic()
        if not self.tally.last_ok or not self.tally.delivered:  # a collector failing, or not yet heard from: its
            timeout_s = min(timeout_s, FAILING_CLOSE_TIMEOUT_S)  # retries would only hold the drain up
        # the SDK's shutdown waits up to 30 s and takes no timeout: on a thread of its own, waited for this long
        closing = threading.Thread(target=self._shutdown, name="otlp-close", daemon=True)
        closing.start()
        closing.join(timeout_s)
        if closing.is_alive():  # a batch still retrying: the exporter's own shutdown ends its waits
            self.tally.add(0, False, f"the collector did not answer within {timeout_s:.1f}s")
            self._exporter.shutdown()
            closing.join(FAILING_CLOSE_TIMEOUT_S)
        return undelivered_line(
            "traces", self.endpoint, self.spans, self.tally, f"{self.rollouts} rollouts", time.monotonic() - started
        )


def undelivered_line(what: str, endpoint: str, given: int, tally: ExportTally, unit: str, close_s: float) -> str | None:
    """The one line a run says about an export that lost something (None: everything was delivered)."""
    lost = given - tally.delivered
    if lost <= 0 and tally.first_error is None:
        return None
    reason = tally.first_error or "the export queue was full or the close timed out"
    return (
        f"stampede: OTLP {what} to {endpoint}: {lost} of {given} not delivered ({unit}; closing took {close_s:.1f}s): "
        f"{reason}"
    )
