"""A simulated run read as `observations_from_run` reads a live one, for fits whose truth is known."""

from __future__ import annotations

from foundation.quantiles import nearest_rank
from harness.fitting.observations import QUANTILES, CreateTimeline, ProtocolObservation
from providers.sim.core.experiments import BurstResult

KINDS = {"BOOT_FAILED": "died_before_ready", "TRANSIENT": "create_error"}  # the simulator's errors as a run's kinds


def observed(
    protocol: str, width: int, run: BurstResult, source: str, creates: CreateTimeline | None = None
) -> ProtocolObservation:
    """Raw TTIs and failures by kind@phase; `creates`: the run's create timeline where the fit reads one."""
    samples = tuple(sorted(run.ttis()))
    failures: dict[str, int] = {}
    for s in run.samples:
        if s.failure is not None:
            key = f"{KINDS.get(s.failure, s.failure)}@{s.phase}"
            failures[key] = failures.get(key, 0) + 1
    return ProtocolObservation(
        protocol=protocol,
        concurrency=width,
        attempts=run.n,
        tti_s=samples,
        quantiles={k: nearest_rank(samples, q) for k, q in QUANTILES.items()},
        trimmed=0.0,
        success_rate=len(samples) / run.n,
        failures=failures,
        source=source,
        creates=creates,
    )
