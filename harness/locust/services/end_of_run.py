"""The end of a run on the run folder's owner, once every engine and worker has delivered its records.

The tables are compacted, run.json records how the run ended, and the run is concluded: thresholds checked,
summary.json written, the exit status settled (`harness.wire.run_endings`: 99 when one is crossed) and the
summary table rendered for the terminal.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gevent

from foundation.phase_marks import mark
from harness.locust.run_folder import compact_tables, iso
from harness.locust.run_state import RunState
from harness.locust.services.run_record import RunRecord
from harness.locust.worker_link import process_usage
from harness.results.figures.thresholds import Threshold, Verdict
from harness.wire.run_endings import exit_code_for

if TYPE_CHECKING:
    from harness.results.render.run_summary import RunConclusion


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How the run ended, as this process saw it: what run.json's closing fields record."""

    ending: str  # harness.wire.run_endings: completed, stopped_by_threshold, interrupted, aborted
    engines: list[dict[str, Any]]  # each engine's drain summary
    dropped_starts: dict[str, int]
    is_master: bool  # run.json gets the master process's own usage, measured at the end
    shape_outcome: dict[str, Any] | None
    final_stage: str
    stopped_by: Sequence[Verdict]  # the thresholds that stopped it (--abort-on-threshold)


# What the end of a run reads and writes with: pyarrow, pandas (and numpy), the summary's figures, and jsonschema,
# which checks summary.json against its schema (0.2 s of the summary's 0.4 s when imported there). In steps of
# at most ~0.3 s on a quiet machine, so a preload stops soon after the processes it overlaps are up.
READERS = (
    "numpy",
    "pyarrow.parquet",
    "pandas",
    "harness.results.read.compaction",
    "harness.results.read.dataset",
    "harness.results.render.run_summary",
    "jsonschema",
)

LAST_STEP_POLL_S = 0.05  # how often a burst's last step is checked (the engine's counts come every 0.5 s)


def preload_readers(waiting: Callable[[], bool]) -> None:
    """Import what `conclude` needs while the engine and the vendor start and this process only waits for them.

    The end of the run would import them anyway (about 0.5 s on a quiet machine, 1-3 s on a busy one), on the
    way from the last rollout to the summary; here they overlap the children's start instead, one module at a time
    while `waiting()` says they are still starting (an import holds the loop: the first rollout must not wait for
    it; what is left is imported at the end). One that does not import is left for the end of the run to report:
    a preload never stops a run from starting.
    """
    for name in READERS:
        gevent.sleep(0)  # the children's lines, if they came, are read before the next import
        if not waiting():
            return
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def preload_in_last_step(state: RunState, shape: Any, steps: int) -> None:
    """A local burst's last step, once the engine has every sandbox of it created: nothing more is submitted and the
    creates' rush is over (the vendor and the engine measure it: this import must not take their CPU), only rows are
    awaited, so what the end of the run reads with is imported now (with the vendor and the engine up before
    Locust's own start, `preload_readers` rarely has a wait to fill). An import holds the loop for one module: a
    row arriving meanwhile is seen that much later, time the end of the run would have spent anyway."""
    if not getattr(shape, "gated", False):
        return
    size = int(shape.size())
    while not state.ended:
        created = sum(snapshot.live_sandboxes for snapshot in state.live.snapshots.values())
        if state.gate_step >= steps and state.at_gate == 0 and created >= size:
            preload_readers(lambda: not state.ended)
            return
        gevent.sleep(LAST_STEP_POLL_S)


def conclude(record: RunRecord, end: RunEnd, thresholds: Sequence[Threshold], seconds: str) -> RunConclusion:
    """Compact, record the ending, check the thresholds, write summary.json; the table is in `seconds`."""
    compact_tables(record.run_dir)  # every engine and worker has delivered by now
    mark("end: tables compacted")
    now = time.time()
    # pandas and pyarrow: imported here, at the end, not on the way to the first rollout
    from harness.results.read.dataset import load_rollouts
    from harness.results.render.run_summary import conclude_run

    rollouts = load_rollouts(record.run_dir)
    mark("end: rollouts read")
    manifest = record.manifest
    manifest.update(
        {
            "ended_at": iso(now),
            "t_end": now,
            "wall_s": round(now - float(manifest["t_start"]), 3),
            "status": end.ending,
            "exit_code": exit_code_for(end.ending),
            "rows": {"rollouts": len(rollouts)},
            "engines": end.engines,
            "dropped_starts": end.dropped_starts,
            "master_process": process_usage() if end.is_master else None,
            "shape_outcome": end.shape_outcome,
            "final_stage": end.final_stage,
            "stopped_by_thresholds": [verdict.to_dict() for verdict in end.stopped_by] or None,
        }
    )
    record.write()
    conclusion = conclude_run(
        record.run_dir,
        manifest,
        rollouts,
        end.engines,
        thresholds,
        "wall" if seconds == "wall" else "vendor",
    )
    record.write()
    return conclusion
