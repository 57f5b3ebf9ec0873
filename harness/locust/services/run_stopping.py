"""Why a run stops before its shape's end, and so how it ended (`harness.wire.run_endings` holds the table).

Four things stop a run early: the user's Ctrl-C / SIGTERM (one interrupts, two abort), a threshold crossed for
good (`--abort-on-threshold`, watched live by `harness.locust.live.threshold_watch`), the web UI's Stop button, and
a master left with no worker (Locust's heartbeat check stops its test). A
signal wins: the user stopped it, whatever else happened. Except over results that cannot be written (a full disk):
an engine reporting so stops the run at once, and that is how it ended.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import locust.runners
from locust.env import Environment
from locust.runners import MasterRunner

from harness.locust.live.live_view import LiveView
from harness.locust.live.periodic import Periodic
from harness.locust.live.threshold_watch import ThresholdWatch
from harness.results.figures.thresholds import Threshold, Verdict
from harness.wire.run_endings import (
    INTERRUPTED,
    RESULTS_NOT_WRITABLE,
    STOPPED_BY_THRESHOLD,
    WORKER_SILENCE_S,
    WORKERS_LOST,
    ending_for_signals,
)

WRITE_CHECK_INTERVAL_S = 0.5  # the engines' stats arrive about this often


class RunStopping:
    """One Locust process's stop requests; `stop` ends the run in order (drain, as the first Ctrl-C does)."""

    def __init__(self, stop: Callable[[], None], ended: Callable[[], bool]) -> None:
        self._stop = stop
        self._ended = ended  # the run already ended: nothing left to stop
        self.signals = 0  # Ctrl-C / SIGTERM received: 1 interrupted, 2 or more aborted
        self.stopped_by: list[Verdict] = []  # the thresholds' verdicts that stopped the run (--abort-on-threshold)
        self.from_web_ui = False  # the web UI's Stop: the shape did not run its course
        self._watch: ThresholdWatch | None = None
        self.not_writable: str | None = None  # an engine could not write the results: what it said
        self.workers_lost = False  # a master's test stopped with none of its workers left (Locust's heartbeat check)
        self._writes: Periodic | None = None

    @property
    def ending(self) -> str:
        """How this run is ending: `completed`, `stopped_by_threshold`, or `interrupted` / `aborted` after one / two
        signals (a signal wins: the user stopped it)."""
        if self.not_writable:
            return RESULTS_NOT_WRITABLE
        if self.workers_lost and not self.signals:
            return WORKERS_LOST
        if self.stopped_by and not self.signals:
            return STOPPED_BY_THRESHOLD
        if self.from_web_ui and not self.signals:
            return INTERRUPTED  # the user stopped it, as a Ctrl-C would: no knee verdict speaks over it
        return ending_for_signals(self.signals)

    def new_run(self, live: LiveView, thresholds: Sequence[Threshold], abort_on_threshold: bool) -> None:
        """A run begins unstopped (each test of a web UI session); with --abort-on-threshold, watched."""
        self.stopped_by = []
        self.from_web_ui = False
        self.not_writable = None
        self.workers_lost = False
        self._writes = Periodic(WRITE_CHECK_INTERVAL_S, lambda: self._check_writes(live))
        self._writes.start()
        if abort_on_threshold:
            self._watch = ThresholdWatch(live, thresholds, self._crossed)
            self._watch.start()

    def end_run(self) -> None:
        if self._writes is not None:
            self._writes.stop()
            self._writes = None
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def _check_writes(self, live: LiveView) -> bool:
        """Stop the run once an engine says it cannot write the results (its rows wait in memory meanwhile)."""
        error = next((stats.write_error for stats in live.snapshots.values() if stats.write_error), None)
        if error is None or self._ended():
            return False
        self.not_writable = error
        print(
            f"\nstampede: stopping — cannot write the results ({error}); unwritten rows are kept; terminating"
            " in-flight sandboxes…",
            file=sys.stderr,
            flush=True,
        )
        self._stop()
        return True

    def note_signal(self, count: int) -> None:
        """The `count`-th Ctrl-C/SIGTERM (here, or the master's on a worker)."""
        self.signals = max(self.signals, count)

    def note_workers_lost(self) -> None:
        """A master's test is stopping with no worker left: said once, and that is how the run ended."""
        if self.workers_lost or self._ended():
            return
        self.workers_lost = True
        print(
            "\nstampede: stopping — every worker went missing (no heartbeat); the figures cover only what ran",
            file=sys.stderr,
            flush=True,
        )

    def note_web_stop(self) -> None:
        self.from_web_ui = True

    def _crossed(self, verdicts: list[Verdict]) -> None:
        """--abort-on-threshold: a threshold is crossed for good; drain as the first Ctrl-C does."""
        if self.stopped_by or self.signals or self._ended():
            return
        self.stopped_by = verdicts
        crossed = "; ".join(verdict.describe() for verdict in verdicts)
        print(f"\nstampede: stopping — {crossed}; terminating in-flight sandboxes…", file=sys.stderr, flush=True)
        self._stop()


def watch_workers(environment: Environment, stopping: RunStopping) -> None:
    """A master (`stampede run`'s or `locust -f`'s): lets a worker miss WORKER_SILENCE_S heartbeats, not Locust's 3
    (both workers of a loaded 2-core machine missed 3 as a run began, CI 2026-12-07), and a test that stops with no
    worker left ends `stopped: every worker went missing`, not `completed`."""
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        return
    locust.runners.HEARTBEAT_LIVENESS = WORKER_SILENCE_S  # read by the runner at each worker's heartbeat

    def workers_gone(**_: Any) -> None:
        if runner.worker_count <= 0:
            stopping.note_workers_lost()

    environment.events.test_stopping.add_listener(workers_gone)
