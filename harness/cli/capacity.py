"""How much load one engine carries: what `--workers auto` decides from (imports nothing heavy, no Locust)."""

from __future__ import annotations

import math
import os

from foundation.open_files import processes_for_open_files, reachable_open_files

PER_ENGINE_IN_FLIGHT = 5000
"""Rollouts one engine holds with its loop lag p99 under 50 ms on a 2-core machine (bench/bench_scale.py);
`--workers auto` spreads a larger peak over more engines rather than measuring one engine's queue."""


def engines_needed(peak_in_flight: int | None, cores: int | None = None, open_files: int | None = None) -> int:
    """Local workers `--workers auto` starts for this peak (0: the run stays one process with one engine).

    Each worker is two busy processes (its Locust process and its engine), so a machine gets at most one
    worker per two cores: on 2 cores, 4 workers holding 20,000 starved Locust's own heartbeats (workers
    dropped and rejoined, the user count went wrong) while one engine held 5,000 with 5 ms of loop lag.
    The open-file limit overrides that: a peak one engine cannot hold a connection for is spread regardless.
    """
    if not peak_in_flight:
        return 0
    by_files = processes_for_open_files(peak_in_flight, open_files)
    if peak_in_flight <= PER_ENGINE_IN_FLIGHT and by_files <= 1:
        return 0
    wanted = math.ceil(peak_in_flight / PER_ENGINE_IN_FLIGHT)
    allowed = max(1, (cores if cores is not None else os.cpu_count() or 1) // 2)
    workers = max(min(wanted, allowed), by_files)
    return workers if workers > 1 else 0


def spread_note(peak_in_flight: int | None, workers: int, open_files: int | None = None) -> str | None:
    """What `stampede run` says when it spreads a peak, or cannot spread it as far as it would like."""
    if not peak_in_flight:
        return None
    by_files = processes_for_open_files(peak_in_flight, open_files)
    if by_files > 1 and workers >= by_files:
        limit = open_files if open_files is not None else reachable_open_files()
        crowded = workers > max(1, (os.cpu_count() or 1) // 2)
        return (
            f"{peak_in_flight} in flight needs a connection each, more than one process may open ({limit} files): "
            f"a master and {workers} local workers, each with its own engine"
            + ("; they share fewer cores than they would like: watch the 'harness err' column" if crowded else "")
        )
    if peak_in_flight <= PER_ENGINE_IN_FLIGHT:
        return None
    if workers:
        return (
            f"{peak_in_flight} in flight is more than one engine holds ({PER_ENGINE_IN_FLIGHT}): a master and "
            f"{workers} local workers, each with its own engine (--workers 0 keeps one process)"
        )
    return (
        f"{peak_in_flight} in flight is more than one engine holds ({PER_ENGINE_IN_FLIGHT}), and this machine's "
        f"{os.cpu_count()} cores run one engine best: watch the 'harness err' column, the harness may be "
        "the bottleneck (--workers N spreads it anyway, or use more machines: --master/--worker)"
    )
