"""Whether the simulated vendor's own process was starved during the run: `vendor_loop.json`, a shard each.

A served simulated vendor watches how late its loop wakes (providers/sim/core/loop_watch.py). A stall there delays
every sandbox it serves at once, so a run's TTIs carry this machine's load, not only the profile's draws; the engine's
health rows (harness_bound.py) cannot see it, the engine's loop not being the one that stalled. The rule is the
engine's: a lag past `LAG_BOUND_MS` marks the line `(!)`. At a time scale other than 1 the lag is also given in vendor
seconds, the unit of the figures it touched (0.4 s of stall at 0.1 is 4 vendor s). `bound_note` joins this
verdict with the engines' for the commands that read a run's figures as the vendor's (a trial, a rehearsal).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from harness.results.figures.harness_bound import LAG_BOUND_MS, load_engine_health, worker_health

VENDOR_LOOP_FILE = "vendor_loop.json"


@dataclass(frozen=True, slots=True)
class VendorLoop:
    """One vendor process over the run, wall milliseconds."""

    shard: int
    probes: int
    interval_ms: float
    lag_p99_ms: float
    lag_max_ms: float

    @property
    def bound(self) -> bool:
        return self.lag_max_ms > LAG_BOUND_MS

    def to_dict(self) -> dict[str, object]:
        """summary.json's `vendor_loop[]` entry."""
        return {
            "shard": self.shard,
            "probes": self.probes,
            "lag_p99_ms": self.lag_p99_ms,
            "lag_max_ms": self.lag_max_ms,
            "bound": self.bound,
        }

    def describe(self, time_scale: float, shards: int) -> str:
        which = f" (shard {self.shard})" if shards > 1 else ""
        vendor = f" ({self.lag_max_ms / 1000 / time_scale:.2f} vendor s)" if time_scale != 1.0 else ""
        verdict = (
            f"(!) it stalled past {LAG_BOUND_MS:.0f} ms: every sandbox it served waited at once, so the TTIs are "
            "partly this machine's load"
            if self.bound
            else "not stalled"
        )
        return (
            f"simulated vendor's own loop{which} ({self.probes} probes every {self.interval_ms:g} ms): lag p99 "
            f"{self.lag_p99_ms:.0f} ms, max {self.lag_max_ms:.0f} ms{vendor}: {verdict}"
        )


def load_vendor_loops(run_dir: Path | str) -> list[VendorLoop]:
    """The run's vendor loops in shard order; empty for a run without the file (an outside vendor, an older run)
    or with a damaged one (a cross-check never costs the summary)."""
    try:
        document = json.loads((Path(run_dir) / VENDOR_LOOP_FILE).read_text())
        shards = document["shards"]
        return [
            VendorLoop(
                shard=int(entry.get("shard", index)),  # its own index (an older run's: its position)
                probes=int(entry["probes"]),
                interval_ms=float(entry["interval_ms"]),
                lag_p99_ms=float(entry["lag_p99_ms"]),
                lag_max_ms=float(entry["lag_max_ms"]),
            )
            for index, entry in enumerate(shards)
            if math.isfinite(float(entry["lag_max_ms"]))
        ]
    except (OSError, ValueError, TypeError, KeyError):
        return []


def vendor_loop_lines(run_dir: Path | str, time_scale: float) -> list[str]:
    """The summary's lines, one per vendor process; none when the run has no record of them."""
    loops = load_vendor_loops(run_dir)
    return [loop.describe(time_scale, len(loops)) for loop in loops]


def bound_note(run_dir: Path | str) -> str:
    """What bound a run's figures besides the vendor being measured: an engine past the stall rule or near its fd
    limit, or the simulated vendor's own process stalled ("" when neither). A trial's fit and a rehearsal's model
    read every figure as the vendor's, so they say which runs carry the machine's load."""
    marks = [
        f"(!) harness bound ({health.worker}: {', '.join(health.bound_reasons())})"
        for health in worker_health(load_engine_health(Path(run_dir)))
        if health.bound
    ]
    marks += [
        f"(!) the simulated vendor's own loop stalled (lag max {loop.lag_max_ms:.0f} ms): its TTIs carry this "
        "machine's load"
        for loop in load_vendor_loops(run_dir)
        if loop.bound
    ]
    return "; ".join(marks)
