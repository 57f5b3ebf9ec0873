"""How a run ended (run.json `status`) and the exit status `stampede run` returns for it: the one table.

- `completed` (exit 0): the shape (or `--run-time`) ran to its end; exit 99 (EXIT_THRESHOLDS_CROSSED) when a
  `--threshold` was crossed (run.json `thresholds` and summary.json say which).
- `stopped_by_threshold` (exit 99): `--abort-on-threshold` saw a threshold crossed beyond doubt while the run went
  (harness.locust.live.threshold_watch); drained as the first Ctrl-C drains: rollouts cancelled, sandboxes terminated.
- usage error (exit 2): bad input, a vendor that cannot start; one line on stderr, no run.
- `interrupted` (exit 130): the first Ctrl-C or SIGTERM (or, under Locust's web UI, its Stop button); rollouts
  cancelled, every sandbox terminated, the label swept.
- `aborted` (exit 131): a second Ctrl-C or SIGTERM before stampede exits; cancelled rollouts get ABORT_GRACE_S
  (1 s), the whole drain ABORT_DEADLINE_S (10 s, harness.engine.run), sandboxes still terminated.
- `aborted: results not writable` (exit 74, EX_IOERR): the results could not be written (a full disk, a folder made
  read-only); the run stopped as the first Ctrl-C stops it, rows not yet written kept in memory and written once
  possible, else to a fallback folder (the engine's summary in run.json says where). Wins over every other ending.
- `stopped: every worker went missing` (exit 69, EX_UNAVAILABLE): a master heard from none of its workers for
  WORKER_SILENCE_S (their heartbeats, 1 s apart) or the last one quit; Locust stopped the test there. The figures
  cover only what ran before; each worker's engine drains its own rollouts when it hears again or is stopped.
- `crashed` (no exit status of ours: the process died; a shell shows 137 for kill -9): found later, when run.json
  still says `running` and the process that wrote it is gone.

Precedence of the exit status: a Ctrl-C or SIGTERM wins (130, 131: the user stopped the run, whatever its
figures), then a crossed threshold (99, whether it stopped the run or was found at its end), then 0
(`exit_code_for(ending, thresholds_crossed)`).

A run in progress says `running`. Runs written before endings were recorded say `complete`: read as `completed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import EXIT_USAGE

RUNNING = "running"
COMPLETED = "completed"
INTERRUPTED = "interrupted"
ABORTED = "aborted"
STOPPED_BY_THRESHOLD = "stopped_by_threshold"
RESULTS_NOT_WRITABLE = "aborted: results not writable"
WORKERS_LOST = "stopped: every worker went missing"
CRASHED = "crashed"

EXIT_COMPLETED = 0
EXIT_INTERRUPTED = 130
EXIT_ABORTED = 131
EXIT_THRESHOLDS_CROSSED = 99
"""A `--threshold` was crossed (`run`, `report`, `compare`): k6's code, so CI scripts written for k6 read it alike."""
EXIT_REGRESSION = 98
"""`stampede compare` found a candidate worse than its baseline beyond the noise (a regression)."""
EXIT_RESULTS_NOT_WRITABLE = 74
"""The run's results could not be written (sysexits' EX_IOERR)."""
EXIT_WORKERS_LOST = 69
"""A master lost every worker mid-run (sysexits' EX_UNAVAILABLE)."""
WORKER_SILENCE_S = 10
"""How many 1 s heartbeats a master lets a worker miss before it counts it missing (Locust's own 3 stopped runs on
a loaded 2-core machine: both workers busy at the spawn, CI 2026-12-07)."""
EXIT_SCHEMA_MISMATCH = 3
"""A document stampede wrote (compare.json, a run's summary.json) does not match its own schema: stampede's bug, not
the user's input. The tables are still printed; the document is not written."""
CONCLUDED_EXITS = frozenset(
    {EXIT_THRESHOLDS_CROSSED, EXIT_RESULTS_NOT_WRITABLE, EXIT_SCHEMA_MISMATCH, EXIT_WORKERS_LOST}
)
"""What a run's conclusion (its results read back, summary.json written) may decide the process exits with."""

CUT_SHORT = frozenset({INTERRUPTED, ABORTED, STOPPED_BY_THRESHOLD, RESULTS_NOT_WRITABLE, WORKERS_LOST, CRASHED})
"""Endings whose last stage did not run its course: no knee verdict speaks over them."""


@dataclass(frozen=True, slots=True)
class Ending:
    name: str
    exit_code: int | None
    meaning: str


ENDINGS: tuple[Ending, ...] = (
    Ending(COMPLETED, EXIT_COMPLETED, "ran to the end of its shape"),
    Ending(
        INTERRUPTED,
        EXIT_INTERRUPTED,
        "stopped by Ctrl-C, SIGTERM or the web UI's Stop: rollouts cancelled, sandboxes terminated",
    ),
    Ending(ABORTED, EXIT_ABORTED, "stopped by a second Ctrl-C or SIGTERM: no grace for rollouts, sandboxes terminated"),
    Ending(
        STOPPED_BY_THRESHOLD,
        EXIT_THRESHOLDS_CROSSED,
        "stopped by --abort-on-threshold: a threshold was crossed for good; rollouts cancelled, sandboxes terminated",
    ),
    Ending(
        RESULTS_NOT_WRITABLE,
        EXIT_RESULTS_NOT_WRITABLE,
        "stopped: the results could not be written (disk full, read-only); rollouts cancelled, sandboxes terminated,"
        " unwritten rows kept and written once possible, else where the engine summary says",
    ),
    Ending(
        WORKERS_LOST,
        EXIT_WORKERS_LOST,
        f"stopped: the master heard from no worker for {WORKER_SILENCE_S} s (or the last one quit); the figures cover"
        " only what ran before",
    ),
    Ending(CRASHED, None, "its processes died without recording an ending (kill -9, OOM): sandboxes may be left"),
)
_BY_NAME = {ending.name: ending for ending in ENDINGS}
USAGE_EXIT = EXIT_USAGE  # bad input: see harness.errors


def normalize(status: object) -> str:
    """run.json's `status` in this vocabulary (`complete`, from before endings were recorded, is `completed`)."""
    text = str(status or "").strip().lower()
    return COMPLETED if text == "complete" else text


def exit_code_for(ending: str, thresholds_crossed: bool = False) -> int:
    """The exit status of a run that ended so; a crossed threshold turns a completed run's 0 into 99."""
    found = _BY_NAME.get(normalize(ending))
    code = found.exit_code if found is not None and found.exit_code is not None else EXIT_COMPLETED
    return EXIT_THRESHOLDS_CROSSED if thresholds_crossed and normalize(ending) == COMPLETED else code


def meaning_of(ending: str) -> str:
    found = _BY_NAME.get(normalize(ending))
    return found.meaning if found is not None else "still running (or its ending was never recorded)"


def ending_for_signals(count: int) -> str:
    """The ending the run is heading for after `count` Ctrl-C/SIGTERM: none, interrupted, then aborted."""
    if count <= 0:
        return COMPLETED
    return INTERRUPTED if count == 1 else ABORTED
